# The two commands: `make book` (build the HTML book) and `make test` (the full check).
# Every target is a thin call into replib; the environment lives in .venv (created on first use).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
REPLIB := $(VENV)/bin/replib
SETUP_STAMP := $(VENV)/.replib-installed
# Where pip takes torch from. Empty (the default): the ordinary index, as `pip install torch` does
# (on Linux that is the CUDA build, several GB). For the CPU-only build:
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# MathJax, served from the built book itself so that formulas render offline (npm; pinned).
MATHJAX_VERSION := 3.2.2
MATHJAX_DIR := $(VENV)/mathjax

.PHONY: setup test unit smoke replay-one replay mutants book run scoreboard check sync lint clean

setup: $(SETUP_STAMP)

# torch is installed first, pinned, so that no other requirement pulls a CUDA build of several GB.
$(SETUP_STAMP): pyproject.toml requirements-lock.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==2.13.0
	$(PY) -m pip install -q -c requirements-lock.txt -e '.[book,test]'
	@if command -v npm >/dev/null; then \
	  npm install --silent --no-save --no-package-lock --prefix $(MATHJAX_DIR) mathjax@$(MATHJAX_VERSION); \
	else echo "warning: npm not found: the book will load MathJax from its CDN (formulas need the network)"; fi
	touch $(SETUP_STAMP)

test: unit smoke replay-one ## unit and structure tests, every notebook at smoke, the book build, one replayed seed

unit: setup
	$(VENV)/bin/ruff check lib tests notebooks tools
	$(PY) -m pytest -n 2 tests

smoke: setup
	$(REPLIB) smoke

replay-one: setup          ## re-run one committed seed of the cheapest chapter; its values must be the committed ones
	$(REPLIB) replay --cheapest

replay: setup              ## re-run one committed seed of every chapter (about a third of `make book`)
	$(REPLIB) replay --all

mutants: setup             ## mutation testing (mutmut), a score per file: make mutants [PATTERNS='replib/papers/foam/method.py' TESTS=tests/papers/test_foam.py]
	$(PY) -m pip install -q mutmut==3.8.1
	TESTS='$(TESTS)' tools/mutants.sh $(PATTERNS)

book: setup                 ## execute every notebook at the book profile (cached) and build _build/html
	$(REPLIB) book

run: setup                  ## make run CHAPTER=bidprice_routing ARGS="--seeds 0 1 2"
	$(REPLIB) run $(CHAPTER) $(ARGS)

scoreboard: setup
	$(REPLIB) scoreboard

check: setup
	$(REPLIB) check

sync: setup                 ## after editing a notebook's .py: its Colab cell and output-free .ipynb twin
	$(REPLIB) sync

lint: setup
	$(VENV)/bin/ruff check lib tests notebooks tools

clean:
	rm -rf _build runs
