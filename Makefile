# The isolab book and library. Two commands do everything on a fresh machine:
#   make book   execute every chapter and render the website into _build/html
#   make test   the whole test suite (library, chapters with nbval under another CPU's
#               kernels, the build's outputs against the committed ones, the site in Chromium)
# Both set up the pinned environment in .venv first.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book test test-lib outputs bench chromium colab-env check-outputs clean

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

# Colab's widgets: an interpreter that sees the book's environment (a .pth file) but has
# Colab's ipywidgets 7.7.1 installed in front of it (tests/book/test_colab_widgets.py).
COLAB_ENV := $(VENV)/colab-ipywidgets7
$(COLAB_ENV)/.installed: $(STAMP)
	rm -rf $(COLAB_ENV)
	$(PYTHON) -m venv --without-pip $(COLAB_ENV)
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
	  > "$$($(COLAB_ENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/isolab-book-env.pth"
	$(PY) -m pip --python $(COLAB_ENV)/bin/python install --quiet ipywidgets==7.7.1
	touch $@
colab-env: $(COLAB_ENV)/.installed

# Checked outputs must print the same on any CPU, and the suite tries two environments:
# the book build's own execution of every chapter (this machine's kernels; compared with
# the committed outputs by check-outputs), and nbval's execution under PERTURBED, which
# stands in for any other CPU: ATen's scalar kernels, MKL's compatible path, one thread,
# and every random draw of the book multiplied by 1 + 1e-6 u (isolab.book.seeding's
# jitter; JITTER_SEED chooses the perturbation: make test JITTER_SEED=2).
JITTER_SEED ?= 1
PERTURBED := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
  ISOLAB_JITTER=1e-6 ISOLAB_JITTER_SEED=$(JITTER_SEED)
check-outputs: $(STAMP)
	$(PY) scripts/check_outputs.py

# The unit tests and nbval are each one process on one core: they run side by side (the
# nbval log is printed when both are done), and the target fails if either fails.
test: book chromium colab-env
	$(PY) scripts/check_outputs.py
	@$(PERTURBED) $(PY) -m pytest book --nbval-lax --nbval-current-env -p no:cacheprovider \
	  > _build/nbval-perturbed.log 2>&1 & nbval=$$!; \
	$(PY) -m pytest tests -p no:cacheprovider; unit=$$?; \
	wait $$nbval; perturbed=$$?; \
	echo "== nbval under $(PERTURBED) (ran beside the unit tests) =="; cat _build/nbval-perturbed.log; \
	echo "unit tests: exit $$unit; perturbed nbval: exit $$perturbed"; \
	test $$unit -eq 0 && test $$perturbed -eq 0

# The library's tests alone (tests/lib: no book build, no browser): what a contributor to
# isolab/ runs; make test runs them too.
test-lib: $(STAMP)
	$(PY) -m pytest tests/lib -p no:cacheprovider

# Re-execute the chapters and rewrite their committed outputs (after an intended change).
outputs: $(STAMP)
	$(PY) scripts/refresh_outputs.py

# Benchmarks print ratios and medians; they are not part of the test suite.
bench: $(STAMP)
	$(PY) benchmarks/bench_explorables.py

clean:
	rm -rf _build
