"""The cloud tier: the object store, writer fencing, the manifest mirror, cloud table files.

Object layout under the database's store prefix (all written by this module)::

    epochs/<E, 20 digits>      one per writer session: one log_format record of JSON
                               {"format_version", "epoch": E, "owner", "claimed", "db_id"}
    manifests/<G, 20 digits>   the mirror, generation G: one log_format record of JSON
                               (the cloud part of the version, below)
    tables/<n>-e<E>.sst        one table, written once by the writer of epoch E: a cloud
                               level's table, or the backup of a local one
    wal/<N, 20 digits>         shipped WAL records, or a writer's fence (wal_shipping.py)
    pins/<32 hex digits>       a tiered checkpoint's pin: table objects kept (pins.py)

Every epoch and mirror object is created once, with If-None-Match (create only if absent),
and never overwritten. Correctness rests only on that being atomic, which AWS S3, MinIO
and SeaweedFS guarantee, and never on If-Match, which SeaweedFS does not evaluate
atomically (decision 0004). Both kinds are framed as one checksummed record, so a damaged
object is a CorruptionError, never a silently different database, and both carry the
database's identity (a UUID made at creation, kept in the local manifest too), so a
directory is never opened against another database's prefix.

Fencing: opening lists ``epochs/``, creates ``epochs/<E+1>``, and so becomes the writer of
epoch E+1 (of racing openers, exactly one creates it; the others get FencedError and may
retry). Then it publishes the next mirror generation. A writer checks it is still the
writer with one HEAD of ``epochs/<E+1>`` at every flush and every
``fencing_check_interval``; its publishes are creates too: a fenced writer's create of a
generation that the new writer already created fails, it reads that object, sees the newer
epoch, and stops writing (:class:`FencedError`). Table objects carry their writer's epoch
in their key, so even a writer that has not noticed yet cannot overwrite the new writer's
tables, and a writer deletes retired objects only after its own publish succeeded.

The mirror holds what reopening from the bucket needs: every cloud table (level, number,
size, key range, sequence range, epoch), with WAL shipping on the backup of every local
table too, the segment from which on the WAL objects are needed (``log_number``), the
last sequence number, the next file number, and its ``generation``. The local manifest records the writer's epoch (a directory left
behind by a writer that was since replaced is detected: the mirror's epoch is newer) and
the generation of each cloud-touching edit (a mirror newer than the local manifest means a
manifest record was lost). Old generations are deleted as new ones are published, keeping
the last few; one whose delete failed is tried again at the next publish, and a new writer
learns the old ones from the listing it opens with, so none is left for good. Epoch
objects are never deleted (one small object per open): a writer that was fenced long ago
must still find ``epochs/<E+1>``, and deleting old epochs in order cannot be made reliable
with best-effort deletes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import cloudtier
from cloudtier import NotFoundError, ObjectStore, PreconditionFailedError, StoreError

from .errors import (CorruptionError, Error, FencedError, InvalidArgumentError,
                     NewerFormatError, ObjectStoreError, UnavailableError)
from .formats import CLOUD_OBJECT_FORMAT, MIRROR_FORMAT, WAL_OBJECT_FORMAT
from .log_format import CLEAN, encode_record, read_records
from .version import CLOUD, LOCAL, FileMeta

__all__ = ["CloudFile", "CloudTier", "WalObject", "store_errors"]

EPOCHS = "epochs/"
MIRRORS = "manifests/"
WALS = "wal/"
#: Mirror generations kept besides the newest (a reader that listed just before a publish
#: can still fetch what it listed).
KEEP_MIRRORS = 4
#: Most old mirror generations one publish deletes (normally one; more while catching up
#: after failed deletes, a few at a time so that no publish is held up for long).
_MIRROR_DELETES = 8
#: Creates a new writer tries while claiming its WAL fence before it gives up (each miss
#: is a number an old writer shipped meanwhile; see CloudTier.claim_wal_fence).
_FENCE_CLIMB = 1000


def epoch_key(epoch: int) -> str:
    return f"{EPOCHS}{epoch:020d}"


def mirror_key(generation: int) -> str:
    return f"{MIRRORS}{generation:020d}"


def wal_key(number: int) -> str:
    return f"{WALS}{number:020d}"


def store_errors(what: str, e: StoreError) -> Exception:
    """The rocksmash error for an object-store failure (callers ``raise ... from e``).

    Retriable failures (after the retries) are UnavailableError; failures that retrying
    cannot fix (no such bucket, access denied, a bad request) are ObjectStoreError, so
    background work stops retrying them and writes fail fast.
    """
    if isinstance(e, NotFoundError):
        return CorruptionError(f"{what}: object is missing from the object store")
    if e.retriable:
        return UnavailableError(f"{what}: object store unavailable after retries: {e}")
    return ObjectStoreError(f"{what}: the object store refused: {e}")


def encode_object(doc: dict[str, Any]) -> bytes:
    """The bytes of an epoch or mirror object: one checksummed record of JSON."""
    return encode_record(json.dumps(doc, separators=(",", ":")).encode())


def decode_object(data: bytes, what: str, formats: tuple[int, ...] = (CLOUD_OBJECT_FORMAT,)
                  ) -> dict[str, Any]:
    """Parse an epoch or mirror object; CorruptionError unless it is exactly one valid
    record holding a JSON object of one of ``formats``."""
    records, end, tail = read_records(data, name=what)
    if tail != CLEAN or len(records) != 1:
        raise CorruptionError(f"object store: {what} object is damaged (checksum)")
    return _decode_doc(records[0], what, formats)


def _decode_doc(payload: bytes, what: str, formats: tuple[int, ...]) -> dict[str, Any]:
    try:
        doc = json.loads(payload)
        fmt = doc["format_version"]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptionError(f"object store: malformed {what} object ({e})") from e
    if type(fmt) is not int or fmt > max(formats):
        raise NewerFormatError(f"object store: {what} object format {fmt!r} is newer than "
                               f"this rocksmash supports ({max(formats)}); upgrade rocksmash")
    if fmt not in formats:
        raise CorruptionError(f"object store: {what} object has unknown format {fmt!r}")
    return doc


#: Mirror formats this code reads (it writes the newest).
MIRROR_FORMATS = (CLOUD_OBJECT_FORMAT, MIRROR_FORMAT)


@dataclass(frozen=True)
class WalObject:
    """One ``wal/<number>`` object: shipped records of one local WAL segment, or a fence.

    Layout: one log_format record holding the JSON header, then the segment's records
    ``[offset, end)`` exactly as they are in the local segment file (log_format records
    of write batches). The header: ``format_version``, ``kind`` (``"records"`` or
    ``"fence"``), ``db_id``, ``epoch``, and for records ``segment``, ``table`` and
    ``first_seq`` (the segment header's fields), ``offset`` and ``end`` (byte range in
    the segment).
    """

    number: int
    header: dict[str, Any]
    records: bytes

    @property
    def kind(self) -> str:
        return str(self.header["kind"])

    @property
    def segment(self) -> int:
        return int(self.header.get("segment", 0))

    def encode(self) -> bytes:
        return encode_record(json.dumps(self.header, separators=(",", ":")).encode()) + self.records

    @classmethod
    def decode(cls, number: int, data: bytes) -> "WalObject":
        what = f"WAL object {number}"
        records, end, tail = read_records(data, name=what)
        if tail != CLEAN or not records:
            raise CorruptionError(f"object store: {what} is damaged (checksum)")
        header = _decode_doc(records[0], what, (WAL_OBJECT_FORMAT,))
        body = data[8 + len(records[0]):]
        try:
            kind = header["kind"]
            if kind == "records":
                for name in ("segment", "table", "first_seq", "offset", "end"):
                    if type(header[name]) is not int:
                        raise TypeError(f"{name} is not an integer")
                if header["end"] - header["offset"] != len(body):
                    raise ValueError(f"holds {len(body)} bytes of records, its header says "
                                     f"{header['end'] - header['offset']}")
            elif kind != "fence":
                raise ValueError(f"unknown kind {kind!r}")
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(f"object store: malformed {what} ({e})") from e
        return cls(number, header, body)


class CloudFile:
    """A RandomAccessFile over one object: each read is one ranged GET.

    A missing object is a CorruptionError (a table the version names is gone), except
    for a reader of another process's database (bucket_reader.py), whose view can name a
    table the writer has since retired and deleted: there ``vanished(key)`` says which
    error it is (UnavailableError for a retired table, CorruptionError for one the newest
    mirror still names), raised with the NotFoundError as its cause."""

    __slots__ = ("store", "key", "_size", "_vanished")

    def __init__(self, store: ObjectStore, key: str, size: int,
                 vanished: Callable[[str], Error] | None = None) -> None:
        self.store = store
        self.key = key
        self._size = size
        self._vanished = vanished

    def read(self, offset: int, size: int) -> bytes:
        try:
            return self.store.get(self.key, offset, offset + size)
        except NotFoundError as e:
            if self._vanished is not None:
                raise self._vanished(self.key) from e
            raise store_errors(self.key, e) from e
        except StoreError as e:
            raise store_errors(self.key, e) from e

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        pass


class CloudTier:
    """One database's view of its object store. Thread-safe.

    ``url`` is a cloudtier URL or an open :class:`ObjectStore` (then not shareable with
    worker processes, and the caller keeps ownership of it).
    """

    def __init__(self, url: str | ObjectStore, options: dict[str, Any], retries: int,
                 fetch_threads: int = 0) -> None:
        if isinstance(url, ObjectStore):
            self.url: str | None = None
            base = url
        elif isinstance(url, str):
            self.url = url
            try:
                base = cloudtier.open_store(url, **options)
            except (ValueError, TypeError) as e:
                raise InvalidArgumentError(f"object_store: {e}") from e
            except StoreError as e:
                raise store_errors(f"opening {url}", e) from e
        else:
            raise InvalidArgumentError(
                f"object_store: expected a URL or a cloudtier.ObjectStore, not {type(url).__name__}")
        self.options = dict(options)
        self.retries = retries
        self._owned = isinstance(url, str)
        self._base = base
        self.metered = cloudtier.MeteredStore(base)
        self.store: ObjectStore = (cloudtier.RetryingStore(
            self.metered, cloudtier.RetryPolicy(max_attempts=retries + 1))
            if retries else self.metered)
        self.epoch = 0
        #: Another process writes the tables this tier reads (a bucket reader), so a
        #: table may be deleted under a read: the error for a missing one (CloudFile).
        self.tables_vanish: Callable[[str], Error] | None = None
        #: The database's identity, once claim_epoch has run.
        self.db_id: str | None = None
        self.generation = 0
        #: Mirror generations in the store that are not deleted yet, ascending (from the
        #: listing at load_mirror, then each publish); the oldest go as newer ones come.
        self._mirrors: list[int] = []
        #: The number the next shipped WAL object gets (set by claim_wal_fence).
        self.wal_next = 0
        #: Every writer's WAL fence (kept in the mirror; fences are never deleted).
        self.wal_fences: set[int] = set()
        self._unknown_body: bytes | None = None
        self._lock = threading.Lock()
        self._worker_traffic: dict[str, Any] = {"requests": {}, "bytes_in": 0, "bytes_out": 0}
        #: Background block fetches (Table.prefetch_block): threads start on first use.
        self._fetcher = (ThreadPoolExecutor(fetch_threads, thread_name_prefix="rocksmash-fetch")
                         if fetch_threads else None)
        #: What tables get as their ``prefetch``: the fetcher's submit, or None.
        self.prefetch = self._fetcher.submit if self._fetcher is not None else None

    def add_worker_traffic(self, t: dict[str, Any]) -> None:
        """Count requests a worker process made on its own handle of the store."""
        with self._lock:
            w = self._worker_traffic
            for kind, n in t["requests"].items():
                w["requests"][kind] = w["requests"].get(kind, 0) + n
            w["bytes_in"] += t["bytes_in"]
            w["bytes_out"] += t["bytes_out"]

    def traffic(self) -> dict[str, Any]:
        """cloudtier's meter snapshot of this process, with the requests and bytes of the
        worker processes added in (latencies and cost estimates are this process's)."""
        snap = self.metered.snapshot()
        with self._lock:
            w = self._worker_traffic
            for kind, n in w["requests"].items():
                snap["requests"][kind] = snap["requests"].get(kind, 0) + n
            snap["bytes_in"] += w["bytes_in"]
            snap["bytes_out"] += w["bytes_out"]
            snap["worker_requests"] = dict(w["requests"])
        return snap

    @property
    def shareable(self) -> bool:
        """Whether worker processes can open the same store from ``url`` (not memory://)."""
        return self.url is not None and not self.url.startswith("memory:")

    def worker_spec(self) -> dict[str, Any]:
        """What a worker needs to open its own handle on the store."""
        return {"url": self.url, "options": self.options, "retries": self.retries}

    # ------------------------------------------------------------ fencing and mirror

    def _latest(self, prefix: str) -> int:
        """The highest number under ``prefix`` (0 if none)."""
        return max(self._numbers(prefix), default=0)

    def _numbers(self, prefix: str) -> list[int]:
        """Every number under ``prefix``, ascending."""
        out = []
        for info in self.store.list(prefix):
            try:
                out.append(int(info.key[len(prefix):]))
            except ValueError:
                raise CorruptionError(f"object store: unexpected object {info.key!r}") from None
        return sorted(out)

    def _read(self, key: str, what: str, formats: tuple[int, ...] = (CLOUD_OBJECT_FORMAT,)
              ) -> dict[str, Any]:
        doc = decode_object(self.store.get(key), what, formats)
        try:
            int(doc["epoch"])
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(f"object store: malformed {what} ({e})") from e
        return doc

    def claim_epoch(self, db_id: str | None) -> str | None:
        """Become the writer: create ``epochs/<E+1>``. FencedError if another opener
        created it first (retry the open).

        ``db_id`` is the local database's identity (None for a new directory). Returns the
        identity recorded in the bucket (None for an empty prefix). A prefix that holds
        another database is refused with InvalidArgumentError, before anything is written.
        """
        try:
            current = self._latest(EPOCHS)
            bucket_id = (self._read(epoch_key(current), f"epoch {current}").get("db_id")
                         if current else None)
            if db_id is not None and bucket_id is not None and db_id != bucket_id:
                raise InvalidArgumentError(
                    f"the object store prefix holds another database (id {bucket_id}) than "
                    f"this directory (id {db_id}); check object_store=")
            body = encode_object({"format_version": CLOUD_OBJECT_FORMAT, "epoch": current + 1,
                                  "owner": f"{socket.gethostname()}:{os.getpid()}",
                                  "claimed": time.time(), "db_id": db_id or bucket_id})
            self.store.put(epoch_key(current + 1), body, if_none_match=True)
        except PreconditionFailedError:
            raise FencedError("another writer claimed this object-store prefix at the same "
                              "time; retry the open") from None
        except NotFoundError:
            raise FencedError("the object store prefix changed while this writer opened it "
                              "(another writer?); retry the open") from None
        except StoreError as e:
            raise store_errors("claiming the writer epoch", e) from e
        self.epoch = current + 1
        self.db_id = db_id or bucket_id
        return bucket_id

    def check_epoch(self) -> None:
        """Raise FencedError if another writer has claimed the prefix since this one did
        (one HEAD: a newer writer always creates ``epochs/<E+1>`` first). Unavailable or
        refusing stores raise their rocksmash errors."""
        try:
            self.store.head(epoch_key(self.epoch + 1))
        except NotFoundError:
            return
        except StoreError as e:
            raise store_errors("checking the writer epoch", e) from e
        raise FencedError(f"another writer has taken over this object-store prefix from this "
                          f"one (epoch {self.epoch}); this database is now read-only")

    def load_mirror(self) -> dict[str, Any] | None:
        """The newest mirror, or None if the prefix holds no database."""
        try:
            gens = self._numbers(MIRRORS)
            if not gens:
                return None
            gen = gens[-1]
            mirror = self._read(mirror_key(gen), "manifest mirror", MIRROR_FORMATS)
        except NotFoundError:  # deleted between the listing and the read: a newer one exists
            return self.load_mirror()
        except StoreError as e:
            raise store_errors("reading the manifest mirror", e) from e
        try:
            if int(mirror["generation"]) != gen:
                raise ValueError(f"generation {mirror['generation']} in object {gen}")
            int(mirror["last_seq"]), int(mirror["next_file"]), int(mirror.get("log_number") or 0)
            self.wal_fences.update(int(n) for n in mirror.get("wal_fences", ()))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"object store: malformed manifest mirror ({e})") from e
        if self.db_id is not None and mirror.get("db_id") not in (None, self.db_id):
            raise InvalidArgumentError(
                f"the object store prefix's manifest mirror belongs to another database "
                f"(id {mirror.get('db_id')}) than this one (id {self.db_id})")
        self.generation = gen
        self._mirrors = gens
        return mirror

    def publish_mirror(self, files: list[tuple[int, FileMeta]], *, num_levels: int,
                       last_seq: int, next_file: int, log_number: int | None) -> int:
        """Create the next mirror generation; return it. ``files`` are cloud tables and
        backed-up local ones (each with the epoch of its object), ``log_number`` the
        oldest WAL segment whose writes are in none of them (None: no WAL shipping, the
        local levels are not in the bucket).

        A create, so a writer that lost the prefix gets FencedError instead of replacing
        the new writer's mirror: its generation already exists, written by a newer epoch
        (or by an older writer that published after this one loaded the mirror, which only
        happens during an open: retry the open).
        """
        with self._lock:
            try:
                self._settle_unknown_publish()
            except StoreError as e:
                raise store_errors("checking the manifest mirror", e) from e
            self.check_epoch()  # a fenced writer must not publish (and then delete) at all
            gen = self.generation + 1
            body = encode_object({
                "format_version": MIRROR_FORMAT, "generation": gen, "epoch": self.epoch,
                "db_id": self.db_id, "num_levels": num_levels, "last_seq": last_seq,
                "next_file": next_file, "log_number": log_number,
                "wal_fences": sorted(self.wal_fences),
                "files": [[lvl, f.number, f.size, f.smallest.hex(), f.largest.hex(),
                           f.min_seq, f.max_seq, f.epoch, f.tier] for lvl, f in files],
            })
            try:
                self.store.put(mirror_key(gen), body, if_none_match=True)
            except PreconditionFailedError:
                raise self._lost_publish(gen) from None
            except StoreError as e:
                # The PUT may have happened anyway (a timeout after the server applied
                # it); remember the body so the next publish can tell.
                self._unknown_body = body
                raise store_errors("publishing the manifest mirror", e) from e
            self.generation = gen
            self._mirrors.append(gen)
            self._delete_old_mirrors()
            return gen

    def _delete_old_mirrors(self) -> None:
        """Delete the generations older than the newest KEEP_MIRRORS + 1, oldest first, up
        to _MIRROR_DELETES of them. Best effort: one whose delete fails stays in
        ``_mirrors`` and is tried again at the next publish (issue 16: a leftover used to
        be retried only once, so two failed deletes in a row left a mirror for good)."""
        for _ in range(_MIRROR_DELETES):
            if len(self._mirrors) <= KEEP_MIRRORS + 1:
                return
            try:
                self.store.delete(mirror_key(self._mirrors[0]))
            except StoreError:
                return
            del self._mirrors[0]

    def _lost_publish(self, gen: int) -> FencedError:
        """The error for a mirror generation that someone else created first."""
        try:
            epoch = int(self._read(mirror_key(gen), "manifest mirror", MIRROR_FORMATS)["epoch"])
        except (StoreError, CorruptionError):
            epoch = -1
        who = (f"a writer with epoch {epoch}" if epoch > self.epoch
               else "another writer")
        err = FencedError(f"{who} has published this object-store prefix's mirror "
                          f"generation {gen} (this writer's epoch is {self.epoch}); this "
                          f"database is now read-only: reopen it to continue")
        # An older writer published after this one read the mirror: only possible while
        # this one opens (it has not published yet), and reopening resolves it.
        err.retry_open = 0 <= epoch < self.epoch  # type: ignore[attr-defined]
        return err

    def _settle_unknown_publish(self) -> None:
        """After a failed publish, adopt its generation if that publish did land (the
        object holds our body), so this writer does not mistake its own create for
        another writer's."""
        body, self._unknown_body = self._unknown_body, None
        if body is None:
            return
        try:
            if self.store.get(mirror_key(self.generation + 1)) == body:
                self.generation += 1
                self._mirrors.append(self.generation)
        except NotFoundError:
            pass
        except StoreError:
            self._unknown_body = body
            raise

    @staticmethod
    def mirror_files(mirror: dict[str, Any]) -> list[tuple[int, FileMeta]]:
        """The mirror's tables; a local table's backup has tier LOCAL (its object is at
        the same key a cloud table's would be)."""
        try:
            files = [(int(a[0]), FileMeta(int(a[1]), int(a[2]), bytes.fromhex(a[3]),
                                          bytes.fromhex(a[4]), int(a[5]), int(a[6]), None,
                                          int(a[8]) if len(a) > 8 else CLOUD, int(a[7])))
                     for a in mirror["files"]]
            if any(f.tier not in (LOCAL, CLOUD) for _, f in files):
                raise ValueError("unknown tier")
            return files
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise CorruptionError(f"object store: malformed manifest mirror ({e})") from e

    # ------------------------------------------------------------ WAL objects

    def wal_numbers(self) -> list[int]:
        """The numbers of every ``wal/`` object, ascending."""
        try:
            out = []
            for info in self.store.list(WALS):
                try:
                    out.append(int(info.key[len(WALS):]))
                except ValueError:
                    raise CorruptionError(
                        f"object store: unexpected object {info.key!r}") from None
            return sorted(out)
        except StoreError as e:
            raise store_errors("listing WAL objects", e) from e

    def read_wal(self, number: int) -> WalObject:
        try:
            return WalObject.decode(number, self.store.get(wal_key(number)))
        except StoreError as e:
            raise store_errors(f"reading WAL object {number}", e) from e

    def claim_wal_fence(self) -> int:
        """Create the next ``wal/`` number as this writer's fence (after claim_epoch).

        A writer ships to consecutive numbers, so an older writer's next shipment is
        exactly this number: its create fails, and it raises FencedError before it
        acknowledges anything more (SlateDB's WAL fencing). Fences are never deleted
        (a paused old writer may try its number much later). Every number below the
        fence is final once it exists. Returns the fence's number.
        """
        header = {"format_version": WAL_OBJECT_FORMAT, "kind": "fence", "db_id": self.db_id,
                  "epoch": self.epoch}
        # One LIST, then upward one number at a time: a failed create means n exists, so
        # n + 1 is the next candidate and no gap can open. Listing again after each miss
        # lost the race to an old writer shipping every sync write (CI, 2026-12-01: eight
        # misses in a row); a create is cheaper than a LIST, so this climb overtakes a
        # writer that must also write and sync before each shipment.
        n = (self.wal_numbers() or [0])[-1] + 1
        for _ in range(_FENCE_CLIMB):
            body = WalObject(n, header, b"").encode()
            try:
                self.store.put(wal_key(n), body, if_none_match=True)
            except PreconditionFailedError:
                n += 1  # the old writer shipped n meanwhile: fence after it
                continue
            except StoreError as e:
                raise store_errors("claiming the WAL fence", e) from e
            self.wal_next = n + 1
            self.wal_fences.add(n)
            return n
        err = FencedError("WAL objects keep appearing after this writer's fence (another "
                          "writer is shipping); retry the open")
        err.retry_open = True  # type: ignore[attr-defined]
        raise err

    def ship_wal(self, header: dict[str, Any], records: bytes) -> int:
        """Create the next ``wal/`` object with ``records``; return its number.

        FencedError if a newer writer holds that number (its fence). A failed PUT may have
        landed anyway: retrying the same call finds its own bytes there and succeeds. The
        fence of an *older* writer there (one that lost a race to open after this one had
        claimed its fence; its open then fails) is stepped over.
        """
        doc = dict(header, format_version=WAL_OBJECT_FORMAT, kind="records",
                   db_id=self.db_id, epoch=self.epoch)
        body = WalObject(0, doc, records).encode()  # (the number is not in the bytes)
        while True:
            n = self.wal_next
            try:
                self.store.put(wal_key(n), body, if_none_match=True)
                break
            except PreconditionFailedError:
                try:
                    theirs = self.store.get(wal_key(n))
                except NotFoundError:
                    theirs = None
                except StoreError as e:
                    raise store_errors(f"reading back WAL object {n}", e) from e
                if theirs == body:
                    break
                if theirs is not None and self._older_fence(n, theirs):
                    self.wal_next = n + 1
                    continue
                raise FencedError(
                    f"another writer has taken over this object-store prefix (it holds WAL "
                    f"object {n}, this writer's next; this writer's epoch is {self.epoch}); "
                    f"this database is now read-only") from None
            except StoreError as e:
                raise store_errors(f"shipping WAL object {n}", e) from e
        self.wal_next = n + 1
        return n

    def _older_fence(self, number: int, data: bytes) -> bool:
        """Whether ``data`` is the fence of a writer with an older epoch than this one
        (recorded, so the mirror keeps it)."""
        obj = WalObject.decode(number, data)
        if obj.kind == "fence" and int(obj.header.get("epoch", 0)) < self.epoch:
            self.wal_fences.add(number)
            return True
        return False

    def delete_wal(self, numbers: list[int]) -> list[int]:
        """Delete WAL data objects (best effort, several at once: a delete costs a round
        trip); return the numbers deleted.

        The one this writer shipped last (``wal_next - 1``) is kept, whatever the caller
        asks: the highest number a writer has used must stay in the bucket until a newer
        writer's fence is above it. Else a new writer, which puts its fence at the highest
        number it lists plus one, would take a freed number *below* this writer's next,
        and this writer's next shipment would succeed above the fence: acknowledged, and
        never read by the new writer (CI, 2026-12-02). A newer writer deletes it later.
        """
        numbers = [n for n in numbers if n != self.wal_next - 1]
        def one(n: int) -> int | None:
            try:
                self.store.delete(wal_key(n))
            except StoreError:
                return None
            return n

        if len(numbers) <= 1:
            return [n for n in map(one, numbers) if n is not None]
        with ThreadPoolExecutor(8, thread_name_prefix="rocksmash-wal-delete") as ex:
            return [n for n in ex.map(one, numbers) if n is not None]

    def download(self, key: str, path: str) -> int:
        """Copy object ``key`` to the new file ``path`` (synced); return its size."""
        try:
            data = self.store.get(key)
        except StoreError as e:
            raise store_errors(f"downloading {key}", e) from e
        tmp = path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return len(data)

    # ------------------------------------------------------------ objects

    def file(self, f: FileMeta) -> CloudFile:
        return CloudFile(self.store, f.object_key, f.size, self.tables_vanish)

    def upload(self, path: str, key: str) -> None:
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            self.store.put(key, data)
        except StoreError as e:
            raise store_errors(f"uploading {key}", e) from e

    def delete(self, key: str) -> None:
        try:
            self.store.delete(key)
        except StoreError as e:
            raise store_errors(f"deleting {key}", e) from e

    def table_keys(self) -> list[str]:
        try:
            return [info.key for info in self.store.list("tables/")]
        except StoreError as e:
            raise store_errors("listing tables", e) from e

    def close(self) -> None:
        """Stop the background fetches (queued ones are dropped, running ones finish),
        then close the store if this tier opened it."""
        if self._fetcher is not None:
            self._fetcher.shutdown(wait=True, cancel_futures=True)
        if self._owned:
            self.store.close()
