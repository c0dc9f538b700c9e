/* service_parts.h - what the service's files share. They call one way,
 * from the top down: service.c (lifecycle, items, health, metrics, draining,
 * each request's entry) -> service_order.c (an order under the lock modes)
 * -> service_batch.c (group commit) -> service_steps.c (the steps of a
 * deduction both share) -> service_log.c (the lines an order leaves) ->
 * service_result.c (outcomes, names, error mapping). Each file's functions
 * are declared below in that order. Not for other modules. */
#ifndef SERVICE_PARTS_H
#define SERVICE_PARTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "server/batch.h"
#include "server/service.h"
#include "server/workers.h"

/* Item ids known to exist, direct-mapped by id: items are never deleted, so
 * an id seen once needs no read before its lock again. */
#define SERVICE_KNOWN_ITEMS 4096

struct service {
    service_config cfg;     /* its strings belong to the caller and outlive the service */
    store *store;
    dlock_client *locks;    /* NULL unless the lock mode is redis */
    batch_queues *batches;  /* NULL: no group commit */
    workers *work;          /* the threads requests' slow halves run on */
    workers *probes;        /* the thread /health and /metrics are answered on */
    metrics *metrics;
    pthread_mutex_t mu;     /* guards inflight */
    pthread_cond_t idle;    /* signalled when inflight drops to 0 */
    int inflight;           /* requests between service_enter and service_leave */
    _Atomic int commits_refused;
    _Atomic int redis_state;  /* what Redis last told us, so a change is logged once */
    _Atomic int64_t full_since_ms; /* when writes began to fail for lack of space (the
                                    * monotonic clock), 0 since one succeeded */
    _Atomic int stopped_once; /* the test-only fault point has fired */
    _Atomic int64_t known_items[SERVICE_KNOWN_ITEMS]; /* 0: empty (ids are >= 1) */
};

/* Milliseconds on CLOCK_MONOTONIC, for the service's own measurements. */
static inline int64_t service_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Microseconds on CLOCK_MONOTONIC, for the elapsed time the log shows. */
static inline int64_t service_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* What one order asked for, where its answer goes, its lines' lock keys and
 * the tokens their locks held. */
struct deduction {
    service *s;
    store_conn *c;
    const req_order *r;
    service_result *out;
    store_fence *held;     /* held[i]: the token line i's lock held once taken, for the
                            * log (the caller's; left alone while none is held) */
    int64_t lock_asked_ms; /* when its multi-lock was asked for */
    char (*keys)[DLOCK_KEY_MAX + 1]; /* keys[i]: line i's item (r->nlines of them, the
                                      * caller's: a waiting order's memory is its own) */
};

/* ---- service_order.c: placing an order ---- */

/* What x (s, c, r, out and held set; held zeroed) needs before any lock: a
 * retry of a committed order gets its first answer, an absent item is
 * refused; else x->keys are filled. SERVICE_OK to go on, else the outcome
 * set in x->out. */
int service_order_check(struct deduction *x);

/* Whether order r goes through group commit (service_batch_enter). */
int service_order_batched(const service *s, const req_order *r);

/* Places x (checked) on its own under the lock mode, on x->c; x->held gets
 * the tokens of the locks taken for it. */
void service_order_alone(struct deduction *x);

/* An item's stock set under its lock (redis mode); *held gets the lock's
 * token. */
void service_order_set_stock(service *s, store_conn *c, int64_t item_id, int64_t stock,
                             service_result *out, store_fence *held);

/* ---- service_batch.c: group commit ---- */

/* Queues x (redis mode, no work time) for group commit, as job (x's own,
 * its callbacks set; live until one of them runs): with the other orders of
 * its item (or of several items), served by one leader under one lock hold,
 * in a transaction shared with the other batches of the process. Returns 1
 * when the caller is to lead now (service_batch_lead), 0 when queued (a
 * leader runs job->on_done once x->out is answered, or job->on_lead when x
 * is to lead), -1 when out of memory (nothing queued: serve it alone). */
int service_batch_enter(struct deduction *x, batch_job *job);

/* Leads x's queue: one batch, x's order first, served under its lock.
 * Returns once the batch waits for its transaction (or leads it, on this
 * thread); every order of it, x's too, is answered through its on_done. */
void service_batch_lead(struct deduction *x);

/* ---- service_steps.c: the steps of a deduction that group commit shares ---- */

/* A retry whose first attempt committed (perhaps while it waited for the
 * lock) gets that first answer, before any stock check: STORE_ERR_DUPLICATE
 * (the order in out), STORE_ERR_NOT_FOUND when new, or a storage error. */
int service_replayed(store_conn *c, const req_order *r, service_result *out);

/* r as an order to write, its lines without their stock yet. */
store_new_order service_new_order(const service *s, const req_order *r, dlock_handle *h);

/* The fencing token h holds for key, or (0, 0) when unfenced. */
store_fence service_token_of(const service *s, dlock_handle *h, const char *key);

/* A row refused h's token for key because it carries row, a newer one:
 * fences went back (Redis's clock stepped back, or the counter was lost)
 * and every holder would be refused until the clock caught up. Raises h's
 * fence for key past row, only while key still holds h's token in Redis
 * (dlock_fence_raise: a holder whose lock moved on stays refused), and logs
 * it. Call it outside a transaction: it asks Redis. Returns DLOCK_OK (claim
 * once more with service_token_of), or the lock's failure. */
int service_raise_fence(service *s, dlock_handle *h, const char *key, store_fence row);

/* The store's last-moment commit check (arg: the service): no commit once
 * draining has refused them. */
int service_commits_allowed(void *arg);

/* The test-only fault (--test-stop-before-write). */
void service_fault_point(service *s);

/* ---- service_log.c: the lines an operator follows an order by ---- */

/* One line for order r's outcome (its level by the outcome): its requestId,
 * outcome, orderId, units, ms since t0_us, items, lock keys and the tokens
 * it was written under (done) or its locks held (held, r->nlines), and the
 * caller's token's name (r->token_name), never the token. */
void service_log_order(const service *s, const req_order *r, const service_result *out,
                       const store_fence *held, int64_t t0_us);

/* One line for a stock set by PUT /items/{id}, with its lock's token *held
 * and who set it (the token's name; "" for none). */
void service_log_stock_set(const service *s, int64_t item_id, int64_t stock, const char *who,
                           const service_result *out, const store_fence *held, int64_t t0_us);

/* A lock lost after its orders committed (their answers stand): the n items'
 * keys and tokens, the number of orders, r's requestId when there is one
 * order (r not NULL), and the release's DLOCK_* result. */
void service_log_lost_after_commit(const service *s, const req_order *r, int orders,
                                   const int64_t *items, const char *const *keys,
                                   const store_fence *tok, int n, int dlock_rc);

/* A lock's fence for key raised past the token row that a row refused it
 * for (dlock_rc DLOCK_OK: from was to now), or not (the lock's failure,
 * dlock_errstr its detail): one warn line with both tokens. */
void service_log_fence_raise(const service *s, const char *key, store_fence row, int64_t was,
                             int64_t now, int dlock_rc);

/* ---- service_result.c: outcomes, names, and the layers' errors as outcomes ---- */

/* The API's code of each outcome (service_outcome_name), for the metrics. */
extern const char *const service_outcome_names[SERVICE_OUTCOME_COUNT];

/* Sets out's outcome and message (printf-style); returns the outcome. */
int service_fail(service_result *out, enum service_outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Maps a store result to out, detail saying what went wrong (rc STORE_OK
 * leaves out alone); returns the outcome. */
int service_from_store_text(service_result *out, int rc, const char *detail);

/* service_from_store_text for a result on c, whose store_errstr is the detail. */
int service_from_store(service_result *out, int rc, const store_conn *c);

/* Maps a store result for order r (NULL: not an order); STORE_ERR_DUPLICATE
 * means out->order holds the earlier order of r's requestId: a replay when
 * it has the same lines, else a conflict. */
int service_from_order_store(service_result *out, int rc, const store_conn *c,
                             const req_order *r);

/* Maps a lock failure (a DLOCK_* code) on key to out, noting Redis's state
 * (service_note_redis); returns the outcome. */
int service_from_lock(service *s, service_result *out, int dlock_rc, const char *key);

/* service_from_lock with detail for dlock_errstr(): the text of a failure
 * that happened on another thread (an asynchronous acquire's). */
int service_from_lock_text(service *s, service_result *out, int dlock_rc, const char *key,
                           const char *detail);

/* Records what a Redis call returned (a DLOCK_* code) and logs one line when
 * that changes Redis's state: reachable, unreachable, or refusing our
 * credentials. */
void service_note_redis(service *s, int dlock_rc);

/* Line i of r is short, with the stock there was; then service_insufficient
 * once sets the outcome. */
void service_add_short(service_result *out, const req_order *r, int i, int64_t stock);
int service_insufficient(service_result *out);

#endif
