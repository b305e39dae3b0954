"""Generate rocksmash/open_options.py, the typed keyword options of ``rocksmash.open``,
from rocksmash/options.py (the one list of options: names, types, defaults, and the
comment above each field as its meaning).

    python scripts/gen_open_options.py          # rewrite rocksmash/open_options.py
    python scripts/gen_open_options.py --check  # exit 1 if it is out of date

tests/rocksmash/test_library_options.py runs the check, so adding an option to
options.py without regenerating fails the tests with this command in the message.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rocksmash.options import Options  # noqa: E402

TARGET = ROOT / "rocksmash" / "open_options.py"
COMMAND = "python scripts/gen_open_options.py"

_FIELD = re.compile(r"^    (\w+): [^=]+(=|$)")

#: What ``open`` accepts for a field, by its annotation in options.py (sizes and durations
#: also take strings, parsed by Options.from_kwargs).
_TYPES = {"bool": "bool", "int": "int", "float": "float", "str": "str", "Any": "Any",
          "dict": "dict[str, Any]"}


def comments() -> dict[str, str]:
    """Each field's meaning: the comment lines right above it (section rules skipped).
    Fields declared together under one comment (``level_base_size`` and
    ``level_multiplier``) share it."""
    out: dict[str, str] = {}
    pending: list[str] = []
    last = ""  # the comment of the field on the line before, if it was a field
    for line in inspect.getsource(Options).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if not text.startswith("---"):
                pending.append(text)
            last = ""
            continue
        m = _FIELD.match(line)
        if m:
            last = out[m.group(1)] = " ".join(pending) or last
        else:
            last = ""
        pending = []
    return out


def accepted_type(f: dataclasses.Field[Any]) -> str:
    if f.metadata.get("size"):
        return "int | str"
    if f.metadata.get("duration"):
        return "float | str"
    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "Any")
    return _TYPES.get(name, "Any")


def show_default(f: dataclasses.Field[Any]) -> str:
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    if f.metadata.get("size") and isinstance(value, int) and value:
        for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
            if value % (1 << shift) == 0:
                return repr(f"{value >> shift}{unit}")
    if f.metadata.get("duration"):
        return repr(f"{value:g}s")
    return repr(value)


def generate() -> str:
    docs = comments()
    fields = dataclasses.fields(Options)
    missing = [f.name for f in fields if not docs.get(f.name)]
    if missing:
        raise SystemExit(f"options without a comment in rocksmash/options.py: {missing}")
    body = []
    helps = []
    for f in fields:
        meaning = docs[f.name]
        default = show_default(f)
        doc = textwrap.fill(f"{meaning} Default: ``{default}``.", 88,
                            initial_indent="    ", subsequent_indent="    ")
        body.append(f"    {f.name}: {accepted_type(f)}\n    \"\"\"{doc.strip()}\"\"\"\n")
        helps.append(f"    {f.name!r}: ({default!r}, {meaning!r}),")
    return HEADER.format(command=COMMAND) + "\n".join(body) + HELP_HEAD + "\n".join(helps) + "\n}\n"


HEADER = '''"""The keyword options of :func:`rocksmash.open`, typed for editors and type checkers.

GENERATED from rocksmash/options.py by ``{command}``; do not
edit. tests/rocksmash/test_library_options.py fails when this file is out of date.

``rocksmash.open(path, **options: Unpack[OpenOptions])``: mypy and editors check each
keyword's name and type against :class:`OpenOptions`; at run time an unknown name, or a
value that does not parse, raises :class:`~rocksmash.errors.InvalidArgumentError`.
Sizes take an ``int`` (bytes) or a string such as ``"64MiB"``; durations a number of
seconds or a string such as ``"100ms"``.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["OpenOptions", "HELP"]


class OpenOptions(TypedDict, total=False):
    """Every option of :func:`rocksmash.open`, with what it accepts (see
    :class:`rocksmash.Options` for the parsed values)."""

'''

HELP_HEAD = '''

#: Each option's default (as shown to users) and meaning, for ``help(rocksmash.open)``.
HELP: dict[str, tuple[str, str]] = {
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = ap.parse_args()
    text = generate()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
