# Two entry points: `make run` (set up + main job on the built-in default) and
# `make test` (set up + the test suite). Both create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= out

.PHONY: run test setup setup-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.core
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.core
setup-test: $(VENV)/.test

# The main job: analyse the real multi-stream CUDA trace shipped in the package and write
# an HTML report (terminal report on stdout).
run: setup
	@mkdir -p $(OUT)
	$(BIN)/parastream analyze --html $(OUT)/report.html --perfetto $(OUT)/trace.perfetto.json

test: setup-test
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider

bench: setup
	bash benchmarks/run_all.sh

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
