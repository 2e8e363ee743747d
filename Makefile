# Entry points: `make test` (set up, build, run every CPU test), `make demo`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build build-cuda test test-cpp test-asan clean python-deps python-install test-python demo

deps:
	bash scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DSDM_WERROR=ON $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: test-cpp test-python

# Compile the CUDA engine and the GPU tests with nvcc for CUDA_ARCHS (CMake's architecture list,
# default 90; CI builds "80;86;89;90": A100, RTX 30xx / A10, L4 / RTX 40xx, H100 / H200); nothing
# CUDA runs without a GPU. CI runs it after `make test`.
# nvcc's temporaries (up to ~200 MB a translation unit at four architectures: the fatbinary as C
# text) go under the build directory, not a possibly small or shared /tmp.
CUDA_BUILD ?= build-cuda
CUDA_ARCHS ?= 90
build-cuda: deps
	cmake -S . -B $(CUDA_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DSDM_WERROR=ON -DSDM_ENABLE_CUDA=ON \
	  -DSDM_CUDA_ARCHS="$(CUDA_ARCHS)" -DSDM_BUILD_TESTS=OFF -DSDM_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	mkdir -p $(CUDA_BUILD)/nvcc-tmp
	TMPDIR="$(abspath $(CUDA_BUILD))/nvcc-tmp" cmake --build $(CUDA_BUILD) -j $(JOBS)

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	bash scripts/test_install.sh $(BUILD)

# The C++ tests once more under AddressSanitizer + UndefinedBehaviorSanitizer (any report fails
# the run: -fno-sanitize-recover). CI runs it after `make test`.
ASAN_BUILD ?= build-asan
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDM_WERROR=ON -DSDM_BUILD_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS="$(SANITIZE)" -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZE)" -DCMAKE_SHARED_LINKER_FLAGS="$(SANITIZE)"
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

# ---- Python: the `sdm` package and its tests ------------------------------------------------
# A virtualenv under .venv (ignored by git) rather than the user's python: Debian's system
# python refuses pip installs (PEP 668, externally managed), and a venv keeps the pinned CPU
# torch apart from whatever else the machine has; its pip still reads the machine's pip
# configuration. torch is installed first and pinned (TORCH_VERSION, a CPU build available
# locally); the package is then built against it without build isolation, in the kept
# build-python/ directory, so a reinstall only recompiles what changed.
PYTHON ?= python3
VENV ?= .venv
VENV_PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
# Where pip builds the extension (kept between installs). Two checkouts or two venvs built at
# once need two of these: `make test VENV=.venv-b PY_BUILD_DIR=build-python-b`.
PY_BUILD_DIR ?= build-python/{wheel_tag}

python-deps: deps
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install -q torch==$(TORCH_VERSION)
	$(VENV_PY) -m pip install -q "scikit-build-core>=0.10"

python-install: python-deps
	$(VENV_PY) -m pip install -q --no-build-isolation -C build-dir=$(PY_BUILD_DIR) ".[test,demo]"

test-python: python-install
	$(VENV_PY) -m pytest tests/python -q -p no:cacheprovider

# The main job: train two small SDM models on associative recall on the CPU (python -m
# sdm.demo; DEMO_ARGS passes flags, e.g. DEMO_ARGS="--steps 200"). Writes to out/.
DEMO_ARGS ?=
demo: python-install
	$(VENV_PY) -m sdm.demo $(DEMO_ARGS)

clean:
	rm -rf $(BUILD) $(CUDA_BUILD) $(ASAN_BUILD) build-python
