# tally: plain GNU make. `make help` lists the targets.
#
# Sources are grouped by what links them:
#   common/   libtally: schema, key hashing, logging (agent, tallyctl, queryd)
#   spoa/     the agent; spoa/main.c holds main(), everything else is unit-testable
#   ctl/      tallyctl, the operator CLI
#   queryd/   tally-queryd, the dashboard and JSON API server (libmicrohttpd); its SQL is
#             sql/queries/*.sql and its dashboard queryd/dashboard/, both compiled in
#   loadtest/ mock upstream and load tools
# BUILD selects the output tree so that sanitizer builds never mix with normal ones.

SHELL    := /bin/bash
CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
SAN      ?=
PYTHON   ?= /usr/bin/python3
# The Node.js make deps installs (scripts/install-deps.sh), ahead of any other.
export PATH := $(CURDIR)/build/node/bin:$(PATH)
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# libpq: common/db.c speaks to PostgreSQL too (a postgresql:// store).
PG_INCLUDE := $(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
CPPFLAGS := -D_GNU_SOURCE -Icommon -Ispoa -I$(BUILD)/gen -I$(PG_INCLUDE)
CFLAGS   := -std=c11 -g $(OPT) $(WARN) $(SAN) $(EXTRA_CFLAGS)
LDFLAGS  := $(SAN)
# The libraries are asked of pkg-config when a link runs (=, not :=): on a first `make run`
# the -dev packages arrive with `deps`, after make has read this file. The fallback names
# are Debian 12's (libmsgpack-dev 4 ships libmsgpackc).
PKGS     := msgpack libcjson sqlite3 libpq libcrypto
pkg_libs  = $(shell pkg-config --libs $(1) 2>/dev/null || echo $(2))
LIBS      = -lev -lhttp_parser \
            $(call pkg_libs,$(PKGS),-lmsgpackc -lcjson -lsqlite3 -lpq -lcrypto) -lpthread -lm

COMMON_SRC := $(wildcard common/*.c)
AGENT_SRC  := $(filter-out spoa/main.c,$(wildcard spoa/*.c))
GEN_SRC    := $(BUILD)/gen/schema_sql.c $(BUILD)/gen/migrations_sql.c \
              $(BUILD)/gen/pg_schema_sql.c $(BUILD)/gen/pg_migrations_sql.c
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/schema_sql.o \
              $(BUILD)/obj/gen/migrations_sql.o $(BUILD)/obj/gen/pg_schema_sql.o \
              $(BUILD)/obj/gen/pg_migrations_sql.o
AGENT_OBJ  := $(AGENT_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/%)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN   := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
QUERYD_SRC := $(filter-out queryd/main.c,$(wildcard queryd/*.c))
CTL_SRC    := $(wildcard ctl/*.c)
CTL_OBJ    := $(CTL_SRC:%.c=$(BUILD)/obj/%.o)
QUERYD_OBJ := $(QUERYD_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/queries_sql.o \
              $(BUILD)/obj/gen/assets_data.o
BINS       := $(BUILD)/tally-agent $(BUILD)/tallyctl $(BUILD)/mock-upstream $(BUILD)/tally-stress \
              $(BUILD)/tally-queryd $(BUILD)/tally-gen $(BUILD)/queryd-probe

.PHONY: all deps build unit-bins lua-rules haproxy-repeats fuzz-bins test test-matrix test-compose test-fresh test-unit test-integration fuzz asan valgrind \
        run run-cluster bench-decision bench-accounting bench-journal bench-writer bench-queryd bench-codec \
        clean help
.DELETE_ON_ERROR:
.SECONDARY:

all: build

help:
	@echo "make run             install deps, build, seed ./data, start mock upstream + agent + HAProxy"
	@echo "make run-cluster     the same as two nodes (gateways 8080, 8082) on a private PostgreSQL in ./data/cluster"
	@echo "make test            install deps, build, run unit, fuzz-smoke and integration tests"
	@echo "                     (HAPROXY=2.6|3.0|3.2|3.4: on that HAProxy, prepared on first use;"
	@echo "                     make run HAPROXY=... too)"
	@echo "make test-matrix     the integration tests on HAProxy 2.6, 3.0, 3.2 and 3.4: a line each"
	@echo "make asan            unit + integration tests under ASan+UBSan (build/asan)"
	@echo "make valgrind        unit tests under valgrind memcheck"
	@echo "make lua-rules       write spoa/reqrules.c's lists into haproxy/scanner.lua (after changing them)"
	@echo "make fuzz            run every libFuzzer target for FUZZ_SECONDS (default 60) each"
	@echo "make haproxy-repeats write out haproxy/tally.cfg's repeated blocks (after changing one)"
	@echo "make bench-decision  unary 1 KB: upstream direct vs plain HAProxy vs gateway"
	@echo "make bench-accounting plain HAProxy vs gateway with accounting: unary, SSE, held memory,"
	@echo "                     count check (HAPROXY=3.4, or BENCH_HAPROXY_VERSIONS=\"2.6 3.4\" side by side)"
	@echo "make bench-journal   ns per journal entry: encode, append + flush (each, per 16)"
	@echo "make bench-writer    writer rows/s (BENCH_ROWS, BENCH_BATCH) vs a plain INSERT loop;"
	@echo "                     STORE=postgres: SQLite and PostgreSQL side by side"
	@echo "make bench-codec     SPOP decode/encode, record + usage parsing: operations/s"
	@echo "make bench-queryd    queryd p50/p95 per endpoint on 10M rows; writer rows/s polled vs idle;"
	@echo "                     STORE=postgres: SQLite and PostgreSQL side by side"
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

# The migrations, sql/migrations/NNN.sql upgrading version NNN - 1, in order; the
# generated file checks that there is one per version after the first.
MIGRATIONS := $(sort $(wildcard sql/migrations/*.sql))
$(BUILD)/gen/migrations_sql.c: $(MIGRATIONS)
	@mkdir -p $(dir $@)
	awk 'BEGIN { print "/* generated from the files in sql/migrations by the Makefile */"; \
	             print "#include \"db.h\""; print "const char *const tally_migrations_sql[] = {" } \
	     FNR == 1 { if (NR > 1) print "\t,"; n++ } \
	     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "\t\"" $$0 "\\n\"" } \
	     END { print "\t, (const char *)0"; print "};"; \
	           print "_Static_assert(" n " == DB_SCHEMA_VERSION - 1, \"one migration per schema version after the first\");" }' \
	  $^ > $@

$(BUILD)/obj/gen/migrations_sql.o: $(BUILD)/gen/migrations_sql.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# PostgreSQL's schema and migrations, the same way (common/db.c picks by the store).
# Its first schema is version 9: sql/pg/migrations/NNN.sql starts at 010.sql, and the
# entries below are NULL (no PostgreSQL database of an older version exists).
PG_FIRST_VERSION := 9
$(BUILD)/gen/pg_schema_sql.c: sql/pg/schema.sql
	@mkdir -p $(dir $@)
	awk 'BEGIN { print "/* generated from sql/pg/schema.sql by the Makefile */"; \
	             print "const char tally_pg_schema_sql[] =" } \
	     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "\"" $$0 "\\n\"" } \
	     END { print ";" }' $< > $@

PG_MIGRATIONS := $(sort $(wildcard sql/pg/migrations/*.sql))
$(BUILD)/gen/pg_migrations_sql.c: $(PG_MIGRATIONS)
	@mkdir -p $(dir $@)
	awk -v first=$(PG_FIRST_VERSION) \
	    'BEGIN { print "/* generated from the files in sql/pg/migrations by the Makefile */"; \
	             print "#include \"db.h\""; \
	             print "const char *const tally_pg_migrations_sql[DB_SCHEMA_VERSION] = {"; \
	             print "\t0"; top = first } \
	     FNR == 1 { name = FILENAME; sub(/.*\//, "", name); sub(/\.sql$$/, "", name); \
	                v = name + 0; if (v != top + 1) { print "sql/pg/migrations: " name ".sql where " \
	                sprintf("%03d", top + 1) ".sql was expected" > "/dev/stderr"; exit 1 } \
	                top = v; print "\t, [" v - 2 "] =" } \
	     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "\t\"" $$0 "\\n\"" } \
	     END { print "};"; \
	           print "_Static_assert(" top " == DB_SCHEMA_VERSION, \"a PostgreSQL migration per schema version after " first "\");" }' \
	  /dev/null $^ > $@

$(BUILD)/obj/gen/pg_schema_sql.o $(BUILD)/obj/gen/pg_migrations_sql.o: $(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# queryd's named queries, one C table of {name, text} (queryd/conn.h): sql/queries/NAME.sql
# as NAME, PostgreSQL's own text of some of them, sql/pg/queries/NAME.sql, as pg/NAME.
$(BUILD)/gen/queries_sql.c: $(sort $(wildcard sql/queries/*.sql)) $(sort $(wildcard sql/pg/queries/*.sql))
	@mkdir -p $(dir $@)
	awk 'BEGIN { print "/* generated from the files in sql/queries and sql/pg/queries by the Makefile */"; \
	             print "#include \"conn.h\""; print "const struct conn_sql conn_sql_files[] = {" } \
	     FNR == 1 { if (NR > 1) print "\t},"; name = FILENAME; sub(/^sql\/queries\//, "", name); \
	                sub(/^sql\/pg\/queries\//, "pg/", name); sub(/\.sql$$/, "", name); print "\t{ \"" name "\"," } \
	     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "\t\"" $$0 "\\n\"" } \
	     END { print "\t},"; print "};"; \
	           print "const size_t conn_sql_count = sizeof(conn_sql_files) / sizeof(conn_sql_files[0]);" }' \
	  $^ > $@

# The dashboard as served: queryd/dashboard/public/ plus uPlot from npm (make deps runs
# npm ci there), assembled in $(BUILD)/dashboard/ and embedded file by file.
DASH_PUBLIC := $(shell find queryd/dashboard/public -type f 2>/dev/null | sort)
UPLOT_DIST  := queryd/dashboard/node_modules/uplot/dist
DASH_VENDOR := $(UPLOT_DIST)/uPlot.iife.min.js $(UPLOT_DIST)/uPlot.min.css
$(UPLOT_DIST)/%:
	@echo "$@ is missing: run make deps (npm ci in queryd/dashboard)" >&2; exit 1

$(BUILD)/gen/assets_data.c: $(DASH_PUBLIC) $(DASH_VENDOR) scripts/embed-assets.sh
	rm -rf $(BUILD)/dashboard
	mkdir -p $(BUILD)/dashboard/vendor $(dir $@)
	cp -R queryd/dashboard/public/. $(BUILD)/dashboard/
	cp $(DASH_VENDOR) $(BUILD)/dashboard/vendor/
	bash scripts/embed-assets.sh $(BUILD)/dashboard > $@

$(BUILD)/obj/gen/queries_sql.o $(BUILD)/obj/gen/assets_data.o: $(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Iqueryd $(CFLAGS) -c $< -o $@

# queryd links neither keyhash.o nor libcrypto, libev, http-parser: every library
# linked is loaded, and its pages count in queryd's resident memory.
QUERYD_LIBS = $(call pkg_libs,libmicrohttpd,-lmicrohttpd) \
              $(call pkg_libs,msgpack libcjson sqlite3 libpq,-lmsgpackc -lcjson -lsqlite3 -lpq) -lpthread -lm
$(BUILD)/tally-queryd: $(BUILD)/obj/queryd/main.o $(QUERYD_OBJ) \
                       $(filter-out %/keyhash.o %/gwsecret.o,$(COMMON_OBJ))
	$(CC) $(LDFLAGS) $^ $(QUERYD_LIBS) -o $@

# tally-gen stores rows through the agent's own queue and writer.
$(BUILD)/tally-gen: $(BUILD)/obj/loadtest/tally-gen.o $(BUILD)/obj/loadtest/ndjson_row.o \
                    $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/tally-agent: $(BUILD)/obj/spoa/main.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/tallyctl: $(CTL_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/mock-upstream: $(BUILD)/obj/loadtest/mock-upstream.o $(BUILD)/obj/common/hash.o
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

# tally-stress reads the store it checks through common/db.c (a path or a URL).
$(BUILD)/tally-stress: $(BUILD)/obj/loadtest/tally-stress.o $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

unit-bins: $(UNIT_BIN) $(BUILD)/luarules $(BUILD)/contract
# HAProxy's side of the contract as the agent's tables say it (record.h's log-format,
# txnvar.h's variables, usage.h's members): tests/test_contract.py compares it with haproxy/.
$(BUILD)/contract: $(BUILD)/obj/scripts/contract.o
	$(CC) $(LDFLAGS) $^ -o $@
# haproxy/scanner.lua's copy of spoa/reqrules.c's lists, written by scripts/luarules.c
# (tests/test_lua.py fails while it is stale).
$(BUILD)/luarules: $(BUILD)/obj/scripts/luarules.o $(BUILD)/obj/spoa/reqrules.o
	$(CC) $(LDFLAGS) $^ -o $@
lua-rules: $(BUILD)/luarules
	$(BUILD)/luarules > $(BUILD)/reqrules.lua
	awk -v gen=$(BUILD)/reqrules.lua '/^-- BEGIN reqrules/ { while ((getline l < gen) > 0) print l; skip = 1 } \
	  !skip { print } /^-- END reqrules/ { skip = 0 }' haproxy/scanner.lua > haproxy/scanner.lua.new
	mv haproxy/scanner.lua.new haproxy/scanner.lua
haproxy-repeats:
	awk -f scripts/repeats.awk haproxy/tally.cfg > haproxy/tally.cfg.new
	mv haproxy/tally.cfg.new haproxy/tally.cfg
# test_usage and test_join read answers through haproxy/capture.lua itself, under an
# embedded Lua (tests/unit/luacap.c), as the answer-reader fuzz target does.
LUA_CFLAGS := -I/usr/include/lua5.4
LUA_LIBS   := -llua5.4
$(BUILD)/obj/tests/unit/luacap.o: CPPFLAGS += $(LUA_CFLAGS) -DTALLY_ROOT='"$(CURDIR)"'
$(BUILD)/test_usage $(BUILD)/test_join: $(BUILD)/test_%: $(BUILD)/obj/tests/unit/test_%.o \
    $(BUILD)/obj/tests/unit/luacap.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) $(LUA_LIBS) -o $@
# The parsers of tallyctl's modules (all of ctl/ but main) are tested alone too.
CTL_TEST_BIN := $(BUILD)/test_ctlargs $(BUILD)/test_priceimport
$(CTL_TEST_BIN:$(BUILD)/%=$(BUILD)/obj/tests/unit/%.o): CPPFLAGS += -Ictl
$(CTL_TEST_BIN): $(BUILD)/test_%: $(BUILD)/obj/tests/unit/test_%.o \
    $(filter-out %/ctl/tallyctl.o,$(CTL_OBJ)) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@
# test_db tests common/ alone: it builds while the agent's modules change.
$(BUILD)/test_db: $(BUILD)/obj/tests/unit/test_db.o $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@
# test_plan tests queryd's planner (queryd/plan.c), a pure module, alone.
$(BUILD)/obj/tests/unit/test_plan.o: CPPFLAGS += -Iqueryd
$(BUILD)/test_plan: $(BUILD)/obj/tests/unit/test_plan.o $(BUILD)/obj/queryd/plan.o $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@
# test_json tests queryd's JSON printer (queryd/json.c), a pure module, alone.
$(BUILD)/obj/tests/unit/test_json.o: CPPFLAGS += -Iqueryd
$(BUILD)/test_json: $(BUILD)/obj/tests/unit/test_json.o $(BUILD)/obj/queryd/json.o
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@
$(BUILD)/test_%: $(BUILD)/obj/tests/unit/test_%.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

# libFuzzer targets are built with clang from the module sources, never from $(BUILD)/obj.
# A target whose module lives outside spoa/ and common/ names it in FUZZ_EXTRA_SRC.
FUZZ_CFLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -Icommon -Ispoa -Iloadtest -I$(PG_INCLUDE) \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
fuzz-bins: $(FUZZ_BIN)
$(BUILD)/fuzz/fuzz_gen_ndjson: FUZZ_EXTRA_SRC := loadtest/ndjson_row.c
$(BUILD)/fuzz/fuzz_gen_ndjson: loadtest/ndjson_row.c
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(AGENT_SRC) $(COMMON_SRC) $(GEN_SRC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) $< $(FUZZ_EXTRA_SRC) $(AGENT_SRC) $(COMMON_SRC) $(GEN_SRC) $(LIBS) -o $@

$(BUILD)/fuzz/fuzz_answer: FUZZ_EXTRA_SRC := -Itests/unit -DTALLY_ROOT='"$(CURDIR)"' tests/unit/luacap.c \
    $(LUA_CFLAGS) $(LUA_LIBS)
$(BUILD)/fuzz/fuzz_answer: tests/unit/luacap.c
# haproxy/scanner.lua, the capture filter's request scanner, held to reqbody.c: an embedded
# Lua 5.4 loads the filter (and tests/lua/haproxy.lua) from this checkout at run time.
$(BUILD)/fuzz/fuzz_capture_request: tests/fuzz/fuzz_capture_request.c $(AGENT_SRC) $(COMMON_SRC) $(GEN_SRC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) $(LUA_CFLAGS) -DTALLY_ROOT='"$(CURDIR)"' $< $(AGENT_SRC) \
	  $(COMMON_SRC) $(GEN_SRC) $(LIBS) $(LUA_LIBS) -o $@

# queryd's parsers of peer input: the query parameters and the agent's control replies.
QFUZZ_SRC := queryd/params.c queryd/live.c queryd/json.c common/mpcheck.c common/tags.c
$(BUILD)/fuzz/fuzz_params $(BUILD)/fuzz/fuzz_live_reply: $(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(QFUZZ_SRC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -Iqueryd $< $(QFUZZ_SRC) $(LIBS) -o $@

# HAPROXY=2.6|3.0|3.2|3.4 runs the tests (make test, make run: the stack) on that HAProxy,
# which scripts/haproxy-version.sh prepares on first use (a Debian chroot in
# build/haproxy/); without it, haproxy from PATH (Debian 12's 2.6) as always.
HAPROXY ?=
HAPROXY_VERSIONS ?= 2.6 3.0 3.2 3.4
MATRIX_TESTS ?= tests/integration

test: deps
	$(MAKE) build unit-bins fuzz-bins
ifeq ($(HAPROXY),)
	TALLY_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests
else
	haproxy=$$(bash scripts/haproxy-version.sh $(HAPROXY)) && \
	  TALLY_HAPROXY=$$haproxy TALLY_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests
endif

# The docker-compose stack, built from this checkout and run on HAProxy 3.4 (needs
# root the first time: debootstrap for the base images, docker.io if missing).
# TALLY_COMPOSE_CLEAN=all removes the base images afterwards too.
test-compose:
	bash tests/compose/run.sh

# make run and make test as the README has a newcomer type them, in a container of
# Debian 12 with only make and git added (tests/fresh/run.sh; root, as test-compose).
test-fresh:
	bash tests/fresh/run.sh

# The integration suites on every HAPROXY_VERSIONS, one after the other (each log kept
# in $(BUILD)/haproxy/matrix-VERSION.log), then one line per version and the sum.
test-matrix: deps build
	@passed=0; failed=0; status=0; lines=(); \
	for v in $(HAPROXY_VERSIONS); do \
	  log=$(BUILD)/haproxy/matrix-$$v.log; mkdir -p $(BUILD)/haproxy; \
	  if ! haproxy=$$(bash scripts/haproxy-version.sh $$v); then \
	    lines+=("haproxy $$v: not available (scripts/haproxy-version.sh $$v failed)"); status=1; continue; \
	  fi; \
	  reported=$$("$$haproxy" -v | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p' | sed 's/-[0-9][^-]*$$//'); \
	  echo "=== haproxy $$reported ($$haproxy): $(MATRIX_TESTS)"; \
	  TALLY_HAPROXY=$$haproxy TALLY_BUILD=$(BUILD) $(PYTHON) -m pytest -q $(MATRIX_TESTS) 2>&1 | tee "$$log"; \
	  rc=$${PIPESTATUS[0]}; \
	  summary=$$(grep -E '[0-9]+ (passed|failed|errors?)( |,|$$)' "$$log" | tail -n 1); \
	  p=$$(grep -oE '[0-9]+ passed' <<<"$$summary" | grep -oE '[0-9]+' || echo 0); \
	  f=$$(grep -oE '[0-9]+ failed' <<<"$$summary" | grep -oE '[0-9]+' || echo 0); \
	  e=$$(grep -oE '[0-9]+ errors?' <<<"$$summary" | grep -oE '[0-9]+' || echo 0); \
	  f=$$((f + e)); \
	  if [ "$$rc" -ne 0 ] && [ "$$f" -eq 0 ]; then f=1; fi; \
	  [ "$$f" -eq 0 ] || status=1; \
	  passed=$$((passed + p)); failed=$$((failed + f)); \
	  lines+=("haproxy $$reported: $$p passed, $$f failed"); \
	done; \
	echo; printf '%s\n' "$${lines[@]}"; \
	echo "$$passed passed, $$failed failed"; \
	exit $$status

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

# deps, then the build in a make of its own: one that reads this file after deps ran.
run: deps
	@$(MAKE) --no-print-directory build
ifeq ($(HAPROXY),)
	@bash scripts/run.sh
else
	@haproxy=$$(bash scripts/haproxy-version.sh $(HAPROXY)) && TALLY_HAPROXY=$$haproxy bash scripts/run.sh
endif

# make run's stack as two nodes on one PostgreSQL (HAPROXY=... as for make run).
run-cluster: deps
	@$(MAKE) --no-print-directory build
	@$(if $(HAPROXY),haproxy=$$(bash scripts/haproxy-version.sh $(HAPROXY)) && TALLY_HAPROXY=$$haproxy) \
	  bash scripts/run-cluster.sh

# HAPROXY=3.4 runs it on that HAProxy; BENCH_LONG=1 sends long prompts (see the script).
bench-decision: deps build
ifeq ($(HAPROXY),)
	@bash loadtest/bench-decision.sh
else
	@haproxy=$$(bash scripts/haproxy-version.sh $(HAPROXY)) && TALLY_HAPROXY=$$haproxy bash loadtest/bench-decision.sh
endif

# HAPROXY=3.4 runs it on that HAProxy; BENCH_HAPROXY_VERSIONS="2.6 3.4" on each, interleaved.
bench-accounting: deps build
	@BENCH_HAPROXY_VERSIONS="$(or $(HAPROXY),$(BENCH_HAPROXY_VERSIONS))" bash loadtest/bench-accounting.sh

$(BUILD)/bench-journal: $(BUILD)/obj/loadtest/bench-journal.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

bench-journal: $(BUILD)/bench-journal
	$(BUILD)/bench-journal

$(BUILD)/bench-codec: $(BUILD)/obj/loadtest/bench-codec.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

bench-codec: $(BUILD)/bench-codec
	$(BUILD)/bench-codec

$(BUILD)/bench-writer: $(BUILD)/obj/loadtest/bench-writer.o $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

# STORE=postgres: also on a private PostgreSQL cluster the script starts, side by side.
bench-writer: $(BUILD)/bench-writer
	@BUILD=$(BUILD) STORE=$(STORE) bash loadtest/bench-writer.sh

$(BUILD)/queryd-probe: $(BUILD)/obj/loadtest/queryd-probe.o
	$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

# QUERYD (default $(BUILD)/tally-queryd) and BENCH_ROWS (10000000) can be overridden.
# STORE=postgres: the same latencies on a private PostgreSQL cluster too, side by side.
bench-queryd: deps build $(BUILD)/queryd-probe
	@BUILD=$(BUILD) STORE=$(STORE) bash loadtest/bench-queryd.sh

# loadtest/perf.sh's cluster stages (docs/performance.md, "Several nodes"); the limits run
# lasts PERF_CLUSTER_LIMITS_S (180) seconds on 1 node, then on 3.
.PHONY: bench-cluster
bench-cluster: deps build
	@TALLY_BUILD=$(BUILD) bash loadtest/perf.sh cluster cluster-limits

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
