# The course's entry points. Each target sets up .venv itself (idempotently) from the repo's own files.
#   make run    execute every chapter headless (papermill, cpu_smoke) and print a per-chapter summary
#   make test   run the whole test suite
#   make lab    open JupyterLab on the course

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
RUN_ARGS ?=

.PHONY: setup run test lab check clean

$(STAMP): requirements-cpu.txt pyproject.toml environment/verl-config-check.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-cpu.txt
	# verl's shipped Hydra configs (no heavy dependencies) for the override check of the verl stage
	$(PY) -m pip install --quiet --no-deps -r environment/verl-config-check.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(PY) -m tools.course run --run-mode cpu_smoke $(RUN_ARGS)

test: setup
	$(PY) -m pytest

check: setup
	$(PY) -m tools.course check
	$(PY) -m tools.course grading build --check

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=.

clean:
	rm -rf build
