# Two commands for a fresh machine with Python 3.11:  make book  and  make test.
# Both create .venv and install everything on first use (and again whenever pyproject.toml changes).

PYTHON     ?= python3
VENV       := .venv
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.installed
# Installed first, before anything that depends on torch: an open torch requirement with no torch
# present would pull a multi-GB CUDA build. Override on other machines, e.g. TORCH_SPEC=torch.
TORCH_SPEC ?= torch==2.13.0
NBGRADER   := cd exercises && ../$(BIN)/nbgrader
# nbgrader runs helper programs (alembic) from the environment: put the venv first on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install book test test-fast readers exercises results grade sync-setup clean help

help:
	@echo "make book       build the site into _build/html"
	@echo "make test       run the whole test suite (unit, book, site, exercises)"
	@echo "make test-fast  the unit tests of course_lib and the grading core (about a minute)"
	@echo "make readers    after make book: regenerate book/colab/ (the chapters for Colab and Jupyter)"
	@echo "make exercises  regenerate exercises/release/ from exercises/source/"
	@echo "make results    rerun chapter 12's committed experiments into RESULTS (default runs/results; under an hour)"
	@echo "make grade      autograde and give feedback for everything in exercises/submitted/"
	@echo "make sync-setup rewrite the first (setup) cell of every notebook from its one template"

# The environment: TORCH_SPEC with pip (which knows where this machine keeps its torch), then the rest
# with uv, which downloads and byte-compiles in parallel where pip goes one package at a time, and
# keeps the torch installed; with pip where uv fails (no uv for the platform, or a package index that
# only pip is configured for).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	( $(BIN)/python -m pip install --quiet uv && \
	  $(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e ".[dev]" ) || \
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# The chapters not yet in the execution cache run first, one kernel per core (book/_tools/execute_book.py,
# which empties the cache when course_lib has changed since it was filled, and prints one line per
# chapter); the build finds them cached. -q: Sphinx prints its warnings (errors under -W), not its progress.
book: install
	$(BIN)/python book/_tools/execute_book.py
	$(BIN)/jupyter-book build . -W --keep-going -q
	@echo
	@echo "Open the book: file://$(CURDIR)/_build/html/index.html"

test: install
	$(BIN)/python -m pytest

# The contributor's loop: the unit tests of course_lib and of the grading core, in two pytest processes,
# one per core (the grading tests, and the rest). Left out, and run by make test: whatever executes or
# checks notebooks, runs nbgrader, builds the book or drives a browser; the command line and the
# benchmark scripts run end to end; the experiment grids reproduced and every mistake catalogue graded.
FAST_SKIP := exercises mistake_catalogue book site_browser colab readers notebooks notebook_helpers \
             objectives experiments benchmarks cli gpu_check
FAST      := -q -p no:cacheprovider $(FAST_SKIP:%=--ignore=tests/test_%.py)
test-fast: install
	@log=$$(mktemp); \
	$(BIN)/python -m pytest $(FAST) tests/test_grading_*.py >$$log 2>&1 & grading=$$!; \
	$(BIN)/python -m pytest $(FAST) --ignore-glob='tests/test_grading_*.py'; rest=$$?; \
	wait $$grading; graded=$$?; echo "--- the grading core (tests/test_grading_*.py):"; cat $$log; \
	rm -f $$log; [ $$rest -eq 0 ] && [ $$graded -eq 0 ]

# The reader notebooks (book/colab/): each chapter with its glued values, citations and callouts
# rendered for Colab and Jupyter, from its source and the values of the last `make book`.
readers: install
	$(BIN)/python book/_tools/reader_notebooks.py --write

exercises: install
	$(NBGRADER) generate_assignment "*" --force --no-db

# Chapter 12's committed results, made again from scratch into RESULTS: the copying model (one thread)
# alongside the step-budget grids (two runs at a time), then the wall-clock grid alone, so that its
# timing has the cores to itself. Finished runs already in RESULTS are kept (an interrupted run resumes).
# To replace the committed results, point RESULTS at an empty folder and copy the outcome into
# course_lib/experiments/results/.
# Timed on 2026-12-07 (the same runs one grid after another, the copying model last): 53 minutes.
RESULTS ?= runs/results
STEP_GRIDS := lr-sweep positions arch norm overfit init-scale
results: install
	@set -e; \
	$(BIN)/python -m course_lib.experiments.copying --out $(RESULTS) --no-progress & copying=$$!; \
	for grid in $(STEP_GRIDS); do $(BIN)/python -m course_lib.experiments $$grid --out $(RESULTS) --no-progress; done; \
	wait $$copying; \
	$(BIN)/python -m course_lib.experiments arch-time --out $(RESULTS) --no-progress

# Autograde everything in exercises/submitted/<student>/<assignment>/, write HTML feedback (hidden tests
# removed) to exercises/feedback/ and the grades to exercises/grades.csv. generate_assignment first
# records the source's test cells in the gradebook (its release output is identical to the committed one).
grade: install
	$(NBGRADER) generate_assignment "*" --force
	$(NBGRADER) autograde "*"
	$(NBGRADER) generate_feedback "*"
	$(NBGRADER) export

sync-setup: install
	$(BIN)/python book/_tools/setup_cell.py --write

clean:
	rm -rf _build exercises/autograded exercises/feedback exercises/gradebook.db
