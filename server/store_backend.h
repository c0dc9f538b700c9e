/* store_backend.h - the seam a storage backend plugs into: one table of
 * operations (the ones store.h states), filled by one file per backend, and
 * chosen in store.c by what --db looks like. A backend's store and
 * connection structs begin with the headers below, so store.c can dispatch.
 * Only store.c and the backends include this file. Calls go from store.c
 * to a backend, never back up: what every backend would do alike, store.c
 * does around its call. */
#ifndef STORE_BACKEND_H
#define STORE_BACKEND_H

#include "server/store.h"

typedef struct store_backend store_backend;

struct store {
    const store_backend *be;
};

struct store_conn {
    const store_backend *be;
    store_fence stale; /* the row's token at the last STALE answer (store_stale_token) */
    store_limit_info limit; /* the line of the last BUYER_* answer (store_limit_item) */
};

struct store_backend {
    const char *name;
    int savepoints_max; /* store_savepoints_max */
    int pooled;         /* store_pooled */
    int (*serves)(const char *db); /* 1 when db is this backend's kind of name */
    int (*open)(const store_config *cfg, store **out, char *err, size_t errlen);
    void (*close)(store *s);
    int (*get)(store *s, store_conn **out, char *err, size_t errlen);
    void (*put)(store *s, store_conn *c);
    const char *(*errstr)(const store_conn *c);
    void (*node)(store *s, char *buf, size_t size); /* store_node's; NULL: no server */
    int (*ping)(store_conn *c);
    int (*probe_write)(store_conn *c);
    int (*item_create)(store_conn *c, const char *name, int64_t stock, const char *request_id,
                       int64_t per_buyer_limit, store_item *out);
    int (*item_get)(store_conn *c, int64_t id, store_item *out);
    int (*item_list)(store_conn *c, int64_t after, int limit, store_item_fn fn, void *arg);
    int (*item_set_stock)(store_conn *c, int64_t id, int64_t stock, int64_t per_buyer_limit,
                          const store_fence *f, const store_commit_check *check,
                          store_item *out);
    int (*lines_of_item)(store_conn *c, int64_t item_id, int64_t before, int limit,
                         store_line_fn fn, void *arg);
    int (*order_by_request)(store_conn *c, const char *request_id, store_order *out);
    int (*order_get)(store_conn *c, int64_t order_id, store_order *out);
    int (*stock_read)(store_conn *c, int64_t item_id, int64_t *stock);
    int (*stock_claim)(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock);
    int (*tx_begin)(store_conn *c);
    int (*tx_set_stock)(store_conn *c, int64_t item_id, int64_t stock, const store_fence *f);
    int (*tx_take)(store_conn *c, int64_t item_id, int64_t quantity, int64_t *left);
    int (*tx_lock_stock)(store_conn *c, int64_t item_id, int wait_ms, int64_t *stock); /* or NULL */
    /* fills out's order id and created_at (the rest: store.c, from o), or
     * with STORE_ERR_DUPLICATE the whole earlier order */
    int (*tx_add_order)(store_conn *c, const store_new_order *o, store_order *out);
    int (*tx_set_buyer_limit)(store_conn *c, int64_t id, int64_t per_buyer_limit);
    /* reservations and returns: as store.h states them, whole (out filled by the backend) */
    int (*tx_reserve)(store_conn *c, const store_new_reservation *r, store_reservation *out);
    int (*reservation_get)(store_conn *c, int64_t id, store_reservation *out);
    int (*tx_reservation_confirm)(store_conn *c, int64_t id, const store_new_order *o,
                                  store_reservation *res, store_order *order);
    int (*tx_reservation_cancel)(store_conn *c, int64_t id, const int64_t *items,
                                 const store_fence *f, int nf, store_reservation *res);
    int (*reservation_extend)(store_conn *c, int64_t id, int64_t hold_ms, store_reservation *out);
    int (*reservations_due)(store_conn *c, int limit, int64_t *items, int items_max, int *n,
                            int *due);
    int (*tx_reservations_expire)(store_conn *c, const int64_t *items, const store_fence *f,
                                  int n, int limit, int *expired, int64_t *lag_ms);
    int (*reservations_held)(store_conn *c, int64_t *n);
    int (*tx_order_cancel)(store_conn *c, int64_t order_id, const char *request_id,
                           const char *instance, const char *lock_token, const int64_t *items,
                           const store_fence *f, int nf, store_order *out);
    int (*tx_savepoint)(store_conn *c);
    int (*tx_rollback_to_savepoint)(store_conn *c);
    int (*tx_commit)(store_conn *c, const store_commit_check *check);
    void (*tx_abort)(store_conn *c);
};

/* The backends. */
extern const store_backend store_sqlite;
extern const store_backend store_postgres;

/* One embedded schema file (scripts/embed-sql.sh writes the arrays). */
struct store_migration {
    int version;      /* the file's number: 1 for 001_init.sql */
    const char *name; /* file name, for logs */
    const char *sql;
};

#endif
