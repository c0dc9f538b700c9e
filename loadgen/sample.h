/* sample.h - the stock of one item over the run, as the service reports it:
 * a thread of its own reads the item every few milliseconds while the load
 * runs (through a read function: stockd's GET by default, another
 * service's as its profile says). What is drawn is what the server said at that moment, not what
 * loadgen worked out from its answers (and its reads are no deductions: the
 * verdict's ledger is untouched). When LG_SAMPLES_MAX samples are taken,
 * every other one is dropped and the interval doubles, so a long run keeps an
 * even record of bounded size. */
#ifndef LG_SAMPLE_H
#define LG_SAMPLE_H

#include "loadgen/api.h"
#include "loadgen/err.h"
#include "loadgen/history.h"
#include "loadgen/opts.h"

#define LG_SAMPLES_MAX 512
/* The interval until the first thinning: a short run (a flash sale sells out
 * in tens of ms) needs frequent reads, but each read is a connection of its
 * own (a thread in stockd), so not back to back: on a busy machine those
 * competed with the load itself. */
#define LG_SAMPLE_FIRST_MS 5
/* How long one read may take: a hung or stopped replica must not hold the end
 * of the run (or Ctrl-C) for the API's 60 s; a replica that slow is skipped
 * and the next one asked. */
#define LG_SAMPLE_TIMEOUT_MS 1000

typedef struct lg_sample {
    double t_s;            /* since the load started; the middle of the GET */
    long long stock, sold; /* as the item's answer said */
    long long reserved, returned; /* likewise; -1 when the answer had none */
    double t0_s, t1_s;     /* the GET's start and end: the answer tells of a moment between */
} lg_sample;

typedef struct lg_samples {
    long long item;     /* the item's id */
    int interval_ms;    /* between two samples kept */
    int n;
    long long failed;   /* GETs that got no usable answer (skipped) */
    lg_sample s[LG_SAMPLES_MAX];
} lg_samples;

/* Empties s for item. */
void lg_samples_init(lg_samples *s, long long item);

/* Appends a sample, thinning first when s is full (the first sample stays). */
void lg_samples_add(lg_samples *s, double t_s, long long stock, long long sold);

/* The same with every field of x (lg_samples_add leaves reserved and
 * returned -1, t0_s and t1_s at t_s). */
void lg_samples_push(lg_samples *s, const lg_sample *x);

/* Seconds since the load started (thread-safe); the sampler's clock. */
typedef double (*lg_clock_fn)(void *arg);

/* Reads the item's state from one target (base: "http[s]://host:port"),
 * within timeout_ms. Returns 0 with *st filled (stock at least), or an lg_err
 * code with err set: the read is skipped and counted as failed, and the next
 * target asked. Called on the sampler's thread only. */
typedef int (*lg_read_fn)(void *arg, const char *base, int timeout_ms, lg_item_state *st,
                          lg_err *err);

/* stockd's read, the default: GET base/items/{id}, arg a const long long *
 * (the id). */
int lg_sample_read_stockd(void *arg, const char *base, int timeout_ms, lg_item_state *st,
                          lg_err *err);

typedef struct lg_sampler_cfg {
    const lg_target *targets; /* asked in turn until one answers; outlive the sampler */
    int ntargets;
    long long item;           /* the item's id, as the samples name it */
    lg_read_fn read;          /* NULL: lg_sample_read_stockd of item */
    void *read_arg;           /* read's arg; outlives the sampler */
    lg_clock_fn clock;        /* the load's clock */
    void *clock_arg;          /* likewise */
    int every_ms;             /* > 0: read every so many ms and keep every read for the
                                 history check (the chart still gets its thinned, evenly
                                 spaced samples); 0: read at the chart's pace only */
} lg_sampler_cfg;

typedef struct lg_sampler lg_sampler;

/* Starts the sampling thread on c's item (the first target that answers is
 * asked; a target that does not answer is skipped). *c is copied. Returns 0,
 * or LG_ERR_NOMEM / LG_ERR_SYS with err set and *out NULL. */
int lg_sampler_start(const lg_sampler_cfg *c, lg_sampler **out, lg_err *err);

/* Stops and joins the thread (after its GET in flight, if any: at most
 * LG_SAMPLE_TIMEOUT_MS, no further target is asked), appends its
 * samples to *into (after what *into holds), hands every read it kept (with
 * every_ms) to *reads when reads is not NULL (which must be empty; the caller
 * frees it with lg_reads_free) and frees the sampler. NULL is a no-op. */
void lg_sampler_stop(lg_sampler *s, lg_samples *into, lg_reads *reads);

#endif
