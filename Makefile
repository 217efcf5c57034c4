# parallel.h - build, test, bench and demo entry points.
#
#   make                      build the CLI, tests, benches (+ link the CUDA smoke test if nvcc)
#   make test                 install missing Debian packages (.ci/deps), then build and run
#                             every test; last line "N passed, N failed, N skipped"
#   make test SAN=address,undefined   the same with sanitizers (separate build dir)
#   make fuzz                 build the libFuzzer targets (tests/fuzz/) with clang and run
#                             each for FUZZ_SECONDS (default 60); make test runs each briefly
#   make bench                build (-O2 -DNDEBUG, never sanitized) and run bench/bench_*.c
#   make demo                 install libyaml if missing, then train the Llama example on this
#                             repo's text (4 ranks) and print a sample
#   make deps                 only install the missing packages of .ci/packages (what make test does
#                             first; PARALLEL_NO_INSTALL=1 turns installing off, see .ci/deps)
#   make tour                 the par-explain guided tour of layouts and plans
#   make bench-cuda           GPU GEMM / flash-attention figures beside PyTorch's, trainer on one GPU
#   make test-cuda            build and run the CUDA tests (needs a GPU; NCCL test under mpirun;
#                             the trainer's PyTorch reference test on one GPU; every parallel
#                             mode as threads on one GPU: --backend cuda-threads)
#   make install PREFIX=...   install parallel.h and parallel_cuda.cu into $(PREFIX)/include
#
# The implementation (parallel.h's definitions, ~21,000 lines, ~5 s a compile) is
# compiled once per build flavour from tests/parallel_impl.c, the two-line .c
# file a program of several files keeps (miniaudio's pattern), into an object in
# that flavour's build directory: $(B)/parallel_impl.o (plain, a SAN= build, make
# test's own ASan and TSan builds), $(B)/parallel_impl_mpi.o (mpicc with
# PARALLEL_WITH_MPI), build/parallel_impl_bench*.o (the bench flags) and
# build/fuzz/parallel_impl_fuzz.o (libFuzzer). A .c file rather than parallel.h
# compiled with -DPARALLEL_IMPLEMENTATION -x c: it is what users write, so the
# build compiles exactly that; it sets the feature macro before any system
# header; and cc, mpicc and clang take it (and -MMD) like any other source.
# Every program that uses only the public API compiles just its own code and
# links its flavour's object. Programs that test private parts of the
# implementation or change how it compiles, the examples (the single-file idiom
# users copy) and the CUDA programs (nvcc; parallel_cuda.cu's glue goes with
# the implementation) still define PARALLEL_IMPLEMENTATION and compile it
# themselves: the *_OWN_IMPL lists and the comments at their rules say which
# and why. There is no library archive.

CC       ?= cc
CXX      ?= c++
CFLAGS   ?= -std=c11 -O2 -g -Wall -Wextra -Wpedantic -Werror
LDLIBS   ?= -lm -lpthread
PREFIX   ?= /usr/local
CUDA_HOME ?= /usr/local/cuda

# Sanitized objects go to their own directory so a plain and a sanitized build
# never mix (make would otherwise think the other flavour's binaries are current).
# -fno-sanitize-recover: a UBSan report must fail the test, not just print a line.
comma := ,
# SAN_B: make test's own sanitizer runs (SAN_CI below) build in a directory of
# their own, with other flags, so they never clash with a `make test SAN=...`.
ifdef SAN
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_B    ?= build/san-$(subst $(comma),-,$(SAN))
B        := $(SAN_B)
else
SANFLAGS :=
B        := build
endif

# -MMD: track the headers each program really includes (parallel.h, tests/test.h).
ALL_CFLAGS := $(CFLAGS) $(SANFLAGS) -MMD -MP

# Benchmarks measure the library as users ship it: optimized, asserts off, no sanitizers.
BENCH_CFLAGS ?= -std=c11 -O2 -g -DNDEBUG -Wall -Wextra -Wpedantic -Werror

# ---------------------------------------------------------------------------
# Detection of optional dependencies: what is missing is left out of the build
# and its tests are reported as skipped, with the reason (SKIPS below).
# Header probes go through the compiler so multiarch include dirs count.
# ---------------------------------------------------------------------------
hash := \#
probe_header = $(shell printf '$(hash)include <$(1)>\n' | $(CC) $(2) -E -x c - >/dev/null 2>&1 && echo yes || echo no)

MPICC ?= mpicc
MPIRUN ?= mpirun --allow-run-as-root --oversubscribe
# OpenMPI refuses to run as root (CI, containers) without these; also for an
# MPIRUN given without --allow-run-as-root. No effect for other users.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
HAVE_MPI := $(if $(shell command -v $(MPICC) 2>/dev/null),yes,no)

# nvcc from PATH, else from CUDA_HOME (a default CUDA install does not touch PATH).
ifndef NVCC
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
endif
HAVE_CUDA   := $(if $(NVCC),yes,no)
HAVE_NCCL   := $(call probe_header,nccl.h,-I$(CUDA_HOME)/include)
HAVE_CUBLAS := $(call probe_header,cublas_v2.h,-I$(CUDA_HOME)/include)
# OpenBLAS specifically (fast GEMM); HAVE_CBLAS is any cblas.h (Debian's netlib
# libblas-dev ships one too, correct but slow).
HAVE_OPENBLAS := $(if $(shell pkg-config --exists openblas 2>/dev/null && echo y),yes,$(call probe_header,openblas_config.h))
HAVE_CBLAS  := $(call probe_header,cblas.h)
HAVE_YAML   := $(if $(shell pkg-config --exists yaml-0.1 2>/dev/null && echo y),yes,$(call probe_header,yaml.h))

# libFuzzer: clang's -fsanitize=fuzzer (tests/fuzz/). A link probe: clang
# without the compiler-rt fuzzer library fails only at link time.
FUZZ_CC ?= clang
HAVE_FUZZER := $(shell printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' | \
  $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 && echo yes || echo no)

# NVCC_ARCH: with a GPU on this machine, its own architecture (-arch=native: the
# tensor-core attention kernels need sm_80 or newer code); without one (CI) nvcc's
# default target, which only proves the code compiles and links.
NVCC_ARCH  ?= $(if $(shell nvidia-smi -L 2>/dev/null),-arch=native,)
FEATURES := MPI=$(HAVE_MPI) CUDA=$(HAVE_CUDA) NCCL=$(HAVE_NCCL) cuBLAS=$(HAVE_CUBLAS) OpenBLAS=$(HAVE_OPENBLAS) (cblas.h=$(HAVE_CBLAS)) libyaml=$(HAVE_YAML) libFuzzer=$(HAVE_FUZZER) nvcc_arch=$(NVCC_ARCH)
# Rewritten only when the detected set changes; every program whose flags, compiler
# or libraries follow detection depends on it, so installing (or removing) MPI,
# OpenBLAS, CUDA or libyaml rebuilds those programs (their sources did not change,
# so make would otherwise keep binaries built without the new piece).
STAMP := build/features.stamp

# The CUDA smoke test needs all three; why it is skipped is reported by `make test`.
CUDA_SKIP := $(if $(filter no,$(HAVE_CUDA)),no nvcc on PATH or in $(CUDA_HOME)/bin: install the CUDA toolkit,$(if \
  $(filter no,$(HAVE_NCCL)),no nccl.h: install NCCL (libnccl-dev),$(if \
  $(filter no,$(HAVE_CUBLAS)),no cublas_v2.h in $(CUDA_HOME)/include)))

# nvcc compiles .cu as C++; the host compiler gets the same warning bar as the C code.
NVCCFLAGS  ?= -std=c++17 -O2 -g $(NVCC_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart

# ---------------------------------------------------------------------------
# Programs. Optional sources (being written elsewhere) are picked up if present.
# ---------------------------------------------------------------------------
TEST_SRCS  := $(sort $(wildcard tests/test_*.c))
TEST_BINS  := $(patsubst tests/%.c,$(B)/%,$(TEST_SRCS))
BENCH_SRCS := $(sort $(wildcard bench/bench_*.c))
BENCH_BINS := $(patsubst bench/%.c,build/%,$(BENCH_SRCS))
# Test programs that compile the implementation themselves (the others link
# $(B)/parallel_impl.o):
#   test_alloc      defines PARALLEL_MALLOC/REALLOC/FREE (the implementation's
#                   default allocator) and calls par__ctx_planner_create
#   test_attention  its allocator macros; the flash-attention tiles and exp
#                   kernels (PAR__ATTN_*, par__attn_*)
#   test_compute    the GEMM kernel of each ISA (par__cpu_sgemm_isa ...); also
#                   built as cblas_test_compute, which changes the implementation
#   test_redist     its allocator macros (leak and failure counts), par__mesh_same_shape
TEST_OWN_IMPL := $(filter $(patsubst %,$(B)/test_%,alloc attention compute redist),$(TEST_BINS))
TEST_LINKED   := $(filter-out $(TEST_OWN_IMPL),$(TEST_BINS))
# Benches: bench_kernels compiles its own (allocator macros for the heap peak, the
# private GEMM and attention kernels via bench_attention.h); bench_copies and
# bench_train do not include parallel.h (build/train does the work); bench_comm
# links the MPI bench object (rule below); the others build/parallel_impl_bench.o.
BENCH_OWN_IMPL := $(filter build/bench_kernels,$(BENCH_BINS))
BENCH_LINKED   := $(filter-out $(BENCH_OWN_IMPL) build/bench_copies build/bench_train build/bench_comm,$(BENCH_BINS))
EXPLAIN    := $(if $(wildcard examples/explain.c),$(B)/par-explain)
# Always in build/: nvcc gets no sanitizer flags, so a SAN build reuses it.
CUDA_SMOKE := $(if $(CUDA_SKIP),,build/test_cuda_smoke build/test_cuda_compute build/test_cuda_threads build/bench_cuda)
# The NCCL comm test is bootstrapped over MPI, so it also needs mpicc.
CUDA_COMM  := $(if $(CUDA_SKIP),,$(if $(filter yes,$(HAVE_MPI)),build/test_cuda_comm build/test_cuda_cp build/test_cuda_nccl))
# MPI tests (tests/mpi/test_*.c): built with mpicc and PARALLEL_WITH_MPI, run by
# tests/run.sh under mpirun -np 4.
# test_comm_mpi also runs chunked (tiny MPI count limit) to exercise the >INT_MAX path.
MPI_ALL    := $(patsubst tests/mpi/%.c,$(B)/mpi_%,$(sort $(wildcard tests/mpi/test_*.c))) \
              $(if $(wildcard tests/mpi/test_comm_mpi.c),$(B)/mpi_test_comm_chunked)
MPI_BINS   := $(if $(filter yes,$(HAVE_MPI)),$(MPI_ALL))
# Compile the implementation themselves: mpi_test_comm_mpi checks the private
# f16/bf16 converters and reads PAR__MPI_MAX_COUNT; mpi_test_comm_chunked sets it
# (-DPAR__MPI_MAX_COUNT=1000 changes the implementation). The others link
# $(B)/parallel_impl_mpi.o.
MPI_OWN_IMPL := $(B)/mpi_test_comm_mpi $(B)/mpi_test_comm_chunked
MPI_LINKED   := $(filter-out $(MPI_OWN_IMPL),$(MPI_ALL))
# test_compute again with PARALLEL_WITH_CBLAS: the library's GEMM through OpenBLAS.
CBLAS_TEST := $(if $(filter yes,$(HAVE_OPENBLAS)),$(B)/cblas_test_compute)
OPENBLAS_LIBS := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
# The Llama trainer (examples/llama/) reads YAML configs with libyaml; it is built
# with mpicc when MPI exists so `--backend mpi` works under mpirun. The examples
# (train, mlp, par-explain, train_cuda) define PARALLEL_IMPLEMENTATION themselves:
# they are what users copy, a one-file program with the implementation in it,
# and the build proves that idiom compiles warning-free with real code around it.
TRAIN_CC   := $(if $(filter yes,$(HAVE_MPI)),$(MPICC) -DPARALLEL_WITH_MPI,$(CC))
TRAIN      := $(if $(filter yes,$(HAVE_YAML)),$(B)/train)
# The second example (examples/mlp/mlp.c): dp x tp x ZeRO in one file; with mpicc it
# also runs one rank per process under mpirun (par_launch). tests/test_mlp_example.c runs it.
MLP        := $(B)/mlp
# The third example (examples/stacked/): a host with its own layer-stacked buffers and
# loops, as one process (stacked_single.c: no parallel.h) and in parallel (stacked.c, with
# mpicc like mlp). tests/test_stacked_example.c runs both.
STACKED    := $(B)/stacked $(B)/stacked_single
TRAIN_TEST_ALL := $(B)/llama_test_config $(B)/llama_test_train $(B)/llama_test_model_tp $(B)/llama_test_auto
TRAIN_TEST := $(if $(filter yes,$(HAVE_YAML)),$(TRAIN_TEST_ALL))
# The CUDA trainer (--backend nccl: CUDA compute table + NCCL, launched by mpirun):
# linked in CI like the CUDA tests, run by `make test-cuda`.
TRAIN_CUDA := $(if $(and $(filter yes,$(HAVE_YAML)),$(filter yes,$(HAVE_MPI)),$(if $(CUDA_SKIP),,yes)),build/train_cuda)
# bench_kernels compares the built-in GEMM with OpenBLAS in one binary.
BENCH_CBLAS := $(if $(filter yes,$(HAVE_OPENBLAS)),-DBENCH_HAVE_CBLAS,)
BENCH_CBLAS_LIBS := $(if $(filter yes,$(HAVE_OPENBLAS)),-lopenblas,)
# bench_comm measures the MPI backend beside the threads one when mpicc exists.
BENCH_COMM_CC := $(if $(filter yes,$(HAVE_MPI)),$(MPICC) -DPARALLEL_WITH_MPI,$(CC))
BENCH_COMM_IMPL := $(if $(filter yes,$(HAVE_MPI)),build/parallel_impl_bench_mpi.o,build/parallel_impl_bench.o)

# libFuzzer targets (tests/fuzz/fuzz_*.c): clang, ASan + UBSan + the fuzzer, always
# in build/fuzz/ (SAN= does not apply). The library is compiled once for all of them
# (build/fuzz/parallel_impl_fuzz.o); the config targets need libyaml. `make fuzz` runs
# each for FUZZ_SECONDS; `make test` for FUZZ_CI_SECONDS (tests/fuzz/run.sh).
FUZZ_FLAGS := -std=c11 -g -O1 -Wall -Wextra -Wpedantic -Werror -fsanitize=address,undefined \
              -fno-sanitize-recover=all -fno-omit-frame-pointer -MMD -MP
FUZZ_ALL   := mesh layout strategy safetensors config config_set pipeline ckpt_index planner
FUZZ_YAML  := config config_set
FUZZ_NAMES := $(if $(filter yes,$(HAVE_FUZZER)),$(if $(filter yes,$(HAVE_YAML)),$(FUZZ_ALL),$(filter-out $(FUZZ_YAML),$(FUZZ_ALL))))
FUZZ_BINS  := $(patsubst %,build/fuzz/fuzz_%,$(FUZZ_NAMES))
FUZZ_SECONDS ?= 60
FUZZ_CI_SECONDS ?= 10

# Sanitizers inside every `make test` (a bounded subset; `make test SAN=...` runs
# everything): ASan + UBSan on the programs that parse text and files and build
# plans, TSan on the threads backend's tests. -O1 (the sanitizers' advice; half
# the compile time of -O2), one implementation object per sanitizer (only
# test_redist compiles its own) and SAN_CI_JOBS parallel compiles keep this to
# about half a minute on 2 cores (24 s alone). Not under SAN= (that run is
# sanitized already).
SAN_CI_JOBS ?= 2
SAN_CI_CFLAGS := -std=c11 -O1 -g -Wall -Wextra -Wpedantic -Werror
ASAN_CI := $(if $(SAN),,$(patsubst %,build/ci-asan/test_%,layout strategy safetensors fuzz redist pipeline ckpt planner mixed recompute))
TSAN_CI := $(if $(SAN),,$(patsubst %,build/ci-tsan/test_%,comm_threads comm_fault comm_mover params exec pipeline))

# What `make test` leaves out for a missing piece: "name: why" items, each ended
# by '|' (so no '|' or single quote in a reason); tests/run.sh reports and
# counts every one as skipped.
WHY_MPI      := no mpicc: install libopenmpi-dev openmpi-bin
WHY_YAML     := no libyaml: install libyaml-dev
WHY_OPENBLAS := no OpenBLAS: install libopenblas-dev
WHY_FUZZER   := no clang with libFuzzer ($(FUZZ_CC) -fsanitize=fuzzer does not link): install clang
skip_all = $(foreach p,$(1),$(notdir $(p)): $(2)|)
SKIPS := $(strip \
  $(if $(filter no,$(HAVE_MPI)),$(call skip_all,$(MPI_ALL) bench_comm_mpi,$(WHY_MPI))) \
  $(if $(filter no,$(HAVE_YAML)),$(call skip_all,$(TRAIN_TEST_ALL),$(WHY_YAML))) \
  $(if $(filter no,$(HAVE_OPENBLAS)),$(call skip_all,cblas_test_compute bench_kernels_openblas,$(WHY_OPENBLAS))) \
  $(if $(filter no,$(HAVE_FUZZER)),$(call skip_all,$(patsubst %,fuzz_%,$(FUZZ_ALL)),$(WHY_FUZZER)), \
    $(if $(filter no,$(HAVE_YAML)),$(call skip_all,$(patsubst %,fuzz_%,$(FUZZ_YAML)),$(WHY_YAML)))) \
  $(if $(CUDA_SKIP),$(call skip_all,test_cuda_smoke test_cuda_compute test_cuda_threads test_cuda_comm test_cuda_cp test_cuda_nccl train_cuda,$(CUDA_SKIP)), \
    $(if $(filter no,$(HAVE_MPI)),$(call skip_all,test_cuda_comm test_cuda_cp test_cuda_nccl train_cuda,$(WHY_MPI)), \
      $(if $(filter no,$(HAVE_YAML)),$(call skip_all,train_cuda,$(WHY_YAML))))))

.PHONY: all detect deps test run-tests test-programs san-ci-programs fuzz bench bench-cuda demo run-demo tour cuda cuda-available test-cuda install clean FORCE
# A failed recipe must not leave a stale binary that tests/run.sh would then run.
.DELETE_ON_ERROR:

all: detect $(EXPLAIN) $(TRAIN) $(MLP) $(STACKED) $(TRAIN_TEST) $(TRAIN_CUDA) $(TEST_BINS) $(CBLAS_TEST) $(MPI_BINS) $(BENCH_BINS) $(CUDA_SMOKE) $(CUDA_COMM)

detect:
	@echo "detected: $(FEATURES)"

# Touched only when the content changes (make compares the stamp's time after
# the recipe, so an unchanged stamp rebuilds nothing).
$(STAMP): FORCE | build
	@if [ "$$(cat $@ 2>/dev/null)" != '$(FEATURES)' ]; then \
	  if [ -e $@ ]; then echo "detected features changed: rebuilding the programs that depend on them"; fi; \
	  echo '$(FEATURES)' >$@; \
	fi
FORCE:

deps:
	@sh .ci/deps test

$(sort $(B) build):
	@mkdir -p $@

# rm first: a program that no longer compiles must be missing, not stale.
# An implementation object removes the programs that link it first: they are
# relinked after it anyway, and if it no longer compiles they must be missing
# (tests/run.sh reports them), not binaries of the old header.
$(B)/parallel_impl.o: tests/parallel_impl.c parallel.h $(STAMP) | $(B)
	@rm -f $@ $(TEST_LINKED) $(TRAIN_TEST_ALL)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/parallel_impl_mpi.o: tests/parallel_impl.c parallel.h $(STAMP) | $(B)
	@rm -f $@ $(MPI_LINKED)
	$(MPICC) $(ALL_CFLAGS) -DPARALLEL_WITH_MPI -c $< -o $@

$(TEST_LINKED): $(B)/test_%: tests/test_%.c $(B)/parallel_impl.o | $(B)
	@rm -f $@
	$(CC) $(ALL_CFLAGS) -Itests $< $(B)/parallel_impl.o -o $@ $(SANFLAGS) $(LDLIBS)

$(TEST_OWN_IMPL): $(B)/test_%: tests/test_%.c | $(B)
	@rm -f $@
	$(CC) $(ALL_CFLAGS) -Itests $< -o $@ $(SANFLAGS) $(LDLIBS)

$(B)/cblas_test_compute: tests/test_compute.c $(STAMP) | $(B)
	@rm -f $@
	$(CC) $(ALL_CFLAGS) -DPARALLEL_WITH_CBLAS -Itests $< -o $@ $(SANFLAGS) $(OPENBLAS_LIBS) $(LDLIBS)

$(B)/par-explain: examples/explain.c | $(B)
	@rm -f $@
	$(CC) $(ALL_CFLAGS) -I. $< -o $@ $(SANFLAGS) $(LDLIBS)

$(B)/train: examples/llama/train.c $(STAMP) | $(B)
	@rm -f $@
	$(TRAIN_CC) $(ALL_CFLAGS) -I. $< -o $@ $(SANFLAGS) -lyaml $(LDLIBS)

$(B)/mlp: examples/mlp/mlp.c $(STAMP) | $(B)
	@rm -f $@
	$(TRAIN_CC) $(ALL_CFLAGS) -I. $< -o $@ $(SANFLAGS) $(LDLIBS)

$(B)/stacked: examples/stacked/stacked.c $(STAMP) | $(B)
	@rm -f $@
	$(TRAIN_CC) $(ALL_CFLAGS) -I. $< -o $@ $(SANFLAGS) $(LDLIBS)

$(B)/stacked_single: examples/stacked/stacked_single.c | $(B)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(SANFLAGS) -lm

# parallel_cuda.cu as its own object (with MPI for NCCL), linked into the C trainer.
build/parallel_cuda_mpi.o: parallel_cuda.cu parallel.h $(STAMP) | build
	$(NVCC) $(NVCCFLAGS) -I. -DPARALLEL_WITH_MPI $(shell $(MPICC) --showme:compile) -c parallel_cuda.cu -o $@

build/train_cuda: examples/llama/train.c examples/llama/model.h examples/llama/config.h build/parallel_cuda_mpi.o $(STAMP) | build
	@rm -f $@
	$(MPICC) $(CFLAGS) -DPARALLEL_WITH_MPI -DLLAMA_WITH_CUDA -I. -I$(CUDA_HOME)/include $< build/parallel_cuda_mpi.o \
	  -o $@ -lyaml -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart -lstdc++ $(LDLIBS)

$(B)/llama_test_%: tests/llama/test_%.c $(B)/parallel_impl.o $(STAMP) | $(B)
	@rm -f $@
	$(CC) $(ALL_CFLAGS) -I. -Itests $< $(B)/parallel_impl.o -o $@ $(SANFLAGS) -lyaml $(LDLIBS)

$(MPI_LINKED): $(B)/mpi_test_%: tests/mpi/test_%.c $(B)/parallel_impl_mpi.o $(STAMP) | $(B)
	@rm -f $@
	$(MPICC) $(ALL_CFLAGS) -DPARALLEL_WITH_MPI -Itests $< $(B)/parallel_impl_mpi.o -o $@ $(SANFLAGS) $(LDLIBS)

$(B)/mpi_test_comm_mpi: tests/mpi/test_comm_mpi.c $(STAMP) | $(B)
	@rm -f $@
	$(MPICC) $(ALL_CFLAGS) -DPARALLEL_WITH_MPI -Itests $< -o $@ $(SANFLAGS) $(LDLIBS)

$(B)/mpi_test_comm_chunked: tests/mpi/test_comm_mpi.c $(STAMP) | $(B)
	@rm -f $@
	$(MPICC) $(ALL_CFLAGS) -DPARALLEL_WITH_MPI -DPAR__MPI_MAX_COUNT=1000 -Itests $< -o $@ $(SANFLAGS) $(LDLIBS)

build/fuzz:
	@mkdir -p $@

# Named _fuzz: a build/ of 0.3 holds build/fuzz/parallel_impl.d, which makes
# build/fuzz/parallel_impl.o need the old tests/fuzz/parallel_impl.c.
build/fuzz/parallel_impl_fuzz.o: tests/parallel_impl.c parallel.h $(STAMP) | build/fuzz
	@rm -f $@ $(FUZZ_BINS)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c build/fuzz/parallel_impl_fuzz.o | build/fuzz
	@rm -f $@
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -I. $< build/fuzz/parallel_impl_fuzz.o -o $@ \
	  $(if $(filter $*,$(FUZZ_YAML)),-lyaml) $(LDLIBS)

build/parallel_impl_bench.o: tests/parallel_impl.c parallel.h $(STAMP) | build
	@rm -f $@ $(BENCH_LINKED) $(if $(filter yes,$(HAVE_MPI)),,build/bench_comm)
	$(CC) $(BENCH_CFLAGS) -MMD -MP -c $< -o $@

build/parallel_impl_bench_mpi.o: tests/parallel_impl.c parallel.h $(STAMP) | build
	@rm -f $@ build/bench_comm
	$(MPICC) $(BENCH_CFLAGS) -MMD -MP -DPARALLEL_WITH_MPI -c $< -o $@

$(BENCH_LINKED): build/bench_%: bench/bench_%.c build/parallel_impl_bench.o | build
	@rm -f $@
	$(CC) $(BENCH_CFLAGS) -MMD -MP -I. $< build/parallel_impl_bench.o -o $@ $(LDLIBS)

# bench_copies, bench_train: no parallel.h.
build/bench_%: bench/bench_%.c | build
	@rm -f $@
	$(CC) $(BENCH_CFLAGS) -MMD -MP -I. $< -o $@ $(LDLIBS)

build/bench_kernels: bench/bench_kernels.c $(STAMP) | build
	@rm -f $@
	$(CC) $(BENCH_CFLAGS) -MMD -MP -I. $(BENCH_CBLAS) $< -o $@ $(BENCH_CBLAS_LIBS) $(LDLIBS)

build/bench_comm: bench/bench_comm.c $(BENCH_COMM_IMPL) $(STAMP) | build
	@rm -f $@
	$(BENCH_COMM_CC) $(BENCH_CFLAGS) -MMD -MP -I. $< $(BENCH_COMM_IMPL) -o $@ $(LDLIBS)

# The .cu carries no copy of the implementation (it includes parallel.h plain);
# each CUDA program compiles it itself with nvcc, together with parallel_cuda.cu's
# glue (the par_last_error bridge, par_ctx_init_nccl), which must sit in the
# translation unit that has the implementation: tests/parallel_impl.c has no glue.
# Linked here even without a GPU so CI proves it builds.
# parallel_cuda.cu is compiled once per flavour (its kernels take most of nvcc's
# time): build/parallel_cuda.o, and build/parallel_cuda_mpi.o with MPI (above).
build/parallel_cuda.o: parallel_cuda.cu parallel.h $(STAMP) | build
	$(NVCC) $(NVCCFLAGS) -I. -c parallel_cuda.cu -o $@

build/test_cuda_%: tests/cuda/test_cuda_%.cu build/parallel_cuda.o parallel.h tests/test.h $(STAMP) | build
	@rm -f $@
	$(NVCC) $(NVCCFLAGS) -I. $< build/parallel_cuda.o -o $@ $(CUDA_LIBS)

# Many ranks as threads on one GPU (par_run_cuda_threads): the comm suite too.
build/test_cuda_threads: tests/comm_suite.h

# The GPU benchmark (make bench-cuda); linked with the tests so CI proves it builds.
build/bench_cuda: bench/bench_cuda.cu build/parallel_cuda.o parallel.h $(STAMP) | build
	@rm -f $@
	$(NVCC) $(NVCCFLAGS) -I. $< build/parallel_cuda.o -o $@ $(CUDA_LIBS)

build/test_cuda_comm: tests/cuda/test_cuda_comm.cu build/parallel_cuda_mpi.o parallel.h tests/test.h tests/comm_suite.h $(STAMP) | build
	@rm -f $@
	$(NVCC) $(NVCCFLAGS) -I. -DPARALLEL_WITH_MPI $(shell $(MPICC) --showme:compile) $< build/parallel_cuda_mpi.o \
	  -o $@ $(CUDA_LIBS) $(shell $(MPICC) --showme:link)

# The NCCL table's multi-GPU paths (split vs init, a stream per group, the
# pipeline on device buffers, bucket overlap): each part skipped by name below
# the GPUs it needs.
build/test_cuda_nccl: tests/cuda/test_cuda_nccl.cu build/parallel_cuda_mpi.o parallel.h tests/test.h tests/pp_toy.h $(STAMP) | build
	@rm -f $@
	$(NVCC) $(NVCCFLAGS) -I. -DPARALLEL_WITH_MPI $(shell $(MPICC) --showme:compile) $< build/parallel_cuda_mpi.o \
	  -o $@ $(CUDA_LIBS) $(shell $(MPICC) --showme:link)

build/test_cuda_cp: tests/cuda/test_cuda_cp.cu build/parallel_cuda_mpi.o parallel.h tests/test.h tests/cp_suite.h $(STAMP) | build
	@rm -f $@
	$(NVCC) $(NVCCFLAGS) -I. -DPARALLEL_WITH_MPI $(shell $(MPICC) --showme:compile) $< build/parallel_cuda_mpi.o \
	  -o $@ $(CUDA_LIBS) $(shell $(MPICC) --showme:link)

# Everything `make test` runs. Built with -k by `test` so one broken program is
# reported as that program's failure by tests/run.sh instead of stopping the run.
test-programs: $(TRAIN) $(MLP) $(STACKED) $(TRAIN_TEST) $(TRAIN_CUDA) $(TEST_BINS) $(CBLAS_TEST) $(MPI_BINS) $(EXPLAIN) $(BENCH_BINS) $(CUDA_SMOKE) $(CUDA_COMM) $(FUZZ_BINS)

# make test's sanitizer subset: two sanitized makes of their own (flags and dirs).
san-ci-programs:
	@$(if $(ASAN_CI),$(MAKE) --no-print-directory -k -j$(SAN_CI_JOBS) SAN=address$(comma)undefined SAN_B=build/ci-asan \
	  CFLAGS='$(SAN_CI_CFLAGS)' $(ASAN_CI) || true)
	@$(if $(TSAN_CI),$(MAKE) --no-print-directory -k -j$(SAN_CI_JOBS) SAN=thread SAN_B=build/ci-tsan \
	  CFLAGS='$(SAN_CI_CFLAGS)' $(TSAN_CI) || true)

# README's `make test` on a fresh machine: install what is missing (.ci/deps says
# what it did or why it could not), then a new make, which detects afresh what
# is now there, builds what it can and runs everything (run-tests).
test:
	@sh .ci/deps test
	@$(MAKE) --no-print-directory run-tests

# Programs build BUILD_JOBS at a time (the implementation objects, the programs that
# compile the implementation themselves and nvcc's kernels are most of the time).
BUILD_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
run-tests: detect
	@$(MAKE) --no-print-directory -k -j$(BUILD_JOBS) test-programs || \
	  echo "note: some programs failed to build; tests/run.sh reports them as failed"
	@$(MAKE) --no-print-directory san-ci-programs
	@B='$(B)' CC='$(CC)' CXX='$(CXX)' SANFLAGS='$(SANFLAGS)' MPIRUN='$(MPIRUN)' \
	  EXPLAIN='$(EXPLAIN)' BENCH_BINS='$(BENCH_BINS)' CBLAS_TEST='$(CBLAS_TEST)' \
	  MPI_BINS='$(MPI_BINS)' TRAIN='$(TRAIN)' MLP='$(MLP)' STACKED='$(B)/stacked' STACKED_SINGLE='$(B)/stacked_single' TRAIN_TEST='$(TRAIN_TEST)' CUDA_BINS='$(CUDA_SMOKE) $(CUDA_COMM) $(TRAIN_CUDA)' \
	  FUZZ_BINS='$(FUZZ_BINS)' FUZZ_CI_SECONDS='$(FUZZ_CI_SECONDS)' ASAN_CI='$(ASAN_CI)' TSAN_CI='$(TSAN_CI)' \
	  SKIPS='$(SKIPS)' bash tests/run.sh

# Each libFuzzer target for FUZZ_SECONDS, from its seeds (tests/fuzz/NAME/) and
# the corpus it grew before (build/fuzz/corpus/NAME/); a crash's input is kept
# as build/fuzz/crash-NAME-*. Goes on after a failing target, fails at the end.
fuzz: $(FUZZ_BINS)
	@test -n "$(FUZZ_BINS)" || { echo "make fuzz: $(if $(filter no,$(HAVE_FUZZER)),$(WHY_FUZZER),$(WHY_YAML))" >&2; exit 1; }
	@bad=; for t in $(FUZZ_NAMES); do echo "== fuzz_$$t ($(FUZZ_SECONDS) s)"; \
	  bash tests/fuzz/run.sh $$t build/fuzz/fuzz_$$t $(FUZZ_SECONDS) build/fuzz/corpus/$$t || bad="$$bad $$t"; \
	done; test -z "$$bad" || { echo "make fuzz: failed:$$bad" >&2; exit 1; }

bench: $(BENCH_BINS) $(TRAIN)
	@set -e; for b in $(BENCH_BINS); do echo "== $$b"; ./$$b; done

# The main job on the embedded default: the Llama trainer on this repository's own
# text, 4 ranks as threads (dp 2 x tp 2 with sequence parallel and the optimizer
# sharded), then a sample.
DEMO_STEPS ?= 900
demo:
	@sh .ci/deps demo
	@$(MAKE) --no-print-directory run-demo

run-demo: $(TRAIN)
	@test -n "$(TRAIN)" || { echo "make demo: cannot run: the trainer needs libyaml (yaml.h not found), and it could not be installed (see the deps: lines above); install libyaml-dev, then make demo again" >&2; exit 1; }
	@cat README.md parallel.h > build/demo_data.txt
	./$(B)/train --config examples/configs/demo.yaml --data build/demo_data.txt --steps $(DEMO_STEPS) --sample 300

# The par-explain guided tour: meshes, layouts, strategies, redistribution plans.
tour: $(B)/par-explain
	./$(B)/par-explain tour

cuda: cuda-available build/test_cuda_smoke build/test_cuda_compute build/test_cuda_threads $(CUDA_COMM)

# One rank per GPU for the NCCL test (NCCL refuses two ranks on one device).
GPUS = $(shell nvidia-smi -L 2>/dev/null | wc -l)
test-cuda: cuda $(TRAIN_CUDA) $(if $(TRAIN_CUDA),build/llama_test_train $(TRAIN))
	@set -e; ./build/test_cuda_smoke; ./build/test_cuda_compute; ./build/test_cuda_threads; \
	if [ -x build/test_cuda_comm ]; then \
	  $(MPIRUN) -np $(GPUS) build/test_cuda_comm; \
	  $(MPIRUN) -np $(GPUS) build/test_cuda_cp; \
	  $(MPIRUN) -np $(GPUS) build/test_cuda_nccl; \
	  PARALLEL_NCCL_GROUP_STREAMS=1 $(MPIRUN) -np $(GPUS) build/test_cuda_comm; \
	  PARALLEL_NCCL_GROUP_STREAMS=1 $(MPIRUN) -np $(GPUS) build/test_cuda_cp; \
	else echo "cuda_comm: skipped (no mpicc)"; echo "cuda_cp: skipped (no mpicc)"; echo "cuda_nccl: skipped (no mpicc)"; fi; \
	if [ -x build/train_cuda ]; then \
	  LLAMA_TEST_ONLY=reference TRAIN="$(MPIRUN) -np 1 build/train_cuda --backend nccl" build/llama_test_train; \
	  LLAMA_TEST_ONLY=gpu-table TRAIN="build/train_cuda --backend cuda-threads" TRAIN_CPU=$(TRAIN) build/llama_test_train; \
	else echo "llama on GPU: skipped (no libyaml or mpicc)"; fi

# GPU figures: the CUDA table's GEMM and flash attention (bench_cuda), PyTorch's
# on the same GPU and shapes when python3 has torch with CUDA (and its eager
# Llama training step in f32 and bf16 autocast), then the trainer (CUDA table +
# NCCL, one rank) on the bench model and a larger one, in float32 and bfloat16.
BENCH_CUDA_STEPS ?= 30
bench-cuda: cuda-available build/bench_cuda $(TRAIN_CUDA)
	@set -e; ./build/bench_cuda; \
	if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then \
	  python3 bench/bench_cuda_torch.py; else echo "bench_cuda_torch: skipped (python3 has no torch with CUDA)"; fi; \
	if [ -x build/train_cuda ]; then \
	  cat README.md parallel.h > build/bench_data.txt; \
	  for dt in float32 bfloat16; do \
	  echo "trainer on GPU, compute_dtype $$dt: bench model, then the large one (bench_cuda_torch.py's two shapes)"; \
	  $(MPIRUN) -np 1 build/train_cuda --backend nccl --config examples/configs/bench.yaml --data build/bench_data.txt --steps $(BENCH_CUDA_STEPS) \
	    --set model.model_config.compute_dtype=$$dt; \
	  $(MPIRUN) -np 1 build/train_cuda --backend nccl --config examples/configs/bench.yaml --data build/bench_data.txt --steps $(BENCH_CUDA_STEPS) \
	    --set model.model_config.compute_dtype=$$dt \
	    --set model.model_config.hidden_size=1024 --set model.model_config.num_heads=16 --set model.model_config.n_kv_heads=4 \
	    --set model.model_config.intermediate_size=2816 --set model.model_config.num_layers=8 --set model.model_config.seq_length=1024; \
	  done; \
	else echo "trainer on GPU: skipped (no libyaml or mpicc)"; fi

cuda-available:
	@test -z "$(CUDA_SKIP)" || { echo "cannot build the CUDA code: $(CUDA_SKIP)" >&2; exit 1; }

install:
	install -d $(DESTDIR)$(PREFIX)/include
	install -m 644 parallel.h parallel_cuda.cu $(DESTDIR)$(PREFIX)/include/

clean:
	rm -rf build

-include $(wildcard $(B)/*.d build/bench_*.d build/parallel_impl_bench*.d build/fuzz/*.d)
