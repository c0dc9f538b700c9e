# Makefile - builds the lock library, stockd, loadgen and the tests into build/.
# `make help` lists the targets. GNU make.

SHELL := /bin/bash
PKG_CONFIG ?= pkg-config
BUILD ?= build
CFLAGS ?= -O2 -g
SANFLAGS ?=

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wwrite-strings \
        -Werror=implicit-function-declaration
# Only the tests need cmocka, libcurl (their own HTTP calls) and zlib (to read
# the report test's screenshots), so a plain
# `make` (the Docker build) works without them. GnuTLS is stockd's HTTPS
# (through libmicrohttpd, which links it already) and its API tokens'
# SHA-256 (server/auth.c), and loadgen's https:// client. libsystemd is
# stockd's sd_notify (server/notify.c): readiness under a Type=notify unit.
PKGS := hiredis libmicrohttpd gnutls sqlite3 libpq jansson libsystemd
TEST_PKGS := cmocka libcurl zlib
# CPPFLAGS, CFLAGS and LDFLAGS are the caller's too: the Debian build passes
# dpkg-buildflags' hardening (_FORTIFY_SOURCE, the stack protector, RELRO).
ALL_CFLAGS = -std=c11 $(CPPFLAGS) $(CFLAGS) $(WARN) -pthread -D_GNU_SOURCE -MMD -MP $(SANFLAGS) \
             -I. $(shell $(PKG_CONFIG) --cflags $(PKGS))
LDFLAGS += -pthread $(SANFLAGS)
LIBS_LOCK = $(shell $(PKG_CONFIG) --libs hiredis)
LIBS_SERVER = $(LIBS_LOCK) $(shell $(PKG_CONFIG) --libs libmicrohttpd gnutls sqlite3 libpq jansson \
              libsystemd) -lm
# loadgen's HTTP client parses answers with Debian's libhttp-parser-dev, which
# ships no pkg-config file: its header is in /usr/include, the library is
# linked by name.
LIBS_HTTP_PARSER := -lhttp_parser
LIBS_LOADGEN = $(shell $(PKG_CONFIG) --libs jansson gnutls) $(LIBS_HTTP_PARSER) -lm
LIBS_TEST = $(LIBS_SERVER) $(LIBS_LOADGEN) $(shell $(PKG_CONFIG) --libs $(TEST_PKGS))

LOCK_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard lock/*.c))
SERVER_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out server/main.c,$(wildcard server/*.c)))
# Storage backends: each is server/store_<name>.c with its migrations in schema/<name>/.
STORE_BACKENDS := sqlite postgres
SERVER_OBJ += $(STORE_BACKENDS:%=$(BUILD)/obj/gen/migrations_%.o)
LOADGEN_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out loadgen/main.c,$(wildcard loadgen/*.c)))
# What every suite links: the shared helpers of tests/support/ (the harness,
# checked calls, log readers, fakes, a private PostgreSQL, ...).
TEST_SUPPORT_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/support/*.c))
TESTS := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/unit/test_*.c tests/it/test_*.c))

# The shared library: versioned from dlock.h, its soname carries the major.
DLOCK_VERSION := $(shell sed -n 's/^\#define DLOCK_VERSION "\(.*\)"/\1/p' lock/dlock.h)
DLOCK_SONAME := libdlock.so.$(firstword $(subst ., ,$(DLOCK_VERSION)))
DLOCK_SO := libdlock.so.$(DLOCK_VERSION)
LOCK_PIC_OBJ := $(patsubst %.c,$(BUILD)/pic/%.o,$(wildcard lock/*.c))

BINS := $(BUILD)/libdlock.a
ifneq ($(wildcard server/main.c),)
BINS += $(BUILD)/stockd
endif
ifneq ($(wildcard loadgen/main.c),)
BINS += $(BUILD)/loadgen
endif

# libdlock's public headers, split by use: dlock.h (the blocking core, over
# dlock_base.h: what all of them name, and all the library's files see) and,
# each including it, the asynchronous calls, the semaphore, the read-write lock.
DLOCK_HEADERS := lock/dlock.h lock/dlock_base.h lock/dlock_async.h lock/dlock_sem.h lock/dlock_rw.h

# Man pages, laid out in build/man as under share/man (MANPATH=build/man man
# stockd): man/*.in, with the options put in by man/mangen.c from the tables
# that parse them, and a page per function of the public headers that opens
# libdlock(3).
MAN_PAGES := $(BUILD)/man/man8/stockd.8 $(BUILD)/man/man1/loadgen.1 $(BUILD)/man/man3/libdlock.3
DLOCK_FUNCS := ${shell sed -n 's/^[a-z].*[ *]\(dlock_[a-z0-9_]*\)(.*/\1/p' $(DLOCK_HEADERS)}
MAN_LINKS := $(DLOCK_FUNCS:%=$(BUILD)/man/man3/%.3)
ifneq ($(wildcard man/mangen.c),)
BINS += $(MAN_PAGES) $(MAN_LINKS)
endif

.SECONDARY:
.PHONY: all deps test check asan tsan fuzz valgrind demo demo-up demo-down bench clean help \
        test-fresh docker-demo install uninstall mutants deb test-deb

all: $(BINS)

help:
	@echo "make            build build/libdlock.a, build/stockd, build/loadgen"
	@echo "make deps       install missing Debian packages (apt-get, via sudo when not root)"
	@echo "make test       deps, build, run every unit and integration test"
	@echo "make asan       the same tests built with AddressSanitizer + UBSan (build/asan)"
	@echo "make tsan       the same tests built with ThreadSanitizer (build/tsan)"
	@echo "make mutants    each break of tests/mutants.txt must fail its suite (2-4 minutes)"
	@echo "make fuzz       libFuzzer on the request parser and the router (FUZZ_SECONDS=60 each)"
	@echo "make valgrind   a replica under valgrind through a short load; fails on a definite leak"
	@echo "make demo       three stockd replicas + redis-server, loadgen scenarios, verdicts"
	@echo "make demo-up    start the demo stack and leave it running; make demo-down stops it"
	@echo "                (FRONT=haproxy: haproxy in front, HTTPS on 8443)"
	@echo "make bench      every benchmark, about 6 minutes (see bench/README.md)"
	@echo "make test-fresh (root) make demo and make test in a fresh bookworm chroot"
	@echo "make docker-demo (root) the compose demo in Docker: replicas, loadgen, a killed replica"
	@echo "make install    stockd, loadgen, libdlock (.a, .so, headers, dlock.pc), man pages"
	@echo "                under PREFIX (/usr/local)"
	@echo "make deb        the Debian packages in build/deb/, checked by lintian"
	@echo "make test-deb   (root) those packages installed and run under systemd, in Docker"

deps:
	@scripts/deps.sh

# deps first, then the build: `make -j test` must not compile before packages exist.
test: deps
	@$(MAKE) --no-print-directory check

# TEST_SHELL=no leaves out tests/sh/ (docs, layers, install, man pages, run.sh):
# they read the sources and the default build, so a sanitizer run has nothing
# to add to what make test found. TEST_SKIP names suites left out: under a
# sanitizer, the compose services run as processes (their stockd paths are
# test_postgres's and test_sentinel's), the compose file's static checks and
# the report's screenshot in Chromium.
# Suites that mostly wait (for a fault, a clock, a database, a handshake) run
# under one sanitizer, not both: the store's, the HTTP faults', the TLS
# suite's, the Prometheus server's and the Python examples' under ASan (their SQL
# and buffers, loadgen's --api and --fault beside services that sleep; the
# drain's threads run under TSan at every stockd stop of every suite), Redis's
# faults and the lock over several servers under TSan (the lock's threads
# while a server goes away or a claim is voted on); every other suite runs
# under both.
TEST_SHELL ?= yes
TEST_SKIP ?=
SAN_SKIP := test_docker_run test_docker test_report
ASAN_ONLY := test_postgres test_item_totals test_pg_outage test_disk_full test_whole_orders \
             test_store test_reservations test_faults test_tls test_prometheus test_pg_hosts \
             test_pg_catalog test_pg_failover test_examples test_front_door test_patroni
TSAN_ONLY := test_failover test_clock_step test_lock_orphans test_sentinel test_cluster \
             test_lock_rw test_lock_sem
check: all $(TESTS)
	@TEST_SHELL=$(TEST_SHELL) TEST_SKIP="$(TEST_SKIP)" tests/run.sh $(BUILD)

asan: deps
	@$(MAKE) --no-print-directory check BUILD=build/asan TEST_SHELL=no TEST_SKIP="$(SAN_SKIP) $(TSAN_ONLY)" \
	    SANFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

tsan: deps
	@$(MAKE) --no-print-directory check BUILD=build/tsan TEST_SHELL=no TEST_SKIP="$(SAN_SKIP) $(ASAN_ONLY)" \
	    SANFLAGS="-fsanitize=thread"

# The breaks are applied to a copy of the tree, built in build/mutants.
mutants: deps
	@MUTANTS_SHARDS=$${MUTANTS_SHARDS:-2} scripts/mutants.sh

valgrind: deps
	@scripts/deps.sh valgrind
	@$(MAKE) --no-print-directory all
	@scripts/valgrind.sh

bench: deps
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all $(BUILD)/bench/lockbench
	@bench/run.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh run

demo-up: deps
	@$(MAKE) --no-print-directory all
	@$(if $(FRONT),DEMO_FRONT=$(FRONT) )scripts/demo.sh up

demo-down:
	@scripts/demo.sh down

# Both install what they need themselves (scripts/deps.sh fresh / docker).
test-fresh:
	@scripts/test-fresh.sh

docker-demo:
	@scripts/docker-demo.sh

# From a copy of the tracked files in build/deb/src (dpkg-buildpackage writes
# beside the tree it builds); installs the packaging tools itself.
deb:
	@scripts/deb.sh

# The packages installed with apt in a fresh bookworm root and run under a
# real systemd, in a container (scripts/test-deb.sh; needs a Docker engine).
test-deb: deb
	@scripts/test-deb.sh

# libFuzzer targets (clang): new inputs go to build/fuzz/corpus-*, the seeds in
# tests/fuzz/corpus/ are only read; a crash leaves build/fuzz/crash-* and fails.
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=undefined
FUZZ_TARGETS := request route

fuzz:
	@scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@set -e; for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(BUILD)/fuzz/corpus-$$t; \
	    echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	        -artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus-$$t tests/fuzz/corpus/$$t \
	        2>&1 | grep -E '^(INFO: seed|#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY)' ; \
	    test "$${PIPESTATUS[0]}" -eq 0; \
	done

$(BUILD)/fuzz/fuzz_request: tests/fuzz/fuzz_request.c server/request.c tests/support/fields.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ $(shell $(PKG_CONFIG) --libs jansson)

$(BUILD)/fuzz/fuzz_route: tests/fuzz/fuzz_route.c server/route.c server/request.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ $(shell $(PKG_CONFIG) --libs jansson)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# Each backend's schema travels inside the binary (see scripts/embed-sql.sh).
.SECONDEXPANSION:
$(BUILD)/gen/migrations_%.c: $$(sort $$(wildcard schema/%/*.sql)) scripts/embed-sql.sh
	@mkdir -p $(@D)
	scripts/embed-sql.sh $@ store_$*_migrations $(sort $(wildcard schema/$*/*.sql))

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# Made anew: a member of a source file since removed must not linger in it.
$(BUILD)/libdlock.a: $(LOCK_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

# Position-independent, and hidden but for what the public headers declare.
$(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(BUILD)/$(DLOCK_SO): $(LOCK_PIC_OBJ)
	$(CC) -shared -Wl,-soname,$(DLOCK_SONAME) -Wl,--no-undefined $(LDFLAGS) -o $@ $^ $(LIBS_LOCK)

$(BUILD)/dlock.pc: lock/dlock.pc.in $(DLOCK_HEADERS)
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(DLOCK_VERSION)|' $< > $@

# make install PREFIX=... [DESTDIR=...]: stockd (SBINDIR: a daemon), loadgen,
# libdlock (static and shared), its
# headers, dlock.pc, the man pages and loadgen's --api profiles (stockd's own
# API as a profile, a start for one's own). dlock.pc holds PREFIX, so it is made again for
# each install. tests/sh/test_install.sh installs into a private prefix and
# builds lock/README.md's example against it.
PREFIX ?= /usr/local
SBINDIR ?= $(PREFIX)/sbin
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PROFILEDIR ?= $(PREFIX)/share/loadgen/profiles

install: $(BUILD)/stockd $(BUILD)/loadgen $(BUILD)/libdlock.a $(BUILD)/$(DLOCK_SO) $(MAN_PAGES) \
         $(MAN_LINKS)
	@rm -f $(BUILD)/dlock.pc
	@$(MAKE) --no-print-directory $(BUILD)/dlock.pc
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR)
	install -m 755 $(BUILD)/stockd $(DESTDIR)$(SBINDIR)/
	install -m 755 $(BUILD)/loadgen $(DESTDIR)$(BINDIR)/
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 644 $(BUILD)/libdlock.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/$(DLOCK_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf $(DLOCK_SO) $(DESTDIR)$(LIBDIR)/$(DLOCK_SONAME)
	ln -sf $(DLOCK_SONAME) $(DESTDIR)$(LIBDIR)/libdlock.so
	install -m 644 $(DLOCK_HEADERS) $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(BUILD)/dlock.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8
	install -m 644 $(BUILD)/man/man1/loadgen.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(BUILD)/man/man3/libdlock.3 $(MAN_LINKS) $(DESTDIR)$(MANDIR)/man3/
	install -m 644 $(BUILD)/man/man8/stockd.8 $(DESTDIR)$(MANDIR)/man8/
	install -d $(DESTDIR)$(PROFILEDIR)
	install -m 644 loadgen/profiles/*.json $(DESTDIR)$(PROFILEDIR)/

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/stockd $(DESTDIR)$(BINDIR)/loadgen \
	    $(DESTDIR)$(LIBDIR)/libdlock.a $(DESTDIR)$(LIBDIR)/$(DLOCK_SO) \
	    $(DESTDIR)$(LIBDIR)/$(DLOCK_SONAME) $(DESTDIR)$(LIBDIR)/libdlock.so \
	    $(DLOCK_HEADERS:lock/%=$(DESTDIR)$(INCLUDEDIR)/%) $(DESTDIR)$(LIBDIR)/pkgconfig/dlock.pc \
	    $(DESTDIR)$(MANDIR)/man1/loadgen.1 $(DESTDIR)$(MANDIR)/man8/stockd.8 \
	    $(DESTDIR)$(MANDIR)/man3/libdlock.3 $(DLOCK_FUNCS:%=$(DESTDIR)$(MANDIR)/man3/%.3) \
	    $(patsubst loadgen/profiles/%,$(DESTDIR)$(PROFILEDIR)/%,$(wildcard loadgen/profiles/*.json))
	-rmdir $(DESTDIR)$(PROFILEDIR) $(DESTDIR)$(PREFIX)/share/loadgen 2>/dev/null

$(BUILD)/man/mangen: $(BUILD)/obj/man/mangen.o $(BUILD)/libstockd.a $(BUILD)/libloadgen.a \
                     $(BUILD)/libdlock.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_SERVER) $(LIBS_LOADGEN)

$(BUILD)/man/man8/%.8: man/%.8.in $(BUILD)/man/mangen
	@mkdir -p $(@D)
	$(BUILD)/man/mangen $< > $@.tmp && mv $@.tmp $@

$(BUILD)/man/man1/%.1: man/%.1.in $(BUILD)/man/mangen
	@mkdir -p $(@D)
	$(BUILD)/man/mangen $< > $@.tmp && mv $@.tmp $@

$(BUILD)/man/man3/libdlock.3: man/libdlock.3.in $(DLOCK_HEADERS)
	@mkdir -p $(@D)
	sed 's|@DLOCK_VERSION@|$(DLOCK_VERSION)|g' $< > $@

$(MAN_LINKS): $(BUILD)/man/man3/%.3:
	@mkdir -p $(@D)
	@echo '.so man3/libdlock.3' > $@

$(BUILD)/libstockd.a: $(SERVER_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/libloadgen.a: $(LOADGEN_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/stockd: $(BUILD)/obj/server/main.o $(BUILD)/libstockd.a $(BUILD)/libdlock.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_SERVER)

$(BUILD)/loadgen: $(BUILD)/obj/loadgen/main.o $(BUILD)/libloadgen.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_LOADGEN)

TEST_LIBS := $(if $(SERVER_OBJ),$(BUILD)/libstockd.a) $(if $(LOADGEN_OBJ),$(BUILD)/libloadgen.a) \
             $(BUILD)/libdlock.a

$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(shell $(PKG_CONFIG) --cflags $(TEST_PKGS)) -c -o $@ $<

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT_OBJ) $(TEST_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_TEST)

$(BUILD)/bench/logbench: bench/logbench.c $(BUILD)/obj/server/log.o
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^

$(BUILD)/bench/lockbench: bench/lockbench.c bench/serverstats.c bench/serverstats.h \
                         $(BUILD)/libdlock.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ bench/lockbench.c bench/serverstats.c \
	    $(BUILD)/libdlock.a $(LIBS_LOCK)

$(BUILD)/bench/fifobench: bench/fifobench.c $(BUILD)/libdlock.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libdlock.a $(LIBS_LOCK)

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/pic -name '*.d' 2>/dev/null)
# the compiler writes them (-MMD); nothing is to remake them, or make's own
# rule "%: %.o" chains gen/migrations_X.d.o out of a backend called X.d
$(BUILD)/obj/%.d $(BUILD)/pic/%.d: ;
