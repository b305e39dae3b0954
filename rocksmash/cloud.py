"""The cloud tier: the object store, writer fencing, the manifest mirror, cloud table files.

Object layout under the database's store prefix (all written by this module)::

    epoch                      JSON {"epoch": E, "owner": ..., "claimed": unix time}
    manifest                   JSON mirror of the cloud part of the version (below)
    tables/<n>-e<E>.sst        one table, written once by the writer of epoch E

Fencing: opening claims epoch E+1 with a conditional PUT (if-match on the etag read, or
if-none-match when there is none), then publishes the mirror. Every later mirror publish
is a conditional PUT on the etag of this writer's previous publish, so once another
writer has claimed the prefix and published, the old writer's next publish fails and it
stops writing (:class:`FencedError`). Table objects carry their writer's epoch in their
key, so even a writer that has not noticed yet cannot overwrite the new writer's tables.

The mirror holds what reopening from the bucket needs: every cloud table (level, number,
size, key range, sequence range, epoch), the last sequence number, the next file number,
and a ``generation`` that increases with every publish. The local manifest remembers the
generation it last published, so a local directory left behind by a writer that was
since replaced is detected (its cloud view is stale) instead of trusted.
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

from .errors import CorruptionError, FencedError, InvalidArgumentError, UnavailableError
from .version import CLOUD, FileMeta

__all__ = ["CloudFile", "CloudTier", "store_errors"]

EPOCH_KEY = "epoch"
MIRROR_KEY = "manifest"
MIRROR_FORMAT = 1


def store_errors(what: str, e: StoreError) -> Exception:
    """The rocksmash error for an object-store failure (callers ``raise ... from e``)."""
    if isinstance(e, NotFoundError):
        return CorruptionError(f"{what}: object is missing from the object store")
    if e.retriable:
        return UnavailableError(f"{what}: object store unavailable after retries: {e}")
    return UnavailableError(f"{what}: object store error: {e}")


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

    def claim_epoch(self) -> int:
        """Become the writer: epoch E+1 by conditional PUT. FencedError on a race."""
        try:
            try:
                info = self.store.head(EPOCH_KEY)
                current = json.loads(self.store.get(EPOCH_KEY))["epoch"]
                etag: str | None = info.etag
            except NotFoundError:
                current, etag = 0, None
            body = json.dumps({"epoch": current + 1, "owner": f"{socket.gethostname()}:"
                               f"{os.getpid()}", "claimed": time.time()}).encode()
            if etag is None:
                self.store.put(EPOCH_KEY, body, if_none_match=True)
            else:
                self.store.put(EPOCH_KEY, body, if_match=etag)
        except PreconditionFailedError:
            raise FencedError("another writer claimed this object-store prefix at the same "
                              "time; retry the open") from None
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"object store: malformed {EPOCH_KEY} object ({e})") from e
        except StoreError as e:
            raise store_errors("claiming the writer epoch", e) from e
        self.epoch = current + 1
        return self.epoch

    def load_mirror(self) -> dict[str, Any] | None:
        """The mirrored manifest, or None if the prefix holds no database."""
        try:
            info = self.store.head(MIRROR_KEY)
            data = self.store.get(MIRROR_KEY)
        except NotFoundError:
            return None
        except StoreError as e:
            raise store_errors("reading the manifest mirror", e) from e
        try:
            mirror = json.loads(data)
            if mirror["format_version"] > MIRROR_FORMAT:
                raise CorruptionError(f"manifest mirror format {mirror['format_version']} "
                                      f"is newer than this rocksmash supports")
            self.generation = int(mirror["generation"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"object store: malformed manifest mirror ({e})") from e
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
            body = json.dumps({
                "format_version": MIRROR_FORMAT, "generation": gen, "epoch": self.epoch,
                "num_levels": num_levels, "last_seq": last_seq, "next_file": next_file,
                "files": [[lvl, f.number, f.size, f.smallest.hex(), f.largest.hex(),
                           f.min_seq, f.max_seq, f.epoch] for lvl, f in files],
            }, separators=(",", ":")).encode()
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
