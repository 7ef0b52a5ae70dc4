# Set-up for islands. `make demo` and `make test` are all a fresh machine needs:
# both create .venv if missing and install islands with every optional part, pinned by
# requirements/constraints.txt (torch==2.13.0 is the CPU build this machine has on disk).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.islands-installed
PYTEST_ARGS ?=
# make test runs the suite on this many pytest-xdist workers (2: CI's cores; every test
# pins one BLAS/torch thread, tests/conftest.py); 0 runs it in this one process
TEST_WORKERS ?= 2
# SecretFlow SPU (PSI's engine='spu') in its own environment: it needs Python 3.10 or 3.11
SPU_VENV ?= .venv-spu
SPU_STAMP := $(SPU_VENV)/.spu-installed
SPU_PYTHONS ?= $(PYTHON) python3.11 python3.10

.PHONY: install spu data demo test test-all lint bench clean

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-c requirements/constraints.txt -e '.[all,dev]'
	@touch $@

install: $(STAMP) spu

# SPU 0.9.5 pins numpy < 2 and Python < 3.12, so it lives in .venv-spu, which islands runs
# as a subprocess (islands/psi/spu_engine.py). Without Python 3.10/3.11 this says so and
# make goes on (engine='spu' then names how to get it; engine='dh' needs nothing).
$(SPU_STAMP): requirements/spu.txt
	@py=""; for p in $(SPU_PYTHONS); do \
		if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 11))'; then \
			py=$$p; break; fi; done; \
	if [ -z "$$py" ]; then \
		echo "make: PSI's engine='spu' (SecretFlow SPU) needs Python 3.10 or 3.11; none found" \
		     "among $(SPU_PYTHONS), so $(SPU_VENV) is not built (engine='dh' still works)." >&2; \
	else \
		{ test -x $(SPU_VENV)/bin/python || $$py -m venv $(SPU_VENV); } && \
		$(SPU_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
			-r requirements/spu.txt && touch $@; \
	fi

spu: $(SPU_STAMP)

# Fashion-MNIST (the demo, the examples and 19 tests use it) comes from Debian's
# dataset-fashion-mnist. Installed here when this user may (root, or sudo without a
# password); otherwise the one command that does it is printed and make goes on (the
# tests that need it are then skipped, and `islands info` says it is missing).
FMNIST_DIR := $(or $(ISLANDS_FASHION_MNIST),/usr/share/datasets/fashion-mnist)
FMNIST_HINT := sudo apt-get update && sudo apt-get install dataset-fashion-mnist
data:
	@if [ -f "$(FMNIST_DIR)/train-images-idx3-ubyte.gz" ] || [ -f "$(FMNIST_DIR)/train-images-idx3-ubyte" ]; then \
		exit 0; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "make: Fashion-MNIST not found in $(FMNIST_DIR) and apt-get is not available;" \
		     "set ISLANDS_FASHION_MNIST to a directory holding its IDX files" >&2; \
	elif [ "$$(id -u)" -eq 0 ]; then \
		echo "make: installing Debian's dataset-fashion-mnist"; \
		{ apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null; } || \
			echo "make: could not install dataset-fashion-mnist; run: $(FMNIST_HINT)" >&2; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		echo "make: installing Debian's dataset-fashion-mnist (sudo)"; \
		{ sudo -n apt-get update -qq && sudo -n apt-get install -y -qq dataset-fashion-mnist >/dev/null; } || \
			echo "make: could not install dataset-fashion-mnist; run: $(FMNIST_HINT)" >&2; \
	else \
		echo "make: Fashion-MNIST not found; the tests and examples that need it will be skipped." >&2; \
		echo "      Install it with: $(FMNIST_HINT)" >&2; \
	fi

# `islands demo`: every protocol family on real data in ~3 minutes, written to runs/demo/
demo: install data
	$(BIN)/islands demo

# pytest exits 5 when it collects no test: treat that as the failure it is here.
test: install data
	@$(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; exit $$rc

# the long experiments too (marked slow, skipped by default)
test-all: install data
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "slow or not slow" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/bench_runtime.py

clean:
	rm -rf $(VENV) $(SPU_VENV) .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info
