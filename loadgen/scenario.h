/* scenario.h - the named contention scenarios (hot, spread, renew, interrupt,
 * compare): their default parameters, the stockd flags they need, and what
 * each expects to see beyond the invariants (an interrupt run that saw no
 * lock_interrupted answer proved nothing, so it must not PASS). */
#ifndef LG_SCENARIO_H
#define LG_SCENARIO_H

#include <stdint.h>

#include "loadgen/answer.h"
#include "loadgen/opts.h"

typedef struct lg_scenario {
    const char *name;
    const char *summary;      /* one line */
    const char *server_flags; /* stockd flags the scenario needs, "" when none */
    const char *expects;      /* what it checks beyond the invariants */
} lg_scenario;

/* The i-th scenario (0-based) or NULL past the end. */
const lg_scenario *lg_scenario_at(int i);

/* The scenario called name, or NULL. */
const lg_scenario *lg_scenario_find(const char *name);

/* Sets the scenario's defaults in o (call on a defaulted o, before flags). */
void lg_scenario_apply(const lg_scenario *s, lg_opts *o);

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
