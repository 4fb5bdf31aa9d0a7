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

.PHONY: setup consumers serve test lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[torch,test]'
	touch $@

# The export targets' own packages (pyproject.toml [dependency-groups]), each group in a venv of its own
# on the same CPU PyTorch: tests/test_consumers.py (run by `make test`) feeds the exports to them.
CONSUMER_VENVS := .venv-consumers .venv-torchtitan-0.2
consumers: .venv-consumers/.installed .venv-torchtitan-0.2/.installed

.venv-consumers/.installed: GROUP = consumers
# DeepSpeed's CPU accelerator compiles its shared-memory op (C++, ninja) when its process group starts:
# once here, cached beside the venv (tests/test_consumers.py points TORCH_EXTENSIONS_DIR at it).
.venv-consumers/.installed: WARM = DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=$(@D)/torch_extensions \
	$(@D)/bin/python -c 'from deepspeed.comm.torch import build_shm_op; build_shm_op()'
.venv-torchtitan-0.2/.installed: GROUP = consumers-torchtitan-0-2
.venv-torchtitan-0.2/.installed: WARM = true
$(CONSUMER_VENVS:%=%/.installed): pyproject.toml constraints.txt
	rm -rf $(@D)
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install -q --upgrade pip
	$(@D)/bin/python -m pip install -q -c constraints.txt --group $(GROUP)
	$(WARM)
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
	rm -rf $(VENV) $(CONSUMER_VENVS) .pytest_cache
