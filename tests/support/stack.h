/* stack.h - what a fault test runs against: three stockd replicas on one
 * database (a SQLite file, or a PostgreSQL database after th_stack_use_pg)
 * and one item, and loadgen runs against them whose reports are read back. Replica 0 is the one faults happen to; loadgen drives the
 * others (s->targets). The helpers fail the running cmocka test when
 * something does not start. */
#ifndef TEST_STACK_H
#define TEST_STACK_H

#include <sys/types.h>

#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define TH_REPLICAS 3

typedef struct th_stack {
    th_stockd r[TH_REPLICAS];
    const char *dir;   /* where the database, logs and loadgen's reports go */
    char db[256];      /* the file, or the URL */
    char targets[256]; /* replicas 1.., comma-separated, for loadgen */
    long long item;
} th_stack;

/* From now on stacks use a fresh database on pg (NULL: SQLite again). */
void th_stack_use_pg(const th_pg *pg);

/* Three replicas on a fresh database <dir>/<name>.db (or the database name
 * on PostgreSQL, '-' read as '_') against redis, with the
 * common lock flags (lease 1 s, waits up to 8 s, workMs allowed), then the
 * flags in all (every replica) and first (replica 0); either may be NULL.
 * Creates one item of the given stock. */
void th_stack_start(th_stack *s, const char *dir, const th_redis *redis, const char *name,
                    const char *const all[], const char *const first[], long long stock);

/* SIGTERM to every replica still running. */
void th_stack_stop(th_stack *s);

/* The item's stock, read over HTTP from replica 1. */
long long th_stack_stock(const th_stack *s);

/* Starts loadgen in the background on the stack's item against targets:
 * its report goes to <dir>/<name>.json, its output to <dir>/<name>.out. */
pid_t th_loadgen_start(const th_stack *s, const char *name, const char *targets,
                       const char *duration, const char *concurrency, const char *work_ms);

/* Waits for loadgen; fails the test with its output when its exit status
 * is not expected (0: PASS, 1: FAIL). */
void th_loadgen_expect(const th_stack *s, pid_t pid, const char *name, int expected);

/* outcomes.<key> of loadgen's report for run name. */
long long th_loadgen_outcome(const th_stack *s, const char *name, const char *key);

#endif
