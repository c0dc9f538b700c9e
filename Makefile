# Makefile - builds the lock library, stockd, loadgen and the tests into build/.
# `make help` lists the targets. GNU make.

PKG_CONFIG ?= pkg-config
BUILD ?= build
CFLAGS ?= -O2 -g
SANFLAGS ?=

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wwrite-strings \
        -Werror=implicit-function-declaration
ALL_CFLAGS = -std=c11 $(CFLAGS) $(WARN) -pthread -D_GNU_SOURCE -MMD -MP $(SANFLAGS) \
             -I. $(shell $(PKG_CONFIG) --cflags $(PKGS))
LDFLAGS += -pthread $(SANFLAGS)
PKGS := hiredis libmicrohttpd sqlite3 jansson libcurl cmocka
LIBS_LOCK = $(shell $(PKG_CONFIG) --libs hiredis)
LIBS_SERVER = $(LIBS_LOCK) $(shell $(PKG_CONFIG) --libs libmicrohttpd sqlite3 jansson) -lm
LIBS_LOADGEN = $(shell $(PKG_CONFIG) --libs libcurl jansson) -lm
LIBS_TEST = $(LIBS_SERVER) $(LIBS_LOADGEN) $(shell $(PKG_CONFIG) --libs cmocka)

LOCK_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard lock/*.c))
SERVER_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out server/main.c,$(wildcard server/*.c)))
SERVER_OBJ += $(if $(SERVER_OBJ),$(BUILD)/obj/gen/migrations.o)
LOADGEN_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out loadgen/main.c,$(wildcard loadgen/*.c)))
HARNESS_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/*.c))
TESTS := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/unit/test_*.c tests/it/test_*.c))
SCHEMA := $(sort $(wildcard schema/*.sql))

BINS := $(BUILD)/libdlock.a
ifneq ($(wildcard server/main.c),)
BINS += $(BUILD)/stockd
endif
ifneq ($(wildcard loadgen/main.c),)
BINS += $(BUILD)/loadgen
endif

.SECONDARY:
.PHONY: all deps test check asan tsan demo demo-up demo-down bench clean help

all: $(BINS)

help:
	@echo "make            build build/libdlock.a, build/stockd, build/loadgen"
	@echo "make deps       install missing Debian packages (apt-get, via sudo when not root)"
	@echo "make test       deps, build, run every unit and integration test"
	@echo "make asan       the same tests built with AddressSanitizer + UBSan (build/asan)"
	@echo "make tsan       the same tests built with ThreadSanitizer (build/tsan)"
	@echo "make demo       three stockd replicas + redis-server, loadgen scenarios, verdicts"
	@echo "make demo-up    start the demo stack and leave it running; make demo-down stops it"
	@echo "make bench      benchmarks (see bench/README.md)"

deps:
	@scripts/deps.sh

# deps first, then the build: `make -j test` must not compile before packages exist.
test: deps
	@$(MAKE) --no-print-directory check

check: all $(TESTS)
	@tests/run.sh $(BUILD)

asan: deps
	@$(MAKE) --no-print-directory check BUILD=build/asan \
	    SANFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

tsan: deps
	@$(MAKE) --no-print-directory check BUILD=build/tsan SANFLAGS="-fsanitize=thread"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The schema travels inside the binary (see scripts/embed-sql.sh).
$(BUILD)/gen/migrations.c: $(SCHEMA) scripts/embed-sql.sh
	@mkdir -p $(@D)
	scripts/embed-sql.sh $@ $(SCHEMA)

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/libdlock.a: $(LOCK_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/libstockd.a: $(SERVER_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/libloadgen.a: $(LOADGEN_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/stockd: $(BUILD)/obj/server/main.o $(BUILD)/libstockd.a $(BUILD)/libdlock.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_SERVER)

$(BUILD)/loadgen: $(BUILD)/obj/loadgen/main.o $(BUILD)/libloadgen.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_LOADGEN)

TEST_LIBS := $(if $(SERVER_OBJ),$(BUILD)/libstockd.a) $(if $(LOADGEN_OBJ),$(BUILD)/libloadgen.a) \
             $(BUILD)/libdlock.a

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(HARNESS_OBJ) $(TEST_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_TEST)

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
