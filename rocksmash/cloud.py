"""The cloud tier: the object store, writer fencing, the manifest mirror, cloud table files.

Object layout under the database's store prefix (all written by this module)::

    epoch                      one log_format record: JSON {"epoch": E, "owner": ...,
                               "claimed": unix time, "db_id": UUID}
    manifest                   one log_format record: JSON mirror of the cloud part of
                               the version (below)
    tables/<n>-e<E>.sst        one table, written once by the writer of epoch E

The epoch and mirror objects are framed as one checksummed record (length, CRC-32,
payload; see log_format.py), so a damaged object is a CorruptionError, never a silently
different database. Both carry the database's identity (a UUID made at creation and kept
in the local manifest too), so a directory is never opened against another database's
prefix.

Fencing: opening claims epoch E+1 with a conditional PUT (if-match on the etag read, or
if-none-match when there is none), then publishes the mirror. Every later mirror publish
is a conditional PUT on the etag of this writer's previous publish, so once another
writer has claimed the prefix and published, the old writer's next publish fails and it
stops writing (:class:`FencedError`). Table objects carry their writer's epoch in their
key, so even a writer that has not noticed yet cannot overwrite the new writer's tables.

The mirror holds what reopening from the bucket needs: every cloud table (level, number,
size, key range, sequence range, epoch), the last sequence number, the next file number,
and a ``generation`` that increases with every publish. The local manifest records the
writer's epoch (a directory left behind by a writer that was since replaced is detected:
the mirror's epoch is newer) and the generation of each cloud-touching edit (a mirror
newer than the local manifest means a manifest record was lost).

A writer also reads the epoch object at every flush and every ``fencing_check_interval``
(:meth:`CloudTier.check_epoch`), so a writer that another has replaced learns it within
that interval even when it publishes nothing.
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

EPOCH_KEY = "epoch"
MIRROR_KEY = "manifest"
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
        self._mirror_etag: str | None = None
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

    def claim_epoch(self, db_id: str | None) -> str | None:
        """Become the writer: epoch E+1 by conditional PUT. FencedError on a race.

        ``db_id`` is the local database's identity (None for a new directory). Returns the
        identity recorded in the bucket (None for an empty prefix). A prefix that holds
        another database is refused with InvalidArgumentError, before anything is written.
        """
        try:
            try:
                info = self.store.head(EPOCH_KEY)
                doc = decode_object(self.store.get(EPOCH_KEY), EPOCH_KEY)
                current, bucket_id = int(doc["epoch"]), doc.get("db_id")
                etag: str | None = info.etag
            except NotFoundError:
                current, bucket_id, etag = 0, None, None
            if db_id is not None and bucket_id is not None and db_id != bucket_id:
                raise InvalidArgumentError(
                    f"the object store prefix holds another database (id {bucket_id}) than "
                    f"this directory (id {db_id}); check object_store=")
            body = encode_object({"format_version": MIRROR_FORMAT, "epoch": current + 1,
                                  "owner": f"{socket.gethostname()}:{os.getpid()}",
                                  "claimed": time.time(), "db_id": db_id or bucket_id})
            if etag is None:
                self.store.put(EPOCH_KEY, body, if_none_match=True)
            else:
                self.store.put(EPOCH_KEY, body, if_match=etag)
        except PreconditionFailedError:
            raise FencedError("another writer claimed this object-store prefix at the same "
                              "time; retry the open") from None
        except (ValueError, KeyError, TypeError) as e:
            if isinstance(e, InvalidArgumentError):
                raise
            raise CorruptionError(f"object store: malformed {EPOCH_KEY} object ({e})") from e
        except StoreError as e:
            raise store_errors("claiming the writer epoch", e) from e
        self.epoch = current + 1
        self.db_id = db_id or bucket_id
        return bucket_id

    def check_epoch(self) -> None:
        """Raise FencedError if another writer has claimed the prefix since this one did
        (one GET). Unavailable or refusing stores raise their rocksmash errors."""
        try:
            doc = decode_object(self.store.get(EPOCH_KEY), EPOCH_KEY)
            epoch = int(doc["epoch"])
        except NotFoundError:
            raise CorruptionError(f"object store: the {EPOCH_KEY} object vanished") from None
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"object store: malformed {EPOCH_KEY} object ({e})") from e
        except StoreError as e:
            raise store_errors("checking the writer epoch", e) from e
        if epoch != self.epoch:
            raise FencedError(f"another writer (epoch {epoch}) has taken over this "
                              f"object-store prefix from this one (epoch {self.epoch}); "
                              f"this database is now read-only")

    def load_mirror(self) -> dict[str, Any] | None:
        """The mirrored manifest, or None if the prefix holds no database."""
        try:
            info = self.store.head(MIRROR_KEY)
            data = self.store.get(MIRROR_KEY)
        except NotFoundError:
            return None
        except StoreError as e:
            raise store_errors("reading the manifest mirror", e) from e
        mirror = decode_object(data, "manifest mirror")
        try:
            self.generation = int(mirror["generation"])
            int(mirror["epoch"]), int(mirror["last_seq"]), int(mirror["next_file"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"object store: malformed manifest mirror ({e})") from e
        if self.db_id is not None and mirror.get("db_id") not in (None, self.db_id):
            raise InvalidArgumentError(
                f"the object store prefix's manifest mirror belongs to another database "
                f"(id {mirror.get('db_id')}) than this one (id {self.db_id})")
        self._mirror_etag = info.etag
        return mirror

    def publish_mirror(self, files: list[tuple[int, FileMeta]], *, num_levels: int,
                       last_seq: int, next_file: int) -> int:
        """Upload the mirror of the cloud files; return its generation.

        Conditional on this writer's previous publish (or on the mirror read at open),
        so a writer that lost the prefix gets FencedError instead of overwriting.
        """
        with self._lock:
            try:
                self._settle_unknown_publish()
            except StoreError as e:
                raise store_errors("checking the manifest mirror", e) from e
            gen = self.generation + 1
            body = encode_object({
                "format_version": MIRROR_FORMAT, "generation": gen, "epoch": self.epoch,
                "db_id": self.db_id, "num_levels": num_levels, "last_seq": last_seq,
                "next_file": next_file,
                "files": [[lvl, f.number, f.size, f.smallest.hex(), f.largest.hex(),
                           f.min_seq, f.max_seq, f.epoch] for lvl, f in files],
            })
            try:
                if self._mirror_etag is None:
                    etag = self.store.put(MIRROR_KEY, body, if_none_match=True)
                else:
                    etag = self.store.put(MIRROR_KEY, body, if_match=self._mirror_etag)
            except PreconditionFailedError:
                raise FencedError("another writer has taken over this object-store prefix; "
                                  "this database is now read-only") from None
            except StoreError as e:
                # The PUT may have happened anyway (a timeout after the server applied
                # it); remember the body so the next publish can tell.
                self._unknown_body = body
                raise store_errors("publishing the manifest mirror", e) from e
            self._mirror_etag = etag
            self.generation = gen
            return gen

    def _settle_unknown_publish(self) -> None:
        """After a failed publish, adopt the mirror's etag if that publish did land (its
        body is there), so this writer does not mistake its own write for another's."""
        body, self._unknown_body = self._unknown_body, None
        if body is None:
            return
        try:
            info = self.store.head(MIRROR_KEY)
            if self.store.get(MIRROR_KEY) == body:
                self._mirror_etag = info.etag
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
