# The isolab book and library. Two commands do everything on a fresh machine:
#   make book   execute every chapter and render the website into _build/html
#   make test   the whole test suite (library, chapters with nbval, the site in Chromium)
# Both set up the pinned environment in .venv first.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book test outputs bench chromium clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

book: $(STAMP)
	$(PY) scripts/build_book.py

chromium:
	@bash scripts/ensure_chromium.sh

test: book chromium
	$(PY) -m pytest tests book --nbval-lax --nbval-current-env -p no:cacheprovider

# Re-execute the chapters and rewrite their committed outputs (after an intended change).
outputs: $(STAMP)
	$(PY) scripts/refresh_outputs.py

# Benchmarks print ratios and medians; they are not part of the test suite.
bench: $(STAMP)
	$(PY) benchmarks/bench_explorables.py

clean:
	rm -rf _build
