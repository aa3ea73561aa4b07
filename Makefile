# The two commands that must work on a fresh Debian machine:
#   make demo   install what is missing, build, train the reference MLP on 2 local workers
#   make test   install what is missing, build, run the whole test suite
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps build demo test test-asan bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Data-parallel training of the reference MLP on Fashion-MNIST: two local
# workers over shared memory, three epochs; prints the test accuracy and
# where report.html is.
demo: build
	$(BUILD)/gradmesh train examples/mlp.toml --nproc-per-node 2 --set train.epochs=3

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Every test again under AddressSanitizer + UBSan (CI runs this too), except the
# one full training epoch, which the Release run covers.
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADMESH_SANITIZE=ON $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(JOBS) -E 'EndToEnd.ReferenceMlpOneEpoch'

bench: build
	@scripts/install-deps.sh --bench
	python3 bench/engine.py
	python3 bench/comm.py
	python3 bench/ddp.py

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
