/* store_sqlite_order.h - the SQLite backend's ledger (store_sqlite_order.c):
 * orders and their lines, read and written, and each line counted against
 * its buyer's limit. For the backend's operations (store_sqlite.c) and its
 * reservations and returns (store_sqlite_reserve.c); on a connection
 * (store_sqlite_conn.h). */
#ifndef STORE_SQLITE_ORDER_H
#define STORE_SQLITE_ORDER_H

#include "server/store_sqlite_conn.h"

static inline void sq_bind_text_or_null(sqlite3_stmt *st, int col, const char *text)
{
    if (text)
        sqlite3_bind_text(st, col, text, -1, SQLITE_STATIC);
}

/* The order of a requestId, or of an id, with its lines: STORE_OK,
 * STORE_ERR_NOT_FOUND, or a failure (store.h). */
int sqo_order_by_request(sqlite_conn *c, const char *request_id, store_order *out);
int sqo_order_get(sqlite_conn *c, int64_t order_id, store_order *out);
int sqo_lines_of_item(sqlite_conn *c, int64_t item_id, int64_t before, int limit,
                      store_line_fn fn, void *arg);

/* store_tx_add_order: the buyer's lines counted (or refused) first, then the
 * order and its lines; out's order id and created_at filled. */
int sqo_add_order(sqlite_conn *c, const store_new_order *o, store_order *out);

/* Writes order o's row, as buyer_id's (NULL: none) and made from
 * reservation_id (0: none), and its lines (o's, as they are): out's order id
 * and created_at (the rest is the caller's). */
int sqo_insert_order(sqlite_conn *c, const store_new_order *o, const char *buyer_id,
                     int64_t reservation_id, store_order *out);

/* Counts quantity of item (whose per_buyer_limit is limit, 0: none) for
 * buyer (NULL: none): STORE_OK (counted when a buyer is named),
 * STORE_ERR_BUYER_REQUIRED (a limit and no buyer), STORE_ERR_BUYER_LIMIT
 * (past the limit: nothing counted), each refusal in c->base.limit and
 * c->err; or a failure. */
int sqo_count_buyer(sqlite_conn *c, const char *buyer, int64_t item, int64_t quantity,
                    int64_t limit);

/* Takes quantity of item off buyer's count (NULL: nothing to do). */
int sqo_uncount_buyer(sqlite_conn *c, const char *buyer, int64_t item, int64_t quantity);

#endif
