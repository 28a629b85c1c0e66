# The two commands a new user runs: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is pinned to its CPU build through constraints.txt; without the pin pip pulls GBs of CUDA wheels.
PIP_INSTALL := $(BIN)/pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: setup demo test test-fast fuzz bench lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e ".[torch,onnx,openvino,keras,litert,compress,zoo,dev]"
	touch $@

demo: setup
	$(BIN)/edgekit demo

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

# A longer Hypothesis search than the few dozen examples per target `make test` runs.
fuzz: setup
	EDGEKIT_FUZZ_EXAMPLES=$${EDGEKIT_FUZZ_EXAMPLES:-2000} $(BIN)/python -m pytest -q tests/fuzz

bench: setup
	$(BIN)/python -m bench

lint: setup
	$(BIN)/ruff check edgekit tests bench scripts && $(BIN)/ruff format --check edgekit tests bench scripts

clean:
	rm -rf $(VENV) edgekit-demo .pytest_cache
