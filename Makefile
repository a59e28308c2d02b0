# The course's entry points. Each target sets up .venv itself (idempotently) from the repo's own files.
#   make run    execute every chapter headless (papermill, cpu_smoke) and print a per-chapter summary
#   make test   run the whole test suite, then the effect tests again under a second CPU numerics profile
#   make test-fast  the inner loop: every test not marked slow or integration (one process, about 5 minutes)
#   make lint   ruff (rules in pyproject.toml); CI runs it before `make test`
#   make lab    open JupyterLab on the course
#   make verify-full  the whole grader-strength matrix through nbgrader (before a release)
#   make bench  time running, verifying and grading every chapter, and the test suite

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
BROWSER_STAMP := $(VENV)/.browser-deps-stamp
RUN_ARGS ?=
TEST_WORKERS ?= 2
# Debian packages of the browser test: the browser, and fonts so screenshots show Chinese and emoji.
BROWSER_APT := chromium fonts-noto-cjk fonts-noto-color-emoji
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# One CPU arithmetic for every process of a target (tools/core/numerics.py): exported to every target, so
# the notebook kernels papermill and JupyterLab start compute like the tests. It makes one machine repeat
# itself; it does not make two processor families agree, so the effects are also tested under a second one.
export ATEN_CPU_CAPABILITY ?= avx2
export MKL_CBWR ?= AVX2
export ONEDNN_MAX_CPU_ISA ?= AVX2
# The second profile: torch's generic kernels, MKL's compatible path, oneDNN without AVX, and lab models
# pretrained under it (not the committed weights), standing in for another processor family.
GENERIC_NUMERICS := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41 COURSE_LAB_MODELS=build

.PHONY: setup run test test-effects-generic test-fast lint lab check clean browser-deps verify-full bench

$(STAMP): requirements-cpu.txt pyproject.toml environment/verl-config-check.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-cpu.txt
	# verl's shipped Hydra configs (no heavy dependencies) for the override check of the verl stage
	$(PY) -m pip install --quiet --no-deps -r environment/verl-config-check.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# Headless Chromium + Playwright for tests/repo/test_browser_lab.py: apt runs only when a package is
# missing; Playwright drives Debian's /usr/bin/chromium (never `playwright install`).
$(BROWSER_STAMP): environment/browser-test.txt $(STAMP)
	@missing=""; for p in $(BROWSER_APT); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y $$missing; \
	fi
	$(PY) -m pip install --quiet -r environment/browser-test.txt
	touch $(BROWSER_STAMP)

browser-deps: $(BROWSER_STAMP)

# The committed lab models are checked (COURSE_LAB_MODELS=build: built once under build/lab_models) before any chapter needs them.
run: setup
	$(PY) -m tools.models lab-build
	$(PY) -m tools.course run --run-mode cpu_smoke $(RUN_ARGS)

# Two workers on a 2-core machine; tests sharing a module fixture stay on one worker (tests/conftest.py).
# Every test's time (setup, call and teardown) goes to build/test-reports/*.xml (JUnit), for `make test`'s budget.
test: setup browser-deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15 --junitxml=build/test-reports/pinned.xml
	$(MAKE) --no-print-directory test-effects-generic

# Every effect test again under the second numerics profile, from lab models built under it (cached in build/).
# Each model pretrains on one thread: the two build side by side, one per core.
test-effects-generic: setup
	$(GENERIC_NUMERICS) $(PY) -m tools.models lab-build --name lab-teacher & teacher=$$!; \
	$(GENERIC_NUMERICS) $(PY) -m tools.models lab-build --name lab; student=$$?; \
	wait $$teacher && exit $$student
	$(GENERIC_NUMERICS) $(PY) -m pytest -m effect -n $(TEST_WORKERS) --dist loadgroup -p no:cacheprovider --durations=10 \
	  --junitxml=build/test-reports/generic.xml

# The inner loop: no notebook runs, nbgrader, class grading, browser or fresh venv (marks in pyproject.toml).
test-fast: setup
	$(PY) -m pytest -m "not slow and not integration" -q -p no:cacheprovider --durations=10

lint: setup
	$(PY) -m ruff check --no-cache .

# Before a release: every planted submission through nbgrader too, the endless loop, oracle agreement.
verify-full: setup
	$(PY) -m tools.course grading verify --full

bench: setup
	$(PY) -m tools.course bench --suite

check: setup
	$(PY) -m tools.course check
	$(PY) -m tools.course grading build --check

# The venv's bin folder goes first on PATH: nbgrader's formgrader runs `alembic` from there.
lab: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/jupyter lab --notebook-dir=.

clean:
	rm -rf build
