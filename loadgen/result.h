/* result.h - what a load run measured: counts and latency histograms per
 * target and in total, and one record per request for the verdict. Filled by
 * lg_load_join (load.h); read by the verdict and the report. */
#ifndef LG_RESULT_H
#define LG_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/answer.h"
#include "loadgen/hist.h"
#include "loadgen/series.h"
#include "loadgen/verdict.h"

#define LG_EXAMPLE_MAX 448

/* Counts and latencies of one target (or of all of them). */
typedef struct lg_tally {
    uint64_t counts[LG_OUT_COUNT]; /* final outcome of each request */
    uint64_t retries;              /* attempts beyond the first */
    hist *all;                     /* us, every request that got an HTTP answer */
    hist *ok;                      /* us, the LG_OUT_OK ones */
    lg_series series;              /* the outcomes over the run's time */
} lg_tally;

typedef struct lg_result {
    double elapsed_s;  /* first send to last answer */
    int64_t start_ns;  /* lg_now_ns() at the first send: later times on the run's clock */
    int ntargets;
    lg_tally *targets; /* [ntargets], same order as the load's targets */
    lg_tally total;
    int nbatch;        /* one batch of records per load thread */
    lg_batch *batches; /* [nbatch]; empty in raw mode */
    char run_id[40];   /* requestIds of the run are "<run_id>-<batch>-<seq>" */
    char example[LG_OUT_COUNT][LG_EXAMPLE_MAX]; /* first explanation per outcome, or "" */
} lg_result;

/* Zeroes t and gives it empty histograms. 0 or LG_ERR_NOMEM (t then holds
 * whatever was allocated; lg_tally_free releases it). */
int lg_tally_init(lg_tally *t);

/* Counts one request's final outcome, answered latency_us after it was (due
 * to be) sent and t_ns after the run started; a transport error has no
 * latency. */
void lg_tally_record(lg_tally *t, int outcome, uint64_t latency_us, int64_t t_ns);

/* Adds src's counts, histograms and series into dst. */
void lg_tally_merge(lg_tally *dst, const lg_tally *src);

void lg_tally_free(lg_tally *t);

/* Total requests with a final outcome in t. */
uint64_t lg_tally_requests(const lg_tally *t);

/* Frees what res owns (not res itself) and zeroes it. */
void lg_result_free(lg_result *res);

/* The record of one of this run's requestIds, with *lines set to its lines, or
 * NULL when request_id is not of this run (other prefix, batch or sequence out
 * of range, trailing bytes). lines may be NULL. */
lg_rec *lg_result_find(const lg_result *res, const char *request_id, lg_line **lines);

#endif
