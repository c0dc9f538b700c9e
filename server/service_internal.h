/* service_internal.h - what the service's two files share: the service
 * itself (service.c: lifecycle, items, health, metrics, draining) and how an
 * order is deducted (service_order.c). Not for other modules. */
#ifndef SERVICE_INTERNAL_H
#define SERVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "batch.h"
#include "service.h"

struct service {
    service_config cfg;     /* its strings belong to the caller and outlive the service */
    store *store;
    dlock_client *locks;    /* NULL unless the lock mode is redis */
    batch_queues *batches;  /* NULL: no group commit */
    metrics *metrics;
    pthread_mutex_t mu;     /* guards inflight */
    pthread_cond_t idle;    /* signalled when inflight drops to 0 */
    int inflight;           /* requests between service_enter and service_leave */
    _Atomic int commits_refused;
    _Atomic int redis_state;  /* what Redis last told us, so a change is logged once */
    _Atomic int stopped_once; /* the test-only fault point has fired */
};

/* Milliseconds on CLOCK_MONOTONIC, for the service's own measurements. */
static inline int64_t service_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* service_order.c: places order r on connection c. */
void service_order_place(service *s, store_conn *c, const req_order *r, service_result *out);

/* service_order.c: an item's stock set under its lock (redis mode). */
void service_order_set_stock(service *s, store_conn *c, int64_t item_id, int64_t stock,
                             service_result *out);

/* service.c: records what a Redis call returned (a DLOCK_* code) and logs
 * one line when that changes Redis's state: reachable, unreachable, or
 * refusing our credentials. */
void service_note_redis(service *s, int dlock_rc);

/* service.c: sets out's outcome and message (printf-style); returns the outcome. */
int service_fail(service_result *out, enum service_outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* service.c: maps a store result on c to out (rc STORE_OK leaves out alone). */
int service_from_store(service_result *out, int rc, const store_conn *c);

#endif
