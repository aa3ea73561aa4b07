# The two commands that must work on a fresh Debian machine:
#   make demo   install what is missing, build, train the reference MLP on 2 local workers
#   make test   install what is missing, build, run the whole test suite
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps configure build demo python test test-asan test-tsan bench clean

all: build

deps:
	@scripts/install-deps.sh

# Every build here compiles the library in unity batches, one per source
# directory (cold, on two cores: Release 1.7 min against 3.8 file by file, ASan
# 3.0 against 7.2): most of CI's time is compiling. A plain cmake configure
# compiles file by file (GRADMESH_LIB_UNITY defaults to OFF), which is where a
# file that leans on another file's includes would fail.
configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADMESH_TEST_LAYERS= -DGRADMESH_LIB_UNITY=ON $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Data-parallel training of the reference MLP on Fashion-MNIST: two local
# workers over shared memory, three epochs; prints the test accuracy and
# where report.html is. Builds only the gradmesh executable, not the tests.
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target gradmesh
	$(BUILD)/gradmesh train examples/mlp.toml --nproc-per-node 2 --set train.epochs=3

# The torch.distributed backend (docs/pytorch.md): installs Debian's PyTorch
# with its C++ headers and pybind11, then builds the package into
# $(BUILD)/python (`make` builds it too wherever they are installed).
python: deps
	@scripts/install-deps.sh --python
	@$(MAKE) --no-print-directory configure
	@cmake --build $(BUILD) -j $(JOBS) --target gradmesh_torch
	@echo "gradmesh.torch is in $(BUILD)/python: PYTHONPATH=$(BUILD)/python python3 -c 'import gradmesh.torch'"

# The test dependencies come first: the configure step looks for PyTorch's
# headers to build the backend that tests/pytorch runs.
test: deps
	@scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The sanitizer builds compile at -O1 with line tables only (-g1): stack traces
# keep their file:line, and a cold compile on two cores takes half the time of
# -O2 -g, which is most of CI's time.
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DGRADMESH_LIB_UNITY=ON

# Every test again under AddressSanitizer + UBSan (CI runs this too), except
# what the Release run covers well enough alone, because another test under
# ASan runs the same code with fewer processes or a smaller model:
# - the one full training epoch;
# - fault scenarios repeated with more processes: restart from disk is the
#   resume path (ResumeAtTwoWorkersFromOneAndBack), in-process recovery is
#   LostNodeShrinksTheWorldInProcess's path;
# - mpirun data parallelism (the collectives' own tests cover it; every
#   strategy's loop, and bit-identical reruns, run in process:
#   tests/train/training_loop_test.cc);
# - the four-rank collective matrices (two and three ranks run the same code),
#   and the lazy-connection matrices on 6 and 7 ranks (2, 3 and 5 run it);
# - the Kubernetes manifests' checks (tests/deploy is not built: Node.js,
#   kubectl and the launcher's usage checks) and the password-on-the-command-
#   line run (the password-file run trains the same way);
# - PowerSGD's and DiLoCo's kill-and-resume runs (their state's save and
#   restore run under ASan in tests/parallel, the resume path in
#   TrainingFaults.SigtermSavesExitsCleanlyAndResumesBitIdentical).
# - the dashboard in a browser (Chromium drives the page; the server side runs
#   under ASan in tests/elastic and Dashboard.PrometheusShowsTheRunPerRank...),
#   the metered resume and the report command's runs (the meter and the
#   report's parsing run under ASan in Metering.ARunAccounts... and tests/obs).
# - the every-layout matrices (each pipeline, tensor and ZeRO path, and split
#   checkpoints, run under ASan in their own smaller tests), the heartbeat
#   recovery (LaunchHang's tests run the same detection) and the pipeline's
#   long-message deadlock test (its mailbox is tested alone).
# - the control plane's whole-job scenarios and chaos schedules (launchers,
#   stores and workers as processes: the store clients, the peer watch and
#   rank assignment run under ASan in their own tests), and the etcd tests
#   that wait out a leader's restart or a lease's expiry (the same calls run
#   under ASan in the shorter etcd tests).
# Together they were half of the sanitizer run's time on two cores.
ASAN_EXCLUDE = ^(ControlPlane\..*|Chaos/ChaosSchedules\..*|EtcdStoreTest\.(KeepsWorkingThroughAKilledAndRestartedLeader|AKeyOnALeaseThatIsNotKeptAliveDisappears)|EndToEnd\.ReferenceMlpOneEpoch.*|TrainingFaults\.(ThreeKills.*|WorkerOfOneOfTwoNodesIsRecoveredInProcess|StoppedWorkerIsNamedAndTheJobRecovers)|MeshLayouts\..*|PipelineTraining\.ActivationsLargerThanTheMailboxStreamWithoutDeadlock|DataParallel\.UnderMpirunTheMpiBackendGivesTheSameResult|Ranks/(Shm|Gloo)World\.EveryCollectiveMatchesTheReference/4|Ranks/GlooLazyWorld\.EveryCollectiveMatchesTheReference/[67]|StorePassword\.OnTheCommandLine.*|CommunicationReduction\..*RunKilledMidwayEndsBitIdentical|DashboardBrowser\..*|Metering\.AResumedRunContinuesTheTotals|ReportCommand\..*)$$
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja $(SANITIZER_FLAGS) -DGRADMESH_SANITIZE=address \
	  -DGRADMESH_TEST_LAYERS= -DGRADMESH_TEST_SKIP_LAYERS=deploy $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(JOBS) -E '$(ASAN_EXCLUDE)'

# The threaded layers (comm, parallel, data, serve, elastic: the launcher's
# dashboard server and feed; train: the loop with its ranks as threads) under
# ThreadSanitizer (CI runs this too). Only their six test executables (and the gradmesh executable their
# tests start) are built: TSan objects are a cold compile, and the whole suite
# would not fit CI's 30 minutes on two cores. A report fails its test
# (halt_on_error); tests/tsan.supp silences third-party code only.
# Left out: the two tests that fork every rank as a process and must finish
# the whole collective matrix before a 30 s kill, which TSan's slowdown
# overruns on two busy cores. TSan sees races within one process only, and the
# same collectives run under it on threads (Ranks/ShmWorld, Ranks/GlooWorld),
# up to two ranks (three and four add time and the odd-size algorithms' index
# arithmetic, which the Release and ASan runs check, not new threads). The
# two emulated hosts (DataParallelNetns) run the MLP's threads again. The
# training loop runs under TSan in process (tests/train: every strategy's
# ranks as threads of one test), so of the worker-process runs only
# rebalancing and the failure runs stay; the plain MLP through the launcher,
# mpirun, mismatched configs and ZeRO's checkpoint runs (GPT workers) are
# left to the Release and ASan runs. Lazy
# Gloo connections run on 2 and 3 ranks (5-7 add the odd block sizes'
# peers, which the Release run checks, not new threads). The all-reduce
# cache's matrix re-points buffers on one thread per rank; the Release and
# ASan runs check it. The control plane's whole-job scenarios and chaos
# schedules run processes whose threads the launcher tests run already.
TSAN_LAYERS = comm;parallel;data;serve;elastic;train
TSAN_EXCLUDE = ^(ControlPlane\..*|Chaos/ChaosSchedules\..*|(Shm|Gloo)Processes\.CollectivesAcrossForkedRanks|GlooAllreduceCache\.EveryAlgorithmOnEveryWorldSizeAndRebinding|Ranks/(Shm|Gloo)World\.EveryCollectiveMatchesTheReference/[34]|Ranks/GlooLazyWorld\.EveryCollectiveMatchesTheReference/[567]|DataParallelNetns\..*|DataParallel\.(MlpWorkersMatchOneProcess|UnderMpirunTheMpiBackendGivesTheSameResult|MismatchedConfigsAreNamed)|ZeroCheckpoint\..*)$$
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -G Ninja $(SANITIZER_FLAGS) -DGRADMESH_SANITIZE=thread \
	  -DGRADMESH_TEST_LAYERS="$(TSAN_LAYERS)" $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) -E '$(TSAN_EXCLUDE)'

bench: build
	@scripts/install-deps.sh --bench
	python3 bench/engine.py
	python3 bench/comm.py
	python3 bench/ddp.py
	python3 bench/gpt_oracle.py
	python3 bench/gpt_speed.py

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
