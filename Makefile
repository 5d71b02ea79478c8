# make run CASE=pytorch-synthetic NODES=1 GPUS_PER_NODE=2 ARGS="--image-size 64 --batch-size 8"
CASE ?= pytorch-synthetic
NODES ?= 1
GPUS_PER_NODE ?=
HOSTFILE ?= hostfiles/localhost
RUNTIME ?= local
REPEAT ?= 1
ARGS ?=
PYTHON ?= python3

VENV := .venv
SUITE := $(VENV)/bin/python -m suite

.PHONY: run install test cases clean-runs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(SUITE) run --case "$(CASE)" --nodes "$(NODES)" --hostfile "$(HOSTFILE)" --runtime "$(RUNTIME)" \
		--repeat "$(REPEAT)" $(if $(strip $(GPUS_PER_NODE)),--gpus-per-node "$(GPUS_PER_NODE)") -- $(ARGS)

install: $(VENV)/.installed
	$(SUITE) install --case "$(CASE)"

cases: $(VENV)/.installed
	$(SUITE) cases

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -ra tests

clean-runs:
	rm -rf runs
