# forge Makefile. Targets:
#   all (default) build/forge, the CPU-only CLI       test     build + run the CPU test suite
#   cuda          build/cuda/forge with the CUDA backend (needs nvcc) + GPU test binary
#   test-gpu      run the GPU parity suite (needs a GPU)  bench  CPU benchmarks
#   asan          tests under AddressSanitizer + UBSan     ptxas   CUDA resource report check
#   lab           build/cuda/forge-lab: the kernel laboratory (lab/), linked against the CUDA library
#   fuzz          build the libFuzzer targets (clang, ASan + UBSan) and run each for FUZZ_SECONDS
#   fuzz-build    only build them (build/fuzz/fuzz_*)     fuzz-coverage  line coverage of the fuzz corpora
#   clean
#
# CUBLAS=0 (with cuda / test-gpu / ptxas) builds without cuBLAS: -DFORGE_NO_CUBLAS,
# no -lcublas/-lcublasLt, into build/cuda-nocublas/ (so it never mixes objects
# with the default build/cuda/). forge's own kernels alone run the trainer;
# --matmul cublas is refused, auto falls back to forge, and the bench
# cells that need cuBLAS are skipped with the reason printed.
#
# ARCH trades portability for speed: the default `native` uses every vector
# unit of this CPU; ARCH=x86-64-v3 (AVX2 + FMA) builds a binary that runs on
# any recent x86-64 machine (used for binaries carried to the GPU machine).
ARCH     ?= native
CC       ?= cc
NVCC     ?= nvcc
OPT      ?= -O3
# The commit and dirty flag are built in: benchmark provenance needs them on
# machines that receive the binary without the git history.
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
GIT_DIRTY  := $(shell git diff --quiet HEAD 2>/dev/null && echo 0 || echo 1)
CFLAGS   := -std=c11 $(OPT) -march=$(ARCH) -fopenmp -Wall -Wextra -D_GNU_SOURCE -g $(EXTRA_CFLAGS) \
            -DFORGE_GIT_COMMIT='"$(GIT_COMMIT)"' -DFORGE_GIT_DIRTY=$(GIT_DIRTY)
LDLIBS   := -lcjson -lpcre2-8 -lm
# MPI=1 builds the CPU binaries with the MPI communicator (src/runtime/comm.c, docs/distributed.md):
# `mpirun -np N forge train` then runs N data-parallel ranks. The default is 1 where mpicc is found (Open MPI:
# libopenmpi-dev), else 0; a build without it trains on one device as before and refuses to run as one of several
# ranks. The CUDA build links MPI only when asked (CUDA_MPI=1): its binaries are carried to GPU machines that
# may have no libmpi.
MPICC    ?= mpicc
MPI      ?= $(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1 || echo 0)
CUDA_MPI ?= 0
# NCCL=1 (with CUDA_MPI=1): CUDA buffers go through NCCL instead of being staged through host memory for MPI.
NCCL     ?= 0
ifneq ($(MPI)$(CUDA_MPI),00)
MPI_CFLAGS_1 := -DFORGE_WITH_MPI $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show 2>/dev/null | \
                tr ' ' '\n' | grep '^-I' | tr '\n' ' ')
MPI_LIBS_1   := $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -show 2>/dev/null | \
                tr ' ' '\n' | grep -E '^-(L|l|Wl)' | tr '\n' ' ') -lpthread
endif
CPU_MPI_CFLAGS  := $(if $(filter 1,$(MPI)),$(MPI_CFLAGS_1))
CPU_MPI_LIBS    := $(if $(filter 1,$(MPI)),$(MPI_LIBS_1))
CUDA_MPI_CFLAGS := $(if $(filter 1,$(CUDA_MPI)),$(MPI_CFLAGS_1))
CUDA_MPI_LIBS   := $(if $(filter 1,$(CUDA_MPI)),$(MPI_LIBS_1))
ifeq ($(NCCL),1)
ifneq ($(CUDA_MPI),1)
$(error NCCL=1 needs CUDA_MPI=1: MPI starts the ranks and hands out NCCL's id)
endif
CUDA_MPI_CFLAGS += -DFORGE_WITH_NCCL
CUDA_MPI_LIBS   += -lnccl
endif
CUDA_HOME ?= /usr/local/cuda
NVFLAGS  := -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -lineinfo -std=c++17 \
            -Xcompiler -fopenmp,-Wall,-Wextra $(EXTRA_NVFLAGS)
BUILD    := build
CUBLAS   ?= 1
ifeq ($(CUBLAS),0)
CUDA_OUT := $(BUILD)/cuda-nocublas
CUBLAS_DEF := -DFORGE_NO_CUBLAS
CUBLAS_LIBS :=
else
CUDA_OUT := $(BUILD)/cuda
CUBLAS_DEF :=
CUBLAS_LIBS := -lcublasLt -lcublas
endif
NVFLAGS  += $(CUBLAS_DEF)

CORE_SRC := $(shell find src -name '*.c' -not -path 'src/backend/cuda/*' -not -name 'backend_nocuda.c' | sort)
CUDA_SRC := $(shell find src -name '*.cu' 2>/dev/null | sort)
# The CPU test binary also walks the op list (tests/test_op_walker.c) with the GPU suite's walker, which is plain C.
TEST_SRC := $(shell find tests -name '*.c' | sort) tests_gpu/gpu_test.c tests_gpu/op_walker.c
LAB_C_SRC := $(shell find lab -name '*.c' 2>/dev/null | sort)
LAB_CU_SRC := $(shell find lab -name '*.cu' 2>/dev/null | sort)

CPU_OBJ  := $(CORE_SRC:%.c=$(BUILD)/cpu/%.o) $(BUILD)/cpu/src/backend/backend_nocuda.o
CUDA_HOST_OBJ := $(CORE_SRC:%.c=$(CUDA_OUT)/%.o)
CUDA_OBJ := $(CUDA_SRC:%.cu=$(CUDA_OUT)/%.o)

.PHONY: all cpu cuda lab test test-gpu bench asan ptxas clean reproduce fuzz fuzz-build fuzz-coverage FORCE
all: cpu
cpu: $(BUILD)/forge

$(BUILD)/cpu/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CPU_MPI_CFLAGS) -MMD -MP -c $< -o $@

# The communicator's objects depend on MPI=0/1: a stamp holding the value rebuilds them when it changes.
$(BUILD)/cpu/.mpi-$(MPI) $(CUDA_OUT)/.mpi-$(CUDA_MPI)$(NCCL):
	@mkdir -p $(dir $@)
	@rm -f $(dir $@).mpi-*
	@touch $@
$(BUILD)/cpu/src/runtime/comm.o: $(BUILD)/cpu/.mpi-$(MPI)
$(CUDA_OUT)/src/runtime/comm.o $(CUDA_OUT)/cli/forge.o: $(CUDA_OUT)/.mpi-$(CUDA_MPI)$(NCCL)

# provenance.o is the one object that reads FORGE_GIT_COMMIT/FORGE_GIT_DIRTY:
# rebuilt on every make so the commit baked into results is never stale.
FORCE:
$(BUILD)/cpu/src/bench/provenance.o $(CUDA_OUT)/src/bench/provenance.o: FORCE

$(BUILD)/forge: $(CPU_OBJ) $(BUILD)/cpu/cli/forge.o
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CPU_MPI_LIBS)

$(BUILD)/forge_tests: $(CPU_OBJ) $(TEST_SRC:%.c=$(BUILD)/cpu/%.o)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CPU_MPI_LIBS)

test: $(BUILD)/forge_tests $(BUILD)/forge
	./$(BUILD)/forge_tests

# ---- CUDA build: same host code with FORGE_WITH_CUDA, kernels through nvcc.
# Each .cu's nvcc/ptxas report (-Xptxas -v: registers, shared memory, stack,
# spills per kernel) lands in build/cuda/<path>.ptxas.txt; `make ptxas` checks
# them (scripts/check_ptxas.py). nvcc warnings are echoed from that report.
$(CUDA_OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_MPI_CFLAGS) -DFORGE_WITH_CUDA $(CUBLAS_DEF) -I$(CUDA_HOME)/include -MMD -MP -c $< -o $@

$(CUDA_OUT)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@ 2> $(@:.o=.ptxas.txt) || (cat $(@:.o=.ptxas.txt); exit 1)
	@grep -iE 'warning|error' $(@:.o=.ptxas.txt) || true

# cudart is static; cuBLAS (the --matmul cublas reference path) is the
# shared libcublas.so.13 of the toolkit, found through the rpath or LD_LIBRARY_PATH.
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(CUBLAS_LIBS) -lcudart_static -lrt -ldl -lpthread -lstdc++ \
             $(CUDA_MPI_LIBS)
GPU_TEST_SRC := $(shell find tests_gpu -name '*.c' 2>/dev/null | sort)

cuda: $(CUDA_OUT)/forge $(CUDA_OUT)/forge_tests $(CUDA_OUT)/forge_gpu_tests
$(CUDA_OUT)/forge: $(CUDA_HOST_OBJ) $(CUDA_OBJ) $(CUDA_OUT)/cli/forge.o
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
$(CUDA_OUT)/forge_tests: $(CUDA_HOST_OBJ) $(CUDA_OBJ) $(TEST_SRC:%.c=$(CUDA_OUT)/%.o)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
# the GPU parity suite: every CUDA op against the CPU reference backend (needs a GPU to run)
$(CUDA_OUT)/forge_gpu_tests: $(CUDA_HOST_OBJ) $(CUDA_OBJ) $(GPU_TEST_SRC:%.c=$(CUDA_OUT)/%.o)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

# The library the lab links against: every object of src/ in the CUDA build.
$(CUDA_OUT)/libforge.a: $(CUDA_HOST_OBJ) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The kernel laboratory (lab/README.md): variants, characterization and their tests, built once, against
# the library above (and the GPU tests' shared helpers, tests_gpu/gpu_test.c, for the lab's variant tests);
# nothing in src/ includes or links anything of lab/.
lab: $(CUDA_OUT)/forge-lab
$(CUDA_OUT)/forge-lab: $(LAB_C_SRC:%.c=$(CUDA_OUT)/%.o) $(LAB_CU_SRC:%.cu=$(CUDA_OUT)/%.o) $(CUDA_OUT)/tests_gpu/gpu_test.o \
                      $(CUDA_OUT)/libforge.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

test-gpu: $(CUDA_OUT)/forge_gpu_tests
	./$(CUDA_OUT)/forge_gpu_tests

ptxas: cuda
	python3 scripts/check_ptxas.py $(CUDA_OUT) scripts/ptxas_allowlist.txt

# CPU benchmarks through the harness (results/<date>_<commit>/)
bench: $(BUILD)/forge
	./$(BUILD)/forge bench matmul
	./$(BUILD)/forge bench train
	./$(BUILD)/forge bench ops

# regenerate docs/figures/*.png from the committed results/*/*.csv (gnuplot, no GPU)
reproduce:
	sh scripts/reproduce.sh

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer" test

# ---- fuzzing (docs/fuzzing.md). One libFuzzer target per parser, fuzz/fuzz_<name>.c,
# built with clang and ASan + UBSan (any report aborts) against the parsers'
# sources only, with coverage instrumentation; cJSON and PCRE2 are the system
# libraries. `make fuzz` runs each target for FUZZ_SECONDS (one at a time) from
# its committed seeds (fuzz/corpus/<name>, read-only) plus what it found before
# (build/fuzz/corpus/<name>), and fails on any crash, leak, timeout or sanitizer
# report (the input lands in build/fuzz/artifacts/).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
# FUZZ_CJSON_SRC=dir/cJSON.c compiles that cJSON into the targets, instrumented like the
# parsers, into build/fuzz-cjson/ (by default Debian's libcjson is linked, and ASan and the
# coverage counters do not see inside it).
FUZZ_CJSON_SRC ?=
FUZZ_OUT     := $(BUILD)/fuzz$(if $(FUZZ_CJSON_SRC),-cjson)
FUZZ_TARGETS := config safetensors shard tokenizer tokenizer_text
FUZZ_CFLAGS  := -std=c11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -D_GNU_SOURCE \
                -fsanitize=address,undefined -fno-sanitize-recover=all $(EXTRA_FUZZ_CFLAGS)
FUZZ_LIB_SRC := src/base/status.c src/base/fs.c src/model/config.c src/model/hf.c src/model/safetensors.c src/data/shards.c \
                src/data/tokenizer.c src/data/tokenizer_encode.c src/data/tokenizer_map.c
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_OUT)/obj/%.o)

$(FUZZ_OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

# an archive, so each target links (and counts coverage of) only the parser it calls
$(FUZZ_OUT)/libparsers.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

FUZZ_CJSON_OBJ := $(if $(FUZZ_CJSON_SRC),$(FUZZ_OUT)/obj/cjson/cJSON.o)
$(FUZZ_OUT)/obj/cjson/cJSON.o: $(FUZZ_CJSON_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -w -c $< -o $@

$(FUZZ_OUT)/fuzz_%: $(FUZZ_OUT)/obj/fuzz/fuzz_%.o $(FUZZ_OUT)/libparsers.a $(FUZZ_CJSON_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_OUT)/fuzz_%)
.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_OUT)/obj/fuzz/fuzz_%.o)

fuzz: fuzz-build
	sh fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_OUT) $(FUZZ_TARGETS)

# Source-based line/region coverage (llvm-cov) of each parser over its corpora
# (fuzz/corpus/<name> and what `make fuzz` found, build/fuzz/corpus/<name>): the
# same targets built with -fprofile-instr-generate instead of the sanitizers, each
# input run once. Needs llvm (llvm-profdata, llvm-cov).
FUZZ_COV_OUT := $(BUILD)/fuzz-cov
FUZZ_COV_CFLAGS := -std=c11 -O0 -g -D_GNU_SOURCE -fprofile-instr-generate -fcoverage-mapping

$(FUZZ_COV_OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_COV_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_COV_OUT)/libparsers.a: $(FUZZ_LIB_SRC:%.c=$(FUZZ_COV_OUT)/obj/%.o)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_COV_OUT)/fuzz_%: $(FUZZ_COV_OUT)/obj/fuzz/fuzz_%.o $(FUZZ_COV_OUT)/libparsers.a
	$(FUZZ_CC) $(FUZZ_COV_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)
.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_COV_OUT)/obj/fuzz/fuzz_%.o)

fuzz-coverage: $(FUZZ_TARGETS:%=$(FUZZ_COV_OUT)/fuzz_%)
	sh fuzz/coverage.sh $(FUZZ_COV_OUT) $(FUZZ_OUT)/corpus $(FUZZ_TARGETS)

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
