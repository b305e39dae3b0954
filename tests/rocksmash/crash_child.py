"""Child process of test_crash.py: applies a seeded stream of writes and reports each
one on stdout after the engine acknowledged it. It never exits by itself; the parent
kills it with SIGKILL."""

from __future__ import annotations

import random
import sys

import rocksmash

OPTIONS = dict(memtable_size="24KiB", target_file_size="32KiB", level_base_size="64KiB",
               level_multiplier=4, l0_compaction_trigger=2, block_size=512)


def ops(seed: int):
    """The op stream for ``seed``: ("put", key, value) | ("del", key) | ("batch", [...])
    | ("range", start, end) (a delete_range of up to 40 keys)."""
    r = random.Random(seed)
    n = 0
    while True:
        n += 1
        x = r.random()
        key = b"key%04d" % r.randrange(1500)
        if x < 0.7:
            yield ("put", key, b"%d-%d-" % (seed, n) + b"v" * r.randrange(0, 200))
        elif x < 0.83:
            yield ("del", key)
        elif x < 0.85:
            yield ("range", key, key[:3] + b"%04d" % (int(key[3:]) + r.randrange(1, 40)))
        else:
            yield ("batch", [(b"key%04d" % r.randrange(1500),
                              None if r.random() < 0.3 else b"%d-%d-b%d" % (seed, n, i))
                             for i in range(r.randrange(1, 6))])


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    db = rocksmash.open(path, **OPTIONS)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for i, op in enumerate(ops(seed)):
        sync = i % 2 == 0
        if op[0] == "put":
            db.put(op[1], op[2], sync=sync)
        elif op[0] == "del":
            db.delete(op[1], sync=sync)
        elif op[0] == "range":
            db.delete_range(op[1], op[2], sync=sync)
        else:
            b = rocksmash.WriteBatch()
            for k, v in op[1]:
                b.put(k, v) if v is not None else b.delete(k)
            db.write(b, sync=sync)
        out.write("%d\n" % i)
        out.flush()


if __name__ == "__main__":
    main()
