# ddprun's one hand-written Makefile. `make` builds build/bin/*; `make check`
# installs what is missing (scripts/install-deps), builds, and runs every
# test; `make demo` runs the main job. See README.md.

CC       ?= gcc
CLANG    ?= clang
PKGS     := libuv jansson zlib hwloc
# libcurl: its header only; rendezvous/curl_lib.c loads it when etcd is used
CPPFLAGS := -I. -D_GNU_SOURCE $(shell pkg-config --cflags $(PKGS) libcurl 2>/dev/null)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -pthread -MMD -MP
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -luv -ljansson -lz -lhwloc) -ldl -lpthread -lm

B := build
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# The library every program links: one concept per file, grouped by folder.
LIB_SRC := $(wildcard common/*.c proto/*.c store/*.c rendezvous/*.c agent/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
LIB_ASAN_OBJ := $(LIB_SRC:%.c=$(B)/asan/%.o)

# The GPU backend (worker/backend/cuda/ and NCCL's worker/comm/nccl/) is built
# when nvcc, cuDNN and NCCL are all found; otherwise worker/backend/nocuda/ and
# worker/comm/nonccl/ stand in and --device cuda explains why it cannot. `make CUDA=0` forces the build without it.
CUDA_HOME ?= /usr/local/cuda
ifndef NVCC
NVCC := $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA_HOME)/bin/nvcc))
endif
ifndef CUDA
CUDA := $(if $(and $(NVCC),$(wildcard $(CUDA_HOME)/include/cudnn.h),$(wildcard $(CUDA_HOME)/include/nccl.h)),1,0)
endif
# Hopper (H100) code, plus its PTX so newer GPUs can compile it at load.
NVCC_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 $(NVCC_ARCH) --Werror all-warnings -Xcompiler -fPIC,-Wall,-Wextra,-Werror -MMD -MP
CUDA_LIBDIRS := $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib)
comma := ,
NOCUDA_SRC := $(wildcard worker/backend/nocuda/*.c worker/comm/nonccl/*.c)

# ddp-train's runtime (everything but its main) is a second library, one
# folder a layer (see docs/architecture.md).
WORKER_BASE := $(wildcard $(addsuffix /*.c,worker/backend worker/backend/cpu worker/data \
	worker/comm worker/model worker/train worker/plot))
WORKER_CPU_LIBS := -ldnnl -fopenmp -ljpeg -lpng
ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1, but nvcc is neither on PATH nor in $(CUDA_HOME)/bin: set NVCC or CUDA_HOME, or build with CUDA=0)
endif
WORKER_SRC := $(WORKER_BASE) $(wildcard worker/backend/cuda/*.c worker/comm/nccl/*.c)
WORKER_CU_OBJ := $(patsubst %.cu,$(B)/obj/%.o,$(wildcard worker/backend/cuda/*.cu))
# The rpath lets the binaries find the libraries without LD_LIBRARY_PATH
# (cuBLAS too, which worker/backend/cuda/cuda_blas.c opens only when a GPU is
# used); the kernels' host code needs the C++ runtime.
CUDA_LIBS := $(addprefix -L,$(CUDA_LIBDIRS)) $(addprefix -Wl$(comma)-rpath$(comma),$(CUDA_LIBDIRS)) \
	-lcudnn -lcudart -lnccl -lstdc++ -ldl
else
WORKER_SRC := $(WORKER_BASE) $(NOCUDA_SRC)
WORKER_CU_OBJ :=
CUDA_LIBS :=
endif
WORKER_LIBS := $(WORKER_CPU_LIBS) $(CUDA_LIBS)
WORKER_OBJ := $(WORKER_SRC:%.c=$(B)/obj/%.o) $(WORKER_CU_OBJ)
# The sanitizer build always takes the no-CUDA stand-in: the CUDA runtime
# maps device memory where AddressSanitizer keeps its shadow, and the unit
# tests it runs are CPU tests (tests/gpu checks the GPU backend).
WORKER_ASAN_OBJ := $(WORKER_BASE:%.c=$(B)/asan/%.o) $(NOCUDA_SRC:%.c=$(B)/asan/%.o)

BINS := $(B)/bin/ddprun $(B)/bin/ddprun-exec $(B)/bin/ddprun-store $(B)/bin/ddprun-store-cli $(B)/bin/ddp-train \
	$(B)/bin/ddp-allreduce-bench
UNIT_SRC := $(wildcard tests/unit/*.c)
TEST_BINS := $(B)/tests/unit-tests $(B)/tests/store-load $(B)/tests/model-dump \
	$(B)/tests/rank-leaves $(B)/tests/etcd-check $(B)/tests/make-images $(B)/tests/data-dump \
	$(B)/tests/coll-peek $(B)/tests/bootstrap-sim
ifeq ($(CUDA),1)
TEST_BINS += $(B)/tests/gpu-ops $(B)/tests/gpu-preflight $(B)/tests/gpu-jpeg
endif

.PHONY: all deps install uninstall man deb wheel check check-quick check-torch2 check-tf demo demo-store chaos-etcd fuzz bench-store bench-agent bench-train bench-ddp bench-allreduce bench-gpu bench-gpu-restart bench-gpu-jpeg chaos bench-chaos-campaign bench-recovery bench-rdzv-etcd bench-chaos bench-chaos-hosts bench-ckpt-stall bench-data bench-data-equiv bench-bootstrap bench-soak clean
all: $(BINS) $(TEST_BINS)

deps:
	@scripts/install-deps

$(B)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The trainer's kernels: OpenMP across cores, and -O3 for the loops.
$(B)/obj/worker/%.o: worker/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -O3 -fopenmp -c $< -o $@

# The GPU backend's host code sees CUDA's headers; its kernels go through nvcc.
$(B)/obj/worker/backend/cuda/%.o $(B)/obj/worker/comm/nccl/%.o $(B)/obj/tests/gpu/%.o: CPPFLAGS += -I$(CUDA_HOME)/include

# nvJPEG (--decode gpu) is opened at run time; its header comes from the
# toolkit or from scripts/nvjpeg-get, else the decoder says it is missing.
NVJPEG_INC := $(firstword $(dir $(wildcard $(CUDA_HOME)/include/nvjpeg.h build/nvjpeg/include/nvjpeg.h)))
$(B)/obj/worker/backend/cuda/cuda_jpeg.o: CPPFLAGS += $(if $(NVJPEG_INC),-DHAVE_NVJPEG -I$(NVJPEG_INC))
# What nvJPEG's batched decode waits for beside other work on the GPU
# (bench/nvjpeg_beside.cu), built where nvJPEG's library is here too.
NVJPEG_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/libnvjpeg.so build/nvjpeg/lib/libnvjpeg.so.*))
ifeq ($(CUDA)$(if $(and $(NVJPEG_INC),$(NVJPEG_LIB)),1),11)
all: $(B)/tests/nvjpeg-beside
endif
$(B)/tests/nvjpeg-beside: bench/nvjpeg_beside.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I$(NVJPEG_INC) $< -o $@ -Xlinker $(NVJPEG_LIB)
$(B)/obj/worker/backend/cuda/%.o: worker/backend/cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I. -c $< -o $@

$(B)/asan/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) -c $< -o $@

$(B)/asan/worker/%.o: worker/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) -fopenmp -c $< -o $@

# The version every program's --version says (common/build_info.c): the
# VERSION file and, in a checkout, the commit (scripts/version). The header
# is rewritten only when that changes, so a commit rebuilds one file.
DDPRUN_VERSION := $(shell scripts/version)
$(B)/gen/ddprun_version.h: FORCE
	@mkdir -p $(@D)
	@printf '#define DDPRUN_VERSION "%s"\n' '$(DDPRUN_VERSION)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(B)/obj/common/build_info.o $(B)/asan/common/build_info.o: $(B)/gen/ddprun_version.h
$(B)/obj/common/build_info.o $(B)/asan/common/build_info.o: CPPFLAGS += -I$(B)/gen
# The GPU libraries' versions come from their headers, where the build has them.
ifeq ($(CUDA),1)
$(B)/obj/common/build_info.o: CPPFLAGS += -DDDPRUN_CUDA -I$(CUDA_HOME)/include
endif
.PHONY: FORCE
FORCE:

$(B)/libddprun.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

$(B)/libddptrain.a: $(WORKER_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

$(B)/bin/ddprun: $(B)/obj/launcher/ddprun_main.o $(B)/obj/launcher/config.o $(B)/obj/launcher/slurm_env.o $(B)/obj/launcher/status_cli.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# -rdynamic: the stacks it writes (on a crash, or asked for by the agent's
# watchdog) name its functions, not only addresses.
$(B)/bin/ddp-train: $(B)/obj/worker/main.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -rdynamic $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

$(B)/bin/ddp-allreduce-bench: $(B)/obj/bench/allreduce_bench.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# libc alone: it starts every worker (agent/worker_exec.h).
$(B)/bin/ddprun-exec: $(B)/obj/launcher/exec_main.o $(B)/obj/agent/worker_exec.o $(B)/obj/common/build_info.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@

$(B)/bin/ddprun-store: $(B)/obj/launcher/store_main.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(B)/bin/ddprun-store-cli: $(B)/obj/launcher/store_cli.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(B)/tests/unit-tests: $(UNIT_SRC:%.c=$(B)/obj/%.o) $(B)/obj/launcher/config.o $(B)/obj/launcher/slurm_env.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# The same unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
$(B)/tests/unit-tests-asan: $(UNIT_SRC:%.c=$(B)/asan/%.o) $(B)/asan/launcher/config.o $(B)/asan/launcher/slurm_env.o $(WORKER_ASAN_OBJ) $(LIB_ASAN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $^ -o $@ $(WORKER_CPU_LIBS) $(LDLIBS)

# The CUDA backend's operations against the CPU backend's (tests/gpu/).
$(B)/tests/gpu-ops: $(B)/obj/tests/gpu/gpu_ops.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# nvJPEG's decoder against its host twin (tests/gpu/gpu_jpeg.sh).
$(B)/tests/gpu-jpeg: $(B)/obj/tests/gpu/gpu_jpeg.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# The first minute on a GPU machine (tests/gpu/preflight.c, scripts/gpu-preflight).
$(B)/tests/gpu-preflight: $(B)/obj/tests/gpu/preflight.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# Load generator for the store's scale tests and benchmark.
$(B)/tests/store-load: $(B)/obj/bench/store_load.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# Simulated ranks bootstrapping through a store, for bench-bootstrap.
$(B)/tests/bootstrap-sim: $(B)/obj/bench/bootstrap_sim.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# One training step's weights, batch and gradients, for the PyTorch comparison.
$(B)/tests/model-dump: $(B)/obj/tests/tools/model_dump.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# A rank 0 that leaves a job in the middle of resuming.
$(B)/tests/etcd-check: $(B)/obj/tests/tools/etcd_check.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# Image folders (JPEG, PNG) for the imagefolder tests and the data benchmark.
$(B)/tests/make-images: $(B)/obj/tests/tools/make_images.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ -ljpeg -lpng $(LDLIBS)

# A data set's samples as the loader makes them, for the torchvision comparison.
$(B)/tests/data-dump: $(B)/obj/tests/tools/data_dump.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# Where a rank stands in its collectives, for the hang tests.
$(B)/tests/coll-peek: $(B)/obj/tests/tools/coll_peek.o $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(B)/tests/rank-leaves: $(B)/obj/tests/tools/rank_leaves.o $(B)/libddptrain.a $(B)/libddprun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(WORKER_LIBS) $(LDLIBS)

# libFuzzer target for the request parser (clang only).
$(B)/fuzz/fuzz-store-parse: tests/fuzz/fuzz_store_parse.c proto/store_proto.c common/buf.c
	@mkdir -p $(@D)
	$(CLANG) $(CPPFLAGS) -g -O1 -fsanitize=fuzzer,address,undefined $^ -o $@

# make install: the programs, a man page for each (made from its --help by
# scripts/make-man) and the docs, under $(DESTDIR)$(PREFIX); make
# uninstall takes them away again. ddprun-exec goes beside ddprun, where
# ddprun looks for it.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/ddprun
INSTALL_BINS := ddprun ddprun-exec ddprun-store ddprun-store-cli ddp-train ddp-allreduce-bench
INSTALL_DOCS := README.md $(wildcard docs/*.md)
MANS := $(INSTALL_BINS:%=$(B)/man/%.1)

$(B)/man/%.1: $(B)/bin/% scripts/make-man
	@mkdir -p $(@D)
	@scripts/make-man $< > $@.tmp && mv $@.tmp $@

man: $(MANS)

install: $(INSTALL_BINS:%=$(B)/bin/%) $(MANS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)
	install -m 0755 $(INSTALL_BINS:%=$(B)/bin/%) $(DESTDIR)$(BINDIR)/
	install -m 0644 $(MANS) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(INSTALL_DOCS) $(DESTDIR)$(DOCDIR)/

# make deb: dist/ddprun_VERSION_ARCH.deb (scripts/make-deb: dpkg-deb, its
# Depends from dpkg-shlibdeps).
deb: $(INSTALL_BINS:%=$(B)/bin/%) $(MANS)
	@scripts/make-deb

# make wheel: dist/ddprun-VERSION-py3-none-linux_ARCH.whl (scripts/make-wheel:
# python/ddprun, the programs, the libraries they need that the system is
# not expected to have, RPATHs set with patchelf).
wheel: $(B)/bin/ddprun $(B)/bin/ddprun-exec $(B)/bin/ddp-train $(B)/bin/ddprun-store $(B)/bin/ddprun-store-cli
	@scripts/make-wheel

uninstall:
	rm -f $(INSTALL_BINS:%=$(DESTDIR)$(BINDIR)/%) $(INSTALL_BINS:%=$(DESTDIR)$(MANDIR)/man1/%.1)
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(INSTALL_DOCS)))
	-rmdir $(DESTDIR)$(DOCDIR) 2> /dev/null

check: deps
	@$(MAKE) --no-print-directory all $(B)/tests/unit-tests-asan $(B)/fuzz/fuzz-store-parse
	@tests/run

# Tests without the dependency check (for a quick edit-run loop).
check-quick: all $(B)/tests/unit-tests-asan $(B)/fuzz/fuzz-store-parse
	@tests/run

# The compatibility tests against today's PyTorch (2.x from PyPI, in
# build/torch2-venv: 2.3 GB to download the first time, 4.0 GB installed).
# TensorFlow from PyPI into build/tf-venv (opt-in: 280 MB), then its tests;
# `make check` runs them too once the venv exists.
check-tf: deps
	@$(MAKE) --no-print-directory all
	@scripts/tf-venv
	@TESTS=tf_ tests/run

check-torch2: deps
	@$(MAKE) --no-print-directory all $(B)/tests/unit-tests-asan
	@scripts/torch2-venv
	@TESTS=compat/ TORCH_PY=$(CURDIR)/$(B)/torch2-venv/bin/python tests/run

fuzz: $(B)/fuzz/fuzz-store-parse
	@mkdir -p $(B)/fuzz/corpus
	$(B)/fuzz/fuzz-store-parse -max_total_time=$${FUZZ_SECONDS:-600} $(B)/fuzz/corpus tests/fuzz/seeds

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo

demo-store: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo-store

# bench-agent, bench-allreduce, bench-train, bench-ddp, bench-store,
# bench-recovery (root: test hosts in network namespaces), bench-scale (N
# agents on this machine: SIZES="8 64 256 1000"), bench-bootstrap (simulated
# ranks through init_process_group's store requests: RANKS_DIRECT,
# RANKS_PROXY): ours and the peer's side by side (bench/NAME_bench.sh;
# docs/results.md).
BENCHES := agent allreduce train ddp store recovery rdzv-etcd etcd-cost chaos chaos-hosts ckpt-stall data data-equiv scale bootstrap
$(BENCHES:%=bench-%): bench-%: deps
	@$(MAKE) --no-print-directory all
	@bench/$(subst -,_,$*)_bench.sh

# The heartbeat's soak: 1,000 agents (c10d) beating every 2 s for 30
# minutes beside a busy loop per CPU, every false loss counted, then the
# failures timed (bench-scale's phases). SOAK_AGENTS, SOAK_SECONDS,
# SOAK_HEARTBEAT override.
bench-soak: deps
	@$(MAKE) --no-print-directory all
	@SIZES=$${SOAK_AGENTS:-1000} BACKENDS=c10d TORCH_SIZES= REST=$${SOAK_SECONDS:-1800} \
		LOAD=$$(nproc) HEARTBEAT=$${SOAK_HEARTBEAT:-2} CAP=180 bench/scale_bench.sh

# On a machine with a GPU and PyTorch with CUDA (python3, or PY=...).
bench-gpu: all
	@bench/gpu_bench.sh

# On the same: seconds from a worker's SIGKILL to its first step after the
# restart, ours against torchrun + PyTorch.
bench-gpu-restart: all
	@bench/gpu_restart.sh

# On the same: ResNet-50 from a folder of JPEGs (--decode cpu and gpu)
# against the GPU fed from its own memory, and against torchvision's DataLoader.
bench-gpu-jpeg: all
	@bench/gpu_jpeg_bench.sh

# The randomized fault campaign (tests/chaos/chaos.py): CHAOS_SEED, CHAOS_RUNS,
# CHAOS_STORE (c10d: node 0's store; etcd: a cluster of three members); make
# check runs a short one on each (tests/integration/chaos_short.sh, chaos_etcd.sh).
CHAOS_SEED ?= 1
CHAOS_RUNS ?= 30
CHAOS_STORE ?= c10d
chaos: all
	@python3 tests/chaos/chaos.py --seed $(CHAOS_SEED) --runs $(CHAOS_RUNS) --cover --net \
	    --store $(CHAOS_STORE)

chaos-etcd: all
	@$(MAKE) --no-print-directory chaos CHAOS_STORE=etcd

# A long campaign, for docs/results.md (CHAOS_RUNS=1000, CHAOS_STORE=etcd).
bench-chaos-campaign: all
	@python3 tests/chaos/chaos.py --seed $(CHAOS_SEED) --runs $(CHAOS_RUNS) --cover --net \
	    --store $(CHAOS_STORE)

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
