# Two entry points: `make run` (set up + main job on the built-in default) and
# `make test` (set up + the test suite). Both create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= out

.PHONY: run analyze test setup setup-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# README.md too: the installed package's metadata (PKG-INFO) carries it as the long
# description, so an edited README is installed again rather than left stale there
$(VENV)/.core: pyproject.toml README.md | $(BIN)/python
	$(BIN)/pip install -q -e '.[torch]'
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.core
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.core
setup-test: $(VENV)/.test

# The main job: the whole loop on the built-in default model on this machine.
run: setup
	$(BIN)/parastream demo --out $(OUT)/demo

# The verifier alone on the real multi-stream CUDA trace shipped in the package.
analyze: setup
	@mkdir -p $(OUT)
	$(BIN)/parastream analyze --html $(OUT)/report.html --perfetto $(OUT)/trace.perfetto.json

test: setup-test
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider


clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
