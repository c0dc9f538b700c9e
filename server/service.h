/* service.h - stockd's business layer: items, orders deducted under the
 * configured lock mode, health and metrics. A service owns everything a
 * request needs: the store, the lock client, the group-commit queues, its
 * threads (service threads for the store's calls and the commits, and one
 * for the probes), the count of requests in flight and the flag that stops
 * commits at shutdown. The HTTP layer calls it (handlers.c; http.c for the
 * in-flight count and the metrics); it calls the store (store.h) and the
 * lock (dlock.h, dlock_async.h). Every function is thread-safe.
 *
 * Two kinds of call. An order and a stock set are asked for from any
 * thread and never block: they answer through a callback, later, and
 * meanwhile wait as memory (for a lock, a commit, a timer), never as a
 * thread. Reads and item creation block on the store: call them on a
 * service thread (service_run). */
#ifndef SERVICE_H
#define SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "lock/dlock.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/store.h"
#include "server/exec.h"

enum service_lock_mode {
    SERVICE_LOCK_REDIS,  /* read-modify-write under the item's distributed lock */
    SERVICE_LOCK_NONE,   /* the same without a lock: races, on purpose */
    SERVICE_LOCK_ATOMIC, /* one conditional UPDATE per line, no lock: the baseline */
    SERVICE_LOCK_DB,     /* read-work-write holding the rows' locks (SELECT ... FOR
                          * UPDATE): the database's own lock, where it has one */
    SERVICE_LOCK_COUNT
};

/* "redis", "none", "atomic", "db", then NULL. */
extern const char *const service_lock_mode_names[SERVICE_LOCK_COUNT + 1];

typedef struct service_config {
    store_config store;      /* the database */
    int lock_mode;           /* enum service_lock_mode */
    const char *lock_prefix; /* an item's lock key is <prefix>{<itemId>} */
    dlock_config redis;      /* where Redis is (lock mode redis) */
    dlock_opts lock;         /* lease, wait, retry, renewals, wait mode, hand-off */
    int batch;               /* group commit for hot items (lock mode redis) */
    int fencing;             /* 1: claim rows with the lock's fencing token; 0: test only */
    int stop_before_write;   /* test only: SIGSTOP the process once before a write */
    int allow_work_ms;       /* honour a request's workMs */
    int max_work_ms;         /* ... capped at this */
    int hold_ms;             /* a reservation's hold when it asks for none */
    int max_hold_ms;         /* ... and the longest it may ask for (RULE_HOLD_MS_CAP at most) */
    const char *instance_id; /* written into the ledger */
    int workers;             /* service threads: the store's calls and the commits; 0 (the
                              * default): cores + 6 (a database server's pool size - 2 at
                              * most, so that no thread waits for a connection) */
    auth *tokens;            /* the API tokens (the caller's, reloaded by it); NULL: open */
    int sweep_ms;            /* how often this replica looks for lapsed reservations; 0:
                              * never (another replica must) */
    int sweep_batch;         /* reservations given back per pass, at most */
} service_config;

/* Every field's default (the lock's come from dlock_config_defaults and
 * dlock_opts_defaults). instance_id stays NULL: the caller names it. */
void service_config_defaults(service_config *cfg);

/* The service threads cfg makes: cfg->workers, or for 0 the number of cores
 * + 6, and with a database server's pool at most its size - 2. */
int service_workers_of(const service_config *cfg);

/* The most reservations one pass of the expiry sweep gives back (--sweep-batch). */
#define SERVICE_SWEEP_BATCH_MAX 10000

/* The longest lock prefix, so that a lock key fits DLOCK_KEY_MAX. */
#define SERVICE_LOCK_PREFIX_MAX 256

/* An item's lock key, <prefix>{<itemId>}, into buf (DLOCK_KEY_MAX + 1 bytes). */
void service_lock_key(const char *prefix, int64_t item_id, char *buf);

/* What a request ends in; service_outcome_name() gives the API's code. */
enum service_outcome {
    SERVICE_OK,
    SERVICE_REPLAYED,         /* requestId seen before: the first result, nothing deducted */
    SERVICE_NOT_FOUND,        /* no such item */
    SERVICE_ORDER_NOT_FOUND,  /* no such order */
    SERVICE_INSUFFICIENT,     /* nothing deducted; shorts say which lines were short */
    SERVICE_CONFLICT,         /* requestId used before for another order */
    SERVICE_LOCK_TIMEOUT,
    SERVICE_LOCK_INTERRUPTED, /* renewals exhausted; rolled back */
    SERVICE_LOCK_LOST,        /* lease lost or fenced out as a stale holder; rolled back */
    SERVICE_REDIS_DOWN,
    SERVICE_STORAGE_BUSY,
    SERVICE_STORAGE_UNAVAILABLE, /* the database server can't be reached; nothing written */
    SERVICE_COMMIT_UNKNOWN,   /* it went away during COMMIT: a retry with the requestId tells */
    SERVICE_STORAGE_ERROR,
    SERVICE_SHUTTING_DOWN,    /* past the drain deadline: not committed */
    SERVICE_STORAGE_FULL,     /* the database's disk is full: nothing written, reads work */
    SERVICE_NO_MEMORY,        /* the request's memory could not be had: nothing done */
    SERVICE_RESERVATION_NOT_FOUND, /* no such reservation */
    SERVICE_RESERVATION_EXPIRED,   /* the reservation's hold lapsed: its state as met */
    SERVICE_RESERVATION_CANCELLED, /* ... it was cancelled */
    SERVICE_RESERVATION_CONFIRMED, /* ... it was confirmed (became an order) */
    SERVICE_BUYER_LIMIT,      /* a line would take its buyer past the item's limit (limit) */
    SERVICE_BUYER_REQUIRED,   /* an item has a limit and no buyerId came (limit.item_id);
                               * its HTTP code is invalid_request, its metrics label
                               * buyer_required */
    SERVICE_OUTCOME_COUNT
};

/* A line that asked for more than there was. */
typedef struct service_short_line {
    int64_t item_id, remaining, requested;
} service_short_line;

typedef struct service_result {
    enum service_outcome outcome;
    store_order order;  /* SERVICE_OK, SERVICE_REPLAYED: the order */
    store_item item;    /* item operations: the item */
    store_reservation reservation; /* reservation operations: the reservation */
    store_limit_info limit; /* SERVICE_BUYER_LIMIT, SERVICE_BUYER_REQUIRED: which item */
    int nshort;         /* SERVICE_INSUFFICIENT: the short lines, in the order's order */
    service_short_line shorts[RULE_ORDER_LINES_MAX];
    char message[256];  /* for the client, when not OK */
} service_result;

/* Makes out an empty SERVICE_OK: every field but the arrays, which are read
 * only up to their counts (order.nlines, nshort) and the item's name, which
 * is empty. A result cleared so is a few hundred bytes touched, not its
 * whole size: an order waiting in group commit keeps its memory small. */
void service_result_clear(service_result *out);

/* A reservation's state as the API tells it: "held", "confirmed",
 * "cancelled", "expired" - a held one past its expiry too (nothing can
 * confirm it any more; the sweep gives its units back within a second). */
const char *service_reservation_state(const store_reservation *r);

/* "ok", "insufficient_stock", ... : the error codes of the HTTP API. */
const char *service_outcome_name(enum service_outcome outcome);

typedef struct service service;

/* Opens the store (migrating it), and the lock client in redis mode (Redis
 * may be down: requests then get SERVICE_REDIS_DOWN until it is back).
 * Returns 0 with *out set, or with err filled SERVICE_OPEN_UNREACHABLE when
 * the database server could not be reached or was not ready (trying again
 * later may succeed), else -1. */
#define SERVICE_OPEN_UNREACHABLE (-2)
int service_open(const service_config *cfg, service **out, char *err, size_t errlen);

/* Closes everything; no request may be running. NULL is a no-op. */
void service_close(service *s);

/* The metrics the HTTP layer counts its requests in. */
metrics *service_metrics(service *s);

/* Renders every metric (reaped: connections the HTTP layer closed at their
 * deadline). Malloc'd text with *len, or NULL when out of memory. */
char *service_metrics_text(service *s, uint64_t reaped, size_t *len);

/* ---- requests ---- */

/* Whether a request whose Authorization header is authorization (NULL:
 * none) may ask for a route that needs role, by the configured tokens
 * (auth_check); the token's name, when known, into name. */
enum auth_verdict service_authorize(service *s, const char *authorization, enum route_role role,
                                    char *name, size_t namelen);

/* Queues fn(t) to run on one of the service threads, the ones that may
 * block on the store (never an HTTP event thread). t is the caller's link,
 * embedded in its request: never allocates, never fails. */
void service_run(service *s, exec_task *t, exec_fn *fn);

/* service_run on the thread of an operator's probes (/health, /metrics): a
 * flood of orders never holds them up. */
void service_run_probe(service *s, exec_task *t, exec_fn *fn);

/* How an order or a stock set ends: out is valid during the call only.
 * Runs on: a service thread, or the caller's before the call returns (a
 * refusal at the door). */
typedef void service_done(const service_result *out, void *arg);

/* Places order r (copied): every line deducted in one transaction, or
 * none, under the lock mode (several items: a multi-lock). A requestId seen
 * before answers its first order (SERVICE_REPLAYED) when the lines are the
 * same, else SERVICE_CONFLICT; /reduceStock and /orders share one
 * namespace. Runs on: any thread; never blocks. done runs once: the order
 * waits for its lock and its commit as memory (its one allocation, made
 * here: out of memory, it is refused at once). */
void service_place_order(service *s, const req_order *r, service_done *done, void *arg);

/* service_place_order for POST /reduceStock (one line), counted as such. */
void service_reduce(service *s, const req_order *r, service_done *done, void *arg);

/* ---- reservations and an order's cancel ----
 *
 * Each runs one transaction under the locks of its items (redis mode: a
 * multi-lock; the rows claimed with their fences), answers through done
 * as an order does, and logs one line. Runs on: any thread; never blocks;
 * done runs once. who: the caller's token's name for the log ("" for
 * none). */

/* Holds r's lines for r->hold_ms (0: --hold-ms): out->reservation on
 * SERVICE_OK; SERVICE_REPLAYED (the reservation as it is now) when r's
 * requestId made one of the same lines, SERVICE_CONFLICT when of others;
 * SERVICE_INSUFFICIENT (shorts), SERVICE_NOT_FOUND, SERVICE_BUYER_LIMIT,
 * SERVICE_BUYER_REQUIRED (out->limit says which item). */
void service_reserve(service *s, const req_reservation *r, const char *who, service_done *done,
                     void *arg);

/* Confirms reservation id: out->order (the order it became) and
 * out->reservation; SERVICE_REPLAYED when it was confirmed already;
 * SERVICE_RESERVATION_EXPIRED, _CANCELLED, _NOT_FOUND. */
void service_reservation_confirm(service *s, int64_t id, const char *who, service_done *done,
                                 void *arg);

/* Cancels reservation id, its units back: out->reservation;
 * SERVICE_REPLAYED when it was cancelled already;
 * SERVICE_RESERVATION_EXPIRED, _CONFIRMED, _NOT_FOUND. */
void service_reservation_cancel(service *s, int64_t id, const char *who, service_done *done,
                                void *arg);

/* Cancels order id, every line's units returned once: out->order (each
 * line's remaining the stock after its return); SERVICE_REPLAYED when it
 * was cancelled already; SERVICE_ORDER_NOT_FOUND. */
void service_order_cancel(service *s, int64_t id, const req_cancel *r, const char *who,
                          service_done *done, void *arg);

/* The longest holdMs a request may ask for (--max-hold-ms). */
int64_t service_max_hold_ms(const service *s);

/* ---- reads and item creation: on a service thread ---- */

/* Moves a held reservation's expiry to now + hold_ms (no item lock: no
 * stock changes): out->reservation; SERVICE_RESERVATION_EXPIRED,
 * _CANCELLED, _CONFIRMED, _NOT_FOUND. */
void service_reservation_extend(service *s, int64_t id, int64_t hold_ms, const char *who,
                                service_result *out);

/* A reservation by id (out->reservation; a held one that lapsed has
 * lapsed set); SERVICE_RESERVATION_NOT_FOUND when there is none. */
void service_get_reservation(service *s, int64_t id, service_result *out);

/* An order with its lines, by id; SERVICE_ORDER_NOT_FOUND when there is none. */
void service_get_order(service *s, int64_t order_id, service_result *out);

/* Creates an item; out->item on SERVICE_OK. With r's requestId used before:
 * SERVICE_REPLAYED with out->item as that creation made it when r has its
 * name and stock (a retry: nothing written), else SERVICE_CONFLICT. who:
 * the caller's token's name for the log ("" for none). */
void service_create_item(service *s, const req_item *r, const char *who, service_result *out);

/* Sets an item's stock (r->has_stock) and per-buyer limit (r->per_buyer_limit
 * >= 0; 0 clears it) in one transaction under its lock in redis mode, so it
 * never interleaves with a deduction; out->item on SERVICE_OK. who as for
 * service_create_item. Runs on: any thread; never blocks; done runs once, as
 * an order's. */
void service_set_stock(service *s, int64_t item_id, const req_item *r, const char *who,
                       service_done *done, void *arg);

/* Reads an item (out->item) and calls fn for up to limit of its lines below
 * the order id before (0: the newest), newest first. */
void service_item_ledger(service *s, int64_t item_id, int64_t before, int limit,
                         store_line_fn fn, void *arg, service_result *out);

/* Calls fn for up to limit items above id after, in id order. */
void service_list_items(service *s, int64_t after, int limit, store_item_fn fn, void *arg,
                        service_result *out);

typedef struct service_health {
    int ok;                     /* 1 when storage and (in redis mode) Redis answer */
    int degraded;               /* ok, but some of several Redis servers are down */
    int storage_full;           /* ok for reads, but writes fail for lack of space */
    const char *backend;        /* the storage backend's name */
    char storage_node[80];      /* where it writes, "host:port" (store_node); "" for none */
    char storage[256];          /* "ok" or what went wrong */
    char redis[600];            /* "ok", "degraded: ...", what went wrong, or "unused (lock
                                 * mode ...)" */
    int nodes;                  /* redis mode: the Redis servers, and which answered */
    struct {
        char name[DLOCK_HOST_MAX + 10];
        int up;
    } node[DLOCK_NODES_MAX];
    const char *lock_mode, *instance;
    int draining;               /* the stop's notice is running (service_notice_drain) */
} service_health;

/* Pings the store and Redis. Once a write failed for lack of space, also
 * tries a small write (store_probe_write): storage_full until one succeeds,
 * a deduction's or this check's, so the state clears with no traffic too. */
void service_check_health(service *s, service_health *out);

/* ---- shutdown ---- */

/* Brackets every request, so that draining knows what is still running. */
void service_enter(service *s);
void service_leave(service *s);

/* The stop's notice: from now on service_check_health says draining, so
 * that a load balancer takes this replica out of its pool, while every
 * request is served as usual. There is no way back. */
void service_notice_drain(service *s);

/* Waits up to timeout_ms for the requests in flight to end. Returns how
 * many are still running (0 when drained). */
int service_drain(service *s, int timeout_ms);

/* From now on nothing commits: requests still running roll back, and those
 * waiting for a lock stop waiting (SERVICE_SHUTTING_DOWN), since their
 * answers can no longer be sent. There is no way back. */
void service_refuse_commits(service *s);

#endif
