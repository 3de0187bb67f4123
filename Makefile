# Two commands do all set-up on a fresh machine (see README.md):
#   make book   build the website, executing every chapter at paper scale (the main job)
#   make test   run the whole test suite (unit tests, every chapter at quick scale, the -W build, the browser check)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv book book-quick test bench sync clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

book: venv  ## the website at paper scale, in _build/html
	COMPANION_SCALE=$${COMPANION_SCALE:-paper} COMPANION_PROGRESS=0 COMPANION_WIDGETS=static $(BIN)/jupyter-book build . -W --keep-going

test: venv  ## everything, at quick scale
	COMPANION_SCALE=quick COMPANION_PROGRESS=0 COMPANION_WIDGETS=static $(BIN)/python -m pytest

bench: venv  ## performance ratios (see benchmarks/README.md)
	$(BIN)/python benchmarks/run.py

sync: venv  ## rewrite each chapter's paired .ipynb from its .md
	$(BIN)/python tools/chapters.py sync

clean:
	rm -rf _build .jupyter_cache
