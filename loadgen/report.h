/* report.h - what loadgen prints: the text report of a run (counts by outcome,
 * throughput, latency percentiles overall / ok-only / per target, the items and
 * the verdict), the side-by-side compare table, and the same data as JSON.
 * Writes only to the stream main hands it. */
#ifndef LG_REPORT_H
#define LG_REPORT_H

#include <stdio.h>

#include <jansson.h>

#include "loadgen/opts.h"
#include "loadgen/run.h"

/* The full text report of one run, ending with the VERDICT line (none in raw mode). */
void lg_report_text(FILE *f, const lg_opts *o, const lg_run *r);

/* The compare table for runs[0..n) and its overall verdict line; returns
 * LG_PASS when every group but "none" passed, else LG_FAIL. */
int lg_report_compare(FILE *f, const lg_opts *o, const lg_run *runs, int n);

/* A new JSON object for one run (the caller owns it: json_decref), or NULL
 * when out of memory. */
json_t *lg_report_json(const lg_opts *o, const lg_run *r);

/* {"scenario":"compare","verdict":...,"runs":[...]} for compare, or NULL. */
json_t *lg_report_compare_json(const lg_opts *o, const lg_run *runs, int n, int verdict);

#endif
