# Two commands do all set-up on a fresh machine (see README.md):
#   make book   build the website, executing every chapter at paper scale (the main job)
#   make test   run the whole test suite (lint, unit tests, every chapter at quick scale on three seeds with its
#               negative controls, the -W build, the browser check)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SEEDS  ?= 5
JOBS   ?= 2

.PHONY: venv book test lint format seeds bench sync clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

book: venv  ## the website at paper scale, in _build/html (COMPANION_SCALE=quick make book for a quick one)
	COMPANION_SCALE=$${COMPANION_SCALE:-paper} COMPANION_PROGRESS=0 COMPANION_WIDGETS=static \
	  COMPANION_CLAIMS_DIR=$(CURDIR)/_build/claims $(BIN)/jupyter-book build . -W --keep-going

test: venv  ## everything, at quick scale, on JOBS pytest-xdist workers with one torch thread each
	COMPANION_SCALE=quick COMPANION_PROGRESS=0 COMPANION_WIDGETS=static OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	  $(BIN)/python -m pytest -n $(JOBS) --durations=30

lint: venv  ## ruff: lint and format check (also run by the test suite)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: venv  ## ruff: apply the formatter and the safe fixes (chapters: into their .md, then re-synced)
	$(BIN)/ruff check --fix src tools tests benchmarks && $(BIN)/ruff format src tools tests benchmarks && \
	  $(BIN)/python tools/chapters.py format

seeds: venv  ## every chapter at seed offsets 0..SEEDS-1 -> book/_generated/seeds.md (seeds-paper.md with COMPANION_SCALE=paper)
	scale=$${COMPANION_SCALE:-quick}; $(BIN)/python tools/robustness.py seeds --seeds $(SEEDS) --scale $$scale \
	  --out book/_generated/seeds$$( [ "$$scale" = paper ] && echo -paper ).md

bench: venv  ## performance ratios (see benchmarks/README.md)
	$(BIN)/python benchmarks/run.py

sync: venv  ## rewrite each chapter's paired .ipynb from its .md
	$(BIN)/python tools/chapters.py sync

clean:
	rm -rf _build .jupyter_cache
