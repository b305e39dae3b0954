"""How a shard replica's datalet holds its values, and switching that form with the mode.

Two forms (frozen):

* ``plain``: the master-slave modes. A user key holds the value as the client wrote it
  (deleted keys are absent), and ``POSITION_KEY`` holds the replication position.
* ``versioned``: the active-active modes. A user key holds ``versioned.encode(...)``: a
  13-byte header (flags, timestamp, writer) then the value; deletes are tombstones.

``FORMAT_KEY`` (``0xFFFF "bespokv/format"``) holds ``b"plain"`` or ``b"versioned"``. It
is written by a conversion and when a master-slave replica starts a full copy (whose data
has no position until the copy ends). A replica without it is recognised by its content:
a position record means plain; else the first user value tells (a versioned header, or
not); no user data means nothing to convert. ``MERGED_KEY`` (``0xFFFF "bespokv/merged"``,
16 bytes) is in a versioned replica only between a live switch's merge and its conversion
(below): it says the replica holds every replica's values, and names the new history.

A node opens every replica through :func:`open_for` before building its controlet, so a
shard whose mode was changed in the config while the cluster was down (an offline switch)
finds its data in the form it reads:

* **plain -> versioned** (ms -> aa), on each replica, in one atomic datalet batch: every
  value gets the version ``(seq, 0)``, ``seq`` being the replica's replication position
  (at least 1). A replica that lagged (ms-ec, or a chain replica that was down at the
  stop) so gets older versions than the up-to-date ones, and quorum reads and
  anti-entropy prefer the latter. Known gap: a key deleted after the lagging replica's
  position is still live there, and it can come back (the form keeps no tombstones of
  deletes).
* **versioned -> plain** (aa -> ms): no replica alone holds every acknowledged write (an
  aa-sc write is on a majority, an aa-ec write maybe on one replica). Two ways:

  - *Merged first* (the live switch, decision 0049): while the shard is frozen and
    drained, every replica merges every other one's values into its own (newest version
    wins), so all hold the same values, and records that in ``MERGED_KEY`` with the
    history id the switch gives the shard. After the switch each replica converts on its
    own, in one atomic batch: values stripped of their header, tombstones deleted,
    position ``(that history, 0)``, the marker gone. A replica killed before its batch
    still holds the marker and converts when it opens; every replica ends at the same
    position with the same values, so nobody needs a full copy and any of them can lead
    after a failover.
  - *Head merge* (the offline switch): the replicas keep their versioned values
    (:func:`open_for` returns True); the shard's new head merges every other replica's
    versioned values into its own, rewrites them plain in one batch and starts a new
    history, and the other replicas get a full copy from it (masterslave.py). Until then
    the shard serves nothing, and a replica holding versioned values serves nothing
    (no read, no copy, no pull) until a full copy has replaced them.
"""

from __future__ import annotations

from collections.abc import Iterable

import xxhash

from bespokv import versioned
from bespokv.controlets.replstore import FORMAT_KEY, MERGED_KEY, POSITION_KEY, decode_position, encode_position
from bespokv.datalets.base import RESERVED_PREFIX, Datalet, Op

__all__ = [
    "FORMAT_KEY", "MERGED_KEY", "PLAIN", "VERSIONED", "form_of_mode", "stored_form", "open_for", "merge_newer",
    "to_plain", "switch_history",
]

PLAIN = b"plain"
VERSIONED = b"versioned"


def form_of_mode(mode: str) -> bytes:
    return PLAIN if mode.startswith("ms") else VERSIONED


def stored_form(d: Datalet) -> bytes | None:
    """The form ``d`` holds (None: it holds nothing yet)."""
    marker = d.get(FORMAT_KEY)
    if marker is not None:
        return marker
    if d.get(POSITION_KEY) is not None:
        return PLAIN
    first = list(d.scan(None, RESERVED_PREFIX, limit=1))
    if not first:
        return None
    enc = first[0][1]
    return VERSIONED if len(enc) >= versioned.HEADER and enc[0] in (versioned.LIVE, versioned.TOMBSTONE) else PLAIN


def switch_history(shard: int, epoch: int) -> bytes:
    """The history id every replica of ``shard`` starts when it converts plain after the
    merge a live switch asked for at shard epoch ``epoch`` (the same on every replica)."""
    return xxhash.xxh3_128_digest(b"bespokv/switch/%d/%d" % (shard, epoch))


def open_for(d: Datalet, mode: str) -> bool:
    """Make ``d`` readable by a controlet of ``mode`` (called before the controlet exists,
    on the replica's worker thread or before any call reached it, so nothing else touches
    ``d``). Returns True when ``d`` still holds versioned values that a master-slave head
    must merge first (the offline switch; see the module doc)."""
    have, want = stored_form(d), form_of_mode(mode)
    if want == PLAIN and have != PLAIN:
        merged = d.get(MERGED_KEY)
        if merged is not None:  # merged for a live switch: convert here, in one batch
            to_plain(d, history=merged)
            return False
    if have == want or have is None:
        return False
    if want == VERSIONED:
        raw = d.get(POSITION_KEY)
        ts = max(1, decode_position(raw)[1]) if raw is not None else 1
        ops: list[Op] = [(k, versioned.encode(ts, 0, v)) for k, v in d.scan(None, RESERVED_PREFIX)]
        d.write([*ops, (POSITION_KEY, None), (FORMAT_KEY, VERSIONED)])
        return False
    return True


def merge_newer(d: Datalet, pairs: Iterable[tuple[bytes, bytes]]) -> int:
    """Store each versioned pair whose version beats ``d``'s (one batch; run on the
    replica's worker thread). Returns how many were stored."""
    ops: list[Op] = []
    for k, enc in pairs:
        if not k.startswith(RESERVED_PREFIX) and versioned.newer(enc, d.get(k)):
            ops.append((k, enc))
    if ops:
        d.write(ops)
    return len(ops)


def to_plain(d: Datalet, history: bytes | None = None) -> int:
    """Rewrite a versioned replica plain in one atomic batch: live values stripped of
    their header, tombstones deleted, the merge marker gone, and the position ``(history,
    0)`` (none without ``history``); run on the worker thread. Returns the number of live
    values."""
    ops: list[Op] = [(k, versioned.decode(enc)[1]) for k, enc in d.scan(None, RESERVED_PREFIX)]
    position = encode_position(history, 0) if history else None
    d.write([*ops, (POSITION_KEY, position), (FORMAT_KEY, PLAIN), (MERGED_KEY, None)])
    return sum(1 for _, v in ops if v is not None)
