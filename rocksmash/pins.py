"""Pins: objects in the bucket that keep a tiered checkpoint's cloud tables alive.

A checkpoint of a tiered database (checkpoint.py) shares the source's cloud tables
instead of copying them. Its pin, ``pins/<id>`` (32 hex digits), names the object keys of
those tables. Every writer of the prefix keeps an object that any pin names, however long
ago the object left the writer's version, until the pin is deleted
(``rocksmash.release_checkpoint`` or ``rocksmash.detach_checkpoint``). The format is one
checksummed record of JSON, like epochs and mirrors (docs/format.md, "Pins").

The writer's side (publication.py):

* at open it reads every pin (one LIST, then one GET per pin) and keeps what they name;
* its own checkpoints add their keys before the pin is written, under the compaction
  mutex, so that no table of theirs can retire unpinned in between;
* it learns of a release only at its next open. Until then the released tables' objects
  stay (the safe direction), and that open's garbage collection deletes them.

A pin that cannot be read (damaged, or of a newer format) stops that open's garbage
collection instead of being skipped: deleting what it may name would break a checkpoint.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from cloudtier import NotFoundError, PreconditionFailedError, StoreError

from .cloud import CloudTier, decode_object, encode_object, store_errors
from .errors import CorruptionError, InvalidArgumentError
from .formats import PIN_FORMAT

__all__ = ["PINS", "pin_key", "write_pin", "read_pin", "pinned_keys", "delete_pin"]

PINS = "pins/"


def pin_key(pin: str) -> str:
    if len(pin) != 32 or any(c not in "0123456789abcdef" for c in pin):
        raise InvalidArgumentError(f"pin id {pin!r}: expected 32 lowercase hex digits")
    return PINS + pin


def write_pin(cloud: CloudTier, pin: str, keys: list[str], checkpoint: str) -> None:
    """Create ``pins/<pin>`` naming ``keys`` (created once, with If-None-Match)."""
    doc: dict[str, Any] = {"format_version": PIN_FORMAT, "pin": pin, "db_id": cloud.db_id,
                           "epoch": cloud.epoch, "created": time.time(),
                           "checkpoint": f"{socket.gethostname()}:{checkpoint}",
                           "keys": sorted(keys)}
    try:
        cloud.store.put(pin_key(pin), encode_object(doc), if_none_match=True)
    except PreconditionFailedError:
        raise InvalidArgumentError(f"pin {pin} exists already") from None
    except StoreError as e:
        raise store_errors(f"writing pin {pin}", e) from e


def read_pin(cloud: CloudTier, pin: str) -> dict[str, Any]:
    """The pin's document. InvalidArgumentError if it does not exist (released, or another
    prefix); CorruptionError if it is damaged."""
    try:
        data = cloud.store.get(pin_key(pin))
    except NotFoundError:
        raise InvalidArgumentError(
            f"pin {pin} is not in this object store: the checkpoint was released, or "
            f"object_store= is not its source database's") from None
    except StoreError as e:
        raise store_errors(f"reading pin {pin}", e) from e
    return _decode(data, pin)


def _decode(data: bytes, pin: str) -> dict[str, Any]:
    doc = decode_object(data, f"pin {pin}", (PIN_FORMAT,))
    keys = doc.get("keys")
    if (doc.get("pin") != pin or not isinstance(keys, list)
            or not all(isinstance(k, str) and k.startswith("tables/") for k in keys)):
        raise CorruptionError(f"object store: pin {pin} object is malformed")
    return doc


def pinned_keys(cloud: CloudTier) -> set[str]:
    """Every object key that any pin of the prefix names. A pin that cannot be read
    raises (CorruptionError, NewerFormatError): the caller must then delete nothing."""
    keys: set[str] = set()
    try:
        for info in cloud.store.list(PINS):
            try:
                data = cloud.store.get(info.key)
            except NotFoundError:
                continue  # released since the listing
            keys.update(_decode(data, info.key[len(PINS):])["keys"])
    except StoreError as e:
        raise store_errors("reading the pins", e) from e
    return keys


def delete_pin(cloud: CloudTier, pin: str) -> None:
    """Delete ``pins/<pin>`` (if it is absent already, there is nothing to do)."""
    try:
        cloud.store.delete(pin_key(pin))
    except StoreError as e:
        raise store_errors(f"deleting pin {pin}", e) from e
