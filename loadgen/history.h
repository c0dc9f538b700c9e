/* history.h - the history check: every read of the sampled item's stock
 * taken while the load ran, held against what the requests' times allow.
 *
 * With no restock (nothing gives units back), a read that began at t0 and
 * ended at t1 must show a stock in the band
 *     [initial - units invoked before t1, initial - units acknowledged before t0]
 * where units are the quantities of the item's lines, invoked counts every
 * request whose first send came before t1 (whatever its answer: an
 * undetermined or refused one may still have deducted), and acknowledged
 * counts the ok answers (LG_OUT_OK) that came before t0. Above the band,
 * deductions acknowledged before the read began are missing from it: a stale
 * read (a cache, a lagging replica, a lost update). Below it, more was
 * deducted than was ever asked: an impossible read. And a sold-out answer for
 * q units followed by an ok of q or more invoked after it, with no read after
 * the sold-out showing q back, is a sale after sold-out.
 *
 * Cost: linear in requests + reads + buckets. Times are counted in fixed
 * buckets (1 ms, wider for runs over LG_HISTORY_BUCKETS_MAX ms) and prefix
 * sums; each bound is rounded outward to a whole bucket (invoked: up to the end
 * of t1's bucket; acknowledged: before t0's bucket; a sold-out is held against
 * oks invoked from the next bucket on and against reads begun from its own),
 * so the band is at most one bucket wider on each side than the exact one and
 * never narrower: a finding is never the rounding's doing.
 *
 * Pure: no I/O, no threads. */
#ifndef LG_HISTORY_H
#define LG_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/verdict.h"

#define LG_HISTORY_BUCKET_NS 1000000LL /* 1 ms */
#define LG_HISTORY_BUCKETS_MAX (1 << 18)

/* One read of the item: the GET's start and end (ns on the load's clock,
 * lg_result.start_ns) and the stock it answered. */
typedef struct lg_read {
    int64_t t0_ns, t1_ns;
    long long stock;
} lg_read;

/* Every read of a run, in the order taken (a growable array). */
typedef struct lg_reads {
    lg_read *r;
    size_t n, cap;
    long long failed; /* reads that got no usable answer: skipped */
    int interval_ms;  /* the interval asked for (--history-ms) */
} lg_reads;

/* Appends x. 0, or LG_ERR_NOMEM (x is then dropped and counted failed). */
int lg_reads_add(lg_reads *rs, const lg_read *x);

/* Frees what rs holds and zeroes it (keeping nothing). */
void lg_reads_free(lg_reads *rs);

typedef struct lg_history_in {
    const lg_batch *batches; /* the run's records with their times (sent_ns, done_ns) */
    int nbatch;
    int item;                /* the item's index in the lines (0: the sampled item) */
    long long id;            /* its id on the server, for the findings' text */
    long long initial;       /* its stock before the run */
    const lg_read *reads;    /* its reads while the load ran */
    size_t nreads;
    long long failed;        /* reads skipped */
    int interval_ms;
    const char *run_id;      /* names requests: "<run_id>-<batch>-<seq>" */
    int64_t bucket_ns;       /* 0: LG_HISTORY_BUCKET_NS */
    const char *skip;        /* not NULL: do not check; why (a restock may raise the stock) */
} lg_history_in;

/* One read outside the band and the request that bounds it. */
typedef struct lg_history_example {
    lg_read read;
    long long lo, hi;          /* the band at that read */
    char request[LG_ORDER_EXAMPLE_MAX]; /* "" when no request bounds it */
    int64_t sent_ns, done_ns;  /* that request's invoke and completion */
} lg_history_example;

/* A sale after a sold-out answer. */
typedef struct lg_history_sale {
    char ok[LG_ORDER_EXAMPLE_MAX], sold_out[LG_ORDER_EXAMPLE_MAX];
    long long ok_qty, sold_out_qty;
    int64_t ok_sent_ns, sold_out_done_ns;
} lg_history_sale;

typedef struct lg_history {
    int checked;            /* 1: the check ran; else skipped says why */
    char skipped[160];
    long long id;
    size_t reads;           /* reads checked */
    long long failed;       /* reads skipped */
    int interval_ms;
    int64_t bucket_ns;      /* the bucket the bounds were rounded to */
    long long initial;
    long long stale_n, stale_worst;           /* reads above the band; most units above */
    long long impossible_n, impossible_worst; /* below it; most units below */
    long long sold_after_n, sold_after_units; /* oks after a sold-out; their units */
    lg_history_example stale, impossible;     /* the worst of each (valid when _n > 0) */
    lg_history_sale sale;                     /* the first (valid when sold_after_n > 0) */
    long long *lo, *hi;     /* [reads]: the band at each read, for the chart; NULL unchecked */
    const lg_read *reads_at; /* in->reads (borrowed: valid while they are) */
} lg_history;

/* Checks in->reads against the records' times into *out (zeroed first; free
 * with lg_history_free). Records without times (sent_ns NULL), no reads, or
 * in->skip leave out->checked 0 with out->skipped saying why. Returns 0, or
 * LG_ERR_NOMEM (out then holds nothing to free). */
int lg_history_check(const lg_history_in *in, lg_history *out);

/* The findings of a checked history: up to three violations (STALE_READ,
 * IMPOSSIBLE_READ, SOLD_AFTER_SOLD_OUT), each with its count as the amount
 * (reads, reads, answers), into out[0..max); returns how many; *violations
 * (may be NULL) gets the same. */
int lg_history_judge(const lg_history *h, lg_finding *out, int max, int *violations);

void lg_history_free(lg_history *h);

#endif
