# qkv build. `make test` and `make demo` work on a fresh Debian 12 machine:
# both first run .ci/deps, which apt-installs whatever is missing.
#
#   make            library + programs (float32, -O3 on a step's path, OpenMP)
#   make test       both test binaries (float32 tests, float64 gradient checks) and tests/cli/*.sh
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make test-faults       SIGKILL the trainer 100 times while it checkpoints
#   make demo       train the reverse task (examples/train)
#   make step       the gradient step-through (examples/step_through)
#   make check-alone   every file of a compile group (below) compiled on its own
#   make V=1 ...    show every compiler command (demo and step build quietly)
#   make bench      benchmarks -> BENCHMARKS.md
#   make ablate     the paper's Table 3 and design claims at laptop scale -> ABLATIONS.md
#                   (ABLATE_ROWS=A one group, ABLATE_SEEDS, ABLATE_STEPS, ABLATE_JOBS)
#   make install PREFIX=/opt/qkv   headers, libqkv.a + lib/pkgconfig/qkv.pc (float32) and
#                   libqkv64.a + qkv64.pc (float64, for gradcheck) (DESTDIR honoured)
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

# MPI=1: data-parallel training over MPI (dist/distributed.cpp with
# -DQKV_MPI, compiled by OpenMPI's mpicxx), linked by mpicxx into its own
# directory (build/rel-mpi-f32); run it with mpirun -np N build/rel-mpi-f32/train ...
# Only dist/distributed.cpp differs with MPI, so every other object is the
# plain build's (build/rel-f32/...), compiled once for both.
MPI ?= 0
PLAIN_MODE := $(MODE)
LINK_CXX := $(CXX)
ifeq ($(MPI),1)
  LINK_CXX := mpicxx
  MODE := $(MODE)-mpi
  MPI_FLAGS := -DQKV_MPI -DOMPI_SKIP_MPICXX
endif

CXXFLAGS := -std=c++17 -Wall -Wextra -Wno-unused-parameter -fno-math-errno -fno-trapping-math -fopenmp $(OPT) -I. -I$(BLAS_INC) -MMD -MP
LDFLAGS  := -fopenmp $(LDOPT) -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB)
# Debian's libpng and libnetpbm (data/image.cpp: PNG, PGM/PPM) and zlib (data/idx.cpp: gzip IDX).
LDLIBS   := -lxsmm -lopenblas -lpcre2-8 -lpng -lnetpbm -lz -lpthread -lrt -ldl -lm

# The library's folders, each including only from itself and those before it
# (tests/cli/layering.sh checks every #include against this order).
LAYERS   := core io autograd nn data optim models generation checkpoint dist explorer trainer
LIB_SRC  := $(wildcard $(LAYERS:%=%/*.cpp))
TEST_SRC := $(filter-out %_grad.cpp tests/main.cpp,$(wildcard tests/test_*.cpp))
GRAD_SRC := $(wildcard tests/test_*_grad.cpp)

BUILD    ?= build
# The prose corpus (make prose): the llama-style GPT's, the ablation's LM rows' and the
# character-level GPT benchmark's text.
PROSE_DIR := $(BUILD)/datasets/prose
B32 := $(BUILD)/$(MODE)-f32
B64 := $(BUILD)/$(MODE)-f64
# Where the float32 objects are: $(B32), except under MPI=1 (above).
O32 := $(BUILD)/$(PLAIN_MODE)-f32
LIB32 := $(B32)/libqkv.a
LIB64 := $(B64)/libqkv.a
PC32  := $(B32)/pkgconfig/qkv.pc

EXAMPLES := $(patsubst examples/%.cpp,$(B32)/%,$(wildcard examples/*.cpp))
BENCHES  := $(patsubst bench/%.cpp,$(B32)/%,$(wildcard bench/*.cpp))

.PHONY: all deps check-alone test test-faults demo step explore bench bench-torch lib clean fixtures install pkgconfig format
# Keep the programs' object files (make would delete them as intermediates).
.SECONDARY:
all: $(LIB32) $(EXAMPLES) $(PC32)

# DEPS=0 installs nothing (the build then fails plainly if a package is
# missing). Open MPI is installed only for what uses it: the MPI build
# (MPI=1) and the goals that build and run the MPI trainer (test, bench).
DEPS ?= 1
DEPS_MPI := $(if $(filter 1,$(MPI))$(filter test test-faults bench bench-torch,$(MAKECMDGOALS)),libopenmpi-dev openmpi-bin)
DEPS_FORMAT := $(if $(filter test format,$(MAKECMDGOALS)),clang-format)
# The explorer page is laid out by Graphviz; make test opens it in Debian's
# headless chromium, driven from Node (tests/browser/).
DEPS_EXPLORER := $(if $(filter test explore,$(MAKECMDGOALS)),graphviz) \
                 $(if $(filter test,$(MAKECMDGOALS)),chromium nodejs npm)
# PyTorch's side of the benchmarks and the parity fixtures: Debian's PyTorch
# and numpy, which a fresh machine does not have.
DEPS_TORCH := $(if $(filter bench-torch fixtures,$(MAKECMDGOALS)),python3-torch python3-numpy)
# The English prose corpus (datasets/make_prose.py) is read out of Debian's
# Python documentation.
DEPS_PROSE := $(if $(filter prose ablate llama,$(MAKECMDGOALS)),python3.11-doc)
DEPS_VIT   := $(if $(filter vit,$(MAKECMDGOALS)),dataset-fashion-mnist)
deps:
	@if [ "$(DEPS)" != 0 ]; then bash .ci/deps $(DEPS_MPI) $(DEPS_FORMAT) $(DEPS_EXPLORER) $(DEPS_TORCH) $(DEPS_PROSE) $(DEPS_VIT); fi

# `make format` formats every C++ file as .clang-format says; make test checks
# it (tests/cli/format.sh).
format: deps
	clang-format -i $$(git ls-files '*.cpp' '*.h')

lib: $(LIB32)

# Code off a training step's path compiles at -O1: the training program's
# bookkeeping (trainer/: flags, data reading into the tables, reports),
# model files' metadata (checkpoint/), the explorer's page, the example
# programs, and the whole float64 build (the gradient checks and the
# explorer's proofs, on small models). -O1 computes the same numbers (no
# fast-math; the tests' tolerances do not move) in about 70% of -O3's
# compile time: trainer/ was a third of a fresh build's compiling. The
# layers a step runs (core, autograd, nn, models, optim, data, generation,
# io, dist) keep -O3, and a training run takes the time it took with -O3
# everywhere (BENCHMARKS.md, "Compile levels"; an inline function of a
# header that is not inlined is kept once, from whichever object the linker
# meets first). An OPT given on the command line (OPT="-O0 -g") and the
# sanitizer build keep their own flags everywhere.
COLD_OPT  := $(if $(and $(filter rel,$(PLAIN_MODE)),$(filter file,$(origin OPT))),-O1)
COLD_DIRS := trainer checkpoint explorer examples
$(foreach b,$(sort $(B32) $(O32)),$(COLD_DIRS:%=$(b)/%/%.o)) $(B64)/%.o: LEVEL := $(COLD_OPT)

# ---- groups: GROUP_SIZE files compiled as one translation unit -------------
# The test files and every folder of the library (float32 and float64; but
# dist/, which the MPI build compiles with mpicxx) compile GROUP_SIZE files
# of a folder at a time: each group is one translation unit, e.g. $(B64)/trainer/group_2.cpp,
# a list of #include lines that make writes (and rewrites only when the
# list changes), so that the headers they share (the trainer's, doctest's,
# JSON's) are parsed and instantiated once a group, not once a file: ten
# test files compile in 8.8 s of CPU as one unit and 18.9 s as ten, eight of
# trainer/ in 9.7 s and 27.7 s. A file's helpers in `namespace {` share one
# scope with the other files of its group, so each file gives its helpers
# names of its own (a name defined twice stops the build, but two overloads
# would meet silently: CONTRIBUTING.md, "Tests"); the families'
# rows (trainer/family_*.cpp), whose helpers share their names by design
# (build, check, defaults), compile one a unit. Editing one file recompiles
# its group.
GROUP_SIZE := 10
# $(call groups_of,FILES): 1 2 ... N, a number a group; $(call group_files,I,FILES): group I's files.
groups_of = $(shell seq 1 $$(( ($(words $(1)) + $(GROUP_SIZE) - 1) / $(GROUP_SIZE) )))
group_files = $(wordlist $(shell echo $$(( ($(1) - 1) * $(GROUP_SIZE) + 1 ))),$(shell echo $$(( $(1) * $(GROUP_SIZE) ))),$(2))
# $(call write_group,FILES): writes $@, a line `#include "FILE"` a file, unless it says so already.
define write_group
	@mkdir -p $(dir $@)
	@printf '#include "%s"\n' $(1) > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi
endef
# $(call groups,PREFIX,FILES,FLAGS): the rules of PREFIX_1.cpp/.o ... (static
# pattern rules: only these names are groups, so that make's built-in rules
# cannot chain another name to one), and PREFIX_OBJ, their objects.
define groups
$(1)_OBJ := $$(patsubst %,$(1)_%.o,$$(call groups_of,$(2)))
$$($(1)_OBJ:.o=.cpp): $(1)_%.cpp: FORCE
	$$(call write_group,$$(call group_files,$$*,$(2)))
$$($(1)_OBJ): $(1)_%.o: $(1)_%.cpp | deps
	$$(CXX) $$(CXXFLAGS) $(3) -c $$< -o $$@
endef
.PHONY: FORCE
# A group keeps its folder's level (-O3 on a step's path, COLD_OPT off it).
# Grouping the float32 layers a step runs changes no number (no fast-math,
# no contraction under -std=c++17) and no training run's time (BENCHMARKS.md,
# "Compile levels": 0.99-1.01 in interleaved pairs); it saves about 90 s of
# CPU a fresh build (a file's headers cost ~1 s of it).
GROUP_DIRS32 := $(filter-out dist,$(LAYERS))
FAMILY_SRC := $(filter trainer/family_%.cpp,$(LIB_SRC))
GROUPED_SRC := $(filter-out $(FAMILY_SRC),$(filter $(GROUP_DIRS32:%=%/%),$(LIB_SRC)))
UNGROUPED_SRC := $(filter-out $(GROUPED_SRC),$(LIB_SRC))
$(foreach d,$(GROUP_DIRS32),$(eval $(call groups,$(O32)/$(d)/group,$(filter $(d)/%,$(GROUPED_SRC)),$$(LEVEL))))
$(foreach d,$(LAYERS),$(eval $(call groups,$(B64)/$(d)/group,$(filter-out $(FAMILY_SRC),$(filter $(d)/%,$(LIB_SRC))),-DQKV_DOUBLE $$(LEVEL))))
LIB_GROUP32 := $(foreach d,$(GROUP_DIRS32),$($(O32)/$(d)/group_OBJ))
LIB_GROUP64 := $(foreach d,$(LAYERS),$($(B64)/$(d)/group_OBJ))

# ---- objects: float32 in $(B32), float64 (-DQKV_DOUBLE) in $(B64) ----------
$(B32)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(LEVEL) -c $< -o $@
ifeq ($(MPI),1)
$(O32)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(LEVEL) -c $< -o $@
$(B32)/dist/distributed.o: dist/distributed.cpp | deps
	@mkdir -p $(dir $@)
	mpicxx $(CXXFLAGS) $(MPI_FLAGS) -c $< -o $@
LIB32_OBJ := $(patsubst %.cpp,$(O32)/%.o,$(filter-out dist/distributed.cpp,$(UNGROUPED_SRC))) \
             $(LIB_GROUP32) $(B32)/dist/distributed.o
else
LIB32_OBJ := $(UNGROUPED_SRC:%.cpp=$(B32)/%.o) $(LIB_GROUP32)
endif
$(B64)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DQKV_DOUBLE $(LEVEL) -c $< -o $@

# The tests' own code (tests/*.cpp) is compiled with -Og: it calls the
# library (-O3 on a step's path), and its long test functions cost -O3 twice the
# compile time for no speed that matters (tests/test_train.cpp: 16 s of CPU at
# -O3, 9 s at -Og). The sanitizer build keeps its own flags.
TEST_OPT := $(if $(filter rel,$(PLAIN_MODE)),-Og)
$(O32)/tests/%.o: tests/%.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(TEST_OPT) -c $< -o $@
$(B64)/tests/%.o: tests/%.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DQKV_DOUBLE $(LEVEL) $(TEST_OPT) -c $< -o $@

$(LIB32): $(LIB32_OBJ)
	@rm -f $@; ar rcs $@ $^
$(LIB64): $(FAMILY_SRC:%.cpp=$(B64)/%.o) $(LIB_GROUP64)
	@rm -f $@; ar rcs $@ $^

# The tests' groups: $(O32)/tests/group_N and $(B64)/tests/grad_group_N.
$(eval $(call groups,$(O32)/tests/group,$(TEST_SRC),$$(TEST_OPT)))
$(eval $(call groups,$(B64)/tests/grad_group,$(GRAD_SRC),-DQKV_DOUBLE $$(LEVEL) $$(TEST_OPT)))
# `make check-alone`: every file that compiles in a group compiled on its own
# (-fsyntax-only), as a group never does: an #include a file lacks, hidden
# by an earlier file of its group, shows here before the groups shift.
ALONE32 := $(GROUPED_SRC) $(TEST_SRC)
ALONE64 := $(filter-out $(FAMILY_SRC),$(LIB_SRC)) $(GRAD_SRC)
.PHONY: check-alone $(ALONE32:%=alone32/%) $(ALONE64:%=alone64/%)
check-alone: $(ALONE32:%=alone32/%) $(ALONE64:%=alone64/%)
	@echo "$(words $(ALONE32)) float32 and $(words $(ALONE64)) float64 files compile on their own"
$(ALONE32:%=alone32/%): alone32/%: | deps
	@$(CXX) $(filter-out -MMD -MP,$(CXXFLAGS)) -fsyntax-only $*
$(ALONE64:%=alone64/%): alone64/%: | deps
	@$(CXX) $(filter-out -MMD -MP,$(CXXFLAGS)) -DQKV_DOUBLE -fsyntax-only $*

$(B32)/qkv_tests: $(O32)/tests/main.o $($(O32)/tests/group_OBJ) $(LIB32)
	$(LINK_CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)
$(B64)/qkv_grad_tests: $(B64)/tests/main.o $($(B64)/tests/grad_group_OBJ) $(LIB64)
	$(LINK_CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# ---- installing; pkg-config -------------------------------------------------
# `make install PREFIX=/opt/qkv` (default /usr/local; DESTDIR is prepended to
# every path written, not to the paths inside qkv.pc) installs
#   include/qkv/<folder>/*.h for every LAYERS folder (programs #include "models/transformer.h")
#   lib/libqkv.a                               (the float32 release build)
#   lib/pkgconfig/qkv.pc                       (every compile and link flag)
#   lib/libqkv64.a, lib/pkgconfig/qkv64.pc     (the float64 build, -DQKV_DOUBLE: gradcheck at ~1e-6)
# and builds nothing that is already built. `make` also writes
# $(B32)/pkgconfig/qkv.pc, the same flags pointing at this tree, for use
# without installing. Both come from qkv.pc.in. With SANITIZE=1 the
# sanitizer build is installed, and its .pc carries the sanitizer flags.
PREFIX  ?= /usr/local
QKV_VERSION := 0.1.0
# The instruction set the library is compiled for (-march=native: the
# building machine's), recorded in qkv.pc; core/cpu_check.cpp refuses to
# start on a CPU without it.
ISA_MACROS := $(shell $(CXX) $(filter -march=%,$(OPT)) -dM -E -x c++ /dev/null 2>/dev/null)
BUILD_ISA  := $(if $(findstring __AVX512F__,$(ISA_MACROS)),avx512f,$(if $(findstring __AVX2__,$(ISA_MACROS)),avx2,x86-64))
ifeq ($(SANITIZE),1)
  PC_KIND    := sanitizer (ASan + UBSan, -O1)
  PC_FLAGS   := -fsanitize=address,undefined -DQKV_NO_ALLOC_CACHE
  PC_LDFLAGS := -fsanitize=address,undefined
else
  PC_KIND    := release
  PC_FLAGS   :=
  PC_LDFLAGS :=
endif
# $(call write_pc,prefix,includedir,libdir,output file[,64]): with 64, the
# float64 library's qkv64.pc (-lqkv64, -DQKV_DOUBLE).
define write_pc
	@mkdir -p $(dir $(4))
	sed -e 's|@PREFIX@|$(1)|' -e 's|@INCLUDEDIR@|$(2)|' -e 's|@LIBDIR@|$(3)|' \
	    -e 's|@BLAS_INC@|$(BLAS_INC)|' -e 's|@BLAS_LIB@|$(BLAS_LIB)|' \
	    -e 's|@VERSION@|$(QKV_VERSION)|' -e 's|@KIND@|$(PC_KIND)|' -e 's|@ISA@|$(BUILD_ISA)|' \
	    -e 's|@NAME@|qkv$(5)|g' -e 's|@BITS@|$(if $(5),64,32)|g' -e 's|@REAL@|$(if $(5),double,float)|' \
	    -e 's| @EXTRA_FLAGS@|$(if $(5), -DQKV_DOUBLE)$(if $(PC_FLAGS), $(PC_FLAGS))|' \
	    -e 's| @EXTRA_LDFLAGS@|$(if $(PC_LDFLAGS), $(PC_LDFLAGS))|' qkv.pc.in > $(4).tmp
	@mv $(4).tmp $(4)
endef

pkgconfig: $(LIB32) $(PC32)
$(PC32): qkv.pc.in Makefile
	$(call write_pc,$(CURDIR),$${prefix},$(abspath $(B32)),$@)

INSTALL_DIR = $(DESTDIR)$(abspath $(PREFIX))
install: $(LIB32) $(LIB64) qkv.pc.in
	@test -n "$(PREFIX)" || { echo "install: PREFIX is empty"; exit 1; }
	for d in $(LAYERS); do \
	  install -d $(INSTALL_DIR)/include/qkv/$$d && install -m 644 $$d/*.h $(INSTALL_DIR)/include/qkv/$$d/ || exit 1; \
	done
	install -d $(INSTALL_DIR)/lib/pkgconfig
	install -m 644 $(LIB32) $(INSTALL_DIR)/lib/libqkv.a
	$(call write_pc,$(abspath $(PREFIX)),$${prefix}/include/qkv,$${prefix}/lib,$(INSTALL_DIR)/lib/pkgconfig/qkv.pc)
	install -m 644 $(LIB64) $(INSTALL_DIR)/lib/libqkv64.a
	$(call write_pc,$(abspath $(PREFIX)),$${prefix}/include/qkv,$${prefix}/lib,$(INSTALL_DIR)/lib/pkgconfig/qkv64.pc,64)

$(B32)/%: $(O32)/examples/%.o $(LIB32)
	$(LINK_CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)
# The float64 step_through and train write the explorer pages
# (step_through --html and train --explain in the float32 build run them):
# their finite differences must be float64.
EXPLORER64 := $(B64)/step_through $(B64)/train
$(EXPLORER64): $(B64)/%: $(B64)/examples/%.o $(LIB64)
	$(LINK_CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)
# The page's script, style and vendored library are assembled into the library.
EXPLORER_ASSETS := explorer/page.js explorer/page.css explorer/vendor/svg-pan-zoom.min.js \
                   explorer/vendor/svg-pan-zoom.LICENSE
$($(O32)/explorer/group_OBJ) $($(B64)/explorer/group_OBJ): $(EXPLORER_ASSETS)
$(B32)/%: $(O32)/bench/%.o $(LIB32)
	$(LINK_CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# ---- running ----------------------------------------------------------------
# The two doctest binaries, then the program-level tests in tests/cli/*.sh
# (they run the example programs, so those are built first).
test: $(B32)/qkv_tests $(B64)/qkv_grad_tests $(EXAMPLES) $(EXPLORER64) $(PC32)
	@QKV_BIN=$(B32) bash tests/run_all.sh $(B32)/qkv_tests $(B64)/qkv_grad_tests

# make test also builds the MPI trainer when OpenMPI is installed (.ci/deps
# installs it) and tests/cli/mpi_*.sh run it from $(QKV_MPI_BIN); without
# mpicxx/mpirun those scripts say so and pass.
ifneq ($(MPI),1)
export QKV_MPI_BIN := $(BUILD)/$(MODE)-mpi-f32
.PHONY: mpi-train
test bench bench-torch: mpi-train
# The plain objects first: the MPI build links them (only dist/distributed.o is its own).
mpi-train: $(LIB32) $(B32)/examples/train.o | deps
	@if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then \
	  env -u MAKEFLAGS -u MFLAGS $(MAKE) --no-print-directory MPI=1 SANITIZE=$(SANITIZE) BUILD=$(BUILD) \
	    $(QKV_MPI_BIN)/train; fi
endif

# The crash-safety test at full length: 100 SIGKILLs while checkpointing
# (make test runs 10 of them).
test-faults: $(B32)/train
	@QKV_BIN=$(B32) QKV_KILL_TRIES=100 QKV_CLI_ONLY=train_kill bash tests/run_all.sh

# `make demo` and `make step` build their program quietly, one line instead
# of the compiler's (warnings and errors still show; `make V=1 step` shows
# every command), so that the program's output is what a learner reads.
# The inner make gets the command line's variables (MAKEOVERRIDES) and,
# like mpi-train's, its own jobs.
quiet_build = @echo "building $(1) ..."; \
	env -u MAKEFLAGS -u MFLAGS $(MAKE) --no-print-directory $(if $(filter 1,$(V)),,-s) \
	  $(MAKEOVERRIDES) $(1)

demo:
	$(call quiet_build,$(B32)/train)
	$(B32)/train --task reverse

step:
	$(call quiet_build,$(B32)/step_through)
	$(B32)/step_through

# The gradient explorer on the step-through's examples: one HTML file (docs/explorer.md).
# It also builds the float64 train, so that `train --load M --explain TEXT --html
# PAGE` (README.md) works after make demo and make explore.
explore: $(B32)/step_through $(B32)/train $(EXPLORER64)
	$(B32)/step_through --html $(BUILD)/explorer.html

# bench/run.sh files its tables under the instruction set qkv.pc records (bench/machine.sh).
bench: $(BENCHES) $(PC32)
	BENCH_MPI_BUILD=$(QKV_MPI_BIN) bash bench/run.sh $(B32)

bench-torch: $(BENCHES) $(B32)/train $(PC32) | $(PROSE_DIR)/MANIFEST.json
	BENCH_MPI_BUILD=$(QKV_MPI_BIN) bash bench/run.sh $(B32) --torch

# Table 3 of the paper and its design claims, each row a fixed number of
# steps of build/rel-f32/train over several seeds (tools/ablate.py: 25 rows on
# the translation task; tools/ablate_lm.py: 13 rows of a GPT on the prose
# corpus, which this builds first, in bits per byte; tools/ablate_reverse.py:
# 3 rows of positions on the reverse task's longer set, ABLATE_ROWS=R; 123 runs
# with the defaults, two at once; ABLATE_ROWS=L,T,M runs the GPT rows only). Results go to runs/ablate/<row>/<seed>/,
# and a second start resumes from them; the report is ABLATIONS.md, the plots
# docs/ablations/*.svg. Only complete rows (every seed trained to its end) get
# figures and verdicts, and the committed report is replaced only by one
# holding at least its seeds, steps and complete rows: a trial such as
# ABLATE_STEPS=10, or a run with crashes, leaves it as it is and says so
# (python3 tools/ablate.py ... --report ABLATIONS.md writes it anyway; --help
# gives the rules). Exits 1 when any training crashed or was refused.
.PHONY: ablate
ABLATE_ROWS  ?= all
ABLATE_SEEDS ?= 3
ABLATE_STEPS ?= 1000
ABLATE_JOBS  ?= 2
ablate: $(B32)/train
	python3 tools/ablate.py --bin $(B32)/train --rows $(ABLATE_ROWS) --seeds $(ABLATE_SEEDS) \
	  --steps $(ABLATE_STEPS) --jobs $(ABLATE_JOBS) \
	  --command "make ablate ABLATE_ROWS=$(ABLATE_ROWS) ABLATE_SEEDS=$(ABLATE_SEEDS) ABLATE_STEPS=$(ABLATE_STEPS) ABLATE_JOBS=$(ABLATE_JOBS)"

# The English prose corpus of the text families (about 7 MB of paragraphs from
# python3.11-doc, which this installs): build/datasets/prose/{train,valid}.txt
# and MANIFEST.json (the package version and every file's sha256).
.PHONY: prose
prose: $(PROSE_DIR)/MANIFEST.json
$(PROSE_DIR)/MANIFEST.json: | deps
	python3 datasets/make_prose.py --out $(PROSE_DIR)

# Issue 39 item 3: bf16 against float32 over seeds (the demo and a char GPT on
# the prose corpus), written into BENCHMARKS.md; losses, not times, so it can
# run beside other work. bench/bf16_seeds.py says what it runs.
.PHONY: bf16-seeds
bf16-seeds: $(B32)/train | $(PROSE_DIR)/MANIFEST.json
	/usr/bin/python3 bench/bf16_seeds.py $(B32)

# BERT's labelled text set from this machine's apt package lists (run
# apt-get update first): build/datasets/packages/{train,valid,test}.tsv
# ("description<TAB>section"), pretrain.txt and info.json (the lists' sha256
# and dates); datasets/packages/README.md says which sections and why.
.PHONY: packages
PACKAGES_DIR := $(BUILD)/datasets/packages
packages: $(PACKAGES_DIR)/info.json
$(PACKAGES_DIR)/info.json:
	@ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1 || { echo "packages: no apt lists yet: apt-get update"; \
	  $$([ "$$(id -u)" -ne 0 ] && echo sudo) apt-get update -q; }
	python3 datasets/make_packages.py --out $(PACKAGES_DIR)

# BERT on those descriptions: pre-trained by masked language modelling on the
# training split's text (BPE tokens learned from it), then fine-tuned to name
# a description's section from the pre-trained file (--init-from), and asked.
# docs/bert.md has the figures; `make bert-experiment` (tools/bert_packages.py)
# measures whether pre-training helps, on 500 and 2,000 examples, 3 seeds.
# Both pre-train on windows of the text (--no-line-by-line): one description
# a sequence, at these settings, learned no more than the commonest token;
# with 128 lines a batch and lr 5e-4 it pays off as windows do, at twice the
# step (docs/bert.md).
.PHONY: bert bert-experiment
BERT_ARCH := --d-model 128 --heads 4 --layers 4 --d-ff 512
BERT_PRETRAIN_STEPS ?= 4000
BERT_FINETUNE_STEPS ?= 5000
bert: $(PACKAGES_DIR)/info.json
	$(call quiet_build,$(B32)/train)
	$(B32)/train --model bert --objective mlm --data $(PACKAGES_DIR)/pretrain.txt --tokens bpe \
	  --no-line-by-line --bpe-vocab 2048 $(BERT_ARCH) --context 64 --batch 32 --lr 1e-3 --warmup 400 \
	  --steps $(BERT_PRETRAIN_STEPS) --eval-every 1000 --threads 2 --out runs/bert-mlm
	$(B32)/train --load runs/bert-mlm/model.safetensors --ask "a [MASK] game for children"
	$(B32)/train --init-from runs/bert-mlm/model.safetensors --data $(PACKAGES_DIR)/train.tsv \
	  --valid $(PACKAGES_DIR)/valid.tsv --batch 32 --lr 5e-4 --warmup 500 --steps $(BERT_FINETUNE_STEPS) \
	  --eval-every 1000 --threads 2 --out runs/bert
	$(B32)/train --load runs/bert/model.safetensors --ask "command-line tool to edit PDF files"
bert-experiment: $(PACKAGES_DIR)/info.json
	$(call quiet_build,$(B32)/train)
	$(call quiet_build,$(B32)/bow_classify)
	python3 tools/bert_packages.py --bin $(B32) --data $(PACKAGES_DIR) --out runs/bert-packages

# Question answering on Debian's changelogs (datasets/make_changelog_qa.py:
# SQuAD-format questions from templates over the installed packages'
# changelog entries, split by source package): the rule-based baseline, then
# BERT with --objective qa from scratch, scored on the held-out split and the
# test split once, and asked. docs/qa.md has the figures.
.PHONY: qa
QA_DIR := $(BUILD)/datasets/changelog-qa
QA_STEPS ?= 3000
QA_ARCH := --d-model 128 --heads 4 --layers 4 --d-ff 512
qa: $(QA_DIR)/easy/MANIFEST.json
	$(call quiet_build,$(B32)/train)
	python3 datasets/make_changelog_qa.py --baseline $(QA_DIR)/easy/valid.json
	$(B32)/train --model bert --data $(QA_DIR)/easy/train.json --valid $(QA_DIR)/easy/valid.json \
	  --bpe-vocab 2048 $(QA_ARCH) --context 128 --doc-stride 32 --batch 32 --lr 1e-3 --warmup 300 \
	  --steps $(QA_STEPS) --eval-every 1000 --threads 2 --out runs/qa
	$(B32)/train --load runs/qa/model.safetensors --eval-only --valid $(QA_DIR)/easy/test.json
	$(B32)/train --load runs/qa/model.safetensors --ask "$$(cat $(QA_DIR)/easy/question.txt)" \
	  --passage $(QA_DIR)/easy/passage.txt
$(QA_DIR)/easy/MANIFEST.json:
	python3 datasets/make_changelog_qa.py --out $(QA_DIR)/easy --set easy
	python3 datasets/make_changelog_qa.py --out $(QA_DIR)/hard --set hard

# T5 on the same descriptions: the encoder-decoder with T5's block (--preset
# t5: relative positions, RMSNorm, no biases) pre-trained by span corruption
# on the training split's text, asked to fill in a span, then fine-tuned to
# answer a description with its section's name as text (--init-from), and
# asked. docs/t5.md has the figures; `make t5-experiment`
# (tools/t5_packages.py) measures whether pre-training helps, on BERT's
# subsets (500 and 2,000 examples, 3 seeds).
.PHONY: t5 t5-experiment
T5_ARCH := --preset t5 --d-model 128 --heads 4 --layers 2 --d-ff 512
T5_PRETRAIN_STEPS ?= 4000
T5_FINETUNE_STEPS ?= 5000
t5: $(PACKAGES_DIR)/info.json
	$(call quiet_build,$(B32)/train)
	$(B32)/train --model seq2seq --objective span --data $(PACKAGES_DIR)/pretrain.txt --tokens bpe \
	  --bpe-vocab 2048 $(T5_ARCH) --context 64 --batch 32 --lr 1e-3 --warmup 400 \
	  --steps $(T5_PRETRAIN_STEPS) --eval-every 1000 --threads 2 --out runs/t5-span
	$(B32)/train --load runs/t5-span/model.safetensors --ask "a <extra_id_0> for children"
	$(B32)/train --init-from runs/t5-span/model.safetensors --data $(PACKAGES_DIR)/train.tsv \
	  --valid $(PACKAGES_DIR)/valid.tsv --batch 32 --lr 5e-4 --warmup 500 --steps $(T5_FINETUNE_STEPS) \
	  --eval-every 1000 --threads 2 --out runs/t5
	$(B32)/train --load runs/t5/model.safetensors --ask "command-line tool to edit PDF files"
t5-experiment: $(PACKAGES_DIR)/info.json
	$(call quiet_build,$(B32)/train)
	python3 tools/t5_packages.py --bin $(B32) --data $(PACKAGES_DIR) --out runs/t5-packages \
	  --flags "--preset t5"

# The llama-style GPT (RoPE, RMSNorm, SwiGLU, grouped-query attention, no
# biases: --preset llama) on byte-level BPE tokens it learns from the prose
# corpus (built first), then asked to continue a sentence. Its file holds the
# tokenizer: `train --load runs/llama/model.safetensors --ask TEXT` works from
# any folder. About 4 minutes on 2 cores (README.md, "After 2017").
.PHONY: llama
LLAMA_STEPS ?= 2000
llama: $(PROSE_DIR)/MANIFEST.json
	$(call quiet_build,$(B32)/train)
	$(B32)/train --model gpt --preset llama --tokens bpe --bpe-vocab 1024 \
	  --data $(PROSE_DIR)/train.txt --valid $(PROSE_DIR)/valid.txt --format text \
	  --d-model 128 --heads 4 --layers 4 --d-ff 512 --context 128 --batch 16 \
	  --steps $(LLAMA_STEPS) --eval-every 500 --out runs/llama
	$(B32)/train --load runs/llama/model.safetensors --ask "The function returns" --max-new 60

# The Vision Transformer on Fashion-MNIST (Debian's dataset-fashion-mnist,
# which this installs): 7x7 patches, width 64, 6 layers, training images
# shifted by up to a pixel and mirrored (--augment crop:1,flip) in place of
# dropout, about 10 minutes on 2 cores; then the test images scored once and
# one answered from a PNG. The products are bf16 where the CPU has
# AVX512-BF16 (33 ms a step: 16,000 steps in 9 minutes) and float32
# elsewhere, with fewer steps (11,500: 9.4-9.7 minutes at the 49-50 ms of
# an AVX2-only machine, checks included). docs/vit.md has the figures and the
# PyTorch side-by-side (tools/vit_torch.py).
.PHONY: vit
FASHION_MNIST := /usr/share/datasets/fashion-mnist
FASHION_LABELS := T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot
VIT_BF16 := $(findstring __AVX512BF16__,$(ISA_MACROS))
VIT_PRECISION ?= $(if $(VIT_BF16),bf16,fp32)
VIT_STEPS ?= $(if $(VIT_BF16),16000,11500)
VIT_SEED ?= 1
VIT_OUT ?= runs/vit
vit: | deps
	$(call quiet_build,$(B32)/train)
	$(B32)/train --model vit --data $(FASHION_MNIST) --label-names "$(FASHION_LABELS)" \
	  --patch 7 --d-model 64 --heads 4 --layers 6 --d-ff 256 --batch 128 --lr 2e-3 \
	  --dropout 0 --augment crop:1,flip --optimizer adamw --weight-decay 0.05 --label-smoothing 0.1 \
	  --precision $(VIT_PRECISION) --warmup 500 --steps $(VIT_STEPS) --eval-every 2000 \
	  --seed $(VIT_SEED) --threads 2 --out $(VIT_OUT)
	@{ dpkg-query -W dataset-fashion-mnist; cd $(FASHION_MNIST) && sha256sum *.gz; } > $(VIT_OUT)/dataset.txt
	python3 tools/idx_to_png.py $(FASHION_MNIST)/t10k-images-idx3-ubyte.gz 0 $(VIT_OUT)/test0.png
	$(B32)/train --load $(VIT_OUT)/model.safetensors --ask $(VIT_OUT)/test0.png

fixtures: | deps
	/usr/bin/python3 tests/pytorch/make_fixtures.py

clean:
	rm -rf $(BUILD)

# ---- fuzzing (on demand, not part of test) ------------------------------------
# `make fuzz` builds fuzz/fuzz_safetensors.cpp with Debian's clang and libFuzzer
# under ASan + UBSan (installing clang, its runtimes and libomp on first use),
# then runs FUZZ_RUNS executions from the seed corpus fuzz/corpus/safetensors
# and stops by itself (also after FUZZ_TIME seconds, 0 = no limit). New inputs
# go to $(BUILD)/fuzz/corpus; a crash is saved as $(BUILD)/fuzz/crash-*.
FUZZ_RUNS ?= 1000000
FUZZ_TIME ?= 0
FUZZ_CXX  ?= clang++
FUZZ_DIR  := $(BUILD)/fuzz
FUZZ_OPT  := -std=c++17 -O1 -g -fopenmp -fno-omit-frame-pointer -I. -I$(BLAS_INC) \
             -fsanitize=address,undefined -fno-sanitize-recover=undefined -DQKV_NO_ALLOC_CACHE
FUZZ_LIB  := io/safetensors.cpp io/safetensors_write.cpp io/json_bounded.cpp core/tensor.cpp core/shape.cpp core/allocator.cpp \
             core/pool.cpp core/parallel.cpp core/generator.cpp core/blas.cpp
.PHONY: fuzz fuzz-deps
fuzz-deps:
	@bash .ci/deps clang libclang-rt-14-dev libomp-dev
$(FUZZ_DIR)/%.o: %.cpp | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_OPT) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_DIR)/fuzz_safetensors: $(FUZZ_DIR)/fuzz/fuzz_safetensors.o $(FUZZ_LIB:%.cpp=$(FUZZ_DIR)/%.o)
	$(FUZZ_CXX) $(FUZZ_OPT) -fsanitize=fuzzer $^ -o $@ -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) $(LDLIBS)
fuzz: $(FUZZ_DIR)/fuzz_safetensors
	@mkdir -p $(FUZZ_DIR)/corpus
	cd $(FUZZ_DIR) && ./fuzz_safetensors -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_TIME) \
	  -malloc_limit_mb=64 -print_final_stats=1 -dict=$(CURDIR)/fuzz/safetensors.dict \
	  corpus $(CURDIR)/fuzz/corpus/safetensors

# `make fuzz-idx`: the same for fuzz/fuzz_idx.cpp, the IDX reader (data/idx.cpp,
# through zlib), from the seeds fuzz/corpus/idx (new inputs: $(BUILD)/fuzz/corpus-idx).
.PHONY: fuzz-idx
$(FUZZ_DIR)/fuzz_idx: $(FUZZ_DIR)/fuzz/fuzz_idx.o $(FUZZ_DIR)/data/idx.o
	$(FUZZ_CXX) $(FUZZ_OPT) -fsanitize=fuzzer $^ -o $@ -lz
fuzz-idx: $(FUZZ_DIR)/fuzz_idx
	@mkdir -p $(FUZZ_DIR)/corpus-idx
	cd $(FUZZ_DIR) && ./fuzz_idx -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_TIME) \
	  -malloc_limit_mb=64 -print_final_stats=1 corpus-idx $(CURDIR)/fuzz/corpus/idx

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
