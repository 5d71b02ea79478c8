# make run CASE=pytorch-synthetic NODES=1 GPUS_PER_NODE=2 ARGS="--image-size 64 --batch-size 8"
# [CPU_BIND=none|cores|numa|gpu-affine]: how each worker binds itself to cores (docs/running.md, "CPU binding")
# [TINY=1]: the case at its [tiny] sizes (ARGS after them win): a check that it runs, not a measurement
CASE ?= pytorch-synthetic
NODES ?= 1
GPUS_PER_NODE ?=
HOSTFILE ?=
RUNTIME ?=
SCHEDULER ?=
CLUSTER ?=
REPEAT ?= 1
ARGS ?=
DATA_DIR ?=
SYNTHETIC ?=
SRC ?=
TIMEOUT ?=
STALL ?=
PRECHECK ?=
NO_PRECHECK ?=
TELEMETRY ?=
CPU_BIND ?=
FLAVOUR ?=
WHEELS ?=
DRY_RUN ?=
TINY ?=
RECORD ?=
SWEEP ?=
ALLOW_DRIFT ?=
ONLY ?=
JOBS ?=
# where records go and are read (sweeps, tuning studies and site checks beside them) and where run folders go
RESULTS ?=
RUNS ?=
# RUNTIME=modules: the site's environment modules to load, scripts to source, the Python to run (docs/clusters.md);
# PYTHON only from make's command line: a PYTHON some shells export for other tools is not meant here
MODULES ?=
SOURCE ?=
site_python = $(if $(filter command line,$(origin PYTHON)),--python "$(PYTHON)")
# the Python that makes the runner's own .venv
BOOTSTRAP_PYTHON ?= python3

# $(call opt,--flag,$(VAR)): the flag and its value, only when VAR is set
opt = $(if $(strip $(2)),$(1) "$(2)")

# Variables that switch something on or off take 1/yes/true/on or 0/no/false/off (or nothing: off); any other
# value is refused before anything runs. $(call on,VAR) is non-empty where VAR is on.
SWITCHES := SYNTHETIC PRECHECK NO_PRECHECK DRY_RUN TINY ALLOW_DRIFT BASE_REFRESH EXTRA_INDEX
ON_VALUES := 1 yes true on
OFF_VALUES := 0 no false off
on = $(filter $(ON_VALUES),$(strip $($(1))))
not_a_switch = $(or $(filter-out $(ON_VALUES) $(OFF_VALUES),$(strip $($(1)))),$(word 2,$($(1))))
$(foreach v,$(SWITCHES),$(if $(call not_a_switch,$(v)),$(error $(v)=$($(v)) is neither on nor off: \
	use 1, yes, true or on; 0, no, false, off or nothing)))

# BOOTSTRAP_PYTHON, where given: a CPython 3.10-3.13, and the one the runner's .venv was made with (else the
# .venv is named, with how to remake it); tools/check-python.sh says what is wrong in one line
ifneq ($(filter command line environment,$(origin BOOTSTRAP_PYTHON)),)
python_refusal := $(shell tools/check-python.sh "$(BOOTSTRAP_PYTHON)" .venv 2>&1 >/dev/null)
$(if $(python_refusal),$(error $(python_refusal)))
endif

# bash runs a recipe's one command in its own place (exec), so a SIGTERM to make, which make passes to its child,
# reaches the runner and ends its run with a record; dash's sh would take it and leave the runner going.
# Found on PATH: not every system has /bin/bash (NixOS, Guix)
SHELL := $(or $(shell command -v bash 2>/dev/null),/bin/sh)
VENV := .venv
SUITE := $(VENV)/bin/python -m suite

.PHONY: run data install report compare query bench test cases clean-runs doctor rerun resume compare-frameworks tune

$(VENV)/.installed: pyproject.toml
	tools/check-python.sh "$(BOOTSTRAP_PYTHON)"
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

# The options run, tune and compare-frameworks share, those given only: the recipes echo one short command line
# that can be copied as it stands
placement = $(call opt,--gpus-per-node,$(GPUS_PER_NODE)) $(call opt,--hostfile,$(HOSTFILE)) \
	$(call opt,--cluster,$(CLUSTER)) $(call opt,--runtime,$(RUNTIME)) $(call opt,--scheduler,$(SCHEDULER)) \
	$(call opt,--data-dir,$(DATA_DIR)) $(call opt,--timeout,$(TIMEOUT)) $(folders)
folders = $(call opt,--results-dir,$(RESULTS)) $(call opt,--runs-dir,$(RUNS))
stack_options = $(call opt,--flavour,$(FLAVOUR)) $(call opt,--wheels,$(WHEELS)) $(call opt,--modules,$(MODULES)) \
	$(call opt,--source,$(SOURCE)) $(site_python)
tiny = $(if $(call on,TINY),--tiny)
placement_vars := GPUS_PER_NODE HOSTFILE CLUSTER RUNTIME SCHEDULER DATA_DIR TIMEOUT RESULTS RUNS
stack_vars := FLAVOUR WHEELS MODULES SOURCE PYTHON

# how to measure: what run, tune and compare-frameworks share
measure_options = --nodes "$(NODES)" --repeat "$(REPEAT)" $(placement) \
	$(call opt,--stall,$(STALL)) $(if $(call on,DRY_RUN),--dry-run) \
	$(if $(call on,PRECHECK),--precheck) $(if $(call on,NO_PRECHECK),--no-precheck) \
	$(call opt,--telemetry-interval,$(TELEMETRY)) $(call opt,--cpu-bind,$(CPU_BIND)) $(stack_options) $(tiny)
measure_vars := NODES REPEAT $(placement_vars) STALL DRY_RUN PRECHECK NO_PRECHECK TELEMETRY CPU_BIND $(stack_vars) TINY
run_options = --case "$(CASE)" $(measure_options)
# SYNTHETIC belongs to make data: a run reads the set that make data made
vars.run := CASE $(measure_vars) ARGS SYNTHETIC
run: $(VENV)/.installed
	$(if $(call on,SYNTHETIC),$(error SYNTHETIC=1 is for make data, not make run: make data CASE=$(CASE) SYNTHETIC=1 \
		makes the small generated set, which make run CASE=$(CASE) then reads))
	$(SUITE) run $(strip $(run_options)) -- $(ARGS)

# make tune CASE=... [NODES=1] [BUDGET=30] [TINY=1] [ARGS="--batch-size max"]: the case's speed settings (its [tune]
# table) tried one at a time within BUDGET minutes, each trial a record made with make run's variables; the best
# written to reports/tune/ as a preset for ARGS="--preset tuned:<file>" (docs/running.md, "Tuning a case")
vars.tune := CASE $(measure_vars) BUDGET ARGS
tune: $(VENV)/.installed
	$(SUITE) tune $(strip $(run_options) $(call opt,--budget,$(BUDGET))) -- $(ARGS)

# make doctor [CLUSTER=name]: what the cluster profile needs here and what is missing, one line each
vars.doctor := CLUSTER FLAVOUR
doctor: $(VENV)/.installed
	$(SUITE) doctor $(call opt,--cluster,$(CLUSTER)) $(call opt,--flavour,$(FLAVOUR))

# make check-site [CLUSTER=name] [ONLY="pattern ..."] [MODULES=... SOURCE=... PYTHON=...]: every path the profile
# (or this host) offers, each case at its tiny sizes, in one table of ok / failed / not available here
# (docs/clusters.md, "Checking a site"); exit 1 when an available path failed, 3 when no path was available
# (nothing was checked), 130 on Ctrl-C
.PHONY: check-site
vars.check-site := CLUSTER ONLY MODULES SOURCE PYTHON RESULTS RUNS
check-site: $(VENV)/.installed
	$(SUITE) check $(strip $(call opt,--cluster,$(CLUSTER)) $(foreach pattern,$(ONLY),--only "$(pattern)") \
		$(call opt,--modules,$(MODULES)) $(call opt,--source,$(SOURCE)) $(site_python) $(folders))

vars.data := CASE DATA_DIR CLUSTER SYNTHETIC SRC ARGS
data: $(VENV)/.installed
	$(SUITE) data $(strip --case "$(CASE)" $(call opt,--data-dir,$(DATA_DIR)) $(call opt,--cluster,$(CLUSTER)) \
		$(if $(call on,SYNTHETIC),--synthetic) $(if $(strip $(SRC)),--src "$(SRC)")) -- $(ARGS)

# make install CASE=... [FLAVOUR=cpu|cuda] [WHEELS=folder]: the case's local stack, ahead of a run
vars.install := CASE FLAVOUR WHEELS
install: $(VENV)/.installed
	$(SUITE) install --case "$(CASE)" $(call opt,--flavour,$(FLAVOUR)) $(call opt,--wheels,$(WHEELS))

# make wheels CASE=... WHEELS=folder [FLAVOUR=cpu|cuda]: every file of the stack's locks, for machines
# without network (docs/containers.md, "Installing")
.PHONY: wheels
vars.wheels := CASE FLAVOUR WHEELS
wheels: $(VENV)/.installed
	$(if $(strip $(WHEELS)),,$(error make wheels needs WHEELS=<folder>))
	$(SUITE) wheels --case "$(CASE)" $(call opt,--flavour,$(FLAVOUR)) --dest "$(WHEELS)"

vars.cases :=
cases: $(VENV)/.installed
	$(SUITE) cases

# make stacks [REMOVE_UNUSED_DAYS=30]: the local stacks kept here (size, built, last used, made by this checkout);
# with REMOVE_UNUSED_DAYS, those no recipe of this checkout makes and nothing used for that many days are removed
.PHONY: stacks
vars.stacks := REMOVE_UNUSED_DAYS
stacks: $(VENV)/.installed
	$(SUITE) stacks $(call opt,--remove-unused-days,$(REMOVE_UNUSED_DAYS))

# make report [RESULTS=folder]: the pages and summary.csv of the records in RESULTS (default reports/results/),
# written beside that folder (reports/)
vars.report := RESULTS
report: $(VENV)/.installed
	$(SUITE) $(strip report $(call opt,--results-dir,$(RESULTS)))

# make compare A=reports/results-old B=reports/results, or selections of one folder (docs/running.md):
# make compare A='reports/results?cluster=jsc&until=2026-10-31' B='reports/results?cluster=jsc&since=2026-11-01'
vars.compare := A B
compare: $(VENV)/.installed
	$(if $(and $(strip $(A)),$(strip $(B))),,$(error make compare needs A=<records> and B=<records>: folders, \
		files or selections))
	$(SUITE) compare "$(A)" "$(B)"

# make query [CASE=name] [CLUSTER=name] [STACK=name] [FINGERPRINT=sha256-prefix] [DEVICES=8|1,2,4]
#            [SINCE=YYYY-MM-DD] [UNTIL=YYYY-MM-DD] [STATUS=ok|failed|all] [FORMAT=table|csv] [RESULTS=folder]
# The records in the results index; CASE only when given on the command line (its default is for `run`).
vars.query := RESULTS CASE CLUSTER STACK FINGERPRINT DEVICES SINCE UNTIL STATUS FORMAT
query: $(VENV)/.installed
	$(SUITE) query $(strip $(call opt,--results-dir,$(RESULTS)) \
		$(if $(filter command line,$(origin CASE)),--case "$(CASE)") $(call opt,--cluster,$(CLUSTER)) \
		$(call opt,--stack,$(STACK)) $(call opt,--fingerprint,$(FINGERPRINT)) $(call opt,--devices,$(DEVICES)) \
		$(call opt,--since,$(SINCE)) $(call opt,--until,$(UNTIL)) $(call opt,--status,$(STATUS)) \
		$(call opt,--format,$(FORMAT)))

# make compare-frameworks NODES=1 GPUS_PER_NODE=1,4 [TINY=1] [ARGS=...]: every case's --same-work run, one table
vars.compare-frameworks := $(measure_vars) ARGS
compare-frameworks: $(VENV)/.installed
	$(SUITE) compare-frameworks $(strip $(measure_options)) -- $(ARGS)

# make rerun RECORD=reports/results/<run_id>.json [CLUSTER=name | HOSTFILE=file] [ALLOW_DRIFT=1] [DRY_RUN=1]
#            [RESULTS=folder] [RUNS=folder]
vars.rerun := RECORD CLUSTER HOSTFILE DATA_DIR ALLOW_DRIFT DRY_RUN RESULTS RUNS
rerun: $(VENV)/.installed
	$(if $(strip $(RECORD)),,$(error make rerun needs RECORD=<a result record, e.g. reports/results/RUN_ID.json>))
	$(SUITE) rerun $(strip "$(RECORD)" $(call opt,--cluster,$(CLUSTER)) $(call opt,--hostfile,$(HOSTFILE)) \
		$(call opt,--data-dir,$(DATA_DIR)) $(if $(call on,ALLOW_DRIFT),--allow-drift) \
		$(if $(call on,DRY_RUN),--dry-run) $(folders))

# make resume SWEEP=<sweep_id> [ALLOW_DRIFT=1] [DRY_RUN=1] [RESULTS=folder] [RUNS=folder]: the sweep's points
# without an ok record, run again
vars.resume := SWEEP ALLOW_DRIFT DRY_RUN RESULTS RUNS
resume: $(VENV)/.installed
	$(if $(strip $(SWEEP)),,$(error make resume needs SWEEP=<a sweep id, as the sweep's table names it>))
	$(SUITE) resume $(strip "$(SWEEP)" $(if $(call on,ALLOW_DRIFT),--allow-drift) $(if $(call on,DRY_RUN),--dry-run) \
		$(folders))

# make bench [BENCH_ARGS="--tiny | --medium | --rounds 5 | --only scaling_pytorch"]: ratios, written to reports/bench/
vars.bench := BENCH_ARGS
bench: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/harness.py $(BENCH_ARGS)

# make test: what CI runs (.ci/run): ruff, the system packages, then every test under this CPython, less the runs
# across hosts in images that only repeat their pairs (tests/support/pairwise.py), with the unit tests under the
# other CPythons beside it (tools/python-matrix.sh; PYTHON_MATRIX="3.12 3.13" only those, PYTHON_MATRIX= none); the
# log ends with their outcome and the 25 slowest tests. Ctrl-C or a SIGTERM to make reach pytest as one Ctrl-C.
# TEST_WORKERS pytest-xdist workers share the tests by module (the image runtimes' modules in one: tests/conftest.py);
# two keep a 2-core machine busy while one waits on daemons, images and startups; TEST_WORKERS=0 runs them in turn
TEST_SELECT := -m "not full_product"
TEST_WORKERS ?= 2
vars.test := TEST_SELECT TEST_WORKERS PYTHON_MATRIX
test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	tools/install-test-deps.sh
	tools/python-matrix.sh $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadscope -ra --durations=25 \
		$(TEST_SELECT) tests

# make test-all: make test with the full product of image runtime x case x scheduler (not in CI, for its time)
.PHONY: test-all
vars.test-all := TEST_WORKERS PYTHON_MATRIX
test-all:
	$(MAKE) test TEST_SELECT=

# make test-pythons: only the unit tests under the other CPythons 3.10-3.13 of this machine (tools/python-matrix.sh)
.PHONY: test-pythons
vars.test-pythons := PYTHON_MATRIX
test-pythons: $(VENV)/.installed
	tools/python-matrix.sh

# make test-aarch64: pytorch-ddp (two ranks, tiny) with the pytorch stack's aarch64 lock in an arm64 Debian tree under
# qemu-user (tools/aarch64-check.sh; root; it installs mmdebstrap, arch-test and qemu-user-static and registers the
# binfmt handler itself: tools/aarch64-deps.sh); not in `make test`, for its time
# (containers/README.md, "aarch64 (Grace Hopper)")
.PHONY: test-aarch64
vars.test-aarch64 :=
test-aarch64:
	tools/aarch64-check.sh

# make test-debian13, make test-ubuntu2404: README's first command (Horovod built with the distribution's GCC) and a
# compiled pytorch-gpt run in a Debian 13 or Ubuntu 24.04 tree with its own CPython and the public index alone, then
# the compiled run refused without Python's headers (tools/distro-check.sh; root, mmdebstrap); not in `make test`,
# for its time (containers/README.md, "Debian 13 and Ubuntu 24.04")
.PHONY: test-debian13 test-ubuntu2404
vars.test-debian13 :=
vars.test-ubuntu2404 :=
test-debian13 test-ubuntu2404:
	tools/distro-check.sh $(patsubst test-%,%,$@)

# make locks [ONLY=stack[/flavour]] [EXTRA_INDEX=1]: every stack's locks for CPython 3.10-3.13 on Linux x86_64
# and aarch64, resolved by uv from tools/locks.toml (containers/README.md, "Locks")
LOCK_TOOLS := build/lock-tools
.PHONY: locks
$(LOCK_TOOLS)/.installed:
	tools/check-python.sh "$(BOOTSTRAP_PYTHON)"
	$(BOOTSTRAP_PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet 'uv==0.13.8' 'packaging>=23'
	touch $@

vars.locks := ONLY EXTRA_INDEX
locks: $(LOCK_TOOLS)/.installed
	PATH="$(CURDIR)/$(LOCK_TOOLS)/bin:$$PATH" $(LOCK_TOOLS)/bin/python tools/make-locks.py \
		$(if $(strip $(ONLY)),--only "$(ONLY)") $(if $(call on,EXTRA_INDEX),--extra-index)

vars.clean-runs :=
clean-runs:
	rm -rf runs

# make gpu-check [RUNTIME=modules PYTHON=... | FLAVOUR=cuda] [GPU_CHECK_ARGS="--quick" | "--rounds 5 --only NAME ..."]: on a
# GPU host, every case against its bare loop, its MFU and published figures (benchmarks/gpu_check.py); exit 2 without a GPU
.PHONY: gpu-check
vars.gpu-check := GPU_CHECK_ARGS RUNTIME FLAVOUR CLUSTER WHEELS MODULES SOURCE PYTHON
gpu-check: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/gpu_check.py $(GPU_CHECK_ARGS) -- $(call opt,--runtime,$(RUNTIME)) \
		$(call opt,--flavour,$(FLAVOUR)) $(call opt,--cluster,$(CLUSTER)) $(call opt,--wheels,$(WHEELS)) \
		$(call opt,--modules,$(MODULES)) $(call opt,--source,$(SOURCE)) $(site_python)

# make containers [STACK=tensorflow] [FLAVOUR=cpu|cuda] [TOOL=apptainer|docker|charliecloud] [BASE=pinned|debian|docker (apptainer: from the Docker image)] [BASE_REFRESH=1] [JOBS=2]
# (docs/containers.md): images into containers/build/ or the Docker engine
.PHONY: containers
vars.containers := STACK FLAVOUR TOOL BASE BASE_REFRESH WHEELS JOBS
containers: $(VENV)/.installed
	$(SUITE) containers build $(if $(strip $(STACK)),--stack "$(STACK)") \
		$(if $(strip $(FLAVOUR)),--flavour "$(FLAVOUR)") $(if $(strip $(TOOL)),--tool "$(TOOL)") \
		$(if $(strip $(BASE)),--base "$(BASE)") $(if $(call on,BASE_REFRESH),--refresh-base) \
		$(call opt,--wheels,$(WHEELS)) $(call opt,--jobs,$(JOBS))

# make help: each target and the variables it takes (README.md, "Variables", says what they mean)
.PHONY: help
vars.help :=
help:
	@echo "make TARGET [VARIABLE=value ...]; README.md's Variables say what each means, docs/ the rest"
	@$(foreach g,$(sort $(goals_with_variables)),printf '  %-20s %s\n' '$(g)' '$(vars.$(g))';)

# Each goal's variables are named beside it (vars.<goal>). One given on make's command line that the asked goals do
# not take is refused where another goal takes it or it looks misspelt (NODE=4 would otherwise run one node);
# any other name passes to the recipes' environment, as make passes it (NCCL_DEBUG=INFO). Only the first make's:
# a make that a recipe starts (make test's tests, make test-all) inherits its parent's variables
goals_with_variables := $(patsubst vars.%,%,$(filter vars.%,$(.VARIABLES)))
asked_goals := $(or $(MAKECMDGOALS),run)
given_variables := $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v)))
not_taken := $(filter-out BOOTSTRAP_PYTHON $(foreach g,$(asked_goals),$(vars.$(g))),$(given_variables))
ifeq ($(MAKELEVEL)/$(filter-out $(goals_with_variables),$(asked_goals)),0/)  # every asked goal names its variables
ifneq ($(not_taken),)
variables_refusal := $(shell $(BOOTSTRAP_PYTHON) tools/check-make-variables.py --asked "$(asked_goals)" \
	--given "$(not_taken)" $(foreach g,$(goals_with_variables),"$(g)=$(vars.$(g))"))
$(if $(variables_refusal),$(error $(variables_refusal)))
endif
endif
