# The README's commands. Each target creates .venv and installs the project when needed,
# so a fresh machine needs nothing but `make demo` / `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.afr-installed

.PHONY: env native demo test bench lint typecheck clean system-deps lock

env: $(STAMP) native

# Debian packages the project needs beyond the base image (python3-venv, PostgreSQL for the
# tests; gcc and the Python headers for `make native` as a best effort): the script is
# where they go, so a fresh machine gets them from our own files.
system-deps:
	@PYTHON=$(PYTHON) bash scripts/system-deps.sh

# Installed with constraints.txt: the versions `make lock` resolved, not the newest in range.
$(STAMP): pyproject.toml exporter/pyproject.toml constraints.txt
	@$(MAKE) --no-print-directory system-deps
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ./exporter
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,embedded]'
	@touch $(STAMP)

# The ingest path's modules compiled with mypyc (ADR 52): ~2-3 min when a source changed,
# nothing otherwise. Without a C compiler the modules run from source (it says so).
native: $(STAMP)
	@$(BIN)/python scripts/build_native.py

# Re-resolves every dependency from the pyproject.toml files into constraints.txt (after a
# change to a dependency, or to take newer releases): docs/building.md.
lock:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python scripts/lock.py

demo: $(STAMP) native
	$(BIN)/afr demo

test: $(STAMP) native lint
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy afr afr_common exporter/src/afr_exporter collector replay_worker testbed tests bench
	$(BIN)/lint-imports --no-logo

bench: $(STAMP) native
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .afr build dist *.egg-info exporter/build exporter/src/*.egg-info collector/_native
