/* store_sqlite.c - the SQLite backend of the store (store_backend.h): a pool
 * of connections (store_sqlite_conn.c: each with its cached statements, the
 * embedded schema migrations), and items and transactions; orders and
 * their lines: store_sqlite_order.c, reservations and returns:
 * store_sqlite_reserve.c. Several processes on one host share one file (WAL journal,
 * busy timeout). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_sqlite_reserve.h"

#define IDLE_MAX 64

typedef struct sqlite_store {
    struct store base;
    store_config cfg;
    char *path;
    pthread_mutex_t mu; /* guards idle, nidle */
    sqlite_conn *idle[IDLE_MAX];
    int nidle;
} sqlite_store;

#define CONN(c) ((sqlite_conn *)(c))

/* ---- the store: a pool of connections ---- */

static const store_backend *backend(void) { return &store_sqlite; }

static void sq_put(store *st, store_conn *conn);
static void sq_close(store *st);
static int sq_tx_commit(store_conn *conn, const store_commit_check *check);

/* SQLite takes a path: anything that does not name a scheme ("x://"). */
static int sq_serves(const char *db) { return strstr(db, "://") == NULL; }

static int sq_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    sqlite_store *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->path = strdup(cfg->db)) == NULL) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERR_IO;
    }
    s->base.be = backend();
    s->cfg = *cfg;
    s->cfg.db = s->path;
    pthread_mutex_init(&s->mu, NULL);
    sqlite_conn *c = sq_conn_open(&s->cfg, backend(), err, errlen);
    int rc = c ? sq_migrate(c, err, errlen) : STORE_ERR_IO;
    if (rc != STORE_OK) {
        if (c)
            sq_conn_close(c);
        sq_close(&s->base);
        return rc;
    }
    sq_put(&s->base, &c->base);
    *out = &s->base;
    return STORE_OK;
}

static void sq_close(store *st)
{
    sqlite_store *s = (sqlite_store *)st;
    for (int i = 0; i < s->nidle; i++)
        sq_conn_close(s->idle[i]);
    pthread_mutex_destroy(&s->mu);
    free(s->path);
    free(s);
}

static int sq_get(store *st, store_conn **out, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)st;
    sqlite_conn *c = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->nidle > 0)
        c = s->idle[--s->nidle];
    pthread_mutex_unlock(&s->mu);
    if (c == NULL)
        c = sq_conn_open(&s->cfg, backend(), err, errlen);
    *out = c ? &c->base : NULL;
    return c ? STORE_OK : STORE_ERR_IO;
}

static void sq_put(store *st, store_conn *conn)
{
    sqlite_store *s = (sqlite_store *)st;
    sqlite_conn *c = CONN(conn);
    sq_rollback(c); /* never pool a connection inside a transaction */
    pthread_mutex_lock(&s->mu);
    if (s->nidle < IDLE_MAX) {
        s->idle[s->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (c)
        sq_conn_close(c);
}

static const char *sq_errstr(const store_conn *c) { return CONN(c)->err; }

static int sq_ping(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = sq_stmt(c, ST_PING);
    if (st == NULL)
        return STORE_ERR_IO;
    int rc = sqlite3_step(st) == SQLITE_ROW ? STORE_OK : sq_fail(c, "ping");
    sqlite3_reset(st);
    return rc;
}

/* ---- items ---- */

static int sq_item_get(store_conn *conn, int64_t id, store_item *out)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = sq_stmt(c, ST_ITEM_GET);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int rc = sq_first_row(c, st, "read item");
    if (rc == STORE_OK)
        sq_read_item(st, out);
    sqlite3_reset(st);
    return rc;
}

/* The item created under request_id, as its creation made it: STORE_OK,
 * STORE_ERR_NOT_FOUND, or a failure. */
static int item_by_request(sqlite_conn *c, const char *request_id, store_item *out)
{
    sqlite3_stmt *st = sq_stmt(c, ST_ITEM_BY_REQUEST);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_text(st, 1, request_id, -1, SQLITE_STATIC);
    int rc = sq_first_row(c, st, "find item request id");
    if (rc == STORE_OK)
        sq_read_item(st, out);
    sqlite3_reset(st);
    return rc;
}

/* In a transaction that holds the write lock from the start: a requestId
 * looked for finds the item another replica's creation just committed, or
 * none that can appear before this one commits. */
static int sq_item_create(store_conn *conn, const char *name, int64_t stock,
                          const char *request_id, int64_t per_buyer_limit, store_item *out)
{
    sqlite_conn *c = CONN(conn);
    memset(out, 0, sizeof(*out));
    int rc = sq_run(c, ST_BEGIN);
    if (rc == STORE_OK && request_id) {
        rc = item_by_request(c, request_id, out);
        rc = rc == STORE_OK ? STORE_ERR_DUPLICATE : rc == STORE_ERR_NOT_FOUND ? STORE_OK : rc;
    }
    sqlite3_stmt *st = rc == STORE_OK ? sq_stmt(c, ST_ITEM_INSERT) : NULL;
    if (rc == STORE_OK && st == NULL)
        rc = STORE_ERR_IO;
    if (st) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, stock);
        sq_bind_text_or_null(st, 3, request_id);
        sqlite3_bind_int64(st, 4, per_buyer_limit);
        rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "insert item");
        sqlite3_reset(st);
    }
    if (rc == STORE_OK)
        rc = sq_item_get(conn, sqlite3_last_insert_rowid(c->db), out);
    if (rc == STORE_OK)
        return sq_tx_commit(conn, NULL);
    sq_rollback(c);
    return rc;
}

static int sq_item_list(store_conn *conn, int64_t after, int limit, store_item_fn fn, void *arg)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = sq_stmt(c, ST_ITEM_LIST);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    int step;
    store_item it;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        sq_read_item(st, &it);
        fn(&it, arg);
    }
    int rc = step == SQLITE_DONE ? STORE_OK : sq_fail(c, "list items");
    sqlite3_reset(st);
    return rc;
}

static int sq_stock_read(store_conn *conn, int64_t item_id, int64_t *stock)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = sq_stmt(c, ST_STOCK_READ);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    int rc = sq_first_row(c, st, "read stock");
    if (rc == STORE_OK)
        *stock = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc;
}

/* The token on item id's row into c's stale answer: STORE_OK,
 * STORE_ERR_NOT_FOUND, or the failure. */
static int read_stale_token(sqlite_conn *c, int64_t id)
{
    sqlite3_stmt *st = sq_stmt(c, ST_ROW_FENCE);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int rc = sq_first_row(c, st, "read the row's token");
    if (rc == STORE_OK)
        c->base.stale = (store_fence){sqlite3_column_int64(st, 0), sqlite3_column_int(st, 1)};
    sqlite3_reset(st);
    return rc;
}

/* Runs an UPDATE on one item bound as (id, value, fence, seq). When it
 * changes nothing the item is missing (NOT_FOUND) or, when fenced, another
 * holder's token is on the row (STALE, that token in c's stale answer).
 * With RETURNING, *ret gets column 0. */
static int update_item(sqlite_conn *c, enum stmt_id id_stmt, int64_t id, int64_t value,
                       const store_fence *f, int64_t *ret)
{
    sqlite3_stmt *st = sq_stmt(c, id_stmt);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, value);
    if (f) {
        sqlite3_bind_int64(st, 3, f->fence);
        sqlite3_bind_int(st, 4, f->seq);
    }
    int step = sqlite3_step(st), rc = STORE_OK, changed = 0;
    if (step == SQLITE_ROW && ret)
        *ret = sqlite3_column_int64(st, 0);
    if (step == SQLITE_ROW || step == SQLITE_DONE)
        changed = step == SQLITE_ROW || sqlite3_changes(c->db) > 0;
    else
        rc = sq_fail(c, sq_stmt_sql[id_stmt]);
    sqlite3_reset(st);
    if (rc == STORE_OK && !changed) {
        rc = read_stale_token(c, id);
        if (rc == STORE_OK) {
            snprintf(c->err, sizeof(c->err), "item %lld carries a newer lock's token, "
                     "(%lld, %d), than (%lld, %d)", (long long)id, (long long)c->base.stale.fence,
                     c->base.stale.seq, (long long)f->fence, f->seq);
            rc = STORE_ERR_STALE;
        }
    }
    return rc;
}

static int sq_stock_claim(store_conn *conn, int64_t item_id, const store_fence *f,
                          int64_t *stock)
{
    return update_item(CONN(conn), ST_STOCK_CLAIM, item_id, 0, f, stock);
}

/* Commits the open transaction unless check vetoes it; rolls back on failure. */
static int sq_tx_commit(store_conn *conn, const store_commit_check *check)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    if (rc != STORE_OK) {
        /* rolled back already: nothing to commit */
    } else if (check && !check->ok(check->arg)) {
        snprintf(c->err, sizeof(c->err), "commit vetoed by the caller");
        rc = STORE_ERR_VETOED;
    } else {
        rc = sq_run(c, ST_COMMIT);
    }
    if (rc != STORE_OK)
        sq_rollback(c);
    return rc;
}

static int sq_tx_begin(store_conn *conn)
{
    CONN(conn)->savepoint = 0;
    return sq_run(CONN(conn), ST_BEGIN);
}

/* The one before is released first: savepoints would otherwise pile up,
 * one per order of a transaction. */
static int sq_tx_savepoint(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    if (rc == STORE_OK && c->savepoint)
        rc = sq_run(c, ST_RELEASE);
    if (rc == STORE_OK)
        rc = sq_run(c, ST_SAVEPOINT);
    c->savepoint = rc == STORE_OK;
    return rc;
}

/* A transaction SQLite rolled back whole (sq_tx_open) has no savepoint left:
 * its failure is the answer, for every order of it. */
static int sq_tx_rollback_to_savepoint(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    if (rc == STORE_OK && !c->savepoint) {
        snprintf(c->err, sizeof(c->err), "no savepoint to roll back to");
        rc = STORE_ERR_IO;
    }
    return rc == STORE_OK ? sq_run(c, ST_ROLLBACK_TO) : rc;
}

static void sq_tx_abort(store_conn *conn) { sq_rollback(CONN(conn)); }

/* A write of nothing that matters, committed: STORE_ERR_FULL while the
 * disk has no room for about what a deduction appends to the WAL. */
static int sq_probe_write(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_run(c, ST_BEGIN);
    if (rc == STORE_OK)
        rc = sq_run(c, ST_PROBE);
    if (rc == STORE_OK)
        rc = sq_run(c, ST_COMMIT);
    sq_rollback(c);
    return rc;
}

/* An item's per_buyer_limit (0: none): STORE_OK, STORE_ERR_NOT_FOUND, or a failure. */
static int set_limit(sqlite_conn *c, int64_t id, int64_t per_buyer_limit)
{
    sqlite3_stmt *st = sq_stmt(c, ST_SET_LIMIT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, per_buyer_limit);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "set the buyer limit");
    sqlite3_reset(st);
    if (rc == STORE_OK && sqlite3_changes(c->db) == 0) {
        snprintf(c->err, sizeof(c->err), "no item %lld", (long long)id);
        rc = STORE_ERR_NOT_FOUND;
    }
    return rc;
}

static int sq_tx_set_buyer_limit(store_conn *conn, int64_t id, int64_t per_buyer_limit)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    return rc == STORE_OK ? set_limit(c, id, per_buyer_limit) : rc;
}

static int sq_item_set_stock(store_conn *conn, int64_t id, int64_t stock,
                             int64_t per_buyer_limit, const store_fence *f,
                             const store_commit_check *check, store_item *out)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_run(c, ST_BEGIN);
    if (rc == STORE_OK)
        rc = update_item(c, f ? ST_SET_STOCK_FENCED : ST_SET_STOCK, id, stock, f, NULL);
    if (rc == STORE_OK && per_buyer_limit >= 0)
        rc = set_limit(c, id, per_buyer_limit);
    if (rc == STORE_OK && out) /* as it committed, whatever writes come after */
        rc = sq_item_get(conn, id, out);
    if (rc == STORE_OK)
        return sq_tx_commit(conn, check);
    sq_rollback(c);
    return rc;
}

/* ---- orders and lines (store_sqlite_order.c) ---- */

static int sq_order_by_request(store_conn *conn, const char *request_id, store_order *out)
{
    return sqo_order_by_request(CONN(conn), request_id, out);
}

static int sq_order_get(store_conn *conn, int64_t order_id, store_order *out)
{
    return sqo_order_get(CONN(conn), order_id, out);
}

static int sq_lines_of_item(store_conn *conn, int64_t item_id, int64_t before, int limit,
                            store_line_fn fn, void *arg)
{
    return sqo_lines_of_item(CONN(conn), item_id, before, limit, fn, arg);
}

static int sq_tx_add_order(store_conn *conn, const store_new_order *o, store_order *out)
{
    return sqo_add_order(CONN(conn), o, out); /* store.c fills in the rest of out from o */
}

static int sq_tx_set_stock(store_conn *conn, int64_t item_id, int64_t stock, const store_fence *f)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    return rc != STORE_OK ? rc : update_item(c, f ? ST_STOCK_WRITE_CLAIMED : ST_SET_STOCK,
                                             item_id, stock, f, NULL);
}

static int sq_tx_take(store_conn *conn, int64_t item_id, int64_t quantity, int64_t *left)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    sqlite3_stmt *st = rc == STORE_OK ? sq_stmt(c, ST_STOCK_TAKE) : NULL;
    if (st == NULL)
        return rc != STORE_OK ? rc : STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    sqlite3_bind_int64(st, 2, quantity);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW)
        *left = sqlite3_column_int64(st, 0);
    else if (step != SQLITE_DONE)
        rc = sq_fail(c, "take stock");
    sqlite3_reset(st);
    if (rc == STORE_OK && step == SQLITE_DONE) { /* no row: missing or not enough */
        rc = sq_stock_read(conn, item_id, left);
        if (rc == STORE_OK)
            rc = STORE_ERR_INSUFFICIENT;
    }
    return rc;
}

const store_backend store_sqlite = {
    .name = "sqlite",
    .serves = sq_serves,
    .open = sq_open,
    .close = sq_close,
    .get = sq_get,
    .put = sq_put,
    .errstr = sq_errstr,
    .ping = sq_ping,
    .probe_write = sq_probe_write,
    .item_create = sq_item_create,
    .item_get = sq_item_get,
    .item_list = sq_item_list,
    .item_set_stock = sq_item_set_stock,
    .lines_of_item = sq_lines_of_item,
    .order_by_request = sq_order_by_request,
    .order_get = sq_order_get,
    .stock_read = sq_stock_read,
    .stock_claim = sq_stock_claim,
    .tx_begin = sq_tx_begin,
    .tx_set_stock = sq_tx_set_stock,
    .tx_take = sq_tx_take,
    .tx_add_order = sq_tx_add_order,
    .tx_set_buyer_limit = sq_tx_set_buyer_limit,
    .tx_reserve = sqr_tx_reserve,
    .reservation_get = sqr_reservation_get,
    .tx_reservation_confirm = sqr_tx_reservation_confirm,
    .tx_reservation_cancel = sqr_tx_reservation_cancel,
    .reservation_extend = sqr_reservation_extend,
    .reservations_due = sqr_reservations_due,
    .tx_reservations_expire = sqr_tx_reservations_expire,
    .reservations_held = sqr_reservations_held,
    .tx_order_cancel = sqr_tx_order_cancel,
    .tx_savepoint = sq_tx_savepoint,
    .tx_rollback_to_savepoint = sq_tx_rollback_to_savepoint,
    .tx_commit = sq_tx_commit,
    .tx_abort = sq_tx_abort,
};
