"""The KV records of the checkpoint store: key layout and value encodings.

All keys start with the store's namespace ``ns`` (default ``b"training/"``); see
docs/training.md for the full layout. Values are UTF-8 JSON objects with a format number
``"v"`` (currently 1; a reader refuses a newer one), written with sorted keys and no
spaces so one record has one encoding (CAS compares bytes).

=====================================  ===============================================
key                                    value
=====================================  ===============================================
``ns + b"ck/" + run + b"/" + name``    :class:`CheckpointRecord` (pending or committed)
``ns + b"md/" + save_id + b"/%04d"``   part i of the pickled DCP ``Metadata``
``ns + b"chunk/" + blake3 hex``        :class:`ChunkRecord`: incarnation and holders
=====================================  ===============================================
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bespokv.training.errors import CheckpointError, InvalidArgumentError

__all__ = [
    "FORMAT",
    "CheckpointRecord",
    "ChunkRecord",
    "checkpoint_key",
    "metadata_key",
    "chunk_key",
    "split_checkpoint_id",
    "checkpoint_id_of",
    "step_of",
]

#: The record format number. Do not change; a new layout gets a new number.
FORMAT = 1

PENDING = "pending"
COMMITTED = "committed"
LIVE = "live"
DELETING = "deleting"


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _loads(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise CheckpointError(f"{what} record is not valid JSON: {raw[:80]!r}") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("v"), int):
        raise CheckpointError(f"{what} record has no format number: {raw[:80]!r}")
    if obj["v"] > FORMAT:
        raise CheckpointError(f"{what} record has format {obj['v']}; this code reads up to {FORMAT}")
    return obj


@dataclasses.dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint: ``pending`` from the global plan until ``finish``, then ``committed``.

    The pending -> committed step is one CAS on this key: the commit point. A pending
    record whose ``expires`` has passed may be reaped by GC (a CAS to absent), which makes
    a late ``finish`` fail instead of committing chunks GC may already have freed.
    """

    state: str
    save_id: str
    step: int | None
    started: float
    expires: float
    committed: float | None = None
    bytes: int = 0  #: tensor and object bytes in the checkpoint
    new_bytes: int = 0  #: bytes this save uploaded
    dedup_bytes: int = 0  #: bytes found already stored (not uploaded)
    chunks: int = 0
    md_parts: int = 0

    def encode(self) -> bytes:
        d = dataclasses.asdict(self)
        d["v"] = FORMAT
        return _dumps(d)

    @classmethod
    def decode(cls, raw: bytes) -> CheckpointRecord:
        d = _loads(raw, "checkpoint")
        d.pop("v")
        try:
            return cls(**d)
        except TypeError as e:
            raise CheckpointError(f"checkpoint record has unexpected fields: {raw[:80]!r}") from e


@dataclasses.dataclass(frozen=True)
class ChunkRecord:
    """One stored chunk: which incarnation is current, whether it is uploaded, who holds it.

    ``token`` names the incarnation: the object is ``chunks/<hash[:2]>/<hash>.<token>``. A
    new incarnation (after GC marked the old one ``deleting``) gets a new random token, so
    a GC still deleting the old object can never delete the new one. ``holders`` are the
    save ids that reference the chunk: its reference count is ``len(holders)``.
    """

    token: str
    state: str
    uploaded: bool
    size: int
    holders: tuple[str, ...]
    #: the object store's etag of the upload (what a later save's HEAD must find); None
    #: until uploaded, and in records written before etags were kept (size is checked then)
    etag: str | None = None

    def encode(self) -> bytes:
        d = {"v": FORMAT, "token": self.token, "state": self.state,
             "up": self.uploaded, "size": self.size, "holders": list(self.holders)}
        if self.etag is not None:  # absent rather than null: older records keep their bytes
            d["etag"] = self.etag
        return _dumps(d)

    @classmethod
    def decode(cls, raw: bytes) -> ChunkRecord:
        d = _loads(raw, "chunk")
        try:
            etag = d.get("etag")
            if etag is not None and not isinstance(etag, str):
                raise TypeError("etag")
            return cls(d["token"], d["state"], bool(d["up"]), int(d["size"]), tuple(d["holders"]), etag)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"chunk record is malformed: {raw[:80]!r}") from e


def split_checkpoint_id(checkpoint_id: object) -> tuple[str, str]:
    """``"run1/step-100"`` -> ``("run1", "step-100")``: the run is all before the last ``/``.

    Raises ``InvalidArgumentError`` for a non-str id, an id without a run part, an empty
    segment, or control characters.
    """
    if not isinstance(checkpoint_id, str):
        raise InvalidArgumentError(f"checkpoint ids are str like 'run1/step-100', not {type(checkpoint_id).__name__}")
    run, sep, name = checkpoint_id.rpartition("/")
    if not sep or not run or not name or any(not s for s in run.split("/")):
        raise InvalidArgumentError(f"checkpoint id {checkpoint_id!r} is not 'run/name' (e.g. 'run1/step-100')")
    if any(c < " " or c == "\x7f" for c in checkpoint_id):
        raise InvalidArgumentError(f"checkpoint id {checkpoint_id!r} contains a control character")
    return run, name


def checkpoint_id_of(checkpoint_id: object) -> str:
    """A checked checkpoint id (``str`` or path-like, as DCP passes it) as a ``str``."""
    cid = os.fspath(checkpoint_id) if isinstance(checkpoint_id, (str, os.PathLike)) else checkpoint_id
    split_checkpoint_id(cid)
    return str(cid)


def step_of(name: str) -> int | None:
    """The trailing integer of a checkpoint name (``"step-100"`` -> 100), else None."""
    digits = ""
    for c in reversed(name):
        if not c.isdigit():
            break
        digits = c + digits
    return int(digits) if digits else None


def checkpoint_key(ns: bytes, run: str, name: str = "") -> bytes:
    """The record key of ``run/name``; with ``name=""`` the prefix of all of a run's records."""
    return ns + b"ck/" + run.encode() + b"/" + name.encode()


def metadata_key(ns: bytes, save_id: str, part: int | None = None) -> bytes:
    base = ns + b"md/" + save_id.encode() + b"/"
    return base if part is None else base + b"%04d" % part


def chunk_key(ns: bytes, digest: str = "") -> bytes:
    return ns + b"chunk/" + digest.encode()


def object_key(digest: str, token: str) -> str:
    """The object-store key of one chunk incarnation."""
    return f"chunks/{digest[:2]}/{digest}.{token}"


def parse_object_key(key: str) -> tuple[str, str] | None:
    """``chunks/ab/<hash>.<token>`` -> ``(hash, token)``; None for any other key."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "chunks":
        return None
    digest, dot, token = parts[2].partition(".")
    if not dot or len(digest) != 64 or parts[1] != digest[:2]:
        return None
    return digest, token
