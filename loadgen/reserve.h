/* reserve.h - the engine of a reserve run (--scenario reserve): buyers
 * POST /reservations (a requestId and a buyerId each), then confirm, cancel
 * or walk away as their share says, over C keep-alive connections on one
 * event loop; at the end GET /reservations/{id} of every one. Each
 * connection slot talks to two replicas: a reservation goes to one and its
 * confirm or cancel to the next, and a request that fails in transport is
 * sent again with the same requestId (or to the same reservation) to the
 * other one, so a replica killed mid-run costs no buyer its fate.
 *
 * Thread safety: one call at a time; it runs on the calling thread. */
#ifndef LG_RESERVE_H
#define LG_RESERVE_H

#include <stdint.h>

#include "loadgen/err.h"
#include "loadgen/opts.h"
#include "loadgen/result.h"
#include "loadgen/rsv.h"

typedef struct lg_reserve_cfg {
    const lg_target *targets;
    int ntargets;
    long long item_id;
    long long buyers;      /* reservations to make, one a buyer */
    int buyer_ids;         /* distinct buyerIds, cycled; 0 = one per buyer */
    int concurrency;       /* connection slots */
    double rate;           /* reservations started per second; 0 = as fast as answered */
    int qmin, qmax;        /* units per reservation */
    int hold_ms;
    int share[3];          /* percent confirm, cancel, lapse */
    int timeout_ms, retries;
    const char *run_id;    /* requestIds "<run_id>-r<k>", buyerIds "<run_id>-b<i>" */
    int64_t start_ns;      /* lg_now_ns() of the run's start: the records' clock */
    /* called about four times a second with the requests answered so far and
     * those not ok; returns 0 to go on, 1 to start no more buyers (those under
     * way finish), 2 to abandon them too. NULL: never asked. */
    int (*tick)(long long done, long long errors, void *arg);
    void *tick_arg;
} lg_reserve_cfg;

/* The plan of buyer k: share[] spread evenly, every 100 buyers in a row
 * taking exactly the shares. */
int lg_reserve_plan(const int share[3], long long k);

/* Runs the buyers: r[0..buyers) get their records (zeroed first), res
 * (lg_result_free) the counts and latencies of every POST per target. A step
 * abandoned by the tick is LG_STEP_UNKNOWN (it may have happened). *stopped
 * gets 1 when the tick stopped the run early.
 * Returns 0 (whatever the server answered), or LG_ERR_TRANSPORT (a target's
 * name does not resolve) / LG_ERR_NOMEM / LG_ERR_SYS with err filled. */
int lg_reserve_run(const lg_reserve_cfg *c, lg_rsv *r, lg_result *res, int *stopped,
                   lg_err *err);

/* GET /reservations/{id} of every record with an id, into its state and
 * order_id. Errors as lg_reserve_run; a reservation that cannot be read stays
 * LG_RSV_UNREAD. */
int lg_reserve_read(const lg_reserve_cfg *c, lg_rsv *r, lg_err *err);

#endif
