/* run.h - one complete loadgen run against a set of targets: set-up (fresh
 * items, or the given one, visible from every target), the load, then the
 * verdict read back from the service (item states and ledger rows) plus the
 * scenario's expectations. main runs it once, or once per group for compare. */
#ifndef LG_RUN_H
#define LG_RUN_H

#include "loadgen/api.h"
#include "loadgen/err.h"
#include "loadgen/fault.h"
#include "loadgen/history.h"
#include "loadgen/load.h"
#include "loadgen/opts.h"
#include "loadgen/profile.h"
#include "loadgen/profile_io.h"
#include "loadgen/result.h"
#include "loadgen/rsv.h"
#include "loadgen/sale.h"
#include "loadgen/sample.h"
#include "loadgen/scenario.h"
#include "loadgen/verdict.h"

enum lg_verdict_value { LG_PASS = 0, LG_FAIL = 1, LG_NO_VERDICT = 2 /* raw mode */ };

typedef struct lg_run {
    char label[LG_LABEL_MAX];  /* compare group ("redis", "none", ...) or "" */
    const lg_target *targets;  /* borrowed from the options */
    int ntargets;
    lg_result load;            /* what the load measured */
    int nitems;
    lg_item_check *items;      /* [nitems]: states before/after and the tallies */
    lg_profile_id *api_ids;    /* --api: [nitems], each item's id as the service has it
                                  (items[k].id is its integer, or k + 1); else NULL */
    int carts;                 /* 1: the load sent POST /orders carts */
    lg_order_check orders;     /* the per-order checks (carts only) */
    lg_finding *findings;      /* every finding of every item, then of the orders */
    int nfindings, violations;
    char expect[LG_EXPECT_MAX][LG_EXPECT_TEXT]; /* unmet scenario expectations */
    int nexpect;
    int verdict;               /* enum lg_verdict_value */
    int stopped;               /* the user stopped the load early (verdict still valid) */
    lg_samples stock;          /* the first item's stock and sold over the run, as the
                                  service answered: before, during (sample.h), after */
    lg_reads reads;            /* every read of the first item while the load ran, for */
    lg_history history;        /* the history check (--history-ms; checked 0: skipped) */
    double read_waited_s;      /* how long the read-back waited for an answer */
    char read_waited_for[LG_ERR_MSG_MAX]; /* the first answer (or failure) it waited on */
    int64_t settle_until_ns;   /* when the read-back stops waiting; 0 until it first must */
    lg_sale *sale;             /* a flash sale's own counts (--buyers), else NULL */
    /* a reserve run (--scenario reserve): its buyers' records and what the checks found */
    lg_rsv *rsv;               /* [nrsv], else NULL */
    long long nrsv;
    lg_rsv_totals rsv_before, rsv_after;
    lg_rsv_summary rsv_sum;
    double rsv_waited_s;       /* after the buyers, waiting for the last holds to run out */
    lg_fault_result *faults;   /* [nfaults]: what each --fault did (fault.h), else NULL */
    int nfaults;
} lg_run;

/* Called about four times a second while the load runs (from the calling
 * thread). Returns 0 to go on, 1 to stop starting requests, 2 to also abandon
 * those in flight. */
typedef int (*lg_tick_fn)(const lg_progress *p, void *arg);

/* Runs o against targets[0..ntargets) (set-up calls go to targets[0]; the
 * verdict reads items back from the first target that answers, so a replica
 * stopped during the run does not spoil it, and waits up to o->settle_s for
 * one to). Returns 0 with *out filled (free with lg_run_free), or
 * LG_ERR_TRANSPORT / LG_ERR_SETUP / LG_ERR_NOMEM / LG_ERR_SYS with err set,
 * in which case *out holds nothing to free. */
int lg_run_exec(const lg_opts *o, const lg_target *targets, int ntargets, const char *label,
                lg_tick_fn tick, void *arg, lg_run *out, lg_err *err);

void lg_run_free(lg_run *r);

#endif
