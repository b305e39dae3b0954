# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create .venv and install what they need; nothing else must be set up by hand.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,training]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m bench demo

# System packages some tests use (redis-server); tests that need an absent one skip with a reason.
test: $(STAMP)
	sh scripts/install-system-deps.sh
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
