/* store_postgres_reserve.c - the PostgreSQL backend's reservations and
 * returns: units taken from stock into reserved and their one fate
 * (confirmed into an order, cancelled, expired), and a cancelled order's
 * units back. Each state change is one conditional UPDATE that reads the
 * server's clock as it (re)checks the row, so two replicas racing for one
 * reservation meet on its row lock and the second sees the first's fate.
 * Fenced item writes change a row only while it carries the claim's
 * token. Over the ledger (store_postgres_order.c). */
#include <stdlib.h>
#include <string.h>

#include "server/store_lines.h"
#include "server/store_postgres_reserve.h"
#include "server/store_postgres_tx.h"

/* Runs item write id bound (item, quantity, fence, seq), with RETURNING
 * stock (and the limit as column 1 when limit is not NULL): STORE_OK,
 * STORE_ERR_NOT_FOUND when it changed no row (refusal says why), or the
 * failure. */
static int item_write(pg_session *c, enum stmt_id id, int64_t item, int64_t quantity,
                      const store_fence *f, int64_t *stock, int64_t *limit)
{
    struct params p = {0};
    PGresult *r;
    f = store_fence_or_null(f);
    p_int(&p, item);
    p_int(&p, quantity);
    p_int(&p, f ? f->fence : 0);
    p_int(&p, f ? f->seq : 0);
    if (f == NULL)
        p.v[2] = p.v[3] = NULL;
    int rc = pg_exec_row(c, id, &p, &r);
    if (rc == STORE_OK) {
        *stock = col_int(r, 0, 0);
        if (limit)
            *limit = col_int(r, 0, 1);
    }
    PQclear(r);
    return rc;
}

/* Why an item write (fenced by f, wanting quantity) changed nothing:
 * STORE_ERR_NOT_FOUND, STORE_ERR_STALE (the row's token in conn's stale
 * answer), or STORE_ERR_INSUFFICIENT with *stock the stock there is. */
static int refusal(store_conn *conn, int64_t item, const store_fence *f, int64_t quantity,
                   int64_t *stock)
{
    pg_session *c = SESSION(conn);
    struct params p = {0};
    PGresult *r;
    p_int(&p, item);
    int rc = pg_exec_row(c, ST_ITEM_STATE, &p, &r);
    store_fence row = {0, 0};
    if (rc == STORE_OK) {
        *stock = col_int(r, 0, 0);
        row = (store_fence){col_int(r, 0, 1), (int)col_int(r, 0, 2)};
    }
    PQclear(r);
    if (rc == STORE_ERR_NOT_FOUND)
        snprintf(c->err, sizeof(c->err), "no item %lld", (long long)item);
    if (rc != STORE_OK)
        return rc;
    if ((f = store_fence_or_null(f)) != NULL && (row.fence != f->fence || row.seq != f->seq)) {
        conn->stale = row;
        snprintf(c->err, sizeof(c->err), "item %lld carries another lock's token, (%lld, %d), "
                 "than (%lld, %d)", (long long)item, (long long)row.fence, row.seq,
                 (long long)f->fence, f->seq);
        return STORE_ERR_STALE;
    }
    snprintf(c->err, sizeof(c->err), "item %lld has %lld, less than %lld", (long long)item,
             (long long)*stock, (long long)quantity);
    return STORE_ERR_INSUFFICIENT;
}

/* An item write that must change its row: a refusal when it did not. */
static int item_write_must(store_conn *conn, enum stmt_id id, int64_t item, int64_t quantity,
                           const store_fence *f, int64_t *stock)
{
    int rc = item_write(SESSION(conn), id, item, quantity, f, stock, NULL);
    return rc == STORE_ERR_NOT_FOUND ? refusal(conn, item, f, 0, stock) : rc;
}

/* ---- reading a reservation ---- */

/* res's lines, each line's available its item's stock now. */
static int read_lines(pg_session *c, store_reservation *res)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, res->id);
    int rc = pg_exec(c, ST_RES_LINES, &p, &r);
    res->nlines = 0;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r) && i < RULE_ORDER_LINES_MAX; i++) {
        store_reservation_line *l = &res->lines[res->nlines++];
        l->item_id = col_int(r, i, 0);
        l->quantity = col_int(r, i, 1);
        l->available = col_int(r, i, 2);
    }
    PQclear(r);
    return rc;
}

/* The reservation row statement id gives for p (RES_COLS), without lines:
 * STORE_OK, STORE_ERR_NOT_FOUND (no row), or the failure. */
static int res_row(pg_session *c, enum stmt_id id, const struct params *p, store_reservation *res)
{
    PGresult *r;
    memset(res, 0, sizeof(*res));
    int rc = pg_exec_row(c, id, p, &r);
    if (rc == STORE_OK)
        pg_read_reservation(r, 0, 0, res);
    PQclear(r);
    return rc;
}

static int res_get(pg_session *c, int64_t id, store_reservation *out)
{
    struct params p = {0};
    p_int(&p, id);
    int rc = res_row(c, ST_RES_GET, &p, out);
    if (rc == STORE_ERR_NOT_FOUND)
        snprintf(c->err, sizeof(c->err), "no reservation %lld", (long long)id);
    return rc == STORE_OK ? read_lines(c, out) : rc;
}

int pgr_reservation_get(store_conn *conn, int64_t id, store_reservation *out)
{
    return res_get(SESSION(conn), id, out);
}

/* The reservation of request_id, as it is now: STORE_ERR_DUPLICATE, or
 * STORE_ERR_NOT_FOUND, or a failure. */
static int res_of_request(pg_session *c, const char *request_id, store_reservation *out)
{
    struct params p = {0};
    p_text(&p, request_id);
    int rc = res_row(c, ST_RES_BY_REQUEST, &p, out);
    if (rc == STORE_OK)
        rc = read_lines(c, out);
    return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
}

/* ---- reserve ---- */

/* Gives back what lines idx[0..n) of r took and counted, in the
 * transaction (their rows locked by it: as if they never were), keeping
 * the refusal's text; rc is the answer unless that fails. */
static int undo_lines(store_conn *conn, const store_new_reservation *r, const int *idx, int n,
                      int rc)
{
    pg_session *c = SESSION(conn);
    char why[sizeof(c->err)];
    memcpy(why, c->err, sizeof(why));
    int undo = STORE_OK;
    int64_t stock;
    for (int k = 0; undo == STORE_OK && k < n; k++) {
        const store_line *l = &r->lines[idx[k]];
        undo = item_write_must(conn, ST_UNRESERVE, l->item_id, l->quantity, NULL, &stock);
        if (undo == STORE_OK)
            undo = pgo_uncount_buyer(c, r->buyer_id, l->item_id, l->quantity);
    }
    if (undo != STORE_OK)
        return undo;
    memcpy(c->err, why, sizeof(why));
    return rc;
}

/* Line l of a reservation taken and counted for buyer, or neither. */
static int take_line(store_conn *conn, const char *buyer, const store_line *l,
                     int64_t *available)
{
    pg_session *c = SESSION(conn);
    int64_t limit = 0, stock;
    int rc = item_write(c, ST_RESERVE_TAKE, l->item_id, l->quantity, &l->fence, available,
                        &limit);
    if (rc == STORE_ERR_NOT_FOUND)
        return refusal(conn, l->item_id, &l->fence, l->quantity, available);
    if (rc == STORE_OK && (rc = pgo_count_buyer(conn, buyer, l->item_id, l->quantity, limit)) !=
                              STORE_OK) {
        char why[sizeof(c->err)];
        memcpy(why, c->err, sizeof(why));
        int undo = item_write_must(conn, ST_UNRESERVE, l->item_id, l->quantity, NULL, &stock);
        memcpy(c->err, why, sizeof(why));
        return undo == STORE_OK ? rc : undo;
    }
    return rc;
}

/* out's lines as asked, each with its item's stock now as available. */
static void short_answer(pg_session *c, const store_new_reservation *r, store_reservation *out)
{
    out->nlines = r->nlines;
    for (int i = 0; i < r->nlines; i++) {
        store_reservation_line *l = &out->lines[i];
        struct params p = {0};
        PGresult *res;
        l->item_id = r->lines[i].item_id;
        l->quantity = r->lines[i].quantity;
        p_int(&p, l->item_id);
        if (pg_exec_row(c, ST_STOCK_READ, &p, &res) == STORE_OK)
            l->available = col_int(res, 0, 0);
        PQclear(res);
    }
}

static int insert_line(pg_session *c, int64_t id, const store_line *l, int64_t available)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    p_int(&p, l->item_id);
    p_int(&p, l->quantity);
    p_int(&p, available);
    p_int(&p, l->fence.fence);
    p_int(&p, l->fence.seq);
    if (l->fence.fence == 0)
        p.v[4] = p.v[5] = NULL;
    int rc = pg_exec(c, ST_RES_LINE_INSERT, &p, &r);
    PQclear(r);
    return rc;
}

int pgr_tx_reserve(store_conn *conn, const store_new_reservation *r, store_reservation *out)
{
    pg_session *c = SESSION(conn);
    int64_t available[RULE_ORDER_LINES_MAX];
    int rc = pg_in_transaction(c) ? STORE_OK : STORE_ERR_IO, taken = 0;
    memset(out, 0, sizeof(*out));
    if (rc == STORE_OK && r->request_id &&
        (rc = res_of_request(c, r->request_id, out)) != STORE_ERR_NOT_FOUND)
        return rc;
    rc = STORE_OK;
    int idx[RULE_ORDER_LINES_MAX];
    store_line_order(r->lines, r->nlines, idx);
    while (rc == STORE_OK && taken < r->nlines) {
        int i = idx[taken];
        rc = take_line(conn, r->buyer_id, &r->lines[i], &available[i]);
        taken += rc == STORE_OK;
    }
    if (rc == STORE_ERR_INSUFFICIENT || rc == STORE_ERR_BUYER_LIMIT ||
        rc == STORE_ERR_BUYER_REQUIRED || rc == STORE_ERR_STALE || rc == STORE_ERR_NOT_FOUND) {
        rc = undo_lines(conn, r, idx, taken, rc);
        if ((rc == STORE_ERR_INSUFFICIENT || rc == STORE_ERR_BUYER_LIMIT) && r->request_id) {
            /* Review 1.4: the take or the count waited for another
             * transaction's row lock, maybe this very request's first try:
             * a statement now sees it, and a retry is answered, not refused. */
            char why[sizeof(c->err)];
            memcpy(why, c->err, sizeof(why));
            int again = res_of_request(c, r->request_id, out);
            if (again != STORE_ERR_NOT_FOUND)
                return again;
            memcpy(c->err, why, sizeof(why));
        }
        if (rc == STORE_ERR_INSUFFICIENT)
            short_answer(c, r, out);
        return rc;
    }
    struct params p = {0};
    p_text(&p, r->request_id);
    p_text(&p, r->buyer_id);
    p_text(&p, r->instance);
    p_int(&p, r->hold_ms);
    if (rc == STORE_OK && (rc = res_row(c, ST_RES_INSERT, &p, out)) == STORE_ERR_NOT_FOUND) {
        /* its requestId, written by another transaction meanwhile */
        rc = undo_lines(conn, r, idx, taken, STORE_OK);
        return rc == STORE_OK ? res_of_request(c, r->request_id, out) : rc;
    }
    for (int i = 0; rc == STORE_OK && i < r->nlines; i++) {
        rc = insert_line(c, out->id, &r->lines[i], available[i]);
        out->lines[i] = (store_reservation_line){r->lines[i].item_id, r->lines[i].quantity,
                                                 available[i]};
    }
    out->nlines = r->nlines;
    return rc;
}

/* ---- one fate ---- */

/* Moves reservation id from held (and not lapsed, by the server's clock
 * as the row is checked) to state, in that one statement: STORE_OK with
 * *res (without its lines). When it was not held: *res as it is, and
 * STORE_ERR_DUPLICATE when it is in state already (a repeat),
 * STORE_ERR_NOT_FOUND, or STORE_ERR_STATE. */
static int end_held(pg_session *c, int64_t id, const char *state,
                    enum store_reservation_state repeat, store_reservation *res)
{
    struct params p = {0};
    p_int(&p, id);
    p_text(&p, state);
    int rc = res_row(c, ST_RES_END, &p, res);
    if (rc != STORE_ERR_NOT_FOUND)
        return rc;
    if ((rc = res_get(c, id, res)) != STORE_OK)
        return rc;
    if (res->state == repeat)
        return STORE_ERR_DUPLICATE;
    snprintf(c->err, sizeof(c->err), "reservation %lld is %s", (long long)id, store_not_held(res));
    return STORE_ERR_STATE;
}

int pgr_tx_reservation_confirm(store_conn *conn, int64_t id, const store_new_order *o,
                               store_reservation *res, store_order *order)
{
    pg_session *c = SESSION(conn);
    int rc = pg_in_transaction(c) ? STORE_OK : STORE_ERR_IO;
    memset(order, 0, sizeof(*order));
    if (rc == STORE_OK)
        rc = end_held(c, id, "confirmed", STORE_RES_CONFIRMED, res);
    if (rc == STORE_ERR_DUPLICATE) {
        int found = pgo_order_get(c, res->order_id, order);
        return found == STORE_OK ? rc : found;
    }
    if (rc == STORE_OK)
        rc = read_lines(c, res);
    store_new_order w = *o;
    w.nlines = res->nlines;
    int idx[RULE_ORDER_LINES_MAX];
    store_res_line_order(res, idx);
    for (int k = 0; rc == STORE_OK && k < res->nlines; k++) {
        int i = idx[k];
        store_line *l = &w.lines[i];
        *l = (store_line){res->lines[i].item_id, res->lines[i].quantity, 0,
                          store_order_fence(o, res->lines[i].item_id)};
        rc = item_write_must(conn, ST_CONFIRM_TAKE, l->item_id, l->quantity, &l->fence,
                             &l->remaining);
    }
    if (rc == STORE_OK)
        rc = pgo_insert_confirmed(conn, &w, res->has_buyer_id ? res->buyer_id : NULL, id, order);
    if (rc != STORE_OK)
        return rc;
    order->nlines = w.nlines;
    memcpy(order->lines, w.lines, (size_t)w.nlines * sizeof(w.lines[0]));
    res->order_id = order->info.order_id;
    return STORE_OK;
}

int pgr_tx_reservation_cancel(store_conn *conn, int64_t id, const int64_t *items,
                              const store_fence *f, int nf, store_reservation *res)
{
    pg_session *c = SESSION(conn);
    int rc = pg_in_transaction(c) ? STORE_OK : STORE_ERR_IO;
    if (rc == STORE_OK)
        rc = end_held(c, id, "cancelled", STORE_RES_CANCELLED, res);
    if (rc == STORE_OK)
        rc = read_lines(c, res);
    int idx[RULE_ORDER_LINES_MAX];
    store_res_line_order(res, idx);
    for (int k = 0; rc == STORE_OK && k < res->nlines; k++) {
        store_reservation_line *l = &res->lines[idx[k]];
        store_fence fi = store_fence_for(items, f, nf, l->item_id);
        rc = item_write_must(conn, ST_UNRESERVE, l->item_id, l->quantity, &fi, &l->available);
        if (rc == STORE_OK)
            rc = pgo_uncount_buyer(c, res->has_buyer_id ? res->buyer_id : NULL, l->item_id,
                                   l->quantity);
    }
    return rc;
}

int pgr_reservation_extend(store_conn *conn, int64_t id, int64_t hold_ms, store_reservation *out)
{
    pg_session *c = SESSION(conn);
    struct params p = {0};
    p_int(&p, id);
    p_int(&p, hold_ms);
    int rc = pg_tx_begin(conn);
    if (rc == STORE_OK && (rc = res_row(c, ST_RES_EXTEND, &p, out)) == STORE_ERR_NOT_FOUND &&
        (rc = res_get(c, id, out)) == STORE_OK) {
        snprintf(c->err, sizeof(c->err), "reservation %lld is %s", (long long)id, store_not_held(out));
        rc = STORE_ERR_STATE;
    } else if (rc == STORE_OK) {
        rc = read_lines(c, out);
    }
    if (rc == STORE_OK)
        return pg_tx_commit(conn, NULL);
    pg_rollback(c);
    return rc;
}

/* ---- the sweep ---- */

int pgr_reservations_due(store_conn *conn, int limit, int64_t *items, int items_max, int *n,
                         int *due)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, limit);
    *n = *due = 0;
    int rc = pg_exec(SESSION(conn), ST_RES_DUE, &p, &r);
    store_due d;
    store_due_start(&d, items, items_max, n, due);
    for (int i = 0; rc == STORE_OK && i < PQntuples(r); i++)
        store_due_row(&d, col_int(r, i, 0), col_int(r, i, 1));
    store_due_end(&d);
    PQclear(r);
    return rc;
}

/* items[0..n) and their fences as ST_RES_EXPIRE's arrays' text: ids,
 * fences and seqs, NULL where unfenced. NULL when out of memory. */
static char *arrays(const int64_t *items, const store_fence *f, int n, const char **ids,
                    const char **fences, const char **seqs)
{
    size_t size = 3 + (size_t)n * 22;
    char *buf = malloc(3 * size);
    if (buf == NULL)
        return NULL;
    char *out[3] = {buf, buf + size, buf + 2 * size};
    size_t used[3];
    for (int a = 0; a < 3; a++)
        used[a] = (size_t)snprintf(out[a], size, "{");
    for (int i = 0; i < n; i++) {
        const store_fence *fi = f ? store_fence_or_null(&f[i]) : NULL;
        long long v[3] = {(long long)items[i], fi ? (long long)fi->fence : 0, fi ? fi->seq : 0};
        for (int a = 0; a < 3; a++) {
            const char *sep = i ? "," : "";
            used[a] += (size_t)(a > 0 && fi == NULL
                                    ? snprintf(out[a] + used[a], size - used[a], "%sNULL", sep)
                                    : snprintf(out[a] + used[a], size - used[a], "%s%lld", sep,
                                               v[a]));
        }
    }
    for (int a = 0; a < 3; a++)
        snprintf(out[a] + used[a], size - used[a], "}");
    *ids = out[0], *fences = out[1], *seqs = out[2];
    return buf;
}

/* A fence refused the pass (fewer items written than had units to give
 * back): which item's row carries another token, for the caller's raise. */
static int stale_item(store_conn *conn, const int64_t *items, const store_fence *f, int n)
{
    for (int i = 0; f && i < n; i++) {
        int64_t stock;
        int rc = store_fence_or_null(&f[i]) ? refusal(conn, items[i], &f[i], 0, &stock) : STORE_OK;
        if (rc == STORE_ERR_STALE || (rc != STORE_OK && rc != STORE_ERR_INSUFFICIENT))
            return rc;
    }
    snprintf(SESSION(conn)->err, sizeof(SESSION(conn)->err), "expire reservations: an item's "
             "units could not be given back");
    return STORE_ERR_IO;
}

/* One statement (ST_RES_EXPIRE) for the whole pass: a sweep that gives
 * back a batch costs one round trip, not a few per reservation. */
int pgr_tx_reservations_expire(store_conn *conn, const int64_t *items, const store_fence *f,
                               int n, int limit, int *expired, int64_t *lag_ms)
{
    pg_session *c = SESSION(conn);
    *expired = 0;
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    if (limit <= 0 || n <= 0)
        return STORE_OK;
    const char *ids, *fences, *seqs;
    char *buf = arrays(items, f, n, &ids, &fences, &seqs);
    if (buf == NULL) {
        snprintf(c->err, sizeof(c->err), "out of memory");
        return STORE_ERR_IO;
    }
    struct params p = {0};
    PGresult *r;
    p_int(&p, limit);
    p_text(&p, ids);
    p_text(&p, fences);
    p_text(&p, seqs);
    int rc = pg_exec_row(c, ST_RES_EXPIRE, &p, &r);
    free(buf);
    if (rc != STORE_OK)
        return rc == STORE_ERR_NOT_FOUND ? STORE_ERR_IO : rc;
    int64_t want = col_int(r, 0, 0), got = col_int(r, 0, 1);
    for (const char *lag = PQgetvalue(r, 0, 3); *lag && *expired < limit;) {
        char *end;
        lag += strspn(lag, "{,}");
        if (*lag == '\0')
            break;
        lag_ms[(*expired)++] = strtoll(lag, &end, 10);
        lag = end;
    }
    PQclear(r);
    return got == want ? STORE_OK : stale_item(conn, items, f, n);
}

int pgr_reservations_held(store_conn *conn, int64_t *n)
{
    PGresult *r;
    int rc = pg_exec_row(SESSION(conn), ST_HELD_COUNT, NULL, &r);
    if (rc == STORE_OK)
        *n = col_int(r, 0, 0);
    PQclear(r);
    return rc;
}

/* ---- returns ---- */

/* A cancelled order's lines' remaining: the stock after each return. */
static int returned_lines(pg_session *c, store_order *out)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, out->info.order_id);
    int rc = pg_exec(c, ST_RETURNS_OF_ORDER, &p, &r);
    for (int k = 0; rc == STORE_OK && k < PQntuples(r); k++)
        for (int i = 0; i < out->nlines; i++)
            if (out->lines[i].item_id == col_int(r, k, 0))
                out->lines[i].remaining = col_int(r, k, 1);
    PQclear(r);
    return rc;
}

static int insert_return(pg_session *c, int64_t order_id, const store_line *l,
                         const char *request_id, const char *instance, const char *lock_token,
                         const store_fence *f)
{
    struct params p = {0};
    PGresult *r;
    f = store_fence_or_null(f);
    p_int(&p, order_id);
    p_int(&p, l->item_id);
    p_int(&p, l->quantity);
    p_int(&p, l->remaining);
    p_text(&p, request_id);
    p_text(&p, instance ? instance : "");
    p_int(&p, f ? f->fence : 0);
    p_int(&p, f ? f->seq : 0);
    p_text(&p, lock_token);
    if (f == NULL)
        p.v[6] = p.v[7] = NULL;
    int rc = pg_exec(c, ST_RETURN_INSERT, &p, &r);
    PQclear(r);
    return rc;
}

/* The order's row is locked first: cancels of one order run one at a
 * time, and each reads the order in a statement that starts after the
 * last one committed - so the second finds the first's returns. */
int pgr_tx_order_cancel(store_conn *conn, int64_t order_id, const char *request_id,
                        const char *instance, const char *lock_token, const int64_t *items,
                        const store_fence *f, int nf, store_order *out)
{
    pg_session *c = SESSION(conn);
    struct params p = {0};
    PGresult *r = NULL;
    p_int(&p, order_id);
    memset(out, 0, sizeof(*out));
    int rc = pg_in_transaction(c) ? pg_exec_row(c, ST_ORDER_LOCK, &p, &r) : STORE_ERR_IO;
    PQclear(r);
    if (rc == STORE_OK)
        rc = pgo_order_get(c, order_id, out);
    if (rc == STORE_ERR_NOT_FOUND)
        snprintf(c->err, sizeof(c->err), "no order %lld", (long long)order_id);
    if (rc == STORE_OK && out->info.cancelled) {
        rc = returned_lines(c, out);
        return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    const char *buyer = out->info.has_buyer_id ? out->info.buyer_id : NULL;
    int idx[RULE_ORDER_LINES_MAX];
    store_line_order(out->lines, out->nlines, idx);
    for (int k = 0; rc == STORE_OK && k < out->nlines; k++) {
        store_line *l = &out->lines[idx[k]];
        store_fence fi = store_fence_for(items, f, nf, l->item_id);
        rc = item_write_must(conn, ST_RETURN_ADD, l->item_id, l->quantity, &fi, &l->remaining);
        if (rc == STORE_OK)
            rc = insert_return(c, order_id, l, request_id, instance, lock_token, &fi);
        if (rc == STORE_OK)
            rc = pgo_uncount_buyer(c, buyer, l->item_id, l->quantity);
    }
    out->info.cancelled = rc == STORE_OK;
    return rc;
}
