/* store_sqlite_reserve.c - the SQLite backend's reservations and returns:
 * units taken from stock into reserved and their one fate (confirmed into
 * an order, cancelled, expired), and a cancelled order's units back. Each
 * state change is one conditional UPDATE whose condition reads the
 * database's clock (the host's, through SQL), in a transaction that holds
 * the file's write lock. Fenced item writes change a row only while it
 * carries the claim's token. Over the ledger (store_sqlite_order.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_lines.h"
#include "server/store_sqlite_reserve.h"

#define CONN(c) ((sqlite_conn *)(c))

/* Runs item write id bound (item, quantity, fence, seq), with RETURNING
 * stock (and the limit as column 1 when limit is not NULL): STORE_OK,
 * STORE_ERR_NOT_FOUND when it changed no row (refusal says why), or the
 * failure. */
static int item_write(sqlite_conn *c, enum stmt_id id, int64_t item, int64_t quantity,
                      const store_fence *f, int64_t *stock, int64_t *limit)
{
    sqlite3_stmt *st = sq_stmt(c, id);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item);
    sqlite3_bind_int64(st, 2, quantity);
    if ((f = store_fence_or_null(f)) != NULL) {
        sqlite3_bind_int64(st, 3, f->fence);
        sqlite3_bind_int(st, 4, f->seq);
    }
    int rc = sq_first_row(c, st, sq_stmt_sql[id]);
    if (rc == STORE_OK) {
        *stock = sqlite3_column_int64(st, 0);
        if (limit)
            *limit = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    return rc;
}

/* Why an item write (fenced by f, wanting quantity) changed nothing:
 * STORE_ERR_NOT_FOUND, STORE_ERR_STALE (the row's token in c's stale
 * answer), or STORE_ERR_INSUFFICIENT with *stock the stock there is. */
static int refusal(sqlite_conn *c, int64_t item, const store_fence *f, int64_t quantity,
                   int64_t *stock)
{
    sqlite3_stmt *st = sq_stmt(c, ST_ITEM_STATE);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item);
    int rc = sq_first_row(c, st, "read the item's stock and token");
    store_fence row = {0, 0};
    if (rc == STORE_OK) {
        *stock = sqlite3_column_int64(st, 0);
        row = (store_fence){sqlite3_column_int64(st, 1), sqlite3_column_int(st, 2)};
    }
    sqlite3_reset(st);
    if (rc == STORE_ERR_NOT_FOUND)
        snprintf(c->err, sizeof(c->err), "no item %lld", (long long)item);
    if (rc != STORE_OK)
        return rc;
    if ((f = store_fence_or_null(f)) != NULL && (row.fence != f->fence || row.seq != f->seq)) {
        c->base.stale = row;
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
static int item_write_must(sqlite_conn *c, enum stmt_id id, int64_t item, int64_t quantity,
                           const store_fence *f, int64_t *stock)
{
    int rc = item_write(c, id, item, quantity, f, stock, NULL);
    return rc == STORE_ERR_NOT_FOUND ? refusal(c, item, f, 0, stock) : rc;
}

/* ---- reading a reservation ---- */

/* A row of RES_COLS. */
static void read_res(sqlite3_stmt *st, store_reservation *r)
{
    char state[16];
    r->id = sqlite3_column_int64(st, 0);
    r->has_request_id = sqlite3_column_type(st, 1) != SQLITE_NULL;
    sq_copy_text(r->request_id, sizeof(r->request_id), st, 1);
    r->has_buyer_id = sqlite3_column_type(st, 2) != SQLITE_NULL;
    sq_copy_text(r->buyer_id, sizeof(r->buyer_id), st, 2);
    sq_copy_text(state, sizeof(state), st, 3);
    r->state = store_state_of(state);
    r->lapsed = sqlite3_column_int(st, 4);
    r->expires_at_ms = sqlite3_column_int64(st, 5);
    r->order_id = sqlite3_column_int64(st, 6);
    sq_copy_text(r->instance, sizeof(r->instance), st, 7);
    sq_copy_text(r->created_at, sizeof(r->created_at), st, 8);
    r->hold_ms = sqlite3_column_int64(st, 9);
}

/* The reservation st (bound) finds, with its lines, each line's available
 * its item's stock now. */
static int read_reservation(sqlite_conn *c, sqlite3_stmt *st, store_reservation *r)
{
    memset(r, 0, sizeof(*r));
    int rc = sq_first_row(c, st, "read reservation");
    if (rc == STORE_OK)
        read_res(st, r);
    sqlite3_reset(st);
    if (rc != STORE_OK)
        return rc;
    st = sq_stmt(c, ST_RES_LINES);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, r->id);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && r->nlines < RULE_ORDER_LINES_MAX) {
        store_reservation_line *l = &r->lines[r->nlines++];
        l->item_id = sqlite3_column_int64(st, 0);
        l->quantity = sqlite3_column_int64(st, 1);
        l->available = sqlite3_column_int64(st, 2);
    }
    rc = step == SQLITE_ROW || step == SQLITE_DONE ? STORE_OK
                                                   : sq_fail(c, "read reservation lines");
    sqlite3_reset(st);
    return rc;
}

static int res_get(sqlite_conn *c, int64_t id, store_reservation *out)
{
    sqlite3_stmt *st = sq_stmt(c, ST_RES_GET);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int rc = read_reservation(c, st, out);
    if (rc == STORE_ERR_NOT_FOUND)
        snprintf(c->err, sizeof(c->err), "no reservation %lld", (long long)id);
    return rc;
}

int sqr_reservation_get(store_conn *conn, int64_t id, store_reservation *out)
{
    return res_get(CONN(conn), id, out);
}

/* ---- reserve ---- */

/* Gives back what lines idx[0..n) of r took and counted, in the
 * transaction (the write lock held: as if they never were). */
static int undo_lines(sqlite_conn *c, const store_new_reservation *r, const int *idx, int n)
{
    int rc = STORE_OK;
    int64_t stock;
    for (int k = 0; rc == STORE_OK && k < n; k++) {
        const store_line *l = &r->lines[idx[k]];
        rc = item_write_must(c, ST_UNRESERVE, l->item_id, l->quantity, NULL, &stock);
        if (rc == STORE_OK)
            rc = sqo_uncount_buyer(c, r->buyer_id, l->item_id, l->quantity);
    }
    return rc;
}

/* Line l of a reservation taken and counted for buyer, or neither. */
static int take_line(sqlite_conn *c, const char *buyer, const store_line *l, int64_t *available)
{
    int64_t limit = 0, stock;
    int rc = item_write(c, ST_RESERVE_TAKE, l->item_id, l->quantity, &l->fence, available, &limit);
    if (rc == STORE_ERR_NOT_FOUND)
        return refusal(c, l->item_id, &l->fence, l->quantity, available);
    if (rc == STORE_OK && (rc = sqo_count_buyer(c, buyer, l->item_id, l->quantity, limit)) !=
                              STORE_OK) {
        char why[sizeof(c->err)];
        memcpy(why, c->err, sizeof(why));
        int undo = item_write_must(c, ST_UNRESERVE, l->item_id, l->quantity, NULL, &stock);
        memcpy(c->err, why, sizeof(why));
        return undo == STORE_OK ? rc : undo;
    }
    return rc;
}

/* out's lines as asked, each with its item's stock now as available. */
static void short_answer(sqlite_conn *c, const store_new_reservation *r, store_reservation *out)
{
    out->nlines = r->nlines;
    for (int i = 0; i < r->nlines; i++) {
        store_reservation_line *l = &out->lines[i];
        l->item_id = r->lines[i].item_id;
        l->quantity = r->lines[i].quantity;
        sqlite3_stmt *st = sq_stmt(c, ST_STOCK_READ);
        if (st == NULL)
            continue;
        sqlite3_bind_int64(st, 1, l->item_id);
        if (sqlite3_step(st) == SQLITE_ROW)
            l->available = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
}

static int insert_reservation(sqlite_conn *c, const store_new_reservation *r,
                              const int64_t *available, int64_t *id)
{
    sqlite3_stmt *st = sq_stmt(c, ST_RES_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sq_bind_text_or_null(st, 1, r->request_id);
    sq_bind_text_or_null(st, 2, r->buyer_id);
    sqlite3_bind_text(st, 3, r->instance, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, r->hold_ms);
    int rc = sq_first_row(c, st, "insert reservation");
    if (rc == STORE_OK)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    for (int i = 0; rc == STORE_OK && i < r->nlines; i++) {
        const store_line *l = &r->lines[i];
        if ((st = sq_stmt(c, ST_RES_LINE_INSERT)) == NULL)
            return STORE_ERR_IO;
        sqlite3_bind_int64(st, 1, *id);
        sqlite3_bind_int64(st, 2, l->item_id);
        sqlite3_bind_int64(st, 3, l->quantity);
        sqlite3_bind_int64(st, 4, available[i]);
        if (l->fence.fence > 0) {
            sqlite3_bind_int64(st, 5, l->fence.fence);
            sqlite3_bind_int(st, 6, l->fence.seq);
        }
        rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "insert reservation line");
        sqlite3_reset(st);
    }
    return rc;
}

int sqr_tx_reserve(store_conn *conn, const store_new_reservation *r, store_reservation *out)
{
    sqlite_conn *c = CONN(conn);
    int64_t available[RULE_ORDER_LINES_MAX], id = 0;
    int rc = sq_tx_open(c), taken = 0;
    memset(out, 0, sizeof(*out));
    if (rc == STORE_OK && r->request_id) {
        sqlite3_stmt *st = sq_stmt(c, ST_RES_BY_REQUEST);
        if (st == NULL)
            return STORE_ERR_IO;
        sqlite3_bind_text(st, 1, r->request_id, -1, SQLITE_STATIC);
        rc = read_reservation(c, st, out);
        if (rc != STORE_ERR_NOT_FOUND)
            return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
        rc = STORE_OK;
    }
    int idx[RULE_ORDER_LINES_MAX];
    store_line_order(r->lines, r->nlines, idx);
    while (rc == STORE_OK && taken < r->nlines) {
        int i = idx[taken];
        rc = take_line(c, r->buyer_id, &r->lines[i], &available[i]);
        taken += rc == STORE_OK;
    }
    if (rc == STORE_ERR_INSUFFICIENT || rc == STORE_ERR_BUYER_LIMIT ||
        rc == STORE_ERR_BUYER_REQUIRED || rc == STORE_ERR_STALE || rc == STORE_ERR_NOT_FOUND) {
        char why[sizeof(c->err)];
        memcpy(why, c->err, sizeof(why));
        int undo = undo_lines(c, r, idx, taken);
        if (undo != STORE_OK)
            return undo;
        memcpy(c->err, why, sizeof(why));
        if (rc == STORE_ERR_INSUFFICIENT)
            short_answer(c, r, out);
        return rc;
    }
    if (rc == STORE_OK)
        rc = insert_reservation(c, r, available, &id);
    return rc == STORE_OK ? res_get(c, id, out) : rc;
}

/* ---- one fate ---- */

/* Moves reservation id from held (and not lapsed, by the database's clock
 * now) to state, in that one statement. When it was not held: *res as it
 * is, and STORE_ERR_DUPLICATE when it is in state already (a repeat),
 * STORE_ERR_NOT_FOUND, or STORE_ERR_STATE. */
static int end_held(sqlite_conn *c, int64_t id, const char *state, store_reservation *res)
{
    sqlite3_stmt *st = sq_stmt(c, ST_RES_END);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "end reservation");
    sqlite3_reset(st);
    if (rc != STORE_OK || sqlite3_changes(c->db) == 1)
        return rc;
    if ((rc = res_get(c, id, res)) != STORE_OK)
        return rc;
    if (strcmp(store_state_names[res->state], state) == 0)
        return STORE_ERR_DUPLICATE;
    snprintf(c->err, sizeof(c->err), "reservation %lld is %s", (long long)id, store_not_held(res));
    return STORE_ERR_STATE;
}

int sqr_tx_reservation_confirm(store_conn *conn, int64_t id, const store_new_order *o,
                               store_reservation *res, store_order *order)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    memset(order, 0, sizeof(*order));
    if (rc == STORE_OK)
        rc = end_held(c, id, "confirmed", res);
    if (rc == STORE_ERR_DUPLICATE) {
        int found = sqo_order_get(c, res->order_id, order);
        return found == STORE_OK ? rc : found;
    }
    if (rc == STORE_OK)
        rc = res_get(c, id, res);
    store_new_order w = *o;
    w.nlines = res->nlines;
    int idx[RULE_ORDER_LINES_MAX];
    store_res_line_order(res, idx);
    for (int k = 0; rc == STORE_OK && k < res->nlines; k++) {
        int i = idx[k];
        store_line *l = &w.lines[i];
        *l = (store_line){res->lines[i].item_id, res->lines[i].quantity, 0,
                          store_order_fence(o, res->lines[i].item_id)};
        rc = item_write_must(c, ST_CONFIRM_TAKE, l->item_id, l->quantity, &l->fence,
                             &l->remaining);
    }
    if (rc == STORE_OK)
        rc = sqo_insert_order(c, &w, res->has_buyer_id ? res->buyer_id : NULL, id, order);
    if (rc != STORE_OK)
        return rc;
    order->nlines = w.nlines;
    memcpy(order->lines, w.lines, (size_t)w.nlines * sizeof(w.lines[0]));
    res->order_id = order->info.order_id;
    return STORE_OK;
}

int sqr_tx_reservation_cancel(store_conn *conn, int64_t id, const int64_t *items,
                              const store_fence *f, int nf, store_reservation *res)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    if (rc == STORE_OK)
        rc = end_held(c, id, "cancelled", res);
    if (rc == STORE_OK)
        rc = res_get(c, id, res);
    int idx[RULE_ORDER_LINES_MAX];
    store_res_line_order(res, idx);
    for (int k = 0; rc == STORE_OK && k < res->nlines; k++) {
        store_reservation_line *l = &res->lines[idx[k]];
        store_fence fi = store_fence_for(items, f, nf, l->item_id);
        rc = item_write_must(c, ST_UNRESERVE, l->item_id, l->quantity, &fi, &l->available);
        if (rc == STORE_OK)
            rc = sqo_uncount_buyer(c, res->has_buyer_id ? res->buyer_id : NULL, l->item_id,
                                   l->quantity);
    }
    return rc;
}

int sqr_reservation_extend(store_conn *conn, int64_t id, int64_t hold_ms, store_reservation *out)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_run(c, ST_BEGIN);
    sqlite3_stmt *st = rc == STORE_OK ? sq_stmt(c, ST_RES_EXTEND) : NULL;
    if (st) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, hold_ms);
        rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "extend reservation");
        sqlite3_reset(st);
    } else if (rc == STORE_OK) {
        rc = STORE_ERR_IO;
    }
    int moved = rc == STORE_OK && sqlite3_changes(c->db) == 1;
    if (rc == STORE_OK)
        rc = res_get(c, id, out);
    if (rc == STORE_OK && !moved) {
        snprintf(c->err, sizeof(c->err), "reservation %lld is %s", (long long)id, store_not_held(out));
        rc = STORE_ERR_STATE;
    }
    if (rc == STORE_OK)
        rc = sq_run(c, ST_COMMIT);
    sq_rollback(c);
    return rc;
}

/* ---- the sweep ---- */

int sqr_reservations_due(store_conn *conn, int limit, int64_t *items, int items_max, int *n,
                         int *due)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = sq_stmt(c, ST_RES_DUE);
    *n = *due = 0;
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int(st, 1, limit);
    store_due d;
    store_due_start(&d, items, items_max, n, due);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW)
        store_due_row(&d, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
    store_due_end(&d);
    int rc = step == SQLITE_DONE ? STORE_OK : sq_fail(c, "find lapsed reservations");
    sqlite3_reset(st);
    return rc;
}

/* The lapsed reservations (up to limit) whose every item is among items,
 * the earliest first, into ids (*nids). */
static int pick(sqlite_conn *c, const int64_t *items, int n, int limit, int64_t *ids, int *nids)
{
    size_t size = 3 + (size_t)n * 21;
    char *json = malloc(size);
    sqlite3_stmt *st = json ? sq_stmt(c, ST_RES_PICK) : NULL;
    *nids = 0;
    if (st == NULL) {
        free(json);
        return STORE_ERR_IO;
    }
    size_t used = (size_t)snprintf(json, size, "[");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(json + used, size - used, "%s%lld", i ? "," : "",
                                 (long long)items[i]);
    snprintf(json + used, size - used, "]");
    sqlite3_bind_int(st, 1, limit);
    sqlite3_bind_text(st, 2, json, -1, SQLITE_STATIC);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && *nids < limit)
        ids[(*nids)++] = sqlite3_column_int64(st, 0);
    int rc = step == SQLITE_ROW || step == SQLITE_DONE ? STORE_OK
                                                       : sq_fail(c, "pick lapsed reservations");
    sqlite3_reset(st);
    free(json);
    return rc;
}

/* Expires reservation id if it is still held and lapsed (*done 1, *lag how
 * late), its units back to stock under items' fences. */
static int expire_one(sqlite_conn *c, int64_t id, const int64_t *items, const store_fence *f,
                      int n, int *done, int64_t *lag)
{
    char buyer[RULE_BUYER_ID_MAX + 1];
    int has_buyer = 0;
    sqlite3_stmt *st = sq_stmt(c, ST_RES_EXPIRE);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int rc = sq_first_row(c, st, "expire reservation");
    if (rc == STORE_OK) {
        *lag = sqlite3_column_int64(st, 0);
        has_buyer = sqlite3_column_type(st, 1) != SQLITE_NULL;
        sq_copy_text(buyer, sizeof(buyer), st, 1);
    }
    sqlite3_reset(st);
    *done = rc == STORE_OK;
    if (rc != STORE_OK)
        return rc == STORE_ERR_NOT_FOUND ? STORE_OK : rc; /* no longer held: not ours */
    store_reservation r;
    rc = res_get(c, id, &r);
    int idx[RULE_ORDER_LINES_MAX];
    store_res_line_order(&r, idx);
    for (int k = 0; rc == STORE_OK && k < r.nlines; k++) {
        const store_reservation_line *l = &r.lines[idx[k]];
        store_fence fi = store_fence_for(items, f, n, l->item_id);
        int64_t stock;
        rc = item_write_must(c, ST_UNRESERVE, l->item_id, l->quantity, &fi, &stock);
        if (rc == STORE_OK)
            rc = sqo_uncount_buyer(c, has_buyer ? buyer : NULL, l->item_id, l->quantity);
    }
    return rc;
}

int sqr_tx_reservations_expire(store_conn *conn, const int64_t *items, const store_fence *f,
                               int n, int limit, int *expired, int64_t *lag_ms)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c), nids = 0;
    *expired = 0;
    if (rc != STORE_OK || limit <= 0 || n <= 0)
        return rc;
    int64_t *ids = malloc((size_t)limit * sizeof(*ids));
    if (ids == NULL) {
        snprintf(c->err, sizeof(c->err), "out of memory");
        return STORE_ERR_IO;
    }
    rc = pick(c, items, n, limit, ids, &nids);
    for (int i = 0; rc == STORE_OK && i < nids; i++) {
        int done = 0;
        rc = expire_one(c, ids[i], items, f, n, &done, &lag_ms[*expired]);
        *expired += done && rc == STORE_OK;
    }
    free(ids);
    return rc;
}

int sqr_reservations_held(store_conn *conn, int64_t *n)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = sq_stmt(c, ST_HELD_COUNT);
    if (st == NULL)
        return STORE_ERR_IO;
    int rc = sq_first_row(c, st, "count held reservations");
    if (rc == STORE_OK)
        *n = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc;
}

/* ---- returns ---- */

/* A cancelled order's lines' remaining: the stock after each return. */
static int returned_lines(sqlite_conn *c, store_order *out)
{
    sqlite3_stmt *st = sq_stmt(c, ST_RETURNS_OF_ORDER);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, out->info.order_id);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW)
        for (int i = 0; i < out->nlines; i++)
            if (out->lines[i].item_id == sqlite3_column_int64(st, 0))
                out->lines[i].remaining = sqlite3_column_int64(st, 1);
    int rc = step == SQLITE_DONE ? STORE_OK : sq_fail(c, "read returns");
    sqlite3_reset(st);
    return rc;
}

static int insert_return(sqlite_conn *c, int64_t order_id, const store_line *l,
                         const char *request_id, const char *instance, const char *lock_token,
                         const store_fence *f)
{
    sqlite3_stmt *st = sq_stmt(c, ST_RETURN_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, order_id);
    sqlite3_bind_int64(st, 2, l->item_id);
    sqlite3_bind_int64(st, 3, l->quantity);
    sqlite3_bind_int64(st, 4, l->remaining);
    sq_bind_text_or_null(st, 5, request_id);
    sqlite3_bind_text(st, 6, instance ? instance : "", -1, SQLITE_STATIC);
    if ((f = store_fence_or_null(f)) != NULL) {
        sqlite3_bind_int64(st, 7, f->fence);
        sqlite3_bind_int(st, 8, f->seq);
    }
    sq_bind_text_or_null(st, 9, lock_token);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : sq_fail(c, "insert return");
    sqlite3_reset(st);
    return rc;
}

int sqr_tx_order_cancel(store_conn *conn, int64_t order_id, const char *request_id,
                        const char *instance, const char *lock_token, const int64_t *items,
                        const store_fence *f, int nf, store_order *out)
{
    sqlite_conn *c = CONN(conn);
    int rc = sq_tx_open(c);
    if (rc == STORE_OK && (rc = sqo_order_get(c, order_id, out)) == STORE_ERR_NOT_FOUND)
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
        rc = item_write_must(c, ST_RETURN_ADD, l->item_id, l->quantity, &fi, &l->remaining);
        if (rc == STORE_OK)
            rc = insert_return(c, order_id, l, request_id, instance, lock_token, &fi);
        if (rc == STORE_OK)
            rc = sqo_uncount_buyer(c, buyer, l->item_id, l->quantity);
    }
    out->info.cancelled = rc == STORE_OK;
    return rc;
}
