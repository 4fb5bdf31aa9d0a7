# Two entry points (see README): `make serve` and `make test`. Both set everything up first in a
# virtual environment (.venv), with PyTorch pinned to the CPU build through constraints.txt.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
# Test processes (pytest-xdist), one test file per process at a time: many files mostly wait on
# subprocesses, servers and launches, so two keep both of this machine's cores busy.
TEST_WORKERS ?= 2

.PHONY: setup serve test lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[torch,test]'
	touch $@

serve: setup
	$(VENV)/bin/meshplan serve --host $(HOST) --port $(PORT)

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
