"""The cloud tier: the object store, writer fencing, the manifest mirror, cloud table files.

Object layout under the database's store prefix (all written by this module)::

    epochs/<E, 20 digits>      one per writer session: one log_format record of JSON
                               {"format_version", "epoch": E, "owner", "claimed", "db_id"}
    manifests/<G, 20 digits>   the mirror, generation G: one log_format record of JSON
                               (the cloud part of the version, below)
    tables/<n>-e<E>.sst        one table, written once by the writer of epoch E

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
size, key range, sequence range, epoch), the last sequence number, the next file number,
and its ``generation``. The local manifest records the writer's epoch (a directory left
behind by a writer that was since replaced is detected: the mirror's epoch is newer) and
the generation of each cloud-touching edit (a mirror newer than the local manifest means a
manifest record was lost). Old generations are deleted as new ones are published, keeping
the last few. Epoch objects are never deleted (one small object per open): a writer that
was fenced long ago must still find ``epochs/<E+1>``, and deleting old epochs in order
cannot be made reliable with best-effort deletes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

import cloudtier
from cloudtier import NotFoundError, ObjectStore, PreconditionFailedError, StoreError

from .errors import (CorruptionError, FencedError, InvalidArgumentError, NewerFormatError,
                     ObjectStoreError, UnavailableError)
from .formats import CLOUD_OBJECT_FORMAT
from .log_format import CLEAN, encode_record, read_records
from .version import CLOUD, FileMeta

__all__ = ["CloudFile", "CloudTier", "store_errors"]

EPOCHS = "epochs/"
MIRRORS = "manifests/"
#: Mirror generations kept besides the newest (a reader that listed just before a publish
#: can still fetch what it listed).
KEEP_MIRRORS = 4


def epoch_key(epoch: int) -> str:
    return f"{EPOCHS}{epoch:020d}"


def mirror_key(generation: int) -> str:
    return f"{MIRRORS}{generation:020d}"
#: Format of the epoch and mirror objects (formats.py).
MIRROR_FORMAT = CLOUD_OBJECT_FORMAT


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


def decode_object(data: bytes, what: str) -> dict[str, Any]:
    """Parse an epoch or mirror object; CorruptionError unless it is exactly one valid
    record holding a JSON object of a known format."""
    records, end, tail = read_records(data, name=what)
    if tail != CLEAN or len(records) != 1:
        raise CorruptionError(f"object store: {what} object is damaged (checksum)")
    try:
        doc = json.loads(records[0])
        fmt = doc["format_version"]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptionError(f"object store: malformed {what} object ({e})") from e
    if type(fmt) is not int or fmt > MIRROR_FORMAT:
        raise NewerFormatError(f"object store: {what} object format {fmt!r} is newer than "
                               f"this rocksmash supports ({MIRROR_FORMAT}); upgrade rocksmash")
    if fmt != MIRROR_FORMAT:
        raise CorruptionError(f"object store: {what} object has unknown format {fmt!r}")
    return doc


class CloudFile:
    """A RandomAccessFile over one object: each read is one ranged GET."""

    __slots__ = ("store", "key", "_size")

    def __init__(self, store: ObjectStore, key: str, size: int) -> None:
        self.store = store
        self.key = key
        self._size = size

    def read(self, offset: int, size: int) -> bytes:
        try:
            return self.store.get(self.key, offset, offset + size)
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

    def __init__(self, url: str | ObjectStore, options: dict[str, Any], retries: int) -> None:
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
        #: The database's identity, once claim_epoch has run.
        self.db_id: str | None = None
        self.generation = 0
        self._unknown_body: bytes | None = None
        self._lock = threading.Lock()
        self._worker_traffic: dict[str, Any] = {"requests": {}, "bytes_in": 0, "bytes_out": 0}

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
        latest = 0
        for info in self.store.list(prefix):
            try:
                latest = max(latest, int(info.key[len(prefix):]))
            except ValueError:
                raise CorruptionError(f"object store: unexpected object {info.key!r}") from None
        return latest

    def _read(self, key: str, what: str) -> dict[str, Any]:
        doc = decode_object(self.store.get(key), what)
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
            body = encode_object({"format_version": MIRROR_FORMAT, "epoch": current + 1,
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
            gen = self._latest(MIRRORS)
            if not gen:
                return None
            mirror = self._read(mirror_key(gen), "manifest mirror")
        except NotFoundError:  # deleted between the listing and the read: a newer one exists
            return self.load_mirror()
        except StoreError as e:
            raise store_errors("reading the manifest mirror", e) from e
        try:
            if int(mirror["generation"]) != gen:
                raise ValueError(f"generation {mirror['generation']} in object {gen}")
            int(mirror["last_seq"]), int(mirror["next_file"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"object store: malformed manifest mirror ({e})") from e
        if self.db_id is not None and mirror.get("db_id") not in (None, self.db_id):
            raise InvalidArgumentError(
                f"the object store prefix's manifest mirror belongs to another database "
                f"(id {mirror.get('db_id')}) than this one (id {self.db_id})")
        self.generation = gen
        return mirror

    def publish_mirror(self, files: list[tuple[int, FileMeta]], *, num_levels: int,
                       last_seq: int, next_file: int) -> int:
        """Create the next mirror generation; return it.

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
                "next_file": next_file,
                "files": [[lvl, f.number, f.size, f.smallest.hex(), f.largest.hex(),
                           f.min_seq, f.max_seq, f.epoch] for lvl, f in files],
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
            if gen > KEEP_MIRRORS + 1:
                try:  # best effort: a leftover is deleted with the next one
                    for old in range(max(1, gen - KEEP_MIRRORS - 2), gen - KEEP_MIRRORS):
                        self.store.delete(mirror_key(old))
                except StoreError:
                    pass
            return gen

    def _lost_publish(self, gen: int) -> FencedError:
        """The error for a mirror generation that someone else created first."""
        try:
            epoch = int(self._read(mirror_key(gen), "manifest mirror")["epoch"])
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
        except NotFoundError:
            pass
        except StoreError:
            self._unknown_body = body
            raise

    @staticmethod
    def mirror_files(mirror: dict[str, Any]) -> list[tuple[int, FileMeta]]:
        try:
            return [(int(a[0]), FileMeta(int(a[1]), int(a[2]), bytes.fromhex(a[3]),
                                         bytes.fromhex(a[4]), int(a[5]), int(a[6]), None,
                                         CLOUD, int(a[7])))
                    for a in mirror["files"]]
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise CorruptionError(f"object store: malformed manifest mirror ({e})") from e

    # ------------------------------------------------------------ objects

    def file(self, f: FileMeta) -> CloudFile:
        return CloudFile(self.store, f.object_key, f.size)

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
        if self._owned:
            self.store.close()
