/* metrics.h - stockd's counters and their Prometheus text rendering. A
 * metrics object is owned by the service; the HTTP layer counts requests in
 * it. Counters are atomics: thread-safe, never reset. */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "lock/dlock.h"
#include "server/route.h"

typedef struct metrics metrics;

/* Counters for outcomes named by outcome_names[0..noutcomes-1] (static
 * strings: the API's result codes). NULL when out of memory. */
metrics *metrics_new(const char *const *outcome_names, int noutcomes);
void metrics_free(metrics *m);

/* Counts one answered request and the microseconds it took. */
void metrics_request(metrics *m, enum route_id route, int status, int64_t us);

/* Counts one POST /reduceStock result. */
void metrics_reduce(metrics *m, int outcome);

/* Counts one order placed (either endpoint): its outcome, its number of
 * lines, and the units it deducted (0 unless it did). */
void metrics_order(metrics *m, int outcome, int nlines, int64_t units);

/* Counts the wait for the locks of an order of several items (a multi-lock). */
void metrics_multilock_wait(metrics *m, int64_t ms);

/* Counts one group-commit transaction: the batches it served (each one
 * lock hold) and their orders. */
void metrics_commit(metrics *m, int batches, int orders);

/* Counts one batch committed under group commit: the orders of one lock hold. */
void metrics_batch(metrics *m, int orders);

/* Counts the hand-offs between threads one order crossed. */
void metrics_handoffs(metrics *m, int n);

/* A reservation's transitions this replica made, the results of
 * stockd_reservations_total. */
enum metrics_reservation {
    METRICS_RES_HELD,
    METRICS_RES_CONFIRMED,
    METRICS_RES_CANCELLED,
    METRICS_RES_COUNT
};

/* Counts one reservation's transition. */
void metrics_reservation(metrics *m, enum metrics_reservation result);

/* Counts one order cancelled (its returns written; a replay is not). */
void metrics_order_cancelled(metrics *m);

/* Where requests' client addresses came from (enum proxies_source's order),
 * the results of stockd_http_client_address_total. */
#define METRICS_CLIENT_SOURCES 3

/* Counts one request whose client address came from source (an enum
 * proxies_source: peer, forwarded, ignored). */
void metrics_client_source(metrics *m, int source);

/* The per-address limits, the results of stockd_http_per_address_refusals_total. */
enum metrics_per_address {
    METRICS_PER_ADDRESS_CONNECTIONS, /* a connection past --max-connections-per-ip */
    METRICS_PER_ADDRESS_IN_FLIGHT,   /* a forwarded client's request past it (429) */
    METRICS_PER_ADDRESS_COUNT
};

/* Counts one refusal for a per-address limit. */
void metrics_per_address_refusal(metrics *m, enum metrics_per_address limit);

/* Counts one request refused for a buyer's limit (409 buyer_limit_reached). */
void metrics_buyer_limit_refusal(metrics *m);

/* Counts one pass of the reservations' expiry sweep (a look for lapsed ones). */
void metrics_sweep_pass(metrics *m);

/* Counts n reservations expired by this replica, each lag_ms[i] after its
 * expires_at (the database's clock) when its units were given back. */
void metrics_reservations_expired(metrics *m, int n, const int64_t *lag_ms);

/* What the rest of the process knows, for one rendering. */
typedef struct metrics_extra {
    dlock_client *locks; /* NULL unless the lock mode is redis */
    int64_t inflight;    /* requests being handled */
    uint64_t reaped;     /* connections closed at their deadline */
    uint64_t tasks;      /* tasks posted to the service threads */
    int64_t reservations_held; /* held now, as the store says; -1: it could not say */
    const char *storage_node;  /* store_node's "host:port", "" for none */
} metrics_extra;

/* Renders every metric. Returns a malloc'd NUL-terminated buffer (caller
 * frees) with its length in *len, or NULL when out of memory. */
char *metrics_render(metrics *m, const metrics_extra *x, size_t *len);

#endif
