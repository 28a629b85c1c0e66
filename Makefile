# The two commands a new user runs: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is pinned to its CPU build through constraints.txt; without the pin pip pulls GBs of CUDA wheels.
PIP_INSTALL := $(BIN)/pip install -q --disable-pip-version-check -c constraints.txt
# `make setup GPU=1` (or demo/test GPU=1): the same torch as a CUDA build from the PyTorch index (constraints-cuda.txt).
CUDA ?= cu130
ifeq ($(GPU),1)
PIP_INSTALL += -c constraints-cuda.txt --extra-index-url https://download.pytorch.org/whl/$(CUDA)
STAMP := $(VENV)/.installed-cuda
else
STAMP := $(VENV)/.installed
endif

.PHONY: setup demo test test-fast fuzz bench lint clean emulate-avx2 arm64-sysroot

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt constraints-cuda.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e ".[torch,onnx,openvino,keras,litert,executorch,compress,zoo,detectors,ray,llm,dev]"
	rm -f $(VENV)/.installed $(VENV)/.installed-cuda  # the other build's stamp: switching GPU= reinstalls
	touch $@

demo: setup
	$(BIN)/edgekit demo
	$(BIN)/edgekit demo --detector

# Two workers, a test file each (its module fixtures built once), each pinned to its own core (tests/conftest.py):
# the time a clean clone takes is in docs/development.md (Test time).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

# A longer Hypothesis search than the few dozen examples per target `make test` runs.
fuzz: setup
	EDGEKIT_FUZZ_EXAMPLES=$${EDGEKIT_FUZZ_EXAMPLES:-2000} $(BIN)/python -m pytest -q tests/fuzz

# llama.cpp, the language-model quality anchor of `bench lm` (bench/lm_real.py), is a benchmark dependency only: built
# from its sdist for this CPU (~5 min on 2 cores), never a runtime one.
bench: setup
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS=-DGGML_NATIVE=ON $(PIP_INSTALL) llama-cpp-python==0.3.36
	$(BIN)/python -m bench

# The CI example on an emulated AVX2-only CPU (no AVX-512, no VNNI): int8 numerics of such a host from any
# x86-64 Linux machine with qemu-user (apt-get install qemu-user). Slow; emulated latency means nothing.
emulate-avx2: setup
	dir=$$(mktemp -d) && cp examples/ci-gate.yaml $$dir/ && qemu-x86_64 -cpu Haswell $(BIN)/python -m edgekit run $$dir/ci-gate.yaml --no-cache

# An Arm64 Python with this venv's numpy and ONNX Runtime (and ai-edge-litert 1.4.0) in .arm64, run under qemu-aarch64
# (apt-get install qemu-user): int8 numerics of their Arm kernels (Raspberry Pi 4 / 5, Graviton 3) from an x86-64
# Debian host (edgekit.emulation); .arm64/bin/python-<class> is a board's --python.
arm64-sysroot: setup
	scripts/arm64_sysroot.sh .arm64

lint: setup
	$(BIN)/ruff check edgekit tests bench scripts && $(BIN)/ruff format --check edgekit tests bench scripts

clean:
	rm -rf $(VENV) edgekit-demo edgekit-demo-keras edgekit-demo-detector .pytest_cache .arm64
