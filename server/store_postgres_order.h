/* store_postgres_order.h - the PostgreSQL backend's ledger
 * (store_postgres_order.c): orders and their lines, read and written, and
 * each line counted against its buyer's limit. For the backend's
 * operations (store_postgres.c) and its reservations and returns
 * (store_postgres_reserve.c); on a connection of the pool. */
#ifndef STORE_POSTGRES_ORDER_H
#define STORE_POSTGRES_ORDER_H

#include "server/store_postgres_pool.h"
#include "server/store_postgres_sql.h"

/* The order of a requestId, or of an id, with its lines: STORE_OK,
 * STORE_ERR_NOT_FOUND, or a failure (store.h). */
int pgo_order_by_request(pg_session *c, const char *request_id, store_order *out);
int pgo_order_get(pg_session *c, int64_t order_id, store_order *out);
int pgo_lines_of_item(pg_session *c, int64_t item_id, int64_t before, int limit,
                      store_line_fn fn, void *arg);

/* store_tx_add_order: a buyer's lines counted (or refused) first, then the
 * order and its lines - an order with no buyer refused, in the statement
 * that writes it, when an item of its has a limit; out's order id and
 * created_at filled. */
int pgo_add_order(store_conn *conn, const store_new_order *o, store_order *out);

/* Writes the order of a confirm (made from reservation_id, as buyer_id's:
 * counted when reserved) and its lines: out's order id and created_at. */
int pgo_insert_confirmed(store_conn *conn, const store_new_order *o, const char *buyer_id,
                         int64_t reservation_id, store_order *out);

/* Counts quantity of item for buyer (NULL: none) against limit (0: none;
 * -1: the item's, read in the statement): STORE_OK (counted when a buyer is
 * named), STORE_ERR_BUYER_REQUIRED (a limit and no buyer), or
 * STORE_ERR_BUYER_LIMIT (nothing counted), each refusal in conn->limit and
 * the session's err; or a failure. */
int pgo_count_buyer(store_conn *conn, const char *buyer, int64_t item, int64_t quantity,
                    int64_t limit);

/* Takes quantity of item off buyer's count (NULL: nothing to do). */
int pgo_uncount_buyer(pg_session *c, const char *buyer, int64_t item, int64_t quantity);

#endif
