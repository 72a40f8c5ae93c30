# trainperf — build. Sources are found by directory, so adding a .c file under
# src/<module>/ needs no edit here.
#
#   make                      library, CLI, examples, unit tests, fakes, benches
#   make SANITIZE=1           the same under ASan+UBSan, in build-asan/
#   make BUILD=dir            build somewhere else (parallel work trees)
#   make test                 the test suite (pytest drives C unit and integration tests)
#   make check                install test dependencies, then the suite, then again under ASan+UBSan
#   make demo                 builds only the CLI, library and bundled C trainer (in parallel),
#                             then runs the trainer under `trainperf run`, ending with its report
#   make gpu-check OUT=DIR    on one NVIDIA GPU: short GPU runs with a known truth (docs/gpu.md);
#                             without one, a line that says so and the script exits 77
#   make bench                benchmarks (figures and ratios against baselines in the same run)
#   make install PREFIX=/usr/local

CC ?= cc
# The version's one source is include/trainperf.h (TPF_VERSION_MAJOR/MINOR/PATCH).
VERSION := $(shell sed -n 's/^\#define TPF_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' include/trainperf.h | paste -sd. -)
PREFIX ?= /usr/local
PYTHON ?= python3

ifeq ($(SANITIZE),1)
BUILD ?= build-asan
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
OPT := -O1
else
BUILD ?= build
SANFLAGS :=
OPT := -O2
endif

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wno-unused-parameter -Wformat=2 -Wvla
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) $(SANFLAGS) -fPIC \
        -Iinclude -Isrc $(CFLAGS)
LIB_CFLAGS := $(CFLAGS_ALL) -fvisibility=hidden -DTPF_BUILDING_LIBRARY
LDLIBS_ALL := -lz -lpthread -lm -ldl
LDFLAGS_ALL := $(SANFLAGS) $(LDFLAGS)

LIB_MODULES := core probe collect watch record report trace session util
LIB_SRC := $(sort $(foreach m,$(LIB_MODULES),$(wildcard src/$(m)/*.c)))
LIB_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
CLI_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(CLI_SRC))

EXAMPLE_SRC := $(wildcard examples/*.c)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRC))
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNITS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
PROG_SRC := $(wildcard tests/progs/*.c)
PROGS := $(patsubst tests/progs/%.c,$(BUILD)/progs/%,$(PROG_SRC))
FAKE_SRC := $(wildcard tests/fakes/*.c)
FAKES := $(patsubst tests/fakes/fake_%.c,$(BUILD)/fakes/lib%.so.1,$(FAKE_SRC))
# The fake NVML again without its versioned symbols: an old driver (docs/gpu.md).
FAKES += $(if $(wildcard tests/fakes/fake_nvidia-ml.c),$(BUILD)/fakes/legacy/libnvidia-ml.so.1)
BENCH_SRC := $(wildcard bench/*.c)
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
FUZZ_SRC := $(wildcard tests/fuzz/*.c)

STATIC := $(BUILD)/libtrainperf.a
SHARED := $(BUILD)/libtrainperf.so
CLI := $(BUILD)/trainperf
# The CUPTI injection library `trainperf run` names in CUDA_INJECTION64_PATH
# (src/gpu/, docs/gpu.md): CUPTI is loaded at run time, nothing NVIDIA at build.
CUPTI_SO := $(BUILD)/libtrainperf-cupti.so

.PHONY: all lib test pytest-passes check demo bench install clean python fuzz gpu-check
all: lib $(CLI) $(CUPTI_SO) $(EXAMPLES) $(UNITS) $(FAKES) $(PROGS) $(BENCHES)
lib: $(STATIC) $(SHARED)

$(BUILD)/obj/cli/%.o: src/cli/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -MMD -MP -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libtrainperf.so.0 -o $@ $^ $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(CUPTI_SO): src/gpu/cupti_inject.c src/gpu/cupti_inject.map $(STATIC)
	$(CC) $(LIB_CFLAGS) -shared -Wl,--version-script=src/gpu/cupti_inject.map -o $@ \
	    src/gpu/cupti_inject.c $(STATIC) $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(CLI): $(CLI_OBJ) $(STATIC)
	$(CC) -o $@ $(CLI_OBJ) $(STATIC) $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(BUILD)/examples/%: examples/%.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(LDLIBS_ALL)

# Unit tests see internal headers and link the static library.
$(BUILD)/tests/%: tests/unit/%.c tests/unit/tt.h $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests/unit -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(LDLIBS_ALL)

# Programs the integration tests run (tests/progs/).
$(BUILD)/progs/%: tests/progs/%.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(LDLIBS_ALL)

# Fakes stand in for NVIDIA libraries on machines without a GPU.
$(BUILD)/fakes/lib%.so.1: tests/fakes/fake_%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -shared -Wl,-soname,lib$*.so.1 -o $@ $< $(LDFLAGS_ALL) -lpthread

$(BUILD)/fakes/legacy/libnvidia-ml.so.1: tests/fakes/fake_nvidia-ml.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -DFAKE_NVML_LEGACY -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $< $(LDFLAGS_ALL) -lpthread

$(BUILD)/bench/%: bench/%.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -O2 -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(LDLIBS_ALL)

# libFuzzer target for the trace parser (clang from Debian's `clang` package).
FUZZ_CC ?= clang
FUZZ_LIB_SRC := src/trace/trace_json.c src/trace/trace_an.c src/trace/trace_out.c src/trace/trace_extra.c src/trace/trace_tbl.c \
        src/util/buf.c src/util/jsonw.c src/util/err.c src/util/table.c src/util/human.c src/util/afile.c
fuzz: $(BUILD)/fuzz/fuzz_trace
$(BUILD)/fuzz/fuzz_trace: tests/fuzz/fuzz_trace.c $(FUZZ_LIB_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Iinclude -Isrc -o $@ $^ -lz -lpthread -lm

# The run-directory readers (report, recovery, segment reader): the whole
# library under the fuzzer, one translation unit at a time.
fuzz: $(BUILD)/fuzz/fuzz_rundir
$(BUILD)/fuzz/fuzz_rundir: tests/fuzz/fuzz_rundir.c $(LIB_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Iinclude -Isrc -DTPF_BUILDING_LIBRARY -o $@ $^ \
	    -lz -lpthread -lm -ldl

# The Python extension, built in place for the test suite.
# Links $(STATIC) unless sanitized (an ASan extension would need libasan preloaded).
python: $(STATIC)
	TRAINPERF_STATIC_LIB=$(if $(SANFLAGS),,$(abspath $(STATIC))) $(PYTHON) setup.py -q build_ext --inplace

# The suite in two passes (tests/README.md): the independent tests on every core (pytest-xdist,
# a file to a worker so module fixtures run once), then the tests that judge timing (marker
# `serial`: scenario verdicts, tune, attach) alone. Without pytest-xdist the first pass is serial.
# pytest's exit 5 (nothing selected: e.g. no serial test outside torch under the sanitizers) is
# not a failure.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST := $(PYTHON) -m pytest tests -q -rfEs --durations=20
XDIST = $(shell $(PYTHON) -c 'import xdist' 2>/dev/null && echo "-n $(TEST_JOBS) --dist loadfile")
TEST_MARK ?=
PAR_MARK = $(if $(TEST_MARK),$(TEST_MARK) and not serial,not serial)
SER_MARK = $(if $(TEST_MARK),$(TEST_MARK) and serial,serial)
test: all python
	$(MAKE) --no-print-directory pytest-passes

pytest-passes:
	TRAINPERF_BUILD=$(BUILD) $(TEST_ENV) $(PYTEST) $(XDIST) -m "$(PAR_MARK)" || [ $$? = 5 ]
	TRAINPERF_BUILD=$(BUILD) $(TEST_ENV) $(PYTEST) -m "$(SER_MARK)" || [ $$? = 5 ]

# The sanitizer pass: what it adds is the C paths under ASan+UBSan, so not the tests that
# need PyTorch or run real workloads (marker `once`), which exercise Python, not our C.
check:
	./scripts/install-deps.sh
	$(MAKE) test
	$(MAKE) SANITIZE=1 all
	$(MAKE) --no-print-directory SANITIZE=1 pytest-passes TEST_MARK="not torch and not once" TEST_ENV=TRAINPERF_SANITIZE=1

# The demo builds only what it runs (the CLI, the library, the bundled trainer),
# DEMO_JOBS at a time (every core unless `make -jN` already set a job count).
DEMO_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_BUILD := lib $(CLI) $(BUILD)/examples/trainer
demo:
	@./scripts/install-deps.sh --build
	@echo "demo: building $(DEMO_BUILD) ($(if $(findstring jobserver,$(MAKEFLAGS)),make's own -j,$(DEMO_JOBS) jobs))"
	@$(MAKE) --no-print-directory $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(DEMO_JOBS)) $(DEMO_BUILD)
	@./scripts/demo.sh $(BUILD)

# On a machine with one NVIDIA GPU (docs/gpu.md): about 6 minutes.
gpu-check:
	./scripts/gpu-check.sh $(or $(OUT),gpu-check-out)

bench: all python
	./bench/run.sh $(BUILD)

install: lib $(CLI) $(CUPTI_SO)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/trainperf
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/libtrainperf.a
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/libtrainperf.so.0
	install -m 755 $(CUPTI_SO) $(DESTDIR)$(PREFIX)/lib/libtrainperf-cupti.so
	ln -sf libtrainperf.so.0 $(DESTDIR)$(PREFIX)/lib/libtrainperf.so
	install -m 644 include/trainperf.h $(DESTDIR)$(PREFIX)/include/trainperf.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' trainperf.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/trainperf.pc
	if [ -d python/trainperf ]; then install -d $(DESTDIR)$(PREFIX)/share/trainperf && \
	    cp -r python/trainperf python/sitecustomize.py $(DESTDIR)$(PREFIX)/share/trainperf/; fi

clean:
	rm -rf build build-asan build-* python/build python/trainperf/*.so

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
