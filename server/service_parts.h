/* service_parts.h - what the service's files share. They call one way,
 * from the top down: service.c (lifecycle, reads, health, metrics,
 * draining, and each order's and stock set's door) -> service_order.c (an
 * order placed alone, under each lock mode), service_stock.c (a stock
 * set), service_reserve.c (reservations, an order's cancel) and
 * service_sweep.c (lapsed reservations given back, which service.c starts
 * and stops) -> service_locked.c (a transaction under the locks of its
 * items) ->
 * service_batch.c (group commit) -> service_write.c (what writing
 * an order needs: the order as written, a retry's first answer, the tokens
 * a lock holds and their raise, the drain's commit check, a lock's calls
 * registered for the drain) -> service_answer.c (an order's end) ->
 * service_log.c (the lines an order leaves) -> service_result.c
 * (outcomes, names, error mapping). Each file's functions are declared
 * below in that order. Not for other modules. */
#ifndef SERVICE_PARTS_H
#define SERVICE_PARTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "lock/dlock_async.h"
#include "server/batch.h"
#include "server/exec.h"
#include "server/service.h"

/* Item ids known to exist, direct-mapped by id: items are never deleted, so
 * an id seen once needs no read before its lock again. */
#define SERVICE_KNOWN_ITEMS 4096

/* The key of the queue of orders of several items (items are >= 1). */
#define SERVICE_CARTS 0

struct order;
struct sweep;

/* A lock's asynchronous call (acquire, sleep, release) made for a request,
 * registered while it waits so that the drain can withdraw it
 * (service_waits_cancel), and whose end comes back on a service thread. */
struct lock_call {
    service *s;
    dlock_req req;           /* req.data: the request (an order, a batch, a stock set) */
    exec_task task;          /* req.done's way to a service thread */
    exec_fn *then;           /* what runs there */
    struct lock_call *prev, *next; /* the waits registered, while registered */
    int registered;
    int via_lock_thread;     /* its end came from libdlock's thread (a Redis step) */
};

struct service {
    service_config cfg;     /* its strings belong to the caller and outlive the service */
    store *store;
    dlock_client *locks;    /* NULL unless the lock mode is redis */
    batch_queues *queues;   /* group commit: orders per item, and the carts; NULL: none */
    batch_commits *commits; /* ...and the batches waiting for a transaction */
    exec_task commit_task;  /* the committer's link: one transaction in flight at a time */
    exec *work;             /* service threads: store calls, commits, grants */
    exec *probes;           /* the thread /health and /metrics are answered on */
    metrics *metrics;
    int holds_max;          /* requests that may hold a store connection across a wait */
    pthread_mutex_t mu;     /* guards the fields below */
    pthread_cond_t idle;    /* signalled when inflight drops to 0 while draining */
    struct lock_call *waits; /* lock calls in flight (the drain withdraws them) */
    int holds;              /* connections held across a wait now */
    struct order *hold_head, *hold_tail; /* orders waiting for a turn to hold one */
    _Atomic int inflight;   /* requests between service_enter and service_leave */
    _Atomic int draining;   /* service_drain waits: the last leave signals idle */
    _Atomic int commits_refused;
    _Atomic int drain_notice;   /* stopping soon: /health says "draining", the rest serves */
    /* Redis's state as the log tells it, so that each change is one line:
     * credentials refused; each node that stopped answering (dlock_node_info's
     * up), as many as are so; when a failure no node is down for was last
     * logged (at most one a second, with how many since) */
    _Atomic int redis_refused;
    _Atomic unsigned char redis_node_down[DLOCK_NODES_MAX];
    _Atomic int redis_nodes_down;
    _Atomic int64_t redis_failed_logged_ms;
    _Atomic int redis_failed_unlogged;
    _Atomic int64_t full_since_ms; /* when writes began to fail for lack of space (the
                                    * monotonic clock), 0 since one succeeded */
    _Atomic int stopped_once; /* the test-only fault point has fired */
    _Atomic int64_t known_items[SERVICE_KNOWN_ITEMS]; /* 0: empty (ids are >= 1) */
    struct sweep *sweep;    /* the expiry sweep's state (service_sweep.c); NULL: none */
};

/* Milliseconds on CLOCK_MONOTONIC, for the service's own measurements. */
static inline int64_t service_now_ms(void) { return exec_now_ms(); }

/* Microseconds on CLOCK_MONOTONIC, for the elapsed time the log shows. */
static inline int64_t service_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* An order's outcome, kept small while it waits for its batch's commit (a
 * service_result is kilobytes; this, a few hundred bytes and 8 a line). */
struct order_result {
    enum service_outcome outcome;
    int64_t order_id;
    store_limit_info limit; /* a buyer's limit refused it: which item */
    uint32_t shorts;     /* insufficient: bit i set when line i was short */
    union {
        char message[256];                     /* not placed: why */
        char placed_by[RULE_INSTANCE_MAX + 1]; /* replayed: the replica that placed it */
    };
    int64_t *remaining;  /* per line: the stock after it (placed, replayed) or there was
                          * (short); the order's own memory */
    store_fence *fence;  /* per line, placed or replayed: the token it was written under
                          * (the order's held: not placed, its locks' tokens) */
};

/* The items a batch touches (the union of its orders' lines), each with its
 * lock key (an order's of the batch), its token and the stock left as the
 * batch goes. */
struct batch_item {
    int64_t id;
    const char *key;
    store_fence fence;
    store_fence refused; /* the row's newer token when it refused ours */
    int64_t stock;
};

/* One leader's batch, from its lock's grant to its release: memory of the
 * leader's own order (sized at its door), so that no batch allocates. */
struct batch {
    service *s;
    int64_t key;            /* its queue: an item's id, or SERVICE_CARTS */
    struct order *leader;
    struct order *first;    /* its orders, linked by their next, in arrival order */
    int n;
    struct lock_call lock;  /* its lock: asked, granted (h), released */
    dlock_handle *h;
    int out;    /* answered (its lock failed): left out of the transaction */
    int stale;  /* rows refused its tokens for newer ones: raise, then try again */
    int raised; /* it was, once: a row that refuses it now is answered so */
    int64_t asked_ms;
    batch_commit_link commit; /* its place among the batches waiting for a transaction */
    int nitems, items_max;
    struct batch_item item[]; /* items_max: 1 for an item's batch, DLOCK_MULTI_MAX for carts */
};

/* An order placed alone (service_order.c), between its steps: memory of the
 * order's own, where a batched order keeps the batch it may lead. */
struct alone {
    struct order *o;
    struct lock_call lock;  /* its lock: asked, slept under, released */
    dlock_handle *h;
    store_conn *c;          /* held across a wait (lock mode db with work) */
    exec_timer timer;       /* its work, a retry, or a turn's deadline */
    int64_t deadline_ms;    /* of its wait for a row lock (mode db) */
    int tries;              /* ...how many so far */
    int holding;            /* it has a turn to hold a connection across its work */
    int waiting_turn;       /* ...or waits for one (under the service's mu) */
    int64_t lock_asked_ms;
};

/* One order from its door to its answer: one allocation at the door, sized
 * by its lines; every hand-off after that uses the links inside it. */
struct order {
    service *s;
    req_order r;
    int reduce;             /* counted as a POST /reduceStock too */
    int64_t t0_us;
    service_done *done;
    void *arg;
    int hops;               /* hand-offs between threads so far */
    const void *thread;     /* the thread it was last on */
    const void *door;       /* the thread it came in on, which sends its answer */
    exec_task task;         /* its link to a service thread */
    batch_link link;        /* group commit: its place in its key's queue */
    struct order *next;     /* group commit: the next order of its batch; a turn to
                             * hold a connection: the next waiting */
    struct batch *lead;     /* group commit: the batch it may lead (its own memory) */
    struct alone *alone;    /* placed alone: its steps' state (its own memory); one of
                             * the two is NULL */
    int pending;            /* its batch still holds it once answered: freed at its end */
    store_fence *held;      /* held[i]: line i's lock's token once taken, for the log */
    const char **keys;      /* keys[i]: line i's item's lock key */
    struct order_result res;
};

struct locked;

/* What a write under its items' locks does (service_locked.c), each on a
 * service thread. */
struct locked_ops {
    /* Before any lock, c free for reads: adds the items to lock
     * (service_locked_add), or sets w->out's outcome to end without a
     * lock (a thing not found, nothing to do). */
    void (*prepare)(struct locked *w, store_conn *c);
    /* Under the locks, before the transaction's connection is taken, each
     * try (NULL: none): SERVICE_OK goes on; any other outcome, set in
     * w->out, ends it there (a last check, say). */
    int (*ready)(struct locked *w);
    /* Inside the transaction, every item claimed (service_locked_fence):
     * the store's write. STORE_OK commits; anything else rolls back. */
    int (*write)(struct locked *w, store_conn *c);
    /* The transaction's result (rc: the write's failure, or the commit's)
     * into w->out, c still the connection it ran on. */
    void (*result)(struct locked *w, int rc, store_conn *c);
    /* The end, its locks released: counts, logs, answers, frees w. */
    void (*end)(struct locked *w);
};

/* A write under the locks of up to RULE_ORDER_LINES_MAX items, from the
 * read that names them to its end: memory of the request that embeds it
 * (or of the sweep, one pass at a time). */
struct locked {
    service *s;
    const struct locked_ops *ops;
    int n;                                      /* items, in id order */
    int64_t items[RULE_ORDER_LINES_MAX];
    store_fence held[RULE_ORDER_LINES_MAX];     /* each item's token, as claimed */
    const char *keys[RULE_ORDER_LINES_MAX];
    char key[RULE_ORDER_LINES_MAX][DLOCK_KEY_MAX + 1];
    exec_task task;
    struct lock_call lock;
    dlock_handle *h;
    exec_timer timer;       /* lock mode db: the next try for the rows' locks */
    int64_t deadline_ms;    /* ...until then */
    int tries;
    int64_t asked_ms, t0_us;
    service_result out;     /* cleared by whoever makes it */
};

/* PUT /items/{id}: its memory, from its door to its answer. */
struct stock_set {
    struct locked w;        /* first: the write under the item's lock */
    int64_t item;
    req_item r;             /* the stock (has_stock) and the limit (-1: left) */
    char who[RULE_TOKEN_NAME_MAX + 1];
    service_done *done;
    void *arg;
};

/* ---- service_order.c: an order placed alone, and a stock set ---- */

/* Whether order r goes through group commit (service_batch_join). */
int service_order_batched(const service *s, const req_order *r);

/* Places o (checked: its items exist, its keys set) alone under the lock
 * mode; answers it once done. On any thread: what blocks goes to a service
 * thread, what waits waits as memory. */
void service_order_alone(struct order *o);

/* ---- service_stock.c: an item's stock set ---- */

/* Sets ss's stock and limit (ss made at its door, ss->w.out cleared): the
 * item must exist (else 404, and its lock never touches Redis), then under
 * its lock (redis mode). Answers through ss->done and frees ss. Never
 * blocks. */
void service_stock_set(struct stock_set *ss);

/* ---- service_reserve.c: reservations and an order's cancel ---- */

enum service_res_kind {
    SERVICE_RES_MAKE,         /* POST /reservations: r */
    SERVICE_RES_CONFIRM,      /* reservation id */
    SERVICE_RES_CANCEL,       /* reservation id */
    SERVICE_RES_ORDER_CANCEL, /* order id, cancel */
};

/* Makes, confirms or cancels a reservation, or cancels an order (r,
 * cancel: copied, NULL when not of its kind), in one transaction under
 * its items' locks; done once, as an order's (out of memory: at once).
 * Never blocks. */
void service_reserve_write(service *s, enum service_res_kind kind, int64_t id,
                           const req_reservation *r, const req_cancel *cancel, const char *who,
                           service_done *done, void *arg);

/* ---- service_sweep.c: lapsed reservations given back ---- */

/* Starts s's expiry sweep (none with --sweep-ms 0): its first tick a
 * --sweep-ms from now, on the service threads. 0, or -1 with err filled
 * (out of memory). */
int service_sweep_start(service *s, char *err, size_t errlen);

/* Stops the sweep: no pass begins from now on, the one in flight ends
 * (its lock waits withdrawn with the others' once commits are refused),
 * then the sweep lock is released. Blocks until then, or until deadline_ms
 * on the monotonic clock (-1: no bound) has passed: 0 when stopped, -1 when
 * a pass is still in flight (held in the store: a database that does not
 * answer), which ends on its own; service_sweep_free waits for it. Not on a
 * service thread. Idempotent; a no-op without a sweep. */
int service_sweep_stop(service *s, int64_t deadline_ms);

/* Stops the sweep (service_sweep_stop) and frees it. */
void service_sweep_free(service *s);

/* ---- service_locked.c: a transaction under the locks of its items ---- */

/* Runs w (its s, ops and out set, out cleared): prepare on a service
 * thread, then the items' locks, the transaction, the release, the end.
 * Never blocks; w->ops->end runs once. */
void service_locked_start(struct locked *w);

/* Adds item to w's items (once; kept in id order). In prepare. */
void service_locked_add(struct locked *w, int64_t item);

/* The token item's row was claimed with, or NULL when unfenced. In write. */
const store_fence *service_locked_fence(const struct locked *w, int64_t item);

/* ---- service_batch.c: group commit ---- */

/* Queues o (redis mode, no work time; its batch memory at o->lead) for
 * group commit: with the other orders of its item (or of several items),
 * served by one leader under one lock hold, in a transaction shared with
 * the other batches of the process. Answers it once done (an out of memory
 * at its queue, at once). On any thread; never blocks. */
void service_batch_join(struct order *o);

/* The bytes of batch memory an order of nlines lines carries. */
size_t service_batch_size(int nlines);

/* ---- service_write.c: what writing an order needs ---- */

/* Clears out and takes a store connection; NULL with the failure in out
 * (store_get tells why, having no connection to say it on). */
store_conn *service_conn_get(service *s, service_result *out);

/* A retry whose first attempt committed (perhaps while it waited for the
 * lock) gets that first answer, before any stock check: STORE_ERR_DUPLICATE
 * (the order in out), STORE_ERR_NOT_FOUND when new, or a storage error. */
int service_replayed(store_conn *c, const req_order *r, service_result *out);

/* r as an order to write, its lines without their stock yet. */
store_new_order service_new_order(const service *s, const req_order *r, dlock_handle *h);

/* The fencing token h holds for key, or (0, 0) when unfenced. */
store_fence service_token_of(const service *s, dlock_handle *h, const char *key);

/* A row refused h's token for key because it carries row, a newer one:
 * fences went back (Redis's clock stepped back, or the counter was lost)
 * and every holder would be refused until the clock caught up. Raises h's
 * fence for key past row, only while key still holds h's token in Redis
 * (dlock_fence_raise: a holder whose lock moved on stays refused), and logs
 * it. Call it outside a transaction: it asks Redis (blocking, rare).
 * Returns: DLOCK_OK (claim once more with service_token_of), or the lock's
 * failure. */
int service_raise_fence(service *s, dlock_handle *h, const char *key, store_fence row);

/* The store's last-moment commit check (arg: the service): no commit once
 * draining has refused them. */
int service_commits_allowed(void *arg);

/* The test-only fault (--test-stop-before-write). */
void service_fault_point(service *s);

/* A lock call for request data (an order, a batch, a stock set), whose end
 * runs then(&lc->task) on a service thread. service_lock_begin registers it
 * for the drain and holds the service's mu until service_lock_asked, and
 * between the two the caller asks libdlock with &lc->req: so the drain's
 * withdrawal (service_waits_cancel) finds either no call or one asked.
 * Returns 0 when a wait may begin no more (refusable, and the drain refused
 * commits): the caller does not ask, and passes DLOCK_ERR_CANCELLED on.
 * service_lock_asked takes what the ask returned: an error means the call
 * never began, and then runs with it (rc, err) all the same. */
int service_lock_begin(service *s, struct lock_call *lc, void *data, exec_fn *then,
                       int refusable);
void service_lock_asked(struct lock_call *lc, int rc);

/* dlock_release_async of h as lock call lc (never refused). */
void service_lock_release(service *s, struct lock_call *lc, void *data, exec_fn *then,
                          dlock_handle *h);

/* A retry whose first attempt committed gets that first answer even when
 * its lock can't be had (the store knows it; Redis need not answer): 1 with
 * out the replay, else 0 (r has no requestId, or it is new). Blocks on the
 * store: on a service thread. */
int service_replay_when_locked_out(service *s, const req_order *r, service_result *out);

/* The lock call whose end runs on the service thread now (in then). */
struct lock_call *service_lock_call_of(exec_task *t);

/* Withdraws every lock call still waiting (dlock_cancel): each ends with
 * DLOCK_ERR_CANCELLED, through its then. */
void service_waits_cancel(service *s);

/* dlock_config's post: a lock call's end, on its way to a service thread. */
void service_lock_post(void *ctx, dlock_req *req);

/* ---- service_answer.c: an order's end ---- */

/* The thread marker of the calling thread, for counting hand-offs. */
const void *service_here(void);

/* o has moved to the calling thread: counted when it is another. */
void service_touch(struct order *o);

/* o is answered: counted, logged, handed to its caller; freed now unless
 * its batch still holds it (o->pending), whose end frees it then. On any
 * thread. */
void service_answer(struct order *o);

/* Frees o. */
void service_order_free(struct order *o);

/* What a request's outcome o tells about the database's space (wrote: it
 * was a write): a full disk marks the storage full, a write that commits
 * clears it; each change is logged once. */
void service_note_space(service *s, enum service_outcome o, int wrote);

/* ---- service_log.c: the lines an operator follows an order by ---- */

/* One line for order r's outcome (its level by the outcome): its requestId,
 * outcome, orderId, units, ms since t0_us, items, lock keys and the tokens
 * it was written under (done) or its locks held (held, r->nlines), and the
 * caller's token's name (r->token_name), never the token. */
void service_log_order(const service *s, const req_order *r, const service_result *out,
                       const store_fence *held, int64_t t0_us);

/* One line for a stock set by PUT /items/{id} (stock -1: not set; limit
 * the per-buyer limit set, 0 cleared, -1 left), with its lock's token *held
 * and who set it (the token's name; "" for none). */
void service_log_stock_set(const service *s, int64_t item_id, int64_t stock, int64_t limit,
                           const char *who, const service_result *out, const store_fence *held,
                           int64_t t0_us);

/* One line for a write under its items' locks w (a reservation's, an
 * order's cancel): event (its message), the id it is about as id_name
 * (0: none yet), its requestId (NULL: none), its outcome, the items,
 * their keys and the tokens they were claimed with, and who asked (the
 * token's name; "" for none). */
void service_log_locked(const service *s, const char *event, const char *id_name, int64_t id,
                        const char *request_id, const char *who, const service_result *out,
                        const struct locked *w);

/* A lock lost after its orders committed (their answers stand): the n items'
 * keys and tokens, the number of orders, r's requestId when there is one
 * order (r not NULL), and the release's DLOCK_* result. */
void service_log_lost_after_commit(const service *s, const req_order *r, int orders,
                                   const int64_t *items, const char *const *keys,
                                   const store_fence *tok, int n, int dlock_rc);

/* A lock's fence for key raised past the token row that a row refused it
 * for (dlock_rc DLOCK_OK: from was to now), or not (the lock's failure,
 * dlock_errstr its detail): one warn line with both tokens. */
void service_log_fence_raise(const service *s, const char *key, store_fence row, int64_t was,
                             int64_t now, int dlock_rc);

/* ---- service_result.c: outcomes, names, and the layers' errors as outcomes ---- */

/* The API's code of each outcome (service_outcome_name), for the metrics. */
extern const char *const service_outcome_names[SERVICE_OUTCOME_COUNT];

/* Sets out's outcome and message (printf-style); returns the outcome. */
int service_fail(service_result *out, enum service_outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Maps a store result to out, detail saying what went wrong (rc STORE_OK
 * leaves out alone); returns the outcome. A buyer's limit needs the
 * connection (service_from_store): here it is a storage error. */
int service_from_store_text(service_result *out, int rc, const char *detail);

/* service_from_store_text for a result on c, whose store_errstr is the detail. */
int service_from_store(service_result *out, int rc, const store_conn *c);

/* A reservation r not held (STORE_ERR_STATE) as the outcome of the state
 * it was met in (a held one that lapsed: expired); returns the outcome. */
int service_from_state(service_result *out, const store_reservation *r);

/* Maps a store result for order r (NULL: not an order); STORE_ERR_DUPLICATE
 * means out->order holds the earlier order of r's requestId: a replay when
 * it has the same lines, else a conflict. */
int service_from_order_store(service_result *out, int rc, const store_conn *c,
                             const req_order *r);

/* Maps a lock failure (a DLOCK_* code) on key to out, detail its text
 * (dlock_errstr on the thread it failed on, or the request's err), noting
 * Redis's state (service_note_redis); returns the outcome. */
int service_from_lock(service *s, service_result *out, int dlock_rc, const char *key,
                      const char *detail);

/* Records what a Redis call returned (a DLOCK_* code; detail its text, as
 * captured where it failed: the request's err, or dlock_errstr on that
 * thread) and logs one line for each change: our credentials refused or
 * taken again; a node (of the lock client's, by name) unreachable, with
 * detail, or reachable again; a failure while every node answers (a slot
 * in migration, say) at most once a second. One node's failures never
 * make another's lines. Thread-safe. */
void service_note_redis(service *s, int dlock_rc, const char *detail);

/* Line i of r is short, with the stock there was; then service_insufficient
 * once sets the outcome. */
void service_add_short(service_result *out, const req_order *r, int i, int64_t stock);
int service_insufficient(service_result *out);

/* Keeps out (an order r's outcome) in its small result res. */
void service_keep(struct order_result *res, const req_order *r, const service_result *out);

/* Makes out (cleared) from res, for r's answer. */
void service_result_of(const struct order_result *res, const req_order *r,
                       service_result *out);

#endif
