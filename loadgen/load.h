/* load.h - the load engine: T threads, each with its own epoll loop and a
 * share of the C keep-alive HTTP/1.1 connections (conn.h), each connection
 * carrying one request at a time. Closed loop (send the next request as soon
 * as the answer is in) or open loop (--rate: each connection on a fixed
 * schedule, latency measured from the intended send time, as wrk2 does).
 * Per-thread counters and histograms are merged after join.
 *
 * Use: lg_load_start(), then poll lg_load_progress()/lg_load_finished() from
 * the starting thread (lg_load_stop() to end early), then lg_load_join(),
 * which frees the handle and fills an lg_result (result.h) the caller frees
 * with lg_result_free(). The caller keeps cfg's arrays alive until join. */
#ifndef LG_LOAD_H
#define LG_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/err.h"
#include "loadgen/opts.h"
#include "loadgen/result.h"
#include "loadgen/shape.h"

typedef struct lg_load_cfg {
    const lg_target *targets; /* base URLs; connection g talks to targets[g % ntargets] */
    int ntargets;
    int raw;                  /* 1: GET path, classify by status only, keep no records */
    const char *path;         /* raw mode: the --get path; else lg_shape_path(&shape) is used */
    int concurrency, threads;
    long long requests;       /* 0 = no limit */
    double duration_s;        /* 0 = no limit; no new request starts after it */
    double rate;              /* total requests/s, 0 = closed loop */
    int timeout_ms, retries;
    lg_shape shape;           /* what each request asks (unused in raw mode) */
    const char *run_id;       /* requestIds are "<run_id>-<thread>-<seq>"; at most 32 chars */
} lg_load_cfg;

typedef struct lg_progress {
    uint64_t done;     /* requests with a final outcome */
    uint64_t errors;   /* of which not ok */
    double elapsed_s;
} lg_progress;

typedef struct lg_load lg_load;

/* Resolves the targets' names, builds the threads' loops and connection
 * slots and starts sending (connections open with their first request).
 * Returns 0 with *out set, or LG_ERR_NOMEM / LG_ERR_SYS / LG_ERR_USAGE /
 * LG_ERR_TRANSPORT (a target's name does not resolve) with err filled and
 * *out NULL. */
int lg_load_start(const lg_load_cfg *cfg, lg_load **out, lg_err *err);

/* Snapshot of the counters; callable while the threads run. */
void lg_load_progress(lg_load *l, lg_progress *p);

/* 1 when no more requests will start (stopped, past --duration, or every
 * request claimed): what remains is in flight. Thread-safe. */
int lg_load_exhausted(lg_load *l);

/* 1 when every thread has finished. */
int lg_load_finished(lg_load *l);

/* Asks the threads to stop starting requests. hard = 0 lets in-flight
 * requests finish (bounded by timeout_ms); hard = 1 abandons them (they count
 * as transport errors). Safe to call from the starting thread at any time. */
void lg_load_stop(lg_load *l, int hard);

/* Waits for the threads, merges their counters into *res and frees l.
 * Returns 0, or the first thread failure (LG_ERR_NOMEM / LG_ERR_SYS), in which
 * case res still holds what was measured. */
int lg_load_join(lg_load *l, lg_result *res, lg_err *err);

#endif
