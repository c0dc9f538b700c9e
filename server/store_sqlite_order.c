/* store_sqlite_order.c - the SQLite backend's ledger: orders and their lines
 * read and written, and per-buyer limits, counted in the transaction that
 * writes (BEGIN IMMEDIATE holds the file's write lock, so a count read and
 * raised there is exact across every process on the file). Beneath the
 * backend's operations (store_sqlite.c) and its reservations and returns
 * (store_sqlite_reserve.c); over a connection (store_sqlite_conn.c). */
#include <stdio.h>
#include <string.h>

#include "server/store_sqlite_order.h"

static int read_lines_of_order(sqlite_conn *c, store_order *o)
{
    sqlite3_stmt *st = sq_stmt(c, ST_LINES_OF_ORDER);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, o->info.order_id);
    int step;
    o->nlines = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && o->nlines < RULE_ORDER_LINES_MAX)
        sq_read_line(st, 0, &o->lines[o->nlines++]);
    int rc = step == SQLITE_ROW || step == SQLITE_DONE ? STORE_OK : sq_fail(c, "read order lines");
    sqlite3_reset(st);
    return rc;
}

/* The order st (bound) finds, with its lines. */
static int read_order(sqlite_conn *c, sqlite3_stmt *st, const char *what, store_order *out)
{
    int rc = sq_first_row(c, st, what);
    if (rc == STORE_OK)
        sq_read_order_info(st, 0, &out->info);
    sqlite3_reset(st);
    return rc == STORE_OK ? read_lines_of_order(c, out) : rc;
}

int sqo_order_by_request(sqlite_conn *c, const char *request_id, store_order *out)
{
    sqlite3_stmt *st = sq_stmt(c, ST_ORDER_BY_REQUEST);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_text(st, 1, request_id, -1, SQLITE_STATIC);
    return read_order(c, st, "find request id", out);
}

int sqo_order_get(sqlite_conn *c, int64_t order_id, store_order *out)
{
    sqlite3_stmt *st = sq_stmt(c, ST_ORDER_GET);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, order_id);
    return read_order(c, st, "read order", out);
}

int sqo_lines_of_item(sqlite_conn *c, int64_t item_id, int64_t before, int limit,
                      store_line_fn fn, void *arg)
{
    sqlite3_stmt *st = sq_stmt(c, ST_LINES_OF_ITEM);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    sqlite3_bind_int64(st, 2, before > 0 ? before : INT64_MAX);
    sqlite3_bind_int(st, 3, limit);
    int step;
    store_order_info o;
    store_line l;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        sq_read_order_info(st, 0, &o);
        sq_read_line(st, ORDER_NCOLS, &l);
        fn(&o, &l, arg);
    }
    int rc = step == SQLITE_DONE ? STORE_OK : sq_fail(c, "list lines");
    sqlite3_reset(st);
    return rc;
}

/* A one-row query on (item, buyer) whose column 0 is wanted: STORE_OK with
 * *v, STORE_ERR_NOT_FOUND, or the failure. */
static int item_value(sqlite_conn *c, enum stmt_id id, int64_t item, const char *buyer,
                      int64_t *v)
{
    sqlite3_stmt *st = sq_stmt(c, id);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item);
    if (buyer)
        sqlite3_bind_text(st, 2, buyer, -1, SQLITE_STATIC);
    int rc = sq_first_row(c, st, sq_stmt_sql[id]);
    if (rc == STORE_OK)
        *v = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc;
}

/* Line l of order order_id; unless any_item, only when its item has no
 * per-buyer limit: STORE_ERR_BUYER_REQUIRED (and the limit read, on this
 * refusal only) when it has one. */
static int insert_line(sqlite_conn *c, int64_t order_id, const store_line *l,
                       const char *lock_token, int any_item)
{
    sqlite3_stmt *st = sq_stmt(c, ST_LINE_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, order_id);
    sqlite3_bind_int64(st, 2, l->item_id);
    sqlite3_bind_int64(st, 3, l->quantity);
    sqlite3_bind_int64(st, 4, l->remaining);
    if (l->fence.fence > 0) {
        sqlite3_bind_int64(st, 5, l->fence.fence);
        sqlite3_bind_int(st, 6, l->fence.seq);
    }
    sq_bind_text_or_null(st, 7, lock_token);
    sqlite3_bind_int(st, 8, any_item);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "insert order line");
    sqlite3_reset(st);
    if (rc != STORE_OK || sqlite3_changes(c->db) == 1)
        return rc;
    int64_t limit = 0;
    if ((rc = item_value(c, ST_LIMIT_OF, l->item_id, NULL, &limit)) != STORE_OK)
        return rc;
    return sqo_count_buyer(c, NULL, l->item_id, l->quantity, limit);
}

int sqo_insert_order(sqlite_conn *c, const store_new_order *o, const char *buyer_id,
                     int64_t reservation_id, store_order *out)
{
    /* a confirm's lines were checked when they were reserved; a buyer's were
     * just counted, their limits read */
    int any_item = reservation_id > 0 || buyer_id != NULL;
    sqlite3_stmt *st = sq_stmt(c, ST_ORDER_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sq_bind_text_or_null(st, 1, o->request_id);
    sqlite3_bind_text(st, 2, o->instance, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, o->lock_mode, -1, SQLITE_STATIC);
    sq_bind_text_or_null(st, 4, buyer_id);
    if (reservation_id > 0)
        sqlite3_bind_int64(st, 5, reservation_id);
    int rc = STORE_OK;
    memset(out, 0, sizeof(*out));
    if (sqlite3_step(st) == SQLITE_ROW) {
        out->info.order_id = sqlite3_column_int64(st, 0);
        sq_copy_text(out->info.created_at, sizeof(out->info.created_at), st, 1);
    } else {
        rc = sq_fail(c, "insert order");
    }
    sqlite3_reset(st);
    for (int i = 0; rc == STORE_OK && i < o->nlines; i++)
        rc = insert_line(c, out->info.order_id, &o->lines[i], o->lock_token, any_item);
    return rc;
}

int sqo_count_buyer(sqlite_conn *c, const char *buyer, int64_t item, int64_t quantity,
                    int64_t limit)
{
    c->base.limit = (store_limit_info){item, limit, 0, quantity};
    if (buyer == NULL && limit > 0) {
        snprintf(c->err, sizeof(c->err), "item %lld has a per-buyer limit of %lld and no "
                 "buyer was named", (long long)item, (long long)limit);
        return STORE_ERR_BUYER_REQUIRED;
    }
    if (buyer == NULL)
        return STORE_OK;
    sqlite3_stmt *st = sq_stmt(c, ST_BUYER_COUNT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item);
    sqlite3_bind_text(st, 2, buyer, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, quantity);
    sqlite3_bind_int64(st, 4, limit);
    int rc = sq_first_row(c, st, "count the buyer's units");
    sqlite3_reset(st);
    if (rc != STORE_ERR_NOT_FOUND)
        return rc;
    rc = item_value(c, ST_BUYER_HAD, item, buyer, &c->base.limit.had);
    if (rc != STORE_OK && rc != STORE_ERR_NOT_FOUND)
        return rc;
    snprintf(c->err, sizeof(c->err), "buyer %.128s has %lld of item %lld, whose limit is %lld: "
             "%lld more is past it", buyer, (long long)c->base.limit.had, (long long)item,
             (long long)limit, (long long)quantity);
    return STORE_ERR_BUYER_LIMIT;
}

int sqo_uncount_buyer(sqlite_conn *c, const char *buyer, int64_t item, int64_t quantity)
{
    if (buyer == NULL)
        return STORE_OK;
    sqlite3_stmt *st = sq_stmt(c, ST_BUYER_UNCOUNT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item);
    sqlite3_bind_text(st, 2, buyer, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, quantity);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "uncount the buyer's units");
    sqlite3_reset(st);
    return rc;
}

/* Each line counted against its item's limit for o's buyer, or none: a
 * refusal takes back what the lines before it counted, so that nothing is
 * written. */
static int count_lines(sqlite_conn *c, const store_new_order *o)
{
    int rc = STORE_OK, i;
    for (i = 0; rc == STORE_OK && i < o->nlines; i++) {
        int64_t limit = 0;
        rc = item_value(c, ST_LIMIT_OF, o->lines[i].item_id, NULL, &limit);
        rc = rc == STORE_ERR_NOT_FOUND ? STORE_OK : rc; /* the line's insert says so */
        if (rc == STORE_OK)
            rc = sqo_count_buyer(c, o->buyer_id, o->lines[i].item_id, o->lines[i].quantity,
                                 limit);
    }
    if (rc == STORE_ERR_BUYER_LIMIT || rc == STORE_ERR_BUYER_REQUIRED) {
        char why[sizeof(c->err)];
        memcpy(why, c->err, sizeof(why));
        for (int k = 0; k < i - 1; k++) {
            int undo = sqo_uncount_buyer(c, o->buyer_id, o->lines[k].item_id,
                                         o->lines[k].quantity);
            if (undo != STORE_OK)
                return undo;
        }
        memcpy(c->err, why, sizeof(why));
    }
    return rc;
}

int sqo_add_order(sqlite_conn *c, const store_new_order *o, store_order *out)
{
    int rc = sq_tx_open(c);
    if (rc != STORE_OK)
        return rc;
    if (o->request_id) {
        rc = sqo_order_by_request(c, o->request_id, out);
        if (rc != STORE_ERR_NOT_FOUND)
            return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    rc = o->buyer_id ? count_lines(c, o) : STORE_OK; /* no buyer: the lines' inserts check */
    return rc == STORE_OK ? sqo_insert_order(c, o, o->buyer_id, 0, out) : rc;
}
