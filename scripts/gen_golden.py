"""Regenerate the golden files of every rocksmash format, on purpose.

    .venv/bin/python scripts/gen_golden.py

writes tests/rocksmash/testdata/ from fixed inputs (the same inputs the golden test uses).
Run it only when a format changes deliberately (with its version number bumped in
rocksmash/formats.py and docs/format.md updated); the test fails on any change otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.rocksmash.golden import OUT, build  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = build(tmp)
        os.makedirs(OUT, exist_ok=True)
        for name, path in files.items():
            shutil.copyfile(path, os.path.join(OUT, name))
            print(f"{name}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
