/* store_postgres_order.c - the PostgreSQL backend's ledger: orders and their
 * lines read and written, and per-buyer limits. A buyer's units are
 * counted by a conditional upsert (store_postgres_sql.c) in the writing
 * transaction: its row lock orders replicas counting for the same buyer,
 * so a limit holds across them in every lock mode. An order with no buyer
 * costs no statement more: its insert checks that no item of its has a
 * limit. Beneath the backend's operations (store_postgres.c) and its
 * reservations (store_postgres_reserve.c). */
#include <string.h>

#include "server/store_postgres_order.h"

static int read_lines_of_order(pg_session *c, store_order *o)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, o->info.order_id);
    int rc = pg_exec(c, ST_LINES_OF_ORDER, &p, &r);
    o->nlines = 0;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r) && i < RULE_ORDER_LINES_MAX; i++)
        pg_read_line(r, i, 0, &o->lines[o->nlines++]);
    PQclear(r);
    return rc;
}

/* The order statement id finds by p, with its lines. */
static int read_order(pg_session *c, enum stmt_id id, const struct params *p, store_order *out)
{
    PGresult *r;
    int rc = pg_exec_row(c, id, p, &r);
    if (rc == STORE_OK)
        pg_read_order_info(r, 0, 0, &out->info);
    PQclear(r);
    return rc == STORE_OK ? read_lines_of_order(c, out) : rc;
}

int pgo_order_by_request(pg_session *c, const char *request_id, store_order *out)
{
    struct params p = {0};
    p_text(&p, request_id);
    return read_order(c, ST_ORDER_BY_REQUEST, &p, out);
}

int pgo_order_get(pg_session *c, int64_t order_id, store_order *out)
{
    struct params p = {0};
    p_int(&p, order_id);
    return read_order(c, ST_ORDER_GET, &p, out);
}

int pgo_lines_of_item(pg_session *c, int64_t item_id, int64_t before, int limit,
                      store_line_fn fn, void *arg)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    p_int(&p, before > 0 ? before : INT64_MAX);
    p_int(&p, limit);
    int rc = pg_exec(c, ST_LINES_OF_ITEM, &p, &r);
    store_order_info o;
    store_line l;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r); i++) {
        pg_read_order_info(r, i, 0, &o);
        pg_read_line(r, i, ORDER_NCOLS, &l);
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

/* The items of o's lines as a PostgreSQL array's text: {1,2,3}. */
static void ids_of(const store_new_order *o, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "{");
    for (int i = 0; i < o->nlines && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "",
                                 (long long)o->lines[i].item_id);
    if (used < size)
        snprintf(buf + used, size - used, "}");
}

/* Inserts o's row: 1 when written (out's id and created_at), 0 when not
 * (its requestId was there, or no buyer for an item with a limit). */
static int insert_order(pg_session *c, const store_new_order *o, const char *buyer_id,
                        int64_t reservation_id, store_order *out, int *added)
{
    char ids[RULE_ORDER_LINES_MAX * 21 + 3];
    struct params p = {0};
    PGresult *r;
    ids_of(o, ids, sizeof(ids));
    p_text(&p, o->request_id);
    p_text(&p, o->instance);
    p_text(&p, o->lock_mode);
    p_text(&p, buyer_id);
    p_int(&p, reservation_id);
    p_text(&p, ids);
    if (reservation_id == 0)
        p.v[4] = NULL;
    memset(out, 0, sizeof(*out));
    int rc = pg_exec(c, ST_ORDER_INSERT, &p, &r);
    *added = rc == STORE_OK && PQntuples(r) > 0;
    if (*added) {
        out->info.order_id = col_int(r, 0, 0);
        col_text(out->info.created_at, sizeof(out->info.created_at), r, 0, 1);
    }
    PQclear(r);
    for (int i = 0; rc == STORE_OK && *added && i < o->nlines; i++)
        rc = insert_line(c, out->info.order_id, &o->lines[i], o->lock_token);
    return rc;
}

int pgo_insert_confirmed(store_conn *conn, const store_new_order *o, const char *buyer_id,
                         int64_t reservation_id, store_order *out)
{
    pg_session *c = SESSION(conn);
    int added, rc = insert_order(c, o, buyer_id, reservation_id, out, &added);
    if (rc == STORE_OK && !added) {
        snprintf(c->err, sizeof(c->err), "insert order: requestId %.128s was used already",
                 o->request_id ? o->request_id : "");
        rc = STORE_ERR_IO;
    }
    return rc;
}

/* A one-row read of two bound values whose column col is wanted. */
static int value_of(pg_session *c, enum stmt_id id, struct params *p, int col, int64_t *v)
{
    PGresult *r;
    int rc = pg_exec_row(c, id, p, &r);
    if (rc == STORE_OK)
        *v = col_int(r, 0, col);
    PQclear(r);
    return rc;
}

int pgo_count_buyer(store_conn *conn, const char *buyer, int64_t item, int64_t quantity,
                    int64_t limit)
{
    pg_session *c = SESSION(conn);
    conn->limit = (store_limit_info){item, limit, 0, quantity};
    if (buyer == NULL && limit > 0) {
        snprintf(c->err, sizeof(c->err), "item %lld has a per-buyer limit of %lld and no "
                 "buyer was named", (long long)item, (long long)limit);
        return STORE_ERR_BUYER_REQUIRED;
    }
    if (buyer == NULL)
        return STORE_OK;
    struct params p = {0};
    PGresult *r;
    p_int(&p, item);
    p_text(&p, buyer);
    p_int(&p, quantity);
    p_int(&p, limit);
    int rc = pg_exec(c, ST_BUYER_COUNT, &p, &r);
    int counted = rc == STORE_OK && PQntuples(r) > 0;
    PQclear(r);
    if (rc != STORE_OK || counted)
        return rc;
    struct params q = {0};
    char ids[24];
    snprintf(ids, sizeof(ids), "{%lld}", (long long)item);
    p_text(&q, ids);
    if (limit < 0 && (rc = value_of(c, ST_LIMITS_OF, &q, 1, &conn->limit.limit)) != STORE_OK)
        return rc == STORE_ERR_NOT_FOUND ? STORE_ERR_IO : rc;
    struct params h = {0};
    p_int(&h, item);
    p_text(&h, buyer);
    rc = value_of(c, ST_BUYER_HAD, &h, 0, &conn->limit.had);
    if (rc != STORE_OK && rc != STORE_ERR_NOT_FOUND)
        return rc;
    snprintf(c->err, sizeof(c->err), "buyer %.128s has %lld of item %lld, whose limit is %lld: "
             "%lld more is past it", buyer, (long long)conn->limit.had, (long long)item,
             (long long)conn->limit.limit, (long long)quantity);
    return STORE_ERR_BUYER_LIMIT;
}

int pgo_uncount_buyer(pg_session *c, const char *buyer, int64_t item, int64_t quantity)
{
    if (buyer == NULL)
        return STORE_OK;
    struct params p = {0};
    PGresult *r;
    p_int(&p, item);
    p_text(&p, buyer);
    p_int(&p, quantity);
    int rc = pg_exec(c, ST_BUYER_UNCOUNT, &p, &r);
    PQclear(r);
    return rc;
}

/* Takes back what lines [0, n) of o counted for its buyer, keeping the
 * refusal's text; rc is the answer unless that fails. */
static int uncount_lines(pg_session *c, const store_new_order *o, int n, int rc)
{
    char why[sizeof(c->err)];
    memcpy(why, c->err, sizeof(why));
    for (int k = 0; k < n; k++) {
        int undo = pgo_uncount_buyer(c, o->buyer_id, o->lines[k].item_id, o->lines[k].quantity);
        if (undo != STORE_OK)
            return undo;
    }
    memcpy(c->err, why, sizeof(why));
    return rc;
}

/* Why an order with no buyer was not written, its requestId being free:
 * the first of its items with a limit. */
static int buyer_required(store_conn *conn, const store_new_order *o)
{
    pg_session *c = SESSION(conn);
    char ids[RULE_ORDER_LINES_MAX * 21 + 3];
    ids_of(o, ids, sizeof(ids));
    struct params p = {0};
    PGresult *r;
    p_text(&p, ids);
    int rc = pg_exec_row(c, ST_LIMITS_OF, &p, &r);
    int64_t item = rc == STORE_OK ? col_int(r, 0, 0) : 0, limit = 0;
    if (rc == STORE_OK)
        limit = col_int(r, 0, 1);
    PQclear(r);
    if (rc == STORE_ERR_NOT_FOUND) { /* the limit went away meanwhile */
        snprintf(c->err, sizeof(c->err), "insert order: not written, and no item of it has "
                 "a limit now");
        return STORE_ERR_IO;
    }
    for (int i = 0; rc == STORE_OK && i < o->nlines; i++)
        if (o->lines[i].item_id == item)
            return pgo_count_buyer(conn, NULL, item, o->lines[i].quantity, limit);
    return rc == STORE_OK ? STORE_ERR_IO : rc;
}

int pgo_add_order(store_conn *conn, const store_new_order *o, store_order *out)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    int rc = STORE_OK, counted = 0, added = 0;
    while (o->buyer_id && rc == STORE_OK && counted < o->nlines) {
        rc = pgo_count_buyer(conn, o->buyer_id, o->lines[counted].item_id,
                             o->lines[counted].quantity, -1);
        counted += rc == STORE_OK;
    }
    if (rc == STORE_ERR_BUYER_LIMIT && o->request_id) {
        /* Review 1.4: the count waited for another transaction's row lock,
         * maybe this very request's first try committing its order: a
         * statement now sees it, and a retry is answered, not refused. */
        int again = pgo_order_by_request(c, o->request_id, out);
        rc = again == STORE_OK ? STORE_ERR_DUPLICATE : again == STORE_ERR_NOT_FOUND ? rc : again;
    }
    if (rc == STORE_OK)
        rc = insert_order(c, o, o->buyer_id, 0, out, &added);
    if (rc == STORE_OK && !added && o->request_id) { /* its requestId: the earlier order */
        rc = pgo_order_by_request(c, o->request_id, out);
        rc = rc == STORE_OK ? STORE_ERR_DUPLICATE : rc == STORE_ERR_NOT_FOUND ? STORE_OK : rc;
    }
    if (rc == STORE_OK && !added)
        rc = buyer_required(conn, o);
    if (rc == STORE_ERR_DUPLICATE || rc == STORE_ERR_BUYER_LIMIT)
        return uncount_lines(c, o, counted, rc);
    return rc; /* store.c fills in the rest of out from o */
}
