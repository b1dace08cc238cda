# strata — thin front end over CMake/Ninja and the lab.  See README.md.
BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
VENV       := .venv
LAB        := $(VENV)/bin/strata-lab

CARGO      := $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)
RUST       := --manifest-path bindings/rust/Cargo.toml --target-dir $(abspath $(BUILD))/rust

.PHONY: all setup setup-build build test test-native test-sanitize test-lab test-rust rust-bench deb bench clean

all: build

setup:
	@scripts/setup.sh

# Only the compilers and build tools: the peers, servers and the lab are for test and bench.
setup-build:
	@scripts/setup.sh --build

build: setup-build
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Every test: the native suites (GoogleTest under ctest; the packaging tests among them), the
# sanitizer builds, the Rust crates and the lab's pytest.
test: setup build
	@$(MAKE) --no-print-directory test-native test-sanitize test-rust test-lab

test-native:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# ASan+UBSan over everything that can be sanitized (the allocator through its strata_* API,
# pools, GPU resources on the simulated device), TSan over the multithreaded stress tests.
test-sanitize:
	@cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address,undefined >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -L sanitize
	@cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=thread >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS)
	ctest --test-dir $(BUILD)-tsan --output-on-failure -j $(JOBS) -L tsan

# strata-alloc as the global allocator of collection- and thread-heavy tests (bindings/rust).
test-rust:
	$(CARGO) test -q $(RUST) --workspace

# The lab's suite "rust": alloc-bench under strata, mimalloc and jemalloc (the crates' own builds).
rust-bench:
	$(CARGO) build -q --release $(RUST) -p alloc-bench --features peers

# Debian packages libstrata0 and libstrata-dev in $(BUILD)/deb (packaging/deb/build-deb.sh).
# A library-only build: the build tools suffice (build-essential brings dpkg-dev), not the lab,
# peers and servers of `make setup`.
deb: setup-build
	@packaging/deb/build-deb.sh $(BUILD)/deb $(BUILD)-deb

test-lab:
	@if [ -d lab/tests ]; then $(VENV)/bin/python -m pytest -q lab/tests; fi

# The main job: strata against the peer allocators, ending in a table and a report.
bench: setup build
	@if [ ! -x $(LAB) ]; then echo "make bench: $(LAB) is missing: run make setup" >&2; exit 1; fi
	@$(LAB) run --suite default --report

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-deb
