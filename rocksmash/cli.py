"""``rocksmash``: inspect and maintain a database from the shell.

Exit status: 0 success, 1 key not found (get), 2 usage error, 3 rocksmash error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import rocksmash

from .checkpoint import is_tiered_checkpoint
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


def _count(s: str) -> int:
    n = int(s)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _store_option(s: str) -> tuple[str, Any]:
    """``KEY=VALUE``; the value is JSON if it parses (numbers, true/false), else text."""
    key, sep, value = s.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {s!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rocksmash", description="Inspect and maintain a rocksmash database. Keys are "
        "UTF-8 text, or hex with a 0x prefix. stats, get, scan and check open a local "
        "database read-only (a view as of the command's start; a writer may be running). "
        "The other commands, and every command on a tiered database, need it not open "
        "elsewhere (a tiered one: not by any writer, as opening it makes this command "
        "the writer).",
        epilog="Exit status: 0 success, 1 key not found (get), 2 usage error, "
        "3 rocksmash error.")
    ap.add_argument("--version", action="version", version=f"rocksmash {rocksmash.__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("path", help="the database directory")
    common.add_argument("--object-store", metavar="URL",
                        help="the object store of a tiered database (s3://bucket/prefix, "
                        "file:///dir)")
    common.add_argument("--object-store-option", metavar="KEY=VALUE", type=_store_option,
                        action="append", default=[],
                        help="an option for the object store, e.g. endpoint_url=http://"
                        "127.0.0.1:8333 (repeatable)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("stats", parents=[common], help="print the tree shape and counters as JSON")
    p = sub.add_parser("get", parents=[common],
                       help="print the value of a key (exit 1 if absent)")
    p.add_argument("key", type=_key)
    p = sub.add_parser("put", parents=[common], help="set a key (synced before exit)")
    p.add_argument("key", type=_key)
    p.add_argument("value", type=_key)
    p = sub.add_parser("delete", parents=[common], help="delete a key (synced before exit)")
    p.add_argument("key", type=_key)
    p = sub.add_parser("delete-range", parents=[common],
                       help="delete every key in [start, end) as one range tombstone (synced "
                       "before exit)")
    p.add_argument("start", type=_key)
    p.add_argument("end", type=_key)
    p = sub.add_parser("scan", parents=[common], help="print key<TAB>value lines in [start, end)")
    p.add_argument("--start", type=_key)
    p.add_argument("--end", type=_key)
    p.add_argument("--reverse", action="store_true")
    p.add_argument("--limit", type=_count, default=0, help="stop after N records (0: all)")
    p.add_argument("--prefix", type=_key, help="only keys that start with this")
    p.add_argument("--keys-only", action="store_true", help="print keys alone")
    sub.add_parser("compact", parents=[common],
                   help="flush and compact everything into the last level (progress on "
                        "stderr)")
    sub.add_parser("check", parents=[common],
                   help="read every record, verifying every checksum")
    p = sub.add_parser("checkpoint", parents=[common],
                       help="write a consistent copy of the database to the new directory "
                       "DEST (local tables hard-linked; a tiered database's cloud tables "
                       "pinned in the bucket, and DEST then opens read-only)")
    p.add_argument("dest", help="the new directory (must not exist)")
    sub.add_parser("detach", parents=[common],
                   help="make the tiered checkpoint PATH a local database: download its "
                   "cloud tables, then release its pin (needs --object-store: the source's)")
    sub.add_parser("release", parents=[common],
                   help="delete the tiered checkpoint PATH: release its pin in the bucket, "
                   "then delete the directory (needs --object-store: the source's)")
    p = sub.add_parser("du", help="what a tiered database's bucket prefix holds, by kind "
                       "(live cloud tables, backups, retired tables, WAL objects, fences, "
                       "mirrors, epochs, pins); reads only, needs no database directory")
    p.add_argument("object_store", metavar="URL", help="the database's object store prefix")
    p.add_argument("--object-store-option", metavar="KEY=VALUE", type=_store_option,
                   action="append", default=[], help="an option for the object store "
                   "(repeatable)")
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON")
    sub.add_parser("restore", parents=[common],
                   help="rebuild a lost local directory from the object store (PATH must "
                   "not hold a database; needs --object-store)")
    return ap


#: Commands that only read; on a local database they open a read-only view.
_READS = ("stats", "get", "scan", "check")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "du":
        return _du(args)
    opts: dict[str, Any] = {"create_if_missing": args.cmd in ("put", "restore")}
    if args.cmd in _READS and (not args.object_store or is_tiered_checkpoint(args.path)):
        # A point-in-time view that takes no lock: works beside a running writer.
        opts = {"read_only": True, "background_processes": False}
    if args.object_store:
        opts.update(object_store=args.object_store,
                    object_store_options=dict(args.object_store_option))
    try:
        return _run(args, opts)
    except BrokenPipeError:  # `rocksmash scan db | head`: the reader left; so do we
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _compact_progress() -> Any:
    """``rocksmash compact``'s progress on stderr: a line redrawn on a terminal, else one
    line every 10 s."""
    tty = sys.stderr.isatty()
    last = [time.monotonic()]

    def progress(read: int, left: int) -> None:
        now = time.monotonic()
        text = f"compacting: {read / 2**20:,.1f} MiB merged, {left / 2**20:,.1f} MiB of files left"
        if tty:
            print(f"\r{text}   ", end="\n" if not left else "", file=sys.stderr, flush=True)
        elif now - last[0] >= 10 or not left:
            last[0] = now
            print(text, file=sys.stderr, flush=True)

    return progress


def _restore(args: argparse.Namespace, opts: dict[str, Any]) -> int:
    """``rocksmash restore``: open PATH empty against the bucket, with progress."""
    from .cloud import CloudTier
    from .db import DB
    from .options import Options

    if not args.object_store:
        print("rocksmash: restore needs --object-store", file=sys.stderr)
        return 2
    cloud = CloudTier(args.object_store, opts["object_store_options"], 5)
    try:
        if cloud.load_mirror() is None:
            print(f"rocksmash: no database in {args.object_store}", file=sys.stderr)
            return 3
    finally:
        cloud.close()
    tty = sys.stderr.isatty()

    def progress(what: str, done: int, total: int) -> None:
        if tty:
            print(f"\rfetching {what}: {done}/{total}", end="\n" if done == total else "",
                  file=sys.stderr, flush=True)
        elif done == total:
            print(f"fetched {what}: {total}", file=sys.stderr)

    started = time.monotonic()
    db = DB(args.path, Options.from_kwargs(**opts, error_if_exists=True), progress=progress)
    try:
        s = db.stats()
    finally:
        db.close()
    tables = sum(lv["files"] for lv in s["levels"])
    print(f"restored {args.path}: {tables} tables ({s['cloud']['cloud_tables']} in the object "
          f"store, {s.get('restored_table_bytes', 0)} bytes of local tables downloaded), "
          f"{s.get('restored_wal_segments', 0)} WAL segments "
          f"({s.get('restored_wal_bytes', 0)} bytes) replayed, last sequence {s['sequence']}, "
          f"in {time.monotonic() - started:.2f} s")
    return 0


def _du(args: argparse.Namespace) -> int:
    """``rocksmash du``: classify the prefix's objects (bucket_usage.py)."""
    import cloudtier

    from .bucket_usage import bucket_usage, format_usage

    try:
        store = cloudtier.open_store(args.object_store, **dict(args.object_store_option))
    except (ValueError, TypeError, cloudtier.StoreError) as e:
        print(f"rocksmash: du: {e}", file=sys.stderr)
        return 2
    try:
        u = bucket_usage(store)
    except Error as e:
        print(f"rocksmash: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    finally:
        store.close()
    print(json.dumps(u, indent=2) if args.json else format_usage(u))
    return 0


def _checkpoint_command(args: argparse.Namespace) -> int:
    """``detach`` and ``release`` of a tiered checkpoint."""
    if not args.object_store:
        print(f"rocksmash: {args.cmd} needs --object-store (the source database's)",
              file=sys.stderr)
        return 2
    store = dict(args.object_store_option)
    if args.cmd == "detach":
        n = rocksmash.detach_checkpoint(args.path, args.object_store,
                                        object_store_options=store)
        print(f"{args.path} is a local database now ({n} bytes of cloud tables downloaded)")
    else:
        rocksmash.release_checkpoint(args.path, args.object_store, object_store_options=store)
        print(f"checkpoint {args.path} released and deleted")
    return 0


def _run(args: argparse.Namespace, opts: dict[str, Any]) -> int:
    try:
        if args.cmd == "restore":
            return _restore(args, opts)
        if args.cmd in ("detach", "release"):
            return _checkpoint_command(args)
        with rocksmash.open(args.path, **opts) as db:
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
            elif args.cmd == "delete-range":
                db.delete_range(args.start, args.end, sync=True)
            elif args.cmd == "scan":
                items = db.scan(args.start, args.end, reverse=args.reverse, prefix=args.prefix,
                                limit=args.limit or None)
                for k, v in items:
                    print(_show(k) if args.keys_only else f"{_show(k)}\t{_show(v)}")
            elif args.cmd == "checkpoint":
                db.checkpoint(args.dest)
                print(f"checkpoint of {args.path} written to {args.dest}")
            elif args.cmd == "compact":
                db.compact_range(progress=_compact_progress())
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
