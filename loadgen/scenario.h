/* scenario.h - the named contention scenarios (hot, spread, renew, interrupt,
 * compare, cart, flash, reserve): their default parameters, the stockd flags
 * they need, and what each expects to see beyond the invariants (an interrupt run that saw no
 * lock_interrupted answer proved nothing, so it must not PASS). */
#ifndef LG_SCENARIO_H
#define LG_SCENARIO_H

#include <stdint.h>

#include "loadgen/answer.h"

/* The load a scenario runs unless flags say otherwise (lg_opts's fields). */
typedef struct lg_scenario_load {
    int concurrency;
    long long requests;
    int items;
    long long stock;
    int qmin, qmax; /* quantity per request (per line of a cart) */
    int work_ms;
    int lmin, lmax; /* lines per cart; 0 = POST /reduceStock */
    int buyers;     /* a flash sale's buyers (--buyers); 0 = no flash sale */
    int reserve;    /* 1: reservations (reserve.h) instead of deductions */
} lg_scenario_load;

typedef struct lg_scenario {
    const char *name;
    const char *summary;      /* one line */
    const char *server_flags; /* stockd flags the scenario needs, "" when none */
    const char *expects;      /* what it checks beyond the invariants */
    lg_scenario_load load;
} lg_scenario;

/* The i-th scenario (0-based) or NULL past the end. */
const lg_scenario *lg_scenario_at(int i);

/* The scenario called name, or NULL. */
const lg_scenario *lg_scenario_find(const char *name);

/* What a run produced, as far as scenario expectations care. */
typedef struct lg_expect_in {
    uint64_t counts[LG_OUT_COUNT]; /* final outcome of each request, whole run */
    uint64_t ok_min_us;            /* fastest 200 in microseconds; 0 when none */
    int work_ms;                   /* workMs the run sent */
} lg_expect_in;

#define LG_EXPECT_MAX 4
#define LG_EXPECT_TEXT 240

/* Checks the scenario called name (unknown names and "" expect nothing). Writes
 * one line per unmet expectation into out and returns how many (0 = all met). */
int lg_scenario_expect(const char *name, const lg_expect_in *in,
                       char out[LG_EXPECT_MAX][LG_EXPECT_TEXT]);

#endif
