# Two commands do all the set-up on a fresh machine (README.md):
#   make demo   - the whole DAG on the embedded synthetic universe (demo profile); prints where results are
#                 (KP_PROFILE=real KP_SOURCE=parquet KP_SOURCE_PATH=... make demo: the real profile instead)
#   make test   - the test suite
# Both create (or reuse) the virtual environment .venv from constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)
# The venv is installed with --no-compile, so Python must be let write each module's bytecode on its first import:
# with PYTHONDONTWRITEBYTECODE set (as on this workplace's machines) every process, each Dagster step's among them,
# compiled dagster, torch and scipy from source again (definitions import 12.5 s against 4.1 s; the dag lane past
# 3,300 s against 2,000-2,400 s).
unexport PYTHONDONTWRITEBYTECODE
KP_PROFILE ?= demo

.PHONY: demo resume test venv ci materialize-ci ui clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, alone: pip takes the exact CPU wheel on this machine's disk (seconds), not a CUDA build.
	# --no-compile: Python compiles only the modules a run imports, on first import (torch: 16 s against 50 s here),
	# and keeps the bytecode (PYTHONDONTWRITEBYTECODE unexported above; .ci/env unsets it for the CLI calls)
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e '.[dev]'
	touch $@

demo: venv
	KP_PROFILE=$(KP_PROFILE) $(BIN)/python -m kinematic_pipeline materialize

# a stopped `make demo` (killed, interrupted, the machine taken back) finishes what it had not: same KP_* variables
resume: venv
	KP_PROFILE=$(KP_PROFILE) $(BIN)/python -m kinematic_pipeline materialize --resume

# one pytest-xdist worker a core, each pinned to it (kinematic_pipeline_tests/__init__.py); TEST_WORKERS=0: one process
TEST_WORKERS ?= auto
test: venv
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

ui: venv
	$(BIN)/dagster dev -w workspace.yaml

clean:
	rm -rf history schedules storage warehouse/dagster warehouse/*/ warehouse/catalog.duckdb warehouse/.catalog.lock
