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

/* The "percentiles" list of a latency in the JSON report: LG_REPORT_PCT_STEPS
 * points per halving of the distance to 100 % while 1/(1-p) stays within the
 * count, then [100, max]. A count is below 2^64, so at most 64 halvings (and
 * the 0 % point) and the max: LG_REPORT_PCT_POINTS_MAX points, which a reader
 * sized by it draws all of, the max included. */
#define LG_REPORT_PCT_STEPS 5
#define LG_REPORT_PCT_POINTS_MAX (LG_REPORT_PCT_STEPS * 64 + 2)

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

/* A reserve run's part (report_rsv.c): the reservations' ends and the item's
 * totals, as text (before the verdict) and as the "reservations" object. */
void lg_report_rsv_text(FILE *f, const lg_opts *o, const lg_run *r);
json_t *lg_report_rsv_json(const lg_opts *o, const lg_run *r);

/* The faults' part (report_fault.c): each --fault's command and end command,
 * when they ran, how long they took, exit status, first line of output; as
 * text (nothing without faults) and as the "faults" array. */
void lg_report_faults_text(FILE *f, const lg_run *r);
json_t *lg_report_faults_json(const lg_run *r);

/* The history check's part (report_history.c): a line before the verdict
 * (whether it ran, its reads and what it found) and the "history" object. */
void lg_report_history_text(FILE *f, const lg_opts *o, const lg_run *r);
json_t *lg_report_history_json(const lg_opts *o, const lg_run *r);

#endif
