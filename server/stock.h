/* stock.h - stockd's business operations: reduce an item's stock (read, work,
 * write) under the configured lock mode, set stock, and replay idempotent
 * requests. Stateless: everything it needs is passed in. */
#ifndef STOCK_H
#define STOCK_H

#include "lock/dlock.h"
#include "request.h"
#include "store.h"

typedef struct stock_config {
    int lock_mode;           /* enum cfg_lock_mode */
    const char *lock_prefix; /* key = prefix + "{" + itemId + "}" */
    dlock_opts lock;         /* lease, wait, retry, max renewals */
    int fencing;             /* 1: claim the row with the lock's fence before reading */
    int stop_before_write;   /* test-only fault: SIGSTOP the process once before a write */
    int allow_work_ms;
    int max_work_ms;
    const char *instance_id;
} stock_config;

enum stock_outcome {
    STOCK_OK,
    STOCK_REPLAYED,         /* requestId seen before: the first result, nothing deducted */
    STOCK_NOT_FOUND,
    STOCK_INSUFFICIENT,     /* nothing deducted; remaining says what is left */
    STOCK_CONFLICT,         /* requestId used before for another item or quantity */
    STOCK_LOCK_TIMEOUT,
    STOCK_LOCK_INTERRUPTED, /* renewals exhausted; rolled back */
    STOCK_LOCK_LOST,        /* lease lost or fenced out as a stale holder; rolled back */
    STOCK_REDIS_DOWN,
    STOCK_STORAGE_BUSY,
    STOCK_STORAGE_ERROR,
    STOCK_SHUTTING_DOWN,    /* past the drain deadline: not committed */
    STOCK_OUTCOME_COUNT
};

typedef struct stock_result {
    enum stock_outcome outcome;
    store_order order; /* STOCK_OK, STOCK_REPLAYED */
    store_item item;   /* stock_set: the item after the change */
    int64_t remaining; /* STOCK_INSUFFICIENT */
    char message[256]; /* for the client, when not OK */
} stock_result;

typedef struct batch_queues batch_queues;

/* Deducts r->quantity from r->item_id. locks may be NULL unless the mode is
 * redis. With batches (redis mode only), requests without work are served in
 * batches per item, one transaction each (group commit); NULL serves every
 * request alone. c is the calling thread's store connection. Fills *out. */
void stock_reduce(const stock_config *cfg, dlock_client *locks, batch_queues *batches,
                  store_conn *c, const req_reduce *r, stock_result *out);

/* Sets an item's stock (PUT /items/{id}); under the item's lock in redis mode,
 * so it never interleaves with a deduction. Fills out->item on success. */
void stock_set(const stock_config *cfg, dlock_client *locks, store_conn *c, int64_t item_id,
               int64_t stock, stock_result *out);

/* From now on no deduction or stock change commits in this process: those
 * still running roll back (STOCK_SHUTTING_DOWN). Called once the SIGTERM
 * drain deadline has passed, so nothing commits whose answer can no longer be
 * sent. Thread-safe; there is no way back. */
void stock_refuse_commits(void);

/* Records what a Redis call returned (a DLOCK_* code) and logs one line when
 * that changes Redis's state: reachable, unreachable, or refusing our
 * credentials. Thread-safe. */
void stock_note_redis(int dlock_rc);

/* "ok", "insufficient_stock", ... : the error codes of the HTTP API. */
const char *stock_outcome_name(enum stock_outcome outcome);

#endif
