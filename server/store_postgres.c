/* store_postgres.c - the PostgreSQL backend of the store (store_backend.h),
 * for replicas on several hosts: items, orders, lines and their
 * transactions with the semantics store.h states, on READ COMMITTED and
 * row locks. Its statements (store_postgres_sql.c) are passed down to the
 * pool (store_postgres_pool.c) for its sessions (store_postgres_session.c);
 * orders and their lines: store_postgres_order.c; reservations and
 * returns: store_postgres_reserve.c; BEGIN, savepoints and COMMIT:
 * store_postgres_tx.c. */
#include <string.h>

#include "server/store_postgres_reserve.h"
#include "server/store_postgres_tx.h"

/* ---- the store: a pool of sessions that run these statements ---- */

static int pg_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    return pg_pool_open(cfg, &store_postgres, pg_stmts, ST_COUNT, out, err, errlen);
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
        pg_read_item(r, 0, out);
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
    p_int(&p, per_buyer_limit);
    memset(out, 0, sizeof(*out));
    int rc = pg_tx_begin(conn);
    if (rc == STORE_OK)
        rc = pg_exec(c, ST_ITEM_INSERT, &p, &r);
    int added = rc == STORE_OK && PQntuples(r) > 0;
    if (added)
        pg_read_item(r, 0, out);
    PQclear(r);
    if (rc == STORE_OK && !added) { /* its requestId was there: the earlier item */
        struct params q = {0};
        p_text(&q, request_id);
        rc = pg_exec_row(c, ST_ITEM_BY_REQUEST, &q, &r);
        if (rc == STORE_OK)
            pg_read_item(r, 0, out);
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
        pg_read_item(r, i, &it);
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

/* An item's per_buyer_limit (0: none), in the open transaction. */
static int pg_tx_set_buyer_limit(store_conn *conn, int64_t id, int64_t per_buyer_limit)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    p_int(&p, per_buyer_limit);
    int rc = pg_exec(c, ST_SET_LIMIT, &p, &r);
    if (rc == STORE_OK && atoi(PQcmdTuples(r)) == 0) {
        snprintf(c->err, sizeof(c->err), "no item %lld", (long long)id);
        rc = STORE_ERR_NOT_FOUND;
    }
    PQclear(r);
    return rc;
}

static int pg_item_set_stock(store_conn *conn, int64_t id, int64_t stock,
                             int64_t per_buyer_limit, const store_fence *f,
                             const store_commit_check *check, store_item *out)
{
    pg_session *c = SESSION(conn);
    int rc = pg_tx_begin(conn);
    if (rc == STORE_OK)
        rc = update_item(conn, f ? ST_SET_STOCK_FENCED : ST_SET_STOCK, id, stock, f, NULL);
    if (rc == STORE_OK && per_buyer_limit >= 0)
        rc = pg_tx_set_buyer_limit(conn, id, per_buyer_limit);
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

/* ---- orders and lines (store_postgres_order.c) ---- */

static int pg_order_by_request(store_conn *conn, const char *request_id, store_order *out)
{
    return pgo_order_by_request(SESSION(conn), request_id, out);
}

static int pg_order_get(store_conn *conn, int64_t order_id, store_order *out)
{
    return pgo_order_get(SESSION(conn), order_id, out);
}

static int pg_lines_of_item(store_conn *conn, int64_t item_id, int64_t before, int limit,
                            store_line_fn fn, void *arg)
{
    return pgo_lines_of_item(SESSION(conn), item_id, before, limit, fn, arg);
}

static int pg_tx_add_order(store_conn *conn, const store_new_order *o, store_order *out)
{
    return pgo_add_order(conn, o, out); /* store.c fills in the rest of out from o */
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
    .node = pg_node,
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
    .tx_set_buyer_limit = pg_tx_set_buyer_limit,
    .tx_reserve = pgr_tx_reserve,
    .reservation_get = pgr_reservation_get,
    .tx_reservation_confirm = pgr_tx_reservation_confirm,
    .tx_reservation_cancel = pgr_tx_reservation_cancel,
    .reservation_extend = pgr_reservation_extend,
    .reservations_due = pgr_reservations_due,
    .tx_reservations_expire = pgr_tx_reservations_expire,
    .reservations_held = pgr_reservations_held,
    .tx_order_cancel = pgr_tx_order_cancel,
    .tx_savepoint = pg_tx_savepoint,
    .tx_rollback_to_savepoint = pg_tx_rollback_to_savepoint,
    .tx_commit = pg_tx_commit,
    .tx_abort = pg_tx_abort,
};
