"""Typed ``rocksmash.open`` keywords: derived from rocksmash/options.py (the generated
rocksmash/open_options.py must be current), visible to ``help()`` and
``inspect.signature`` with every default, checked by mypy, and still checked at run time
for ``**kwargs`` callers."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

import rocksmash
from rocksmash import InvalidArgumentError, OpenOptions, Options

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_open_options",
                                                  ROOT / "scripts" / "gen_open_options.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_open_options_are_current():
    gen = _generator()
    assert (ROOT / "rocksmash" / "open_options.py").read_text() == gen.generate(), (
        f"rocksmash/open_options.py is out of date: run {gen.COMMAND}")


def test_open_options_name_every_option_and_nothing_else():
    assert list(OpenOptions.__annotations__) == [f.name for f in dataclasses.fields(Options)]


def test_signature_and_help_list_every_option_with_its_default():
    sig = inspect.signature(rocksmash.open)
    params = list(sig.parameters.values())
    assert params[0].name == "path"
    fields = dataclasses.fields(Options)
    assert [p.name for p in params[1:]] == [f.name for f in fields]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    assert sig.parameters["memtable_size"].default == 32 << 20
    assert sig.parameters["object_store_options"].default == {}
    text = pydoc.render_doc(rocksmash.open, renderer=pydoc.plaintext)
    for f in fields:
        assert f"``{f.name}`` (default " in text, f.name
    assert "``memtable_size`` (default ``'32MiB'``)" in text
    assert "``stall_timeout`` (default ``'60s'``)" in text
    assert "RocksDB's default" in " ".join(text.split())  # the meaning: options.py's comment


def test_unknown_keyword_through_kwargs_is_still_an_invalid_argument(tmp_path):
    opts = {"memtable_sise": "1MiB"}
    with pytest.raises(InvalidArgumentError, match="unknown option 'memtable_sise'"):
        rocksmash.open(tmp_path, **opts)
    with pytest.raises(InvalidArgumentError, match="background_processes"):
        rocksmash.open(tmp_path, **{"background_processes": "yes"})


def test_mypy_catches_a_misspelled_or_mistyped_option(tmp_path):
    pytest.importorskip("mypy")
    src = tmp_path / "user_code.py"
    src.write_text(
        "import rocksmash\n"
        "ok = rocksmash.open('db', memtable_size='64MiB', background_processes=False,\n"
        "                    stall_timeout='1s', compression='zstd')\n"
        "bad1 = rocksmash.open('db', memtable_sise='64MiB')\n"
        "bad2 = rocksmash.open('db', background_processes='yes')\n")
    env = dict(os.environ, MYPYPATH=str(ROOT))  # the checkout, as an installed package
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                        "--no-incremental", "--cache-dir", os.devnull, str(src)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, r.stdout + r.stderr
    assert 'user_code.py:4: error: Unexpected keyword argument "memtable_sise"' in errors[0]
    assert 'user_code.py:5: error: Argument "background_processes"' in errors[1]
