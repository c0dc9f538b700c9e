/* store_postgres_reserve.h - the PostgreSQL backend's reservations and returns
 * (store_postgres_reserve.c): the store.h operations of the same names, for
 * the backend's table (store_postgres.c). */
#ifndef STORE_POSTGRES_RESERVE_H
#define STORE_POSTGRES_RESERVE_H

#include "server/store_postgres_order.h"

int pgr_tx_reserve(store_conn *conn, const store_new_reservation *r, store_reservation *out);
int pgr_reservation_get(store_conn *conn, int64_t id, store_reservation *out);
int pgr_tx_reservation_confirm(store_conn *conn, int64_t id, const store_new_order *o,
                               store_reservation *res, store_order *order);
int pgr_tx_reservation_cancel(store_conn *conn, int64_t id, const int64_t *items,
                              const store_fence *f, int nf, store_reservation *res);
int pgr_reservation_extend(store_conn *conn, int64_t id, int64_t hold_ms,
                           store_reservation *out);
int pgr_reservations_due(store_conn *conn, int limit, int64_t *items, int items_max, int *n,
                         int *due);
int pgr_tx_reservations_expire(store_conn *conn, const int64_t *items, const store_fence *f,
                               int n, int limit, int *expired, int64_t *lag_ms);
int pgr_reservations_held(store_conn *conn, int64_t *n);
int pgr_tx_order_cancel(store_conn *conn, int64_t order_id, const char *request_id,
                        const char *instance, const char *lock_token, const int64_t *items,
                        const store_fence *f, int nf, store_order *out);

#endif
