# qkv build. `make test` and `make demo` work on a fresh Debian 12 machine:
# both first run .ci/deps, which apt-installs whatever is missing.
#
#   make            library + programs (float32, -O3, OpenMP)
#   make test       both test binaries (float32 tests, float64 gradient checks) and tests/cli/*.sh
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make test-faults       SIGKILL the trainer 100 times while it checkpoints
#   make demo       train the reverse task (examples/train)
#   make bench      benchmarks -> BENCHMARKS.md
#   make MPI=1      the same built with OpenMPI into build/rel-mpi-f32 (mpirun -np N .../train)

CXX      ?= g++
# Build on every core unless -j was given: plain `make test` is the CI command.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
SANITIZE ?= 0
MULTIARCH := $(shell $(CXX) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
# The OpenMP build of OpenBLAS: sgemm shares our OpenMP threads (one pool).
BLAS_INC := /usr/include/$(MULTIARCH)/openblas-openmp
BLAS_LIB := /usr/lib/$(MULTIARCH)/openblas-openmp

ifeq ($(SANITIZE),1)
  MODE   := san
  OPT    := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined -DQKV_NO_ALLOC_CACHE
  LDOPT  := -fsanitize=address,undefined
else
  MODE   := rel
  OPT    := -O3 -march=native -g1
  LDOPT  :=
endif

# MPI=1: data-parallel training over MPI (optim/distributed.cpp with
# -DQKV_MPI), compiled by OpenMPI's mpicxx into its own directory
# (build/rel-mpi-f32); run it with mpirun -np N build/rel-mpi-f32/train ...
MPI ?= 0
ifeq ($(MPI),1)
  CXX  := mpicxx
  MODE := $(MODE)-mpi
  OPT  += -DQKV_MPI
endif

CXXFLAGS := -std=c++17 -Wall -Wextra -Wno-unused-parameter -fno-math-errno -fno-trapping-math -fopenmp $(OPT) -I. -I$(BLAS_INC) -MMD -MP
LDFLAGS  := -fopenmp $(LDOPT) -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB)
LDLIBS   := -lopenblas -lpthread -lm

LIB_SRC  := $(wildcard core/*.cpp autograd/*.cpp nn/*.cpp optim/*.cpp)
TEST_SRC := $(filter-out %_grad.cpp tests/main.cpp,$(wildcard tests/test_*.cpp))
GRAD_SRC := $(wildcard tests/test_*_grad.cpp)

BUILD    ?= build
B32 := $(BUILD)/$(MODE)-f32
B64 := $(BUILD)/$(MODE)-f64
LIB32 := $(B32)/libqkv.a
LIB64 := $(B64)/libqkv.a

EXAMPLES := $(patsubst examples/%.cpp,$(B32)/%,$(wildcard examples/*.cpp))
BENCHES  := $(patsubst bench/%.cpp,$(B32)/%,$(wildcard bench/*.cpp))

.PHONY: all deps test test-faults demo step bench bench-torch lib clean fixtures
# Keep the programs' object files (make would delete them as intermediates).
.SECONDARY:
all: $(LIB32) $(EXAMPLES)

deps:
	@bash .ci/deps

lib: $(LIB32)

# ---- objects: float32 in $(B32), float64 (-DQKV_DOUBLE) in $(B64) ----------
$(B32)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
$(B64)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DQKV_DOUBLE -c $< -o $@

$(LIB32): $(LIB_SRC:%.cpp=$(B32)/%.o)
	@rm -f $@; ar rcs $@ $^
$(LIB64): $(LIB_SRC:%.cpp=$(B64)/%.o)
	@rm -f $@; ar rcs $@ $^

$(B32)/qkv_tests: $(B32)/tests/main.o $(TEST_SRC:%.cpp=$(B32)/%.o) $(LIB32)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)
$(B64)/qkv_grad_tests: $(B64)/tests/main.o $(GRAD_SRC:%.cpp=$(B64)/%.o) $(LIB64)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(B32)/%: $(B32)/examples/%.o $(LIB32)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)
$(B32)/%: $(B32)/bench/%.o $(LIB32)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# ---- running ----------------------------------------------------------------
# The two doctest binaries, then the program-level tests in tests/cli/*.sh
# (they run the example programs, so those are built first).
test: $(B32)/qkv_tests $(B64)/qkv_grad_tests $(EXAMPLES)
	@QKV_BIN=$(B32) bash tests/run_all.sh $(B32)/qkv_tests $(B64)/qkv_grad_tests

# make test also builds the MPI trainer when OpenMPI is installed (.ci/deps
# installs it) and tests/cli/mpi_*.sh run it from $(QKV_MPI_BIN); without
# mpicxx/mpirun those scripts say so and pass.
ifneq ($(MPI),1)
export QKV_MPI_BIN := $(BUILD)/$(MODE)-mpi-f32
.PHONY: mpi-train
test: mpi-train
mpi-train: | deps
	@if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then \
	  env -u MAKEFLAGS -u MFLAGS $(MAKE) --no-print-directory MPI=1 SANITIZE=$(SANITIZE) BUILD=$(BUILD) \
	    $(QKV_MPI_BIN)/train; fi
endif

# The crash-safety test at full length: 100 SIGKILLs while checkpointing
# (make test runs 10 of them).
test-faults: $(B32)/train
	@QKV_BIN=$(B32) QKV_KILL_TRIES=100 QKV_CLI_ONLY=train_kill bash tests/run_all.sh

demo: $(B32)/train
	$(B32)/train --task reverse

step: $(B32)/step_through
	$(B32)/step_through

bench: $(BENCHES)
	bash bench/run.sh $(B32)

bench-torch: $(BENCHES)
	bash bench/run.sh $(B32) --torch

fixtures:
	/usr/bin/python3 tests/pytorch/make_fixtures.py

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
