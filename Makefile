# effkit — every target bootstraps .venv on first use, so a fresh machine needs only `make demo` / `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.effkit-installed
DEMO_ARGS ?=
SST2 ?= ../shared/data/sst2

.PHONY: setup browser demo test lint lab exercises notebooks site bench gpu-check clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "effkit needs Python >= 3.10"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch/torchvision come from the registry as usual (CUDA builds; they also run on CPU).
	$(BIN)/python -m pip install -q -e ".[course,dev]"
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)  ## the headline demo: benchmarks + autograding, one table
	$(BIN)/python -m grader.demo $(DEMO_ARGS)

# The JupyterLab test drives Debian's chromium; install it where we can (root + apt), else say so.
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium for the browser test (about a minute)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null; \
	  else echo "note: no chromium: the JupyterLab browser test will skip (apt-get install chromium)"; fi; }

test: $(STAMP) browser  ## lint + the whole test suite (what CI runs)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

lab: $(STAMP)  ## JupyterLab on the course, nbgrader extensions enabled
	$(BIN)/jupyter lab --notebook-dir=. $(if $(filter 0,$(shell id -u)),--allow-root)

notebooks: $(STAMP)  ## rebuild the lesson notebooks (and their README) from notebooks/*.py
	$(BIN)/python -m effkit.lesson build

# The course site: runs the lessons (EFFKIT_PROFILE, default cpu on a CPU: minutes per lesson),
# then Sphinx + myst-nb. SITE_ARGS="--executed DIR" reuses already executed notebooks.
SITE_ARGS ?=
site: $(STAMP)  ## static course site with executed lessons -> docs/_build/html/index.html
	$(BIN)/python docs/build.py $(SITE_ARGS)

exercises: $(STAMP)  ## regenerate the student versions in exercises/ from solutions/
	$(BIN)/python -m grader generate

bench: $(STAMP)  ## both workloads' smoke A/B (time-to-target with evaluations on the clock)
	$(BIN)/python -m effkit.bench bert --profile smoke --out runs/bench/bert
	$(BIN)/python -m effkit.bench cifar --profile smoke --out runs/bench/cifar

# On a CUDA machine (offline is fine): gpu profiles, the HF Trainer peer benchmark, every lesson
# under EFFKIT_PROFILE=gpu, grading, stress and calibrate -> benchmarks/results/<device>/.
# About 25 min on one H100. `benchmarks/gpu_check.py --dry-run` is the CPU rehearsal CI runs.
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --sst2 $(SST2)

clean:
	rm -rf runs course .pytest_cache .ruff_cache docs/_src docs/_build
