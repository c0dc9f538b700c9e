/* store.h - the inventory's storage, whatever the backend: items, orders and
 * their lines (the ledger), and the transactions a deduction is made of.
 * store_open picks the backend from --db (store.c says how; each backend is
 * one file behind store_backend.h).
 *
 * Words: an *order* is what one request deducts, under its requestId; it has
 * one or more *lines*, one per item, each with the quantity it took and the
 * stock left after it. The lines are the ledger: the source of truth for
 * what was sold.
 *
 * One store per process holds a pool of connections; a thread takes one with
 * store_get(), uses it alone, and gives it back with store_put(). Several
 * processes may share the database. Every function returns STORE_OK or a
 * STORE_ERR_* code, with the connection's store_errstr() saying more. */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include "server/rules.h"

enum store_code {
    STORE_OK = 0,
    STORE_ERR_NOT_FOUND = -1,    /* no such item, order or requestId */
    STORE_ERR_INSUFFICIENT = -2, /* stock < quantity; nothing written */
    STORE_ERR_STALE = -3,        /* fenced out: a newer lock holder has claimed the row */
    STORE_ERR_DUPLICATE = -4,    /* requestId already used; that order (or item) is returned */
    STORE_ERR_BUSY = -5,         /* the database stayed locked past the busy timeout */
    STORE_ERR_IO = -6,           /* any other failure (errstr says which) */
    STORE_ERR_VETOED = -7,       /* the commit check said no; nothing written */
    STORE_ERR_UNAVAILABLE = -8,  /* the database can't be reached (a server that is down) */
    STORE_ERR_LOCK_TIMEOUT = -9, /* a row lock was not had within the wait asked for */
    STORE_ERR_IN_DOUBT = -10,    /* COMMIT got no answer, and whether the transaction
                                  * committed can't be told (store_tx_commit) */
    STORE_ERR_FULL = -11,        /* the database's disk is full (SQLite: SQLITE_FULL, or an
                                  * I/O error with ENOSPC or EDQUOT; PostgreSQL: SQLSTATE
                                  * 53100 disk_full): nothing written, reads still work,
                                  * and writes succeed again once space is freed */
    STORE_ERR_BUYER_LIMIT = -12, /* a line would take its buyer past the item's
                                  * per_buyer_limit; nothing written (the line is named
                                  * by store_limit_item) */
    STORE_ERR_BUYER_REQUIRED = -13, /* a line's item has a per_buyer_limit and no buyer
                                     * was given; nothing written (store_limit_item) */
    STORE_ERR_STATE = -14,       /* a reservation is not held (any more): its state, as
                                  * met, in the reservation given back */
};

typedef struct store_config {
    const char *db;       /* a file path (SQLite) or a URL naming another backend */
    const char *password; /* a database server's password, or NULL; never logged */
    int sync_full;        /* 1: every commit is durable on disk before it returns */
    int busy_timeout_ms;  /* how long a write waits for another writer (SQLite), or a
                           * request for a free connection of the pool (a server) */
    int pool_size;        /* a database server: connections at most, per process */
    int timeout_ms;       /* a database server: bound on one statement, on the server;
                           * an answer that has not come a grace later (a quarter,
                           * 1 to 2 s) drops the session. Connects: the same, at
                           * least 2 s */
} store_config;

typedef struct store store;
typedef struct store_conn store_conn;

/* A lock's fencing token: (fence, seq), compared as a pair; (0, 0) when
 * written without a lock. seq counts the local hand-offs of one lease. */
typedef struct store_fence {
    int64_t fence;
    int seq;
} store_fence;

typedef struct store_item {
    int64_t id;
    char name[RULE_NAME_BYTES + 1];
    int64_t stock;
    int64_t sold;       /* sum of the item's line quantities */
    int64_t line_count; /* number of lines for the item (one per order) */
    /* both kept on the item's row, in the transaction that writes each line:
     * reading them costs the same however long the ledger grows */
    int64_t reserved;        /* units held by reservations in state held */
    int64_t returned;        /* units given back by cancelled orders (the returns) */
    int64_t per_buyer_limit; /* units one buyer may hold and buy, 0: no limit */
    /* stock is what is available; stock + reserved + sold - returned equals
     * the stock it was created with plus every change a stock set made */
} store_item;

/* Who wrote an order, and when. */
typedef struct store_order_info {
    int64_t order_id;
    int has_request_id;
    char request_id[RULE_REQUEST_ID_MAX + 1];
    int has_buyer_id;
    char buyer_id[RULE_BUYER_ID_MAX + 1];
    int64_t reservation_id; /* the reservation it confirmed, 0 for none */
    int cancelled;          /* its returns are written (store_tx_order_cancel) */
    char instance[RULE_INSTANCE_MAX + 1];
    char lock_mode[RULE_LOCK_MODE_MAX + 1];
    char created_at[32];
} store_order_info;

/* One line as it stands in the ledger. */
typedef struct store_line {
    int64_t item_id, quantity;
    int64_t remaining;  /* the item's stock right after the line */
    store_fence fence;  /* the token of the lock it was written under */
} store_line;

typedef struct store_order {
    store_order_info info;
    int nlines;
    store_line lines[RULE_ORDER_LINES_MAX];
} store_order;

/* An order to write: info's order_id and created_at are filled in by the store. */
typedef struct store_new_order {
    const char *request_id;  /* NULL when the client sent none */
    const char *buyer_id;    /* NULL when none: then a line on an item with a
                              * per_buyer_limit is STORE_ERR_BUYER_REQUIRED */
    const char *instance, *lock_mode;
    const char *lock_token;  /* NULL without a lock */
    int nlines;
    store_line lines[RULE_ORDER_LINES_MAX];
} store_new_order;

/* Asked inside a write transaction, once it holds the database's write lock
 * and just before COMMIT: 1 to commit, 0 to roll back (STORE_ERR_VETOED).
 * A late decision on purpose: waiting for the lock can take up to the busy
 * timeout, and what the caller knew before may no longer hold. */
typedef struct store_commit_check {
    int (*ok)(void *arg);
    void *arg;
} store_commit_check;

/* ---- the store and its connections ---- */

/* Opens the database cfg->db names with the backend that serves it, applies
 * its migrations, and returns STORE_OK with *out set; or an error with err
 * filled and *out NULL: STORE_ERR_UNAVAILABLE when a server could not be
 * reached or was not ready (it may be later), any other when waiting can't
 * help (a password or database the server refuses, a malformed --db). */
int store_open(const store_config *cfg, store **out, char *err, size_t errlen);

/* 1 when the backend that serves db keeps a bounded pool of connections
 * (cfg->pool_size: a database server's), 0 when it opens what it needs. */
int store_pooled(const char *db);

/* db as it may be shown (logs, /health): a password in a URL
 * (user:secret@host) or a conninfo (password=secret) replaced by "***". */
const char *store_db_shown(const char *db, char *buf, size_t size);

/* Closes every connection; all must have been given back. NULL is a no-op. */
void store_close(store *s);

/* The backend's name ("sqlite", "postgres"), for /health and logs. */
const char *store_backend_name(const store *s);

/* Where the store writes, for /health and /metrics: "host:port" of the
 * server of the session the store last gave back alive (PostgreSQL's
 * sessions all ask for a writable server, so after a failover this is the
 * new primary once a session there was used), into buf; "" for a backend
 * with no server (SQLite), before any session was used, and during an
 * outage (from a connect that failed until one succeeds, whose server it
 * names then: a dead primary is not named while none can be reached). A
 * host named with '"', '\\' or a control character has those shown as '_'.
 * Thread-safe. Returns buf. */
const char *store_node(store *s, char *buf, size_t size);

/* 1 when the backend has row locks a transaction can wait for
 * (store_tx_lock_stock): PostgreSQL's, not SQLite's. */
int store_has_row_locks(const store *s);

/* Takes an idle connection or opens one: STORE_OK with *out set, or
 * STORE_ERR_UNAVAILABLE (the server can't be reached: once a connect has
 * failed, at once, while the store reconnects in the background),
 * STORE_ERR_BUSY (every connection of the pool stayed in use past the busy
 * timeout), STORE_ERR_IO, with err filled and *out NULL. Thread-safe. */
int store_get(store *s, store_conn **out, char *err, size_t errlen);

/* Gives c back (rolling back a transaction left open). */
void store_put(store *s, store_conn *c);

/* Text of the last failure on c. */
const char *store_errstr(const store_conn *c);

/* A trivial read, for /health. */
int store_ping(store_conn *c);

/* A small write of nothing that matters, committed, that needs new space
 * where the database keeps its data (SQLite: about what a deduction appends
 * to the WAL; PostgreSQL: a relation extended by a page): STORE_OK when the
 * database takes writes, STORE_ERR_FULL while its disk is full, or another
 * failure. For /health once writes failed for lack of space: a read cannot
 * tell that space is back. */
int store_probe_write(store_conn *c);

/* ---- reads and single writes (each its own transaction) ---- */

/* Creates an item in a transaction of its own, under request_id (an
 * idempotency key, NULL for none; items have their own, apart from the
 * orders'): STORE_OK with the item as written in *out - taken from the
 * transaction itself, so that a session lost after COMMIT's answer costs
 * nothing; STORE_ERR_DUPLICATE when request_id was used already, nothing
 * written and *out the item that creation made, as it made it (its id and
 * name, the stock it was created with, nothing sold): the caller tells a
 * retry from another item by name and stock; or a failure. per_buyer_limit:
 * the units one buyer may hold and buy (0: no limit). A server's COMMIT in
 * doubt (store_tx_commit) that can't be resolved is
 * STORE_ERR_IN_DOUBT with out->id the id the item has if it was created. */
int store_item_create(store_conn *c, const char *name, int64_t stock, const char *request_id,
                      int64_t per_buyer_limit, store_item *out);
int store_item_get(store_conn *c, int64_t id, store_item *out);

/* Calls fn for up to limit items with an id above after (0: from the first),
 * in id order. */
typedef void (*store_item_fn)(const store_item *item, void *arg);
int store_item_list(store_conn *c, int64_t after, int limit, store_item_fn fn, void *arg);

/* Sets an item's stock, in a transaction that check (may be NULL) may veto.
 * A fence (non-NULL) makes it a fenced write that also claims the row:
 * STORE_ERR_STALE when the row carries this or a newer token. out (may be
 * NULL) gets the item as the transaction wrote it, read inside it before
 * COMMIT: what committed is answered even if the session is lost after.
 * per_buyer_limit: the item's new limit (0: none), or -1 to leave it. */
int store_item_set_stock(store_conn *c, int64_t id, int64_t stock, int64_t per_buyer_limit,
                         const store_fence *f, const store_commit_check *check,
                         store_item *out);

/* Sets an item's per_buyer_limit (0: none) in the transaction open on c
 * (store_item_set_stock's, in a transaction the caller holds: --lock db). STORE_OK, STORE_ERR_NOT_FOUND, or a
 * failure. */
int store_tx_set_buyer_limit(store_conn *c, int64_t id, int64_t per_buyer_limit);

/* Calls fn for up to limit of the item's lines of orders with an id below
 * before (0: from the newest), newest first, each with its order's info. */
typedef void (*store_line_fn)(const store_order_info *order, const store_line *line, void *arg);
int store_lines_of_item(store_conn *c, int64_t item_id, int64_t before, int limit,
                        store_line_fn fn, void *arg);

/* The order a requestId produced, with its lines: STORE_OK with *out, or
 * STORE_ERR_NOT_FOUND. Inside a transaction too. */
int store_order_by_request(store_conn *c, const char *request_id, store_order *out);

/* An order by its id, with its lines: STORE_OK with *out, or STORE_ERR_NOT_FOUND. */
int store_order_get(store_conn *c, int64_t order_id, store_order *out);

/* The read half of read-modify-write: the item's stock, no transaction held. */
int store_stock_read(store_conn *c, int64_t item_id, int64_t *stock);

/* The fenced read: claims the row for token f (sets the row's token when it
 * is lower) and returns its stock. From then on a holder with an older token
 * can no longer write it, even one that read before us. STORE_OK,
 * STORE_ERR_STALE (this or a newer token is on the row), STORE_ERR_NOT_FOUND,
 * STORE_ERR_BUSY, STORE_ERR_IO. Inside a transaction too. */
int store_stock_claim(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock);

/* The token the row carried when it last answered STALE on c (a claim, a
 * fenced write or a fenced stock set): what a lock holder refused by it must
 * raise its own above, when it may (dlock_fence_raise). (0, 0) before any. */
store_fence store_stale_token(const store_conn *c);

/* ---- reservations: units held for a buyer until expires_at ----
 *
 * A reservation takes every line's units from the item's stock into its
 * reserved, at once, and has one fate: confirmed (an order is written for
 * it: reserved becomes sold), cancelled or expired (the units go back to
 * stock). Whether it lapsed is decided by the database's clock (the
 * server's for PostgreSQL, the host's for SQLite), in the statement that
 * changes its state: a confirm and the expiry (or a cancel) racing on two
 * replicas cannot both win. */

enum store_reservation_state {
    STORE_RES_HELD,
    STORE_RES_CONFIRMED,
    STORE_RES_CANCELLED,
    STORE_RES_EXPIRED,     /* given back by the sweep */
};

/* "held", "confirmed", "cancelled", "expired". */
const char *store_reservation_state_name(enum store_reservation_state state);

typedef struct store_reservation_line {
    int64_t item_id, quantity;
    int64_t available; /* the item's stock right after the reservation took it (in a
                        * reservation as read: its stock now) */
} store_reservation_line;

typedef struct store_reservation {
    int64_t id;
    int has_request_id;
    char request_id[RULE_REQUEST_ID_MAX + 1];
    int has_buyer_id;
    char buyer_id[RULE_BUYER_ID_MAX + 1];
    enum store_reservation_state state; /* as stored: a held one may have lapsed */
    int lapsed;             /* held, and expires_at is past by the database's clock */
    int64_t expires_at_ms;  /* Unix time in ms, by the database's clock */
    int64_t hold_ms;        /* the hold it was given when made or last extended */
    int64_t order_id;       /* confirmed: the order it became; else 0 */
    char instance[RULE_INSTANCE_MAX + 1]; /* the replica that made it */
    char created_at[32];
    int nlines;
    store_reservation_line lines[RULE_ORDER_LINES_MAX];
} store_reservation;

/* A reservation to make. */
typedef struct store_new_reservation {
    const char *request_id; /* NULL when the client sent none */
    const char *buyer_id;   /* NULL when none (as an order's) */
    const char *instance;
    int64_t hold_ms;        /* expires_at = the database's now + hold_ms */
    int nlines;
    store_line lines[RULE_ORDER_LINES_MAX]; /* item_id, quantity, and the fence of
                                             * the item's claim ((0, 0): unfenced) */
} store_new_reservation;

/* The item of the line a STORE_ERR_BUYER_LIMIT or STORE_ERR_BUYER_REQUIRED
 * on c was about, with the item's limit and what the buyer had already. */
typedef struct store_limit_info {
    int64_t item_id, limit, had, asked;
} store_limit_info;
store_limit_info store_limit_item(const store_conn *c);

/* Inside a write transaction: takes every line's quantity from its item's
 * stock into reserved, and counts it against the buyer's limit, or nothing:
 * STORE_OK with the reservation in *out (each line's available: the stock
 * left); STORE_ERR_INSUFFICIENT (nothing written; *out's lines carry the
 * stock there was as available, for every line, and short lines are those
 * whose available < quantity); STORE_ERR_BUYER_LIMIT,
 * STORE_ERR_BUYER_REQUIRED; STORE_ERR_DUPLICATE when request_id was used
 * by another reservation (nothing written; *out is that one, as it is now);
 * STORE_ERR_STALE when a fenced line's row carries another token; a
 * failure. Fenced lines write their rows only while the row carries the
 * line's fence (claimed first with store_stock_claim). */
int store_tx_reserve(store_conn *c, const store_new_reservation *r, store_reservation *out);

/* A reservation by id, its lines' available the items' stock now:
 * STORE_OK or STORE_ERR_NOT_FOUND. Inside a transaction too. */
int store_reservation_get(store_conn *c, int64_t id, store_reservation *out);

/* Inside a write transaction: the held, unlapsed reservation id becomes the
 * order o (o's lines: the reservation's, with the fences of their items'
 * claims; o->buyer_id is ignored, the reservation's buyer already counted):
 * the order and its lines written (each line's remaining the item's stock,
 * which the confirm leaves), reserved moved to sold, the reservation
 * confirmed and naming the order. STORE_OK with *res and *order;
 * STORE_ERR_DUPLICATE when it was confirmed already (a replay: *res, and
 * *order the order it became); STORE_ERR_STATE when it is cancelled,
 * expired, or held but lapsed (res->state, res->lapsed say which: nothing
 * written, the sweep gives its units back); STORE_ERR_NOT_FOUND;
 * STORE_ERR_STALE; a failure. */
int store_tx_reservation_confirm(store_conn *c, int64_t id, const store_new_order *o,
                                 store_reservation *res, store_order *order);

/* Inside a write transaction: the held, unlapsed reservation id is
 * cancelled: its units back to stock, out of reserved and out of its
 * buyer's count, its item rows touched in item id order; f[k] the fence of
 * items[k]'s claim, k < nf, matched to the lines by item (f NULL, or an item
 * not among items: unfenced).
 * STORE_OK with *res (lines' available: the stock after); STORE_ERR_DUPLICATE
 * when it was cancelled already (a replay, *res); STORE_ERR_STATE when
 * confirmed, expired or lapsed; STORE_ERR_NOT_FOUND; STORE_ERR_STALE; a
 * failure. */
int store_tx_reservation_cancel(store_conn *c, int64_t id, const int64_t *items,
                                const store_fence *f, int nf, store_reservation *res);

/* Moves a held, unlapsed reservation's expires_at to the database's now +
 * hold_ms, in a transaction of its own: STORE_OK with *out;
 * STORE_ERR_STATE (not held, or lapsed: *out says); STORE_ERR_NOT_FOUND; a
 * failure. */
int store_reservation_extend(store_conn *c, int64_t id, int64_t hold_ms, store_reservation *out);

/* The items of up to limit held reservations that have lapsed, the
 * earliest expires_at first (no transaction held): up to items_max distinct
 * item ids into items, *n of them; *due the lapsed reservations those
 * items' locks would cover (at most limit). */
int store_reservations_due(store_conn *c, int limit, int64_t *items, int items_max, int *n,
                           int *due);

/* Inside a write transaction: up to limit held reservations that have
 * lapsed and whose every item is among items[0..n) (f[i]: the fence of
 * items[i]'s claim, NULL: unfenced) are expired, the earliest first: their
 * units back to stock, out of reserved and their buyers' counts. *expired
 * how many; *lag_ms[0..*expired): how late each was (the database's now -
 * expires_at) when given back. STORE_OK, STORE_ERR_STALE, a failure. */
int store_tx_reservations_expire(store_conn *c, const int64_t *items, const store_fence *f,
                                 int n, int limit, int *expired, int64_t *lag_ms);

/* How many reservations are held now (lapsed ones not yet given back
 * included), for the metrics. */
int store_reservations_held(store_conn *c, int64_t *n);

/* ---- returns: a cancelled order's units back ---- */

/* Inside a write transaction: every line of order order_id gets a return
 * (a new ledger entry naming the order, under request_id, NULL for none,
 * written by instance under lock_token, NULL for none), its units back to
 * stock and into the item's returned, out of the buyer's count, its item
 * rows touched in item id order; f[k] the fence of items[k]'s claim, k < nf,
 * matched to the lines by item (f NULL, or an item not among items:
 * unfenced).
 * STORE_OK with *out the order and each line's remaining the stock after
 * its return; STORE_ERR_DUPLICATE when it was cancelled already (nothing
 * written; *out the order, its lines' remaining the stock after that
 * cancel's returns); STORE_ERR_NOT_FOUND; STORE_ERR_STALE; a failure. */
int store_tx_order_cancel(store_conn *c, int64_t order_id, const char *request_id,
                          const char *instance, const char *lock_token, const int64_t *items,
                          const store_fence *f, int nf, store_order *out);

/* ---- write transactions ----
 *
 * A deduction is a transaction: store_tx_begin (it takes the write lock up
 * front), then reads and writes below, then store_tx_commit or
 * store_tx_abort. After a failed write inside it, abort. */

int store_tx_begin(store_conn *c);

/* Writes an item's new stock: when f is given, only while the row still
 * carries f (our claim stands), else STORE_ERR_STALE. */
int store_tx_set_stock(store_conn *c, int64_t item_id, int64_t stock, const store_fence *f);

/* Takes quantity from an item only if enough is left: *left is the new
 * stock, or, with STORE_ERR_INSUFFICIENT, the stock that was not enough. */
int store_tx_take(store_conn *c, int64_t item_id, int64_t quantity, int64_t *left);

/* Locks the item's row until the transaction ends (SELECT ... FOR UPDATE),
 * waiting at most wait_ms in all for other transactions' locks (behind
 * other waiters too), and reads its
 * stock: STORE_OK, STORE_ERR_LOCK_TIMEOUT, STORE_ERR_NOT_FOUND, or a
 * failure. Only where store_has_row_locks. */
int store_tx_lock_stock(store_conn *c, int64_t item_id, int wait_ms, int64_t *stock);

/* Appends an order and its lines (their stock must be written separately).
 * STORE_OK with the written order in *out; STORE_ERR_DUPLICATE with the
 * earlier order in *out when its requestId was used (nothing added). */
int store_tx_add_order(store_conn *c, const store_new_order *o, store_order *out);

/* A savepoint in the open transaction, replacing the one before: what is
 * written from now on can be undone alone (store_tx_rollback_to_savepoint)
 * while the rest of the transaction stays. For a part that must be all or
 * nothing inside a transaction shared with others (an order of group
 * commit): a failed statement undoes only itself on SQLite, leaving the
 * part's earlier writes, and on PostgreSQL it aborts the whole transaction
 * unless rolled back to a savepoint. STORE_OK, or a failure (then abort). */
int store_tx_savepoint(store_conn *c);

/* How many savepoints (one per order of group commit) a transaction should
 * take at most, or 0 for no bound. PostgreSQL: 64, the subtransaction ids a
 * session keeps in shared memory; past them, every other session's
 * snapshot looks in pg_subtrans for as long as the transaction runs. */
int store_savepoints_max(const store *s);

/* Undoes everything written since the savepoint, a failed statement's
 * writes too; the transaction is open and usable again and the savepoint
 * stays. STORE_OK, or a failure (the transaction is lost: abort). A
 * transaction that the failure rolled back whole (SQLite does, on an I/O
 * error, and on a full disk while spilling its cache) answers that
 * failure's code, as store_tx_commit does: a full disk stays FULL. */
int store_tx_rollback_to_savepoint(store_conn *c);

/* Commits unless check (may be NULL) vetoes; on any failure everything is
 * rolled back. A transaction that a failure inside it already rolled back
 * (a full disk, for one) answers that failure's code. A server that goes
 * away during COMMIT, or does not answer it in time, leaves its outcome in
 * doubt: the store then finds out (by the transaction's id, once the
 * session that ran COMMIT is gone) and answers STORE_OK or
 * STORE_ERR_UNAVAILABLE as it turned out; when it can't (the server stays
 * away, or that session lives on), STORE_ERR_IN_DOUBT. The same for the
 * writes above that are transactions of their own (an item created, a
 * stock set). */
int store_tx_commit(store_conn *c, const store_commit_check *check);

void store_tx_abort(store_conn *c);

#endif
