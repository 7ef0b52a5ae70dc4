# Set-up for islands. `make demo` and `make test` are all a fresh machine needs:
# both create .venv if missing and install islands with every optional part, pinned by
# requirements/constraints.txt (torch==2.13.0 is the CPU build this machine has on disk).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.islands-installed
PYTEST_ARGS ?=

.PHONY: install demo test test-all lint bench clean

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-c requirements/constraints.txt -e '.[all,dev]'
	@touch $@

install: $(STAMP)

demo: install
	$(BIN)/islands demo

# pytest exits 5 when it collects no test: treat that as the failure it is here.
test: install
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; exit $$rc

# the long experiments too (marked slow, skipped by default)
test-all: install
	$(BIN)/python -m pytest -m "slow or not slow" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/bench_runtime.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info
