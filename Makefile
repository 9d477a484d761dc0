# tally: plain GNU make. `make help` lists the targets.
#
# Sources are grouped by what links them:
#   common/   libtally: schema, key hashing, logging (agent, tallyctl, queryd)
#   spoa/     the agent; spoa/main.c holds main(), everything else is unit-testable
#   ctl/      tallyctl, the operator CLI
#   loadtest/ mock upstream and load tools
# BUILD selects the output tree so that sanitizer builds never mix with normal ones.

SHELL    := /bin/bash
CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
SAN      ?=
PYTHON   ?= /usr/bin/python3
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CPPFLAGS := -D_GNU_SOURCE -Icommon -Ispoa -I$(BUILD)/gen
CFLAGS   := -std=c11 -g $(OPT) $(WARN) $(SAN) $(EXTRA_CFLAGS)
LDFLAGS  := $(SAN)
PKGS     := msgpack libcjson sqlite3 libcrypto
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lmsgpack-c -lcjson -lsqlite3 -lcrypto)
LIBS     := -lev -lhttp_parser $(PKG_LIBS) -lpthread -lm

COMMON_SRC := $(wildcard common/*.c)
AGENT_SRC  := $(filter-out spoa/main.c,$(wildcard spoa/*.c))
GEN_SRC    := $(BUILD)/gen/schema_sql.c
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/schema_sql.o
AGENT_OBJ  := $(AGENT_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/%)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN   := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
BINS       := $(BUILD)/tally-agent $(BUILD)/tallyctl $(BUILD)/mock-upstream $(BUILD)/tally-stress

.PHONY: all deps build unit-bins fuzz-bins test test-unit test-integration fuzz asan valgrind \
        run bench-decision bench-accounting bench-journal bench-writer clean help
.DELETE_ON_ERROR:
.SECONDARY:

all: build

help:
	@echo "make run             install deps, build, seed ./data, start mock upstream + agent + HAProxy"
	@echo "make test            install deps, build, run unit, fuzz-smoke and integration tests"
	@echo "make asan            unit + integration tests under ASan+UBSan (build/asan)"
	@echo "make valgrind        unit tests under valgrind memcheck"
	@echo "make fuzz            run every libFuzzer target for FUZZ_SECONDS (default 60) each"
	@echo "make bench-decision  unary 1 KB: upstream direct vs plain HAProxy vs gateway"
	@echo "make bench-accounting plain HAProxy vs gateway with accounting: unary, SSE, count check"
	@echo "make bench-journal   ns per journal entry: encode, append + flush (each, per 16)"
	@echo "make bench-writer    writer rows/s (BENCH_ROWS, BENCH_BATCH) vs a plain INSERT loop"
	@echo "make clean"

deps:
	@bash scripts/install-deps.sh

build: $(BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# The schema is compiled into the binaries so that the agent and tallyctl create or
# migrate a database without needing the source tree at run time.
$(BUILD)/gen/schema_sql.c: sql/schema.sql
	@mkdir -p $(dir $@)
	awk 'BEGIN { print "/* generated from sql/schema.sql by the Makefile */"; \
	             print "const char tally_schema_sql[] =" } \
	     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "\"" $$0 "\\n\"" } \
	     END { print ";" }' $< > $@

$(BUILD)/obj/gen/schema_sql.o: $(BUILD)/gen/schema_sql.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/tally-agent: $(BUILD)/obj/spoa/main.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/tallyctl: $(BUILD)/obj/ctl/tallyctl.o $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/mock-upstream: $(BUILD)/obj/loadtest/mock-upstream.o
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/tally-stress: $(BUILD)/obj/loadtest/tally-stress.o
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

unit-bins: $(UNIT_BIN)
$(BUILD)/test_%: $(BUILD)/obj/tests/unit/test_%.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

# libFuzzer targets are built with clang from the module sources, never from $(BUILD)/obj.
FUZZ_CFLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -Icommon -Ispoa -fsanitize=fuzzer,address,undefined \
               -fno-sanitize-recover=undefined
fuzz-bins: $(FUZZ_BIN)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(AGENT_SRC) $(COMMON_SRC) $(GEN_SRC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) $< $(AGENT_SRC) $(COMMON_SRC) $(GEN_SRC) $(LIBS) -o $@

test: deps
	$(MAKE) build unit-bins fuzz-bins
	TALLY_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests

test-unit: unit-bins
	TALLY_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests/test_unit.py

test-integration: build
	TALLY_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests/integration

asan: deps
	$(MAKE) BUILD=build/asan CC=clang OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	  build unit-bins
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  TALLY_BUILD=build/asan $(PYTHON) -m pytest -q tests/test_unit.py tests/integration

valgrind: deps
	$(MAKE) BUILD=build/valgrind OPT=-O0 build unit-bins
	TALLY_BUILD=build/valgrind TALLY_VALGRIND=1 $(PYTHON) -m pytest -q tests/test_unit.py tests/integration

FUZZ_SECONDS ?= 60
fuzz: deps fuzz-bins
	TALLY_BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) $(PYTHON) -m pytest -q tests/test_fuzz.py

run: deps build
	@bash scripts/run.sh

bench-decision: deps build
	@bash loadtest/bench-decision.sh

bench-accounting: deps build
	@bash loadtest/bench-accounting.sh

$(BUILD)/bench-journal: $(BUILD)/obj/loadtest/bench-journal.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

bench-journal: $(BUILD)/bench-journal
	$(BUILD)/bench-journal

$(BUILD)/bench-writer: $(BUILD)/obj/loadtest/bench-writer.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

bench-writer: $(BUILD)/bench-writer
	$(BUILD)/bench-writer

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
