# The two commands of the README. Both create .venv on first use (or when pyproject.toml
# changes) and then reuse it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test check lint bench clean regress regress-nightly leaderboard docs reference-mujoco \
	reference-offline

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,dmc,bench,video,minari]"
	touch $(STAMP)

# The main job's runs go side by side, one per core up to the suite's four: each run keeps
# its one thread, so its numbers are those of a run made alone. The suite's numerics=auto
# makes them portable where the processor allows (x86-64 with AVX2), else native (ARM).
RUN_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
run: $(STAMP)  ## the main job: `make run ARGS="seeds=3"` passes overrides
	$(BIN)/rlbench run suite=smoke jobs=$(RUN_JOBS) $(ARGS)

# The tests run in TEST_WORKERS processes (pytest-xdist, one per core, at most 8): each test
# module stays whole on one worker, the tests that start Ray share one, and the modules of
# minutes go out first (tests/conftest.py: pytest_xdist_make_scheduler).
# The tests marked timing judge times they measure, so they run afterwards, alone.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 8 ] && n=8; echo $$n)
XDIST := -n $(TEST_WORKERS) --dist loadscope
test: $(STAMP)  ## lint, every test but the benchmarks (slow ones included), the gate
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(XDIST) -m "not bench and not nightly and not timing" $(ARGS)
	$(BIN)/python -m pytest -m "timing and not bench and not nightly" $(ARGS)
	$(MAKE) --no-print-directory regress

# The regression gate (rlbench regress). Its candidate runs go to a fresh store each time,
# with numerics=auto (portable on x86-64 with AVX2); its Pendulum dataset is the committed
# copy of what the suite makes on first use with numerics=portable (the same bytes on every
# x86-64 with AVX2), put in place to save making it (about 5 min). Its throughput tier times
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
		numerics=auto \
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
# the five tasks of suite=mujoco at 1M frames, 5 seeds each, with numerics=auto (the same
# numbers on every x86-64 with AVX2) and every 10th update traced (rlbench reproduce then
# names the tensor where a rerun parts; its cost is below what a 2-core machine measures).
# The runs are checkpointed, so a sweep stopped part-way resumes exactly when this is run
# again; a checkout without the sweep's directory starts from the committed store, whose
# finished runs of the same identity (config, code, numerics) are not run again.
# REFERENCE_FROM=scratch runs all 25 again in a directory of their own and writes the
# report and the store from those runs alone. Stop it with Ctrl-C, or SIGTERM to the
# rlbench process: make does not pass SIGTERM on to the command it runs.
REFERENCE_RUNS ?= .reference_runs
REFERENCE_STORE := results/reference/store/mujoco_v5.db.gz
REFERENCE_FROM ?= store
ifeq ($(filter store scratch,$(REFERENCE_FROM)),)
$(error REFERENCE_FROM is store or scratch, not '$(REFERENCE_FROM)')
endif
REFERENCE_OUT := $(REFERENCE_RUNS)/mujoco_v5$(if $(filter scratch,$(REFERENCE_FROM)),_scratch)
reference-mujoco: $(STAMP)  ## PPO on the five MuJoCo v5 tasks at 1M frames, 5 seeds: hours on 2 cores
	test $(REFERENCE_FROM) = scratch || test -f $(REFERENCE_OUT)/mlflow.db || \
		{ mkdir -p $(REFERENCE_OUT) && gunzip -c $(REFERENCE_STORE) > $(REFERENCE_OUT)/mlflow.db; }
	$(BIN)/rlbench run suite=mujoco algo=ppo numerics=auto trace_every=10 jobs=$(JOBS) \
		out_dir=$(REFERENCE_OUT)
	$(BIN)/rlbench compare suite=mujoco algo=ppo frames=1000000 store=$(REFERENCE_OUT) \
		output=results/reference/mujoco_v5_ppo_1m
	gzip -9nc $(REFERENCE_OUT)/mlflow.db > $(REFERENCE_STORE)

# The offline reference table (results/reference/offline_hopper_100k/ and its store): bc,
# td3_bc, iql and rebrac on the Hopper-v5 datasets made here (medium, medium-replay,
# medium-expert), 3 seeds each, then d3rlpy 2.8.1 on the same grid with the same
# hyperparameters, transitions and evaluation, one algorithm at a time (d3rlpy's IQL has no
# deterministic actor, CORL's on medium and medium-replay: it runs on medium-expert). Budgets: 100k
# gradient steps; ReBRAC's batch is 1024, so its 25k steps sample as many transitions as
# the others' 100k at 256. Ten evaluations a run. Datasets not made yet are made first
# (results/reference/hopper_datasets/README.md: a 300k-frame SAC run, about an hour on 2
# cores, then rlbench dataset make from its run directory). Our runs are checkpointed and
# resume where they stopped; a stopped d3rlpy run starts again; a checkout without the runs'
# directory starts from the committed store, whose finished runs are not run again. JOBS
# processes of each library; d3rlpy's environment (.d3rlpy-venv) is made before they start.
# The d3rlpy processes share the store, each from its own out dir: the store's claims give
# each run to one of them (a second process into one out dir would be refused). They run in
# the background, where the shell leaves Ctrl-C ignored: a trap stops them with the make.
OFFLINE_DATASETS := $(REFERENCE_RUNS)/hopper_datasets
OFFLINE_OUT := $(REFERENCE_RUNS)/offline_hopper_100k
OFFLINE_STORE := results/reference/store/offline_hopper_100k.db.gz
OFFLINE_BUDGETS := bc:100000 td3_bc:100000 iql:100000 rebrac:25000
HOPPER_SAC := $(REFERENCE_RUNS)/hopper_sac
reference-offline: $(STAMP)  ## bc, td3_bc, iql, rebrac and d3rlpy's on the Hopper-v5 datasets, 100k steps: about 13 hours on 2 cores
	test -d $(OFFLINE_DATASETS)/minari/rlbench/hopper/medium-expert-v0 || { \
		$(BIN)/rlbench run suite=mujoco algo=sac env=Hopper-v5 seeds=1 frames=300000 \
			eval_every=20000 save_snapshots=true save_transitions=true sac.onednn=false \
			out_dir=$(HOPPER_SAC) && \
		$(BIN)/rlbench dataset make \
			policy=$$(ls -td $(HOPPER_SAC)/runs/mujoco/sac-Hopper-v5-seed0-* | head -1) \
			quality=random,medium,expert,medium-replay,medium-expert steps=100000 \
			out=$(OFFLINE_DATASETS); }
	test -f $(OFFLINE_OUT)/mlflow.db || ! test -f $(OFFLINE_STORE) || \
		{ mkdir -p $(OFFLINE_OUT) && gunzip -c $(OFFLINE_STORE) > $(OFFLINE_OUT)/mlflow.db; }
	$(BIN)/python -c 'from tools.peers.d3rlpy_reference import peer_python; peer_python()'
	export MINARI_DATASETS_PATH=$(CURDIR)/$(OFFLINE_DATASETS)/minari; \
	for budget in $(OFFLINE_BUDGETS); do \
		steps=$${budget#*:}; \
		grid="suite=offline algo=$${budget%%:*} steps=$$steps eval_every=$$((steps / 10))"; \
		$(BIN)/rlbench run $$grid jobs=$(JOBS) out_dir=$(OFFLINE_OUT) || exit $$?; \
		pids=; trap 'kill $$pids 2>/dev/null' INT TERM; \
		for i in $$(seq $(JOBS)); do \
			MLFLOW_TRACKING_URI=sqlite:///$(CURDIR)/$(OFFLINE_OUT)/mlflow.db \
			$(BIN)/python -m tools.peers.d3rlpy_reference $$grid \
				out_dir=$(OFFLINE_OUT)_peers/$$i & \
			pids="$$pids $$!"; sleep 5; done; \
		status=0; for pid in $$pids; do wait $$pid || status=$$?; done; \
		trap - INT TERM; test $$status = 0 || exit $$status; \
	done
	$(BIN)/rlbench compare suite=offline store=$(OFFLINE_OUT) \
		output=results/reference/offline_hopper_100k
	gzip -9nc $(OFFLINE_OUT)/mlflow.db > $(OFFLINE_STORE)

lint: $(STAMP)
	$(BIN)/ruff check .

check: $(STAMP)  ## the loop while working: lint and the fast tests (none marked slow)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(XDIST) $(ARGS)

BENCH_NAME ?= run
bench: $(STAMP)  ## throughput benchmarks, saved under results/benchmarks/, then a goal report
	$(BIN)/python -m pytest -m bench --benchmark-storage=$(CURDIR)/results/benchmarks \
		--benchmark-save=$(BENCH_NAME) $(ARGS)
	$(BIN)/python ci/bench_report.py

.PHONY: nightly
nightly: $(STAMP)  ## hostile-input property tests at 10,000 examples each; the nightly tests
	HYPOTHESIS_PROFILE=nightly $(BIN)/python -m pytest $(XDIST) -m "not bench and not nightly" \
		tests/properties $(ARGS)
	$(BIN)/python -m pytest $(XDIST) -m nightly $(ARGS)

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
