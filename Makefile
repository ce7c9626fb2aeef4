# The two commands of the README. Both create .venv on first use (or when pyproject.toml
# changes) and then reuse it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,dmc,bench,video,minari]"
	touch $(STAMP)

run: $(STAMP)  ## the main job: `make run ARGS="seeds=3"` passes overrides
	$(BIN)/rlbench run suite=smoke $(ARGS)

test: $(STAMP)  ## lint, then every test but the benchmarks (learning tests included)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not bench" $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

BENCH_NAME ?= run
bench: $(STAMP)  ## throughput benchmarks, saved under results/benchmarks/, then a goal report
	$(BIN)/python -m pytest -m bench --benchmark-storage=$(CURDIR)/results/benchmarks \
		--benchmark-save=$(BENCH_NAME) $(ARGS)
	$(BIN)/python ci/bench_report.py

.PHONY: nightly
nightly: $(STAMP)  ## the property tests of hostile inputs at 10,000 examples per target
	HYPOTHESIS_PROFILE=nightly $(BIN)/python -m pytest -m "not bench" tests/properties $(ARGS)

clean:
	rm -rf $(VENV) rlbench_runs .pytest_cache .ruff_cache
