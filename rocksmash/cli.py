"""``rocksmash``: inspect and maintain a database from the shell.

Exit status: 0 success, 1 key not found (get), 2 usage error, 3 rocksmash error.
"""

from __future__ import annotations

import argparse
import json
import sys

import rocksmash

from .errors import Error


def _key(s: str) -> bytes:
    """Keys on the command line: UTF-8 text, or hex with a ``0x`` prefix."""
    return bytes.fromhex(s[2:]) if s.startswith("0x") else s.encode()


def _show(b: bytes) -> str:
    try:
        text = b.decode()
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return "0x" + b.hex()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="rocksmash", description="Inspect and maintain a rocksmash database. Keys are "
        "UTF-8 text, or hex with a 0x prefix. The database must not be open elsewhere.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("stats", help="print the tree shape and counters as JSON")
    p.add_argument("path")
    p = sub.add_parser("get", help="print the value of a key (exit 1 if absent)")
    p.add_argument("path")
    p.add_argument("key", type=_key)
    p = sub.add_parser("put", help="set a key (synced before exit)")
    p.add_argument("path")
    p.add_argument("key", type=_key)
    p.add_argument("value", type=_key)
    p = sub.add_parser("delete", help="delete a key (synced before exit)")
    p.add_argument("path")
    p.add_argument("key", type=_key)
    p = sub.add_parser("scan", help="print key<TAB>value lines in [start, end)")
    p.add_argument("path")
    p.add_argument("--start", type=_key)
    p.add_argument("--end", type=_key)
    p.add_argument("--reverse", action="store_true")
    p.add_argument("--limit", type=int, default=0, help="stop after N records (0: all)")
    p = sub.add_parser("compact", help="flush and compact everything into the last level")
    p.add_argument("path")
    p = sub.add_parser("check", help="read every record, verifying every checksum")
    p.add_argument("path")
    args = ap.parse_args(argv)
    try:
        with rocksmash.open(args.path, create_if_missing=args.cmd == "put") as db:
            if args.cmd == "stats":
                print(json.dumps(db.stats(), indent=2))
            elif args.cmd == "get":
                value = db.get(args.key)
                if value is None:
                    print("not found", file=sys.stderr)
                    return 1
                print(_show(value))
            elif args.cmd == "put":
                db.put(args.key, args.value, sync=True)
            elif args.cmd == "delete":
                db.delete(args.key, sync=True)
            elif args.cmd == "scan":
                for i, (k, v) in enumerate(db.scan(args.start, args.end, reverse=args.reverse)):
                    if args.limit and i >= args.limit:
                        break
                    print(f"{_show(k)}\t{_show(v)}")
            elif args.cmd == "compact":
                db.compact_range()
                print(json.dumps([lv for lv in db.stats()["levels"] if lv["files"]]))
            elif args.cmd == "check":
                n = tables = 0
                for _, f in db._version.files():
                    tables += 1
                    for _ in f.table.entries():
                        n += 1
                live = sum(1 for _ in db.scan())
                print(f"ok: {tables} tables, {n} table entries, {live} live keys")
    except Error as e:
        print(f"rocksmash: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
