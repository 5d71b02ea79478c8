# make run CASE=pytorch-synthetic NODES=1 GPUS_PER_NODE=2 ARGS="--image-size 64 --batch-size 8"
CASE ?= pytorch-synthetic
NODES ?= 1
GPUS_PER_NODE ?=
HOSTFILE ?= hostfiles/localhost
RUNTIME ?= local
REPEAT ?= 1
ARGS ?=
DATA_DIR ?=
SYNTHETIC ?=
SRC ?=
PYTHON ?= python3

VENV := .venv
SUITE := $(VENV)/bin/python -m suite

.PHONY: run data install report compare test cases clean-runs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(SUITE) run --case "$(CASE)" --nodes "$(NODES)" --hostfile "$(HOSTFILE)" --runtime "$(RUNTIME)" \
		--repeat "$(REPEAT)" $(if $(strip $(GPUS_PER_NODE)),--gpus-per-node "$(GPUS_PER_NODE)") \
		$(if $(strip $(DATA_DIR)),--data-dir "$(DATA_DIR)") -- $(ARGS)

data: $(VENV)/.installed
	$(SUITE) data --case "$(CASE)" $(if $(strip $(DATA_DIR)),--data-dir "$(DATA_DIR)") \
		$(if $(filter 1 yes true,$(SYNTHETIC)),--synthetic) $(if $(strip $(SRC)),--src "$(SRC)") -- $(ARGS)

install: $(VENV)/.installed
	$(SUITE) install --case "$(CASE)"

cases: $(VENV)/.installed
	$(SUITE) cases

report: $(VENV)/.installed
	$(SUITE) report

# make compare A=reports/results-old B=reports/results
compare: $(VENV)/.installed
	$(SUITE) compare "$(A)" "$(B)"

test: $(VENV)/.installed
	tools/install-test-deps.sh
	$(VENV)/bin/python -m pytest -ra tests

clean-runs:
	rm -rf runs
