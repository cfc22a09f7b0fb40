# effkit — every target bootstraps .venv on first use, so a fresh machine needs only `make demo` / `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.effkit-installed
DEMO_ARGS ?=
SST2 ?= ../shared/data/sst2
# Every install takes its versions from constraints.txt (see `constraints:` below); pyproject.toml
# keeps the floors a user's own install needs.
PIN    := -c constraints.txt

.PHONY: setup constraints browser bwrap cohort down test-cohort demo test test-oldest-torch lint lab exercises notebooks site record bench dashboard gpu-check gpu-check-lessons gpu-rehearsal test-system clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "the course needs Python >= 3.11 (transformers 5)"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch/torchvision come from the registry as usual (CUDA builds; they also run on CPU).
	$(BIN)/python -m pip install -q $(PIN) -e ".[course,dev]"
	@touch $(STAMP)

setup: $(STAMP)

# constraints.txt pins every package `.[course,dev,cohort]` resolves to, so CI, `make setup` and the
# GPU lease (benchmarks/gpu_lease_wheels.py) install the same versions on every host and every day.
# Regenerate it on purpose (a new release wanted, a dependency added), then run `make test`.
# Made with `uv pip compile`: it resolves without installing (seconds, where a pip freeze needs a
# fresh 7 GB venv), for Linux and macOS and every Python >= 3.11 at once (--universal: a pin that
# differs by platform carries its marker), and --upgrade makes each resolution fresh. Where pip's
# config caps versions on this host (/etc/xdg/pip/constraints.txt: torch wheels on local disk),
# the resolution stays under the caps so the pins install here too. uv runs from its own venv.
UV_VERSION := 0.13.9
HOST_CAPS  := $(wildcard /etc/xdg/pip/constraints.txt)
constraints:
	@[ -x .venv-uv/bin/uv ] || { $(PYTHON) -m venv .venv-uv && .venv-uv/bin/python -m pip install -q "uv==$(UV_VERSION)"; }
	.venv-uv/bin/uv pip compile pyproject.toml --extra course --extra dev --extra cohort \
	  --universal --python-version 3.11 --upgrade $(addprefix -c ,$(HOST_CAPS)) \
	  --custom-compile-command "make constraints" -o constraints.txt

demo: $(STAMP)  ## the headline demo: benchmarks + autograding, one table
	$(BIN)/python -m grader.cli.demo $(DEMO_ARGS)

# The JupyterLab test drives Debian's chromium; install it where we can (root + apt), else say so.
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium for the browser test (about a minute)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null; \
	  else echo "note: no chromium: the JupyterLab browser test will skip (apt-get install chromium)"; fi; }

# The grader's allow-list file view is built by bubblewrap (grader/sandbox/bwrap_view.py); without it
# workers keep the unshare view and reports say so. Installed like chromium: root + apt, else a note.
bwrap:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing bubblewrap for the grader's file view"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null; \
	  else echo "note: no bwrap: gradings use the unshare view, which shows the host minus masked paths (apt-get install bubblewrap)"; fi; }

test: $(STAMP) browser bwrap  ## lint, format check + the whole test suite (what CI runs)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tests/lanes.py

# The exercise tests on the oldest torch pyproject.toml declares, in a second venv
# (.venv-oldest-torch: torch X.Y from the registry, ~3 GB, built once; ~4 min in all here).
test-oldest-torch:
	$(PYTHON) tests/oldest_torch.py

lint: $(STAMP)  ## ruff's lint and format checks (`ruff format .` fixes the second)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The venv's bin goes first on PATH: formgrader creates the gradebook by running `alembic`, which
# lives there (without it: HTTP 500 "No such file or directory: 'alembic'"). LAB_ARGS adds flags.
LAB_ARGS ?=
lab: $(STAMP)  ## JupyterLab on the course, nbgrader extensions enabled
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter lab --notebook-dir=. $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# A cohort on this machine (root: one Unix account per learner): JupyterHub + nbgrader's exchange +
# formgrader as a service, every assignment released. `make cohort down` stops it. COHORT_ARGS adds
# options (`--learners 30`, `--port 8000`); see README "Running a cohort".
COHORT_ARGS ?=
cohort: $(STAMP)
	@$(BIN)/python -c "import jupyterhub" 2>/dev/null || $(BIN)/python -m pip install -q $(PIN) -e ".[cohort]"
	$(BIN)/python -m grader cohort $(if $(filter down,$(MAKECMDGOALS)),down,up $(COHORT_ARGS))
down:
	@$(if $(filter cohort,$(MAKECMDGOALS)),:,echo "did you mean: make cohort down"; exit 2)

# Two learners and an instructor through the hub in headless Chromium (tests/test_cohort.py; root;
# screenshots and step times in runs/cohort/). Too long for CI's budget beside the suite.
test-cohort: $(STAMP) browser
	@$(BIN)/python -c "import jupyterhub" 2>/dev/null || $(BIN)/python -m pip install -q $(PIN) -e ".[cohort]"
	EFFKIT_TEST_COHORT=1 $(BIN)/python -m pytest tests/test_cohort.py -s -p no:cacheprovider

notebooks: $(STAMP)  ## rebuild the lesson notebooks (and their README) from notebooks/*.py
	$(BIN)/python -m effkit.lesson build

# The course site: runs the lessons (EFFKIT_PROFILE, default cpu on a CPU: minutes per lesson),
# then Sphinx + myst-nb. SITE_ARGS="--executed DIR" reuses already executed notebooks.
SITE_ARGS ?=
site: $(STAMP)  ## static course site with executed lessons -> docs/_build/html/index.html
	$(BIN)/python docs/build.py $(SITE_ARGS)

# One lesson at a time in the cpu profile, on a quiet machine: the site shows these outputs, and
# each lesson's stated run time is checked against its quiet recording (tests/test_lesson_record.py).
record: $(STAMP)  ## record the lessons' cpu runs for the site -> docs/recorded/ (RECORD="07_dynamic_padding ...")
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m effkit.lesson record $(RECORD)

exercises: $(STAMP)  ## regenerate the student versions in exercises/ from solutions/
	$(BIN)/python -m grader generate

bench: $(STAMP)  ## both workloads' smoke A/B (time-to-target with evaluations on the clock)
	$(BIN)/python -m effkit.bench bert --profile smoke --out runs/bench/bert
	$(BIN)/python -m effkit.bench cifar --profile smoke --out runs/bench/cifar

dashboard: $(STAMP)  ## every recorded run's cost to target side by side -> runs/dashboard/index.html
	$(BIN)/python -m effkit.dashboard benchmarks/results runs --out runs/dashboard

# On a CUDA machine (offline is fine): the gpu profiles, the HF Trainer peer, GPU calibration and
# every grading (reference full marks, stub 0, no_faster refused) -> benchmarks/results/<device>/
# (summary.json + a README table). Planned per step in benchmarks/gpu_check_plan.py and cut into
# parts of <= 9 min each: under a 10-minute call limit run `make gpu-check-1`, `gpu-check-2`, ...
# (`python benchmarks/gpu_check.py --list` prints them). `make gpu-check-lessons[-N]`: every lesson
# under EFFKIT_PROFILE=gpu. `benchmarks/gpu_check.py --dry-run` is the CPU rehearsal CI runs.
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --sst2 $(SST2)

# The GPU gradings at the gpu spec's sizes on the CPU, a few steps each (benchmarks/gpu_rehearsal.py):
# run before any submission that touches the grader or a recipe (make test leaves it out: ~4 min).
# The tests check what the script prints and more (commit sizes, memfd commits).
# Whole-system checks too long for CI's 40 minutes (tests marked `system`: Ray nodes and drivers
# killed mid-grading, cohort faults, repeat gradings beside a busy core, the GPU check's dry run; then the
# cohort's smoke: learners log in through the hub and cannot reach each other, ~2 min after CI's lanes):
# ~15 min on a quiet 2-core host, run before every stop (the closing note says it passed).
test-system: $(STAMP) bwrap browser
	$(BIN)/python -m pytest -p no:cacheprovider -m system
	EFFKIT_TEST_COHORT=smoke $(BIN)/python -m pytest tests/test_cohort.py -p no:cacheprovider

gpu-rehearsal: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m rehearsal tests/test_gpu_rehearsal.py

gpu-check-lessons: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --sst2 $(SST2) --suite lessons

gpu-check-lessons-%: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --sst2 $(SST2) --suite lessons --part $*

gpu-check-%: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --sst2 $(SST2) --part $*

clean:
	rm -rf runs course .pytest_cache .ruff_cache docs/_src docs/_build
