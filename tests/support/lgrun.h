/* lgrun.h - runs build/loadgen to its end for a test and keeps what it said:
 * its exit status, its output and its --json report. The suites that drive
 * loadgen as a process (test_loadgen, test_lg_profile_runs, test_lg_faults,
 * test_examples) share it. A failure of the expected exit status prints
 * loadgen's output, so the failing test explains itself. */
#ifndef TEST_LGRUN_H
#define TEST_LGRUN_H

#include <jansson.h>

typedef struct th_lg_outcome {
    int status;   /* loadgen's exit status (th_run's) */
    char *text;   /* its stdout + stderr, NULL when unreadable */
    json_t *json; /* its --json report, NULL when none was written */
} th_lg_outcome;

/* Runs loadgen (the binary's path) with --json DIR/loadgen-<n>.json, then
 * pre[] and args[] (each NULL-terminated, pre may be NULL), its output in
 * DIR/loadgen-<n>.out, killed after timeout_ms. Prints the output when the
 * status is not expect. */
th_lg_outcome th_lg_run(const char *loadgen, const char *dir, int expect,
                        const char *const pre[], const char *const args[], int timeout_ms);

void th_lg_outcome_free(th_lg_outcome *o);

/* Whether o's report lists a violation of kind ("oversold", ...); 0 when it
 * has no report. */
int th_lg_has_violation(const th_lg_outcome *o, const char *kind);

#endif
