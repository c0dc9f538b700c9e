/* store.h - the inventory in SQLite: items, the deductions ledger, and the
 * three ways of writing a deduction (read-modify-write, fenced, atomic).
 *
 * One store per process holds a pool of connections; a thread takes one with
 * store_get(), uses it alone, and gives it back with store_put(). Several
 * processes may open the same file (WAL journal, busy timeout). */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_NAME_MAX 800 /* bytes: 200 UTF-8 characters */
#define STORE_REQUEST_ID_MAX 128

enum store_code {
    STORE_OK = 0,
    STORE_ERR_NOT_FOUND = -1,    /* no such item */
    STORE_ERR_INSUFFICIENT = -2, /* stock < quantity; nothing written */
    STORE_ERR_STALE = -3,        /* fenced out: a newer lock holder has claimed the row */
    STORE_ERR_DUPLICATE = -4,    /* requestId already in the ledger; that order is returned */
    STORE_ERR_BUSY = -5,         /* database stayed locked past the busy timeout */
    STORE_ERR_IO = -6,           /* any other SQLite failure (the conn's errstr says which) */
    STORE_ERR_VETOED = -7,       /* the write's commit_ok said no; nothing written */
};

/* Asked inside a write transaction, once it holds the database's write lock
 * and just before COMMIT: 1 to commit, 0 to roll back (STORE_ERR_VETOED).
 * A late decision on purpose: waiting for the lock can take up to the busy
 * timeout, and what the caller knew before may no longer hold. */
typedef struct store_commit_check {
    int (*ok)(void *arg);
    void *arg;
} store_commit_check;

typedef struct store_config {
    const char *path;
    int sync_full;       /* 1: PRAGMA synchronous=FULL (fsync per commit); 0: NORMAL */
    int busy_timeout_ms; /* how long to wait for another writer */
} store_config;

typedef struct store store;
typedef struct store_conn store_conn;

/* A lock's fencing token: (fence, seq), compared as a pair. seq counts the
 * local hand-offs of one lease. */
typedef struct store_fence {
    int64_t fence;
    int seq;
} store_fence;

typedef struct store_item {
    int64_t id;
    char name[STORE_NAME_MAX + 1];
    int64_t stock;
    int64_t sold;        /* sum of the ledger's quantities for the item */
    int64_t order_count; /* number of ledger rows for the item */
} store_item;

typedef struct store_order {
    int64_t order_id, item_id, quantity, remaining;
    int64_t fence; /* 0 when written without a lock */
    int fence_seq;
    int has_request_id;
    char request_id[STORE_REQUEST_ID_MAX + 1];
    char instance[129];
    char lock_mode[8];
    char created_at[32];
} store_order;

/* A deduction to write. */
typedef struct store_deduction {
    int64_t item_id, quantity;
    int64_t new_stock;      /* read-modify-write: stock computed from the earlier read */
    const char *request_id; /* NULL when the client sent none */
    const char *instance, *lock_mode;
    store_fence fence;      /* fence > 0: fenced write, only while the row carries it */
    const char *lock_token; /* NULL without a lock */
    const store_commit_check *check; /* NULL: always commit */
} store_deduction;

/* Opens the database, sets WAL, and applies the embedded schema files newer
 * than the recorded PRAGMA user_version, each in one transaction.
 * Returns STORE_OK with *out set, or an error with err filled and *out NULL. */
int store_open(const store_config *cfg, store **out, char *err, size_t errlen);

/* Closes every connection; all must have been given back. NULL is a no-op. */
void store_close(store *s);

/* Takes an idle connection or opens one; NULL when SQLite can't open the file
 * (err filled). Thread-safe. */
store_conn *store_get(store *s, char *err, size_t errlen);
void store_put(store *s, store_conn *c);

/* Text of the last failure on c. */
const char *store_errstr(const store_conn *c);

/* A trivial read, for /health. */
int store_ping(store_conn *c);

int store_item_create(store_conn *c, const char *name, int64_t stock, store_item *out);
int store_item_get(store_conn *c, int64_t id, store_item *out);

/* Calls fn for up to limit items with an id above after (0: from the first),
 * in id order. */
typedef void (*store_item_fn)(const store_item *item, void *arg);
int store_item_list(store_conn *c, int64_t after, int limit, store_item_fn fn, void *arg);

/* Sets an item's stock, in a transaction that check (may be NULL) may veto. A
 * fence (non-NULL) makes it a fenced write that also claims the row:
 * STORE_ERR_STALE when the row carries this or a newer token. */
int store_item_set_stock(store_conn *c, int64_t id, int64_t stock, const store_fence *f,
                         const store_commit_check *check);

/* Calls fn for up to limit of the item's orders with an id below before (0:
 * from the newest), newest first. */
typedef void (*store_order_fn)(const store_order *order, void *arg);
int store_orders(store_conn *c, int64_t item_id, int64_t before, int limit, store_order_fn fn,
                 void *arg);

/* The order a requestId produced: STORE_OK with *out, or STORE_ERR_NOT_FOUND. */
int store_order_by_request(store_conn *c, const char *request_id, store_order *out);

/* The read half of read-modify-write: a plain SELECT, no transaction held. */
int store_stock_read(store_conn *c, int64_t item_id, int64_t *stock);

/* The fenced read: claims the row for token f (sets items.fence, fence_seq
 * when the row's pair is lower) and returns its stock. From then on a holder
 * with an older token can no longer write it, even one that read before us.
 * STORE_OK, STORE_ERR_STALE (this or a newer token is on the row),
 * STORE_ERR_NOT_FOUND, STORE_ERR_BUSY, STORE_ERR_IO. */
int store_stock_claim(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock);

/* The write half: in one transaction, sets the item's stock to d->new_stock
 * (when fenced, only if the row still carries d->fence, i.e. our claim
 * stands) and appends the ledger row; d->check decides last. Returns STORE_OK
 * with *out; STORE_ERR_DUPLICATE with the earlier order in *out (nothing
 * written); STORE_ERR_STALE, STORE_ERR_NOT_FOUND, STORE_ERR_BUSY,
 * STORE_ERR_IO, STORE_ERR_VETOED with nothing written. */
int store_deduct_write(store_conn *c, const store_deduction *d, store_order *out);

/* The lock-free way: one conditional UPDATE ... WHERE stock >= quantity plus
 * the ledger row, in one transaction (d->new_stock and d->fence ignored).
 * Returns as store_deduct_write, or STORE_ERR_INSUFFICIENT with *remaining. */
int store_deduct_atomic(store_conn *c, const store_deduction *d, store_order *out,
                        int64_t *remaining);

/* Group commit: many deductions of one item in one transaction.
 *
 * store_batch_begin opens the transaction (BEGIN IMMEDIATE) and reads the
 * stock, claiming the row with f when given (NULL: plain read). Errors as
 * store_stock_claim; nothing stays open on failure.
 * store_batch_add appends one ledger row (d->new_stock is the stock after it):
 * STORE_OK with *out; STORE_ERR_DUPLICATE with the earlier order in *out
 * (nothing added; that order may be one of this batch); or an error, after
 * which the caller must abort. It refuses to run outside the transaction.
 * store_batch_commit writes the final stock (only while the claim stands, when
 * fenced) and commits; on failure everything is rolled back.
 * store_batch_abort rolls back. */
int store_batch_begin(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock);
int store_batch_add(store_conn *c, const store_deduction *d, store_order *out);
int store_batch_commit(store_conn *c, int64_t item_id, int64_t stock, const store_fence *f);
void store_batch_abort(store_conn *c);

#endif
