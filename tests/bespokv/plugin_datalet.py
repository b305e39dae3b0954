"""A datalet written in the test suite, to prove the plug-in contract.

It does not subclass ``bespokv.datalets.Datalet``: it only has the three required methods
(``get``, ``write``, ``scan``) with the documented signatures, on a plain dict that is
sorted at scan time. Every controlet must work with it unchanged. Loadable from a config
as ``kind = "plugin_datalet:PlainDictDatalet"`` when this directory is on ``sys.path``.
"""

from __future__ import annotations

import bisect
import time


class PlainDictDatalet:
    """``write_delay``: seconds to sleep per written key (makes a slow replica in tests)."""

    kind = "plain-dict"

    def __init__(self, write_delay: float = 0.0, **options):
        self.write_delay = float(write_delay)
        self.options = options
        self.d: dict[bytes, bytes] = {}

    def get(self, key):
        return self.d.get(key)

    def write(self, ops):
        ops = list(ops)
        for k, v in ops:
            if not isinstance(k, bytes) or (v is not None and not isinstance(v, bytes)):
                raise TypeError("keys and values must be bytes")
        if self.write_delay:
            time.sleep(self.write_delay * len(ops))
        for k, v in ops:
            if v is None:
                self.d.pop(k, None)
            else:
                self.d[k] = v

    def scan(self, start=None, end=None, *, reverse=False, limit=None):
        keys = sorted(self.d)
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        sel = keys[lo:hi]
        if reverse:
            sel.reverse()
        if limit is not None:
            sel = sel[:limit]
        return [(k, self.d[k]) for k in sel]
