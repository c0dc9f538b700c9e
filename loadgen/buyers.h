/* buyers.h - one process's buyers of a flash sale: each on its own keep-alive
 * connection from its own source address (sale.h), all connected first, then
 * fired at once, one request each, on one epoll loop. What became of each is
 * written to an lg_buyer (the caller's, in memory shared with the parent when
 * the sale is spread over processes).
 *
 * Thread safety: one call runs on the calling thread alone. */
#ifndef LG_BUYERS_H
#define LG_BUYERS_H

#include "loadgen/err.h"
#include "loadgen/http.h"
#include "loadgen/sale.h"
#include "loadgen/shape.h"

typedef struct lg_buyers_cfg {
    const lg_http_addr *addrs; /* [ntargets], resolved; buyer g talks to lg_sale_target(g) */
    int ntargets;
    int batch;                 /* requestIds are "<run_id>-<batch>-<index in the part>" */
    const char *run_id;        /* at most 32 characters */
    const lg_shape *shape;     /* what each buyer asks: a /reduceStock line */
    int timeout_ms;            /* bounds the connecting, and the answers after the fire */
    /* Called once every buyer is connected or failed to; returns when the
     * sale fires (0), or nonzero to abandon it (nobody fires). */
    int (*ready)(void *arg, int connected);
    void *arg;
} lg_buyers_cfg;

/* Runs the buyers part->first .. part->first + part->n - 1 into
 * buyers[0..part->n) and sets part->fire_ns and last_ns. Returns 0 (whatever
 * became of the buyers), or LG_ERR_NOMEM / LG_ERR_SYS / LG_ERR_USAGE (a request
 * outgrew its buffer) with err filled and the buyers not fired. */
int lg_buyers_run(const lg_buyers_cfg *c, lg_sale_part *part, lg_buyer *buyers, lg_err *err);

#endif
