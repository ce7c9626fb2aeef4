# The two commands of the README. Both create .venv on first use (or when pyproject.toml
# changes) and then reuse it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test lint bench clean regress regress-nightly leaderboard docs reference-mujoco

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,dmc,bench,video,minari]"
	touch $(STAMP)

# The main job's runs go side by side, one per core up to the suite's four: each run keeps
# its one thread, so its numbers are those of a run made alone.
RUN_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
run: $(STAMP)  ## the main job: `make run ARGS="seeds=3"` passes overrides
	$(BIN)/rlbench run suite=smoke jobs=$(RUN_JOBS) $(ARGS)

test: $(STAMP)  ## lint, every test but the benchmarks (learning tests included), the gate
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not bench and not nightly" $(ARGS)
	$(MAKE) --no-print-directory regress

# The regression gate (rlbench regress). Its candidate runs go to a fresh store each time;
# its Pendulum dataset is the committed one (the bytes its reference was measured on: a
# dataset made here would differ with the processor's rounding). Its throughput tier times
# the commit named in BENCH_BASE beside this checkout, on this machine: moving that file's
# commit is how a change accepts a new speed.
REGRESS_DIR ?= .regress
BENCH_BASE ?= results/reference/regress_bench/BASE
JOBS ?= 2
regress: $(STAMP)  ## the gate's fast tier: learning (suite=regress), then throughput against the commit in BENCH_BASE
	rm -rf $(REGRESS_DIR)/runs $(REGRESS_DIR)/report $(REGRESS_DIR)/datasets
	mkdir -p $(REGRESS_DIR)
	cp -R results/reference/regress_datasets $(REGRESS_DIR)/datasets
	@status=0; \
	MINARI_DATASETS_PATH=$(CURDIR)/$(REGRESS_DIR)/datasets $(BIN)/rlbench regress \
		suite=regress reference=results/reference/regress.json out_dir=$(REGRESS_DIR)/runs \
		report=$(REGRESS_DIR)/report jobs=$(JOBS) || status=$$?; \
	if git diff --quiet HEAD 2>/dev/null; then \
		$(BIN)/rlbench regress bench base=$(BENCH_BASE) report=$(REGRESS_DIR)/report \
			|| status=$$?; \
	else \
		echo "make regress: the checkout has uncommitted changes; the throughput gate" \
			"judges commits: commit, then run make regress"; \
	fi; \
	exit $$status

regress-nightly: $(STAMP)  ## the gate's MuJoCo tier; MINARI_DATASETS_PATH: the Hopper datasets
	rm -rf $(REGRESS_DIR)/nightly
	$(BIN)/rlbench regress suite=regress_nightly reference=results/reference/regress_nightly.json \
		out_dir=$(REGRESS_DIR)/nightly report=$(REGRESS_DIR)/nightly/report jobs=$(JOBS)

# The MuJoCo v5 reference table (results/reference/mujoco_v5_ppo_1m/ and its store): PPO on
# the five tasks of suite=mujoco at 1M frames, 5 seeds each. The runs are checkpointed, so a
# sweep stopped part-way resumes exactly when this is run again; a checkout without the
# sweep's directory starts from the committed store, whose finished runs are not run again.
REFERENCE_RUNS ?= .reference_runs
REFERENCE_STORE := results/reference/mujoco_v5_ppo_1m/store.db.gz
reference-mujoco: $(STAMP)  ## PPO on the five MuJoCo v5 tasks at 1M frames, 5 seeds: hours on 2 cores
	test -f $(REFERENCE_RUNS)/mujoco_v5/mlflow.db || ! test -f $(REFERENCE_STORE) || \
		{ mkdir -p $(REFERENCE_RUNS)/mujoco_v5 && \
		  gunzip -c $(REFERENCE_STORE) > $(REFERENCE_RUNS)/mujoco_v5/mlflow.db; }
	$(BIN)/rlbench run suite=mujoco algo=ppo jobs=$(JOBS) out_dir=$(REFERENCE_RUNS)/mujoco_v5
	$(BIN)/rlbench compare suite=mujoco algo=ppo frames=1000000 out_dir=$(REFERENCE_RUNS)/mujoco_v5 \
		output=results/reference/mujoco_v5_ppo_1m
	gzip -9nc $(REFERENCE_RUNS)/mujoco_v5/mlflow.db > $(REFERENCE_STORE)

lint: $(STAMP)
	$(BIN)/ruff check .

BENCH_NAME ?= run
bench: $(STAMP)  ## throughput benchmarks, saved under results/benchmarks/, then a goal report
	$(BIN)/python -m pytest -m bench --benchmark-storage=$(CURDIR)/results/benchmarks \
		--benchmark-save=$(BENCH_NAME) $(ARGS)
	$(BIN)/python ci/bench_report.py

.PHONY: nightly
nightly: $(STAMP)  ## hostile-input property tests at 10,000 examples each; the nightly tests
	HYPOTHESIS_PROFILE=nightly $(BIN)/python -m pytest -m "not bench and not nightly" \
		tests/properties $(ARGS)
	$(BIN)/python -m pytest -m nightly $(ARGS)

# The leaderboard of the reference runs, rlbench publish over the committed stores, on its
# own; `make docs` builds it into the site as leaderboard/.
leaderboard: $(STAMP)  ## the reference stores' leaderboard in .leaderboard/ (also part of make docs)
	rm -rf .leaderboard
	$(BIN)/python -m tools.docs.leaderboard .leaderboard

# The documentation site in site/, opened from disk or served: docs/, the algorithm pages
# written from the recipes, the API reference, and the leaderboard.
docs: $(STAMP)  ## the documentation site (mkdocs build --strict) in site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) rlbench_runs .pytest_cache .ruff_cache $(REGRESS_DIR) .leaderboard site
