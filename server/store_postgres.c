/* store_postgres.c - the PostgreSQL backend of the store (store_backend.h),
 * for replicas on several hosts: items, orders, lines and their
 * transactions with the semantics store.h states, on READ COMMITTED and
 * row locks. Its statements are passed down to the pool
 * (store_postgres_pool.c) for its sessions (store_postgres_session.c);
 * BEGIN, savepoints and COMMIT: store_postgres_tx.c. */
#include <string.h>

#include "server/store_postgres_tx.h"

enum stmt_id {
    ST_PING, ST_ITEM_INSERT, ST_ITEM_BY_REQUEST, ST_ITEM_GET, ST_ITEM_LIST,
    ST_SET_STOCK, ST_SET_STOCK_FENCED, ST_STOCK_READ, ST_ROW_FENCE, ST_STOCK_CLAIM,
    ST_STOCK_WRITE_CLAIMED,
    ST_STOCK_TAKE, ST_STOCK_LOCK, ST_ORDER_INSERT, ST_LINE_INSERT, ST_ORDER_BY_REQUEST,
    ST_ORDER_GET, ST_LINES_OF_ORDER, ST_LINES_OF_ITEM,
    ST_COUNT
};
_Static_assert(ST_COUNT <= PG_STMTS_MAX, "a session prepares PG_STMTS_MAX statements at most");

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
/* sold and line_count are kept on the row by a trigger (schema 002): a read
 * costs the same however long the item's ledger is */
#define ITEM_SELECT "SELECT id, name, stock, sold, line_count FROM items "
#define ORDER_COLS "o.id, o.request_id, o.instance_id, o.lock_mode, " TS("o.created_at")
#define LINE_COLS "l.item_id, l.quantity, l.remaining, COALESCE(l.fence, 0), " \
                  "COALESCE(l.fence_seq, 0)"

static const struct pg_stmt stmts[ST_COUNT] = {
    [ST_PING] = {"ping", "SELECT 1", ""},
    /* the row as written comes back with the INSERT, inside its transaction:
     * nothing is left to read once COMMIT has answered. A requestId already
     * there (or being written, which this waits for) adds nothing, no row */
    [ST_ITEM_INSERT] = {"insert item",
        "INSERT INTO items (name, stock, request_id, created_stock) VALUES ($1, $2, $3, $2) "
        "ON CONFLICT (request_id) DO NOTHING RETURNING id, name, stock, sold, line_count",
        "tit"},
    /* the item as the creation under this requestId made it */
    [ST_ITEM_BY_REQUEST] = {"find item request id",
        "SELECT id, name, created_stock, 0, 0 FROM items WHERE request_id = $1", "t"},
    [ST_ITEM_GET] = {"read item", ITEM_SELECT "WHERE id = $1", "i"},
    [ST_ITEM_LIST] = {"list items", ITEM_SELECT "WHERE id > $1 ORDER BY id LIMIT $2", "ii"},
    [ST_SET_STOCK] = {"set stock",
        "UPDATE items SET stock = $2, updated_at = now() WHERE id = $1", "iiii"},
    [ST_SET_STOCK_FENCED] = {"set stock",
        "UPDATE items SET stock = $2, fence = $3, fence_seq = $4, updated_at = now() "
        "WHERE id = $1 AND (fence, fence_seq) < ($3, $4)", "iiii"},
    [ST_STOCK_READ] = {"read stock", "SELECT stock FROM items WHERE id = $1", "i"},
    [ST_ROW_FENCE] = {"read the row's token",
        "SELECT fence, fence_seq FROM items WHERE id = $1", "i"},
    [ST_STOCK_CLAIM] = {"claim row",
        "UPDATE items SET fence = $3, fence_seq = $4 "
        "WHERE id = $1 AND (fence, fence_seq) < ($3, $4) RETURNING stock", "iiii"},
    [ST_STOCK_WRITE_CLAIMED] = {"write stock",
        "UPDATE items SET stock = $2, updated_at = now() "
        "WHERE id = $1 AND fence = $3 AND fence_seq = $4", "iiii"},
    [ST_STOCK_TAKE] = {"take stock",
        "UPDATE items SET stock = stock - $2, updated_at = now() "
        "WHERE id = $1 AND stock >= $2 RETURNING stock", "ii"},
    [ST_STOCK_LOCK] = {"lock row", "SELECT stock FROM items WHERE id = $1 FOR UPDATE", "i"},
    /* a requestId already there (or being written by another transaction,
     * which this one then waits for) adds nothing and returns no row */
    [ST_ORDER_INSERT] = {"insert order",
        "INSERT INTO orders (request_id, instance_id, lock_mode) VALUES ($1, $2, $3) "
        "ON CONFLICT (request_id) DO NOTHING RETURNING id, " TS("created_at"), "ttt"},
    [ST_LINE_INSERT] = {"insert order line",
        "INSERT INTO order_lines (order_id, item_id, quantity, remaining, fence, fence_seq, "
        "lock_token) VALUES ($1, $2, $3, $4, $5, $6, $7)", "iiiiiit"},
    [ST_ORDER_BY_REQUEST] = {"find request id",
        "SELECT " ORDER_COLS " FROM orders o WHERE o.request_id = $1", "t"},
    [ST_ORDER_GET] = {"read order", "SELECT " ORDER_COLS " FROM orders o WHERE o.id = $1", "i"},
    [ST_LINES_OF_ORDER] = {"read order lines",
        "SELECT " LINE_COLS " FROM order_lines l WHERE l.order_id = $1 ORDER BY l.id", "i"},
    [ST_LINES_OF_ITEM] = {"list lines",
        "SELECT " ORDER_COLS ", " LINE_COLS " FROM order_lines l "
        "JOIN orders o ON o.id = l.order_id WHERE l.item_id = $1 AND l.order_id < $2 "
        "ORDER BY l.order_id DESC LIMIT $3", "iii"},
};

static void read_item(const PGresult *r, int row, store_item *it)
{
    it->id = col_int(r, row, 0);
    col_text(it->name, sizeof(it->name), r, row, 1);
    it->stock = col_int(r, row, 2);
    it->sold = col_int(r, row, 3);
    it->line_count = col_int(r, row, 4);
}

/* ORDER_COLS from column col on. */
static void read_order_info(const PGresult *r, int row, int col, store_order_info *o)
{
    o->order_id = col_int(r, row, col);
    o->has_request_id = !PQgetisnull(r, row, col + 1);
    col_text(o->request_id, sizeof(o->request_id), r, row, col + 1);
    col_text(o->instance, sizeof(o->instance), r, row, col + 2);
    col_text(o->lock_mode, sizeof(o->lock_mode), r, row, col + 3);
    col_text(o->created_at, sizeof(o->created_at), r, row, col + 4);
}

/* LINE_COLS from column col on. */
static void read_line(const PGresult *r, int row, int col, store_line *l)
{
    l->item_id = col_int(r, row, col);
    l->quantity = col_int(r, row, col + 1);
    l->remaining = col_int(r, row, col + 2);
    l->fence.fence = col_int(r, row, col + 3);
    l->fence.seq = (int)col_int(r, row, col + 4);
}

/* ---- the store: a pool of sessions that run these statements ---- */

static int pg_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    return pg_pool_open(cfg, &store_postgres, stmts, ST_COUNT, out, err, errlen);
}

static int pg_ping(store_conn *conn)
{
    PGresult *r;
    int rc = pg_exec(SESSION(conn), ST_PING, NULL, &r);
    PQclear(r);
    return rc;
}

/* TRUNCATE gives the table a new, empty file, so the row needs a new page
 * where the tables live: the write that fails first when that disk is full
 * (most deductions fit in pages their tables already have). */
static int pg_probe_write(store_conn *conn)
{
    pg_session *c = SESSION(conn);
    int rc = pg_command(c, "BEGIN");
    if (rc == STORE_OK)
        rc = pg_command(c, "TRUNCATE write_probe");
    if (rc == STORE_OK)
        rc = pg_command(c, "INSERT INTO write_probe DEFAULT VALUES");
    if (rc == STORE_OK)
        rc = pg_command(c, "COMMIT");
    if (rc != STORE_OK)
        pg_command(c, "ROLLBACK");
    return rc;
}

/* ---- items ---- */

static int pg_item_get(store_conn *conn, int64_t id, store_item *out)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    int rc = pg_exec_row(SESSION(conn), ST_ITEM_GET, &p, &r);
    if (rc == STORE_OK)
        read_item(r, 0, out);
    PQclear(r);
    return rc;
}

/* In a transaction of its own, not in autocommit: an INSERT whose commit
 * got no answer may have been written, and only a transaction's COMMIT is
 * looked into (store_postgres_tx.c). When that can't tell, out->id is the
 * id the item has if it was created. A requestId used before: that item,
 * as its creation made it, read in the same transaction, which then
 * writes nothing. */
static int pg_item_create(store_conn *conn, const char *name, int64_t stock,
                          const char *request_id, int64_t per_buyer_limit, store_item *out)
{
    pg_session *c = SESSION(conn);
    struct params p = {0};
    PGresult *r = NULL;
    p_text(&p, name);
    p_int(&p, stock);
    p_text(&p, request_id);
    memset(out, 0, sizeof(*out));
    int rc = pg_tx_begin(conn);
    if (rc == STORE_OK)
        rc = pg_exec(c, ST_ITEM_INSERT, &p, &r);
    int added = rc == STORE_OK && PQntuples(r) > 0;
    if (added)
        read_item(r, 0, out);
    PQclear(r);
    if (rc == STORE_OK && !added) { /* its requestId was there: the earlier item */
        struct params q = {0};
        p_text(&q, request_id);
        rc = pg_exec_row(c, ST_ITEM_BY_REQUEST, &q, &r);
        if (rc == STORE_OK)
            read_item(r, 0, out);
        PQclear(r);
        rc = rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    if (rc != STORE_OK) {
        pg_rollback(c);
        return rc;
    }
    return pg_tx_commit(conn, NULL);
}

static int pg_item_list(store_conn *conn, int64_t after, int limit, store_item_fn fn, void *arg)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, after);
    p_int(&p, limit);
    int rc = pg_exec(SESSION(conn), ST_ITEM_LIST, &p, &r);
    store_item it;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r); i++) {
        read_item(r, i, &it);
        fn(&it, arg);
    }
    PQclear(r);
    return rc;
}

static int pg_stock_read(store_conn *conn, int64_t item_id, int64_t *stock)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    int rc = pg_exec_row(SESSION(conn), ST_STOCK_READ, &p, &r);
    if (rc == STORE_OK)
        *stock = col_int(r, 0, 0);
    PQclear(r);
    return rc;
}

/* The token on item id's row into conn's stale answer: STORE_OK,
 * STORE_ERR_NOT_FOUND, or the failure. */
static int read_stale_token(store_conn *conn, int64_t id)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    int rc = pg_exec_row(SESSION(conn), ST_ROW_FENCE, &p, &r);
    if (rc == STORE_OK)
        conn->stale = (store_fence){col_int(r, 0, 0), (int)col_int(r, 0, 1)};
    PQclear(r);
    return rc;
}

/* Runs an UPDATE on one item bound as (id, value, fence, seq). When it
 * changes nothing the item is missing (NOT_FOUND) or, when fenced, another
 * holder's token is on the row (STALE, that token in conn's stale answer).
 * With RETURNING, *ret gets column 0. */
static int update_item(store_conn *conn, enum stmt_id id_stmt, int64_t id, int64_t value,
                       const store_fence *f, int64_t *ret)
{
    pg_session *c = SESSION(conn);
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    p_int(&p, value);
    p_int(&p, f ? f->fence : 0);
    p_int(&p, f ? f->seq : 0);
    int rc = pg_exec(c, id_stmt, &p, &r);
    int changed = rc == STORE_OK && (PQntuples(r) > 0 || atoi(PQcmdTuples(r)) > 0);
    if (changed && ret && PQntuples(r) > 0)
        *ret = col_int(r, 0, 0);
    PQclear(r);
    if (rc == STORE_OK && !changed) {
        rc = read_stale_token(conn, id);
        if (rc == STORE_OK) {
            snprintf(c->err, sizeof(c->err), "item %lld carries a newer lock's token, "
                     "(%lld, %d), than (%lld, %d)", (long long)id, (long long)conn->stale.fence,
                     conn->stale.seq, (long long)(f ? f->fence : 0), f ? f->seq : 0);
            rc = STORE_ERR_STALE;
        }
    }
    return rc;
}

static int pg_stock_claim(store_conn *conn, int64_t item_id, const store_fence *f,
                          int64_t *stock)
{
    return update_item(conn, ST_STOCK_CLAIM, item_id, 0, f, stock);
}

static int pg_item_set_stock(store_conn *conn, int64_t id, int64_t stock,
                             int64_t per_buyer_limit, const store_fence *f,
                             const store_commit_check *check, store_item *out)
{
    pg_session *c = SESSION(conn);
    int rc = pg_tx_begin(conn);
    if (rc == STORE_OK)
        rc = update_item(conn, f ? ST_SET_STOCK_FENCED : ST_SET_STOCK, id, stock, f, NULL);
    if (rc == STORE_OK && out) /* before COMMIT: nothing to read once it answered */
        rc = pg_item_get(conn, id, out);
    if (rc == STORE_OK)
        return pg_tx_commit(conn, check);
    pg_rollback(c);
    return rc;
}

static int pg_tx_set_stock(store_conn *conn, int64_t item_id, int64_t stock, const store_fence *f)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    return update_item(conn, f ? ST_STOCK_WRITE_CLAIMED : ST_SET_STOCK, item_id, stock, f, NULL);
}

static int pg_tx_take(store_conn *conn, int64_t item_id, int64_t quantity, int64_t *left)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    p_int(&p, quantity);
    int rc = pg_exec(c, ST_STOCK_TAKE, &p, &r);
    int taken = rc == STORE_OK && PQntuples(r) > 0;
    if (taken)
        *left = col_int(r, 0, 0);
    PQclear(r);
    if (rc == STORE_OK && !taken) { /* no row: missing or not enough */
        rc = pg_stock_read(conn, item_id, left);
        if (rc == STORE_OK)
            rc = STORE_ERR_INSUFFICIENT;
    }
    return rc;
}

static int pg_tx_lock_stock(store_conn *conn, int64_t item_id, int wait_ms, int64_t *stock)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    /* lock_timeout bounds each lock a statement waits for, and FOR UPDATE
     * may wait for two: the row's tuple lock, which a waiter ahead holds
     * while it waits, then the holder's transaction - twice wait_ms. The
     * statement's own bound is the wait's, whole: a row read by its key
     * takes no time beside its waits. No wait (0): 1 ms a lock, and the
     * statement bounded as any other. */
    char set[96];
    snprintf(set, sizeof(set), "SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
             wait_ms > 0 ? wait_ms : 1, wait_ms > 0 ? wait_ms : (1 + c->cfg->timeout_ms));
    struct params p = {0};
    PGresult *r = NULL;
    p_int(&p, item_id);
    int rc = pg_command(c, set);
    if (rc == STORE_OK)
        rc = pg_exec_waiting(c, ST_STOCK_LOCK, &p, wait_ms, &r);
    if (rc == STORE_ERR_BUSY && wait_ms > 0) /* statement_timeout: the wait, whole */
        rc = c->tx_rc = STORE_ERR_LOCK_TIMEOUT;
    if (rc == STORE_OK && wait_ms > 0) { /* the rest of the transaction: the usual bound */
        snprintf(set, sizeof(set), "SET LOCAL statement_timeout = %d", c->cfg->timeout_ms);
        rc = pg_command(c, set);
    }
    if (rc == STORE_OK && PQntuples(r) == 0)
        rc = STORE_ERR_NOT_FOUND;
    if (rc == STORE_OK)
        *stock = col_int(r, 0, 0);
    else if (rc == STORE_ERR_LOCK_TIMEOUT)
        snprintf(c->err, sizeof(c->err), "the row of item %lld stayed locked for %d ms",
                 (long long)item_id, wait_ms);
    PQclear(r);
    return rc;
}

/* ---- orders and lines ---- */

static int read_lines_of_order(pg_session *c, store_order *o)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, o->info.order_id);
    int rc = pg_exec(c, ST_LINES_OF_ORDER, &p, &r);
    o->nlines = 0;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r) && i < RULE_ORDER_LINES_MAX; i++)
        read_line(r, i, 0, &o->lines[o->nlines++]);
    PQclear(r);
    return rc;
}

/* The order statement id finds by p, with its lines. */
static int read_order(pg_session *c, enum stmt_id id, const struct params *p, store_order *out)
{
    PGresult *r;
    int rc = pg_exec_row(c, id, p, &r);
    if (rc == STORE_OK)
        read_order_info(r, 0, 0, &out->info);
    PQclear(r);
    return rc == STORE_OK ? read_lines_of_order(c, out) : rc;
}

static int pg_order_by_request(store_conn *conn, const char *request_id, store_order *out)
{
    struct params p = {0};
    p_text(&p, request_id);
    return read_order(SESSION(conn), ST_ORDER_BY_REQUEST, &p, out);
}

static int pg_order_get(store_conn *conn, int64_t order_id, store_order *out)
{
    struct params p = {0};
    p_int(&p, order_id);
    return read_order(SESSION(conn), ST_ORDER_GET, &p, out);
}

static int pg_lines_of_item(store_conn *conn, int64_t item_id, int64_t before, int limit,
                            store_line_fn fn, void *arg)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    p_int(&p, before > 0 ? before : INT64_MAX);
    p_int(&p, limit);
    int rc = pg_exec(SESSION(conn), ST_LINES_OF_ITEM, &p, &r);
    store_order_info o;
    store_line l;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r); i++) {
        read_order_info(r, i, 0, &o);
        read_line(r, i, 5, &l);
        fn(&o, &l, arg);
    }
    PQclear(r);
    return rc;
}

static int insert_line(pg_session *c, int64_t order_id, const store_line *l, const char *lock_token)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, order_id);
    p_int(&p, l->item_id);
    p_int(&p, l->quantity);
    p_int(&p, l->remaining);
    p_int(&p, l->fence.fence);
    p_int(&p, l->fence.seq);
    p_text(&p, lock_token);
    if (l->fence.fence == 0) /* unfenced: NULL, as SQLite's rows have it */
        p.v[4] = p.v[5] = NULL;
    int rc = pg_exec(c, ST_LINE_INSERT, &p, &r);
    PQclear(r);
    return rc;
}

static int pg_tx_add_order(store_conn *conn, const store_new_order *o, store_order *out)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    struct params p = {0};
    PGresult *r;
    p_text(&p, o->request_id);
    p_text(&p, o->instance);
    p_text(&p, o->lock_mode);
    memset(out, 0, sizeof(*out));
    int rc = pg_exec(c, ST_ORDER_INSERT, &p, &r);
    int added = rc == STORE_OK && PQntuples(r) > 0;
    if (added) {
        out->info.order_id = col_int(r, 0, 0);
        col_text(out->info.created_at, sizeof(out->info.created_at), r, 0, 1);
    }
    PQclear(r);
    if (rc == STORE_OK && !added) { /* its requestId was there: the earlier order */
        rc = pg_order_by_request(conn, o->request_id, out);
        return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    for (int i = 0; rc == STORE_OK && i < o->nlines; i++)
        rc = insert_line(c, out->info.order_id, &o->lines[i], o->lock_token);
    return rc; /* store.c fills in the rest of out from o */
}

/* PGPROC_MAX_CACHED_SUBXIDS: the subtransaction ids a session shows other
 * snapshots from shared memory; one more and their snapshots are marked
 * overflowed, and each look at a row this session may have written goes
 * through pg_subtrans (an SLRU under one lock) until the transaction ends */
#define SUBXIDS_CACHED 64

const store_backend store_postgres = {
    .name = "postgres",
    .savepoints_max = SUBXIDS_CACHED,
    .pooled = 1,
    .serves = pg_serves,
    .open = pg_open,
    .close = pg_close,
    .get = pg_get,
    .put = pg_put,
    .errstr = pg_errstr,
    .ping = pg_ping,
    .probe_write = pg_probe_write,
    .item_create = pg_item_create,
    .item_get = pg_item_get,
    .item_list = pg_item_list,
    .item_set_stock = pg_item_set_stock,
    .lines_of_item = pg_lines_of_item,
    .order_by_request = pg_order_by_request,
    .order_get = pg_order_get,
    .stock_read = pg_stock_read,
    .stock_claim = pg_stock_claim,
    .tx_begin = pg_tx_begin,
    .tx_set_stock = pg_tx_set_stock,
    .tx_take = pg_tx_take,
    .tx_lock_stock = pg_tx_lock_stock,
    .tx_add_order = pg_tx_add_order,
    .tx_savepoint = pg_tx_savepoint,
    .tx_rollback_to_savepoint = pg_tx_rollback_to_savepoint,
    .tx_commit = pg_tx_commit,
    .tx_abort = pg_tx_abort,
};
