/* service_sweep.c - lapsed reservations given back, exactly once and on
 * time. Every --sweep-ms a replica ticks: in redis mode it must hold the
 * sweep lock (<lock prefix>sweep, tried without waiting, with the client's
 * lease, renewed by the watchdog and kept across ticks while it holds: one
 * replica sweeps at a time, and one that dies or stops hands the sweep on
 * when its lease runs out); in the other modes every replica sweeps. Then
 * passes, each one more write under its items' locks (service_locked.c,
 * as a reservation's): the items of up to --sweep-batch lapsed
 * reservations (store_reservations_due, RULE_ORDER_LINES_MAX items at
 * most: a write's room for items, which a pass need not exceed since
 * passes follow one another), those items' locks (redis mode: the keys
 * orders take; mode db: the rows'), one transaction that claims each row
 * with its key's token and expires them (store_tx_reservations_expire),
 * the locks released; again while a pass gave some back, for half a
 * --sweep-ms at most, so that a mass of lapsed holds never keeps the
 * database's writes (and the orders' locks) to itself.
 *
 * Exactly once does not rest on the sweep lock: the state change is
 * conditional in the database (held and lapsed by its clock), and a
 * replica that lost the items' locks is fenced out by the rows. The lock
 * keeps the others from doing the same work for nothing.
 *
 * Why on the service's executor with libdlock's asynchronous calls and not
 * a thread of its own with the blocking ones: no thread here sleeps waiting
 * for a lock or a timer (DESIGN.md), and so the sweep is made of the same
 * parts as an order: a tick is an exec timer, each step a short task on a
 * service thread, its lock waits registered (service_lock_begin) so that
 * the drain withdraws them with the orders' own, its commit refused with
 * theirs (service_commits_allowed). Its steps run one after another, never
 * two at once: the state below is touched by one thread at a time. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/log.h"
#include "server/service_parts.h"

struct sweep {
    struct locked pass;     /* the pass in flight: a write under its items' locks */
    service *s;
    exec_timer timer;       /* the next tick */
    exec_task task;         /* the next pass of this tick */
    struct lock_call lock;  /* the sweep lock's call in flight: its try, its release */
    dlock_handle *leader;   /* the sweep lock, while this replica holds it */
    int64_t tick_ms;        /* when this tick began */
    int backoff_ms;         /* Redis failed: the pause before the next tick, growing */
    int64_t failed_logged_ms; /* when a failed pass was last logged */
    int failed_unlogged;      /* ...and how many failed since, not logged */
    const char *step;       /* the pass's step now, for its failure's line */
    int expired;            /* the reservations the pass gave back */
    char leader_key[DLOCK_KEY_MAX + 1];
    pthread_mutex_t mu;     /* guards active, and the timer's arming against the stop */
    int active;             /* a tick is armed, queued or running */
    _Atomic int stopping;
    int64_t lag_ms[];       /* SERVICE_SWEEP_BATCH_MAX: each expired one's lag */
};

/* The longest pause between two ticks while Redis fails. */
#define SWEEP_BACKOFF_MAX_MS 1000

static void tick(exec_task *t);
static void pass(struct sweep *w);

static struct sweep *sweep_of(exec_task *t) { return service_lock_call_of(t)->req.data; }

static struct sweep *sweep_of_pass(struct locked *p)
{
    return (struct sweep *)((char *)p - offsetof(struct sweep, pass));
}

/* The tick is over: the next at a --sweep-ms after this one began (later
 * while Redis fails), or, stopping, none: the sweep is idle. */
static void next_tick(struct sweep *w)
{
    int pause = w->s->cfg.sweep_ms > w->backoff_ms ? w->s->cfg.sweep_ms : w->backoff_ms;
    pthread_mutex_lock(&w->mu);
    if (atomic_load(&w->stopping)) {
        w->active = 0;
    } else {
        exec_timer_start(w->s->work, &w->timer, w->tick_ms + pause, tick);
    }
    pthread_mutex_unlock(&w->mu);
}

/* While Redis fails a lock call of the sweep's (down, or our credentials
 * refused), the ticks slow down to one a second at most, so that a
 * replica with nothing to do does not keep a dead Redis's connects going
 * (the subscriber's own are a few a second); once it answers, every
 * --sweep-ms again. */
static void slow_down(struct sweep *w, int failing)
{
    if (failing) {
        int next = w->backoff_ms ? w->backoff_ms * 2 : w->s->cfg.sweep_ms * 2;
        w->backoff_ms = next < SWEEP_BACKOFF_MAX_MS ? next : SWEEP_BACKOFF_MAX_MS;
    } else {
        w->backoff_ms = 0;
    }
}

/* What the sweep lock's try said of Redis. */
static void note_redis(struct sweep *w, int rc, const char *detail)
{
    if (rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH) {
        service_note_redis(w->s, rc, detail);
        slow_down(w, 1);
    } else if (rc == DLOCK_OK || rc == DLOCK_ERR_TIMEOUT) { /* TIMEOUT: another holds it */
        slow_down(w, 0);
    }
}

static void pass_task(exec_task *t)
{
    pass((struct sweep *)((char *)t - offsetof(struct sweep, task)));
}

/* A pass ended: another when it gave some back (there may be more) and the
 * tick has time left, posted behind what waits meanwhile (orders' steps);
 * else the next tick. */
static void pass_done(struct sweep *w)
{
    int64_t spent = service_now_ms() - w->tick_ms;
    if (w->expired > 0 && spent < w->s->cfg.sweep_ms / 2 + 1 && !atomic_load(&w->stopping))
        exec_post(w->s->work, &w->task, pass_task);
    else
        next_tick(w);
}

/* What went wrong in a pass: one line a second at most, with how many
 * failed since the last (a database that is down fails every tick). */
static void pass_failed(struct sweep *w, const char *what, const char *detail)
{
    int64_t now = service_now_ms();
    if (w->failed_logged_ms && now - w->failed_logged_ms < 1000) {
        w->failed_unlogged++;
        return;
    }
    log_kv(LOG_WARN, "reservations' sweep: pass failed", LOG_STR("step", what),
           LOG_INT("items", w->pass.n), LOG_STR("detail", detail),
           LOG_INT("failedUnlogged", w->failed_unlogged),
           LOG_STR("instance", w->s->cfg.instance_id));
    w->failed_logged_ms = now, w->failed_unlogged = 0;
}

/* Counts and logs what the pass gave back. */
static void pass_report(struct sweep *w)
{
    service *s = w->s;
    metrics_reservations_expired(s->metrics, w->expired, w->lag_ms);
    if (w->expired == 0)
        return;
    int64_t lag_max = 0;
    for (int i = 0; i < w->expired; i++)
        lag_max = w->lag_ms[i] > lag_max ? w->lag_ms[i] : lag_max;
    log_kv(LOG_INFO, "reservations expired", LOG_INT("count", w->expired),
           LOG_INT("lagMaxMs", lag_max), LOG_INT("items", w->pass.n),
           LOG_MS("ms", (service_now_us() - w->pass.t0_us) / 1000.0),
           LOG_STR("instance", s->cfg.instance_id));
}

/* The pass's read: the items of the lapsed reservations, as many as one
 * write may lock. */
static void pass_prepare(struct locked *p, store_conn *c)
{
    struct sweep *w = sweep_of_pass(p);
    service *s = w->s;
    int64_t items[RULE_ORDER_LINES_MAX];
    int n = 0, due = 0;
    w->step = "due";
    /* as many items as one write locks, whatever --sweep-batch says: the
     * earliest lapsed reservation, of up to RULE_ORDER_LINES_MAX lines,
     * always fits, and none can keep those after it waiting for ever */
    int rc = store_reservations_due(c, s->cfg.sweep_batch, items, RULE_ORDER_LINES_MAX, &n, &due);
    if (rc != STORE_OK)
        return (void)service_from_store(&p->out, rc, c);
    for (int i = 0; i < n; i++)
        service_locked_add(p, items[i]);
    w->step = "items' locks";
}

/* Under the items' locks, before the transaction: the last moment to back
 * out of locks lost meanwhile. */
static int pass_ready(struct locked *p)
{
    struct sweep *w = sweep_of_pass(p);
    w->step = "lock check";
    int rc = p->h ? dlock_check(p->h) : DLOCK_OK;
    if (rc != DLOCK_OK)
        return service_from_lock(w->s, &p->out, rc, "of the items", dlock_strerror(rc));
    service_fault_point(w->s); /* after the last check, before the write (test only) */
    w->step = "expire";
    return SERVICE_OK;
}

/* The pass's write, each row claimed (held[i]: items[i]'s token; all
 * fenced or none, as one lock holds them): up to --sweep-batch of the
 * items' lapsed reservations expired. */
static int pass_write(struct locked *p, store_conn *c)
{
    struct sweep *w = sweep_of_pass(p);
    const store_fence *f = service_locked_fence(p, p->items[0]) ? p->held : NULL;
    return store_tx_reservations_expire(c, p->items, f, p->n, w->s->cfg.sweep_batch,
                                        &w->expired, w->lag_ms);
}

static void pass_result(struct locked *p, int rc, store_conn *c)
{
    struct sweep *w = sweep_of_pass(p);
    if (rc != STORE_OK) {
        w->expired = 0;
        service_from_store(&p->out, rc, c); /* the drain's veto: shutting down */
    }
    if (rc == STORE_OK || rc == STORE_ERR_FULL) /* the storage's state, as a write tells it */
        service_note_space(w->s, rc == STORE_OK ? SERVICE_OK : SERVICE_STORAGE_FULL, 1);
}

/* The pass is over, its locks released: what Redis said, what went wrong
 * (not the drain's stop), what it gave back; then the next pass or tick. */
static void pass_end(struct locked *p)
{
    struct sweep *w = sweep_of_pass(p);
    enum service_outcome o = p->out.outcome;
    if (p->n > 0 && w->s->locks) /* its items' locks were asked (Redis's state noted) */
        slow_down(w, o == SERVICE_REDIS_DOWN);
    if (o != SERVICE_OK && o != SERVICE_SHUTTING_DOWN)
        pass_failed(w, w->step, p->out.message);
    pass_report(w);
    pass_done(w);
}

static const struct locked_ops pass_ops = {pass_prepare, pass_ready, pass_write, pass_result,
                                           pass_end};

/* One pass: the lapsed reservations' items, their locks, the write. */
static void pass(struct sweep *w)
{
    if (atomic_load(&w->stopping))
        return next_tick(w);
    metrics_sweep_pass(w->s->metrics);
    memset(&w->pass, 0, sizeof(w->pass));
    w->pass.s = w->s;
    w->pass.ops = &pass_ops;
    w->step = "store connection";
    w->expired = 0;
    service_locked_start(&w->pass);
}

static void leader_granted(exec_task *t)
{
    struct sweep *w = sweep_of(t);
    service *s = w->s;
    int rc = w->lock.req.rc;
    note_redis(w, rc, w->lock.req.err);
    if (rc != DLOCK_OK) /* TIMEOUT: another replica sweeps */
        return next_tick(w);
    w->leader = w->lock.req.h;
    log_kv(LOG_INFO, "reservations' sweep lock taken: this replica sweeps",
           LOG_STR("key", w->leader_key), LOG_INT("fence", dlock_fence(w->leader)),
           LOG_STR("instance", s->cfg.instance_id));
    pass(w);
}
/* Tries the sweep lock, without waiting. */
static void try_leader(struct sweep *w)
{
    service *s = w->s;
    if (atomic_load(&w->stopping)) /* (after a lost lock's release) */
        return next_tick(w);
    dlock_opts opts = s->cfg.lock;
    opts.wait_ms = 0;
    int rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &w->lock, w, leader_granted, 1))
        rc = dlock_acquire_async(s->locks, w->leader_key, &opts, &w->lock.req);
    service_lock_asked(&w->lock, rc);
}

static void leader_released(exec_task *t) { try_leader(sweep_of(t)); }

static void tick(exec_task *t)
{
    struct sweep *w = (struct sweep *)((char *)t - offsetof(struct sweep, timer.task));
    service *s = w->s;
    w->tick_ms = service_now_ms();
    if (atomic_load(&w->stopping))
        return next_tick(w);
    if (s->locks == NULL)
        return pass(w);
    if (w->leader == NULL)
        return try_leader(w);
    int rc = dlock_check(w->leader);
    if (rc == DLOCK_OK)
        return pass(w);
    /* lost (a lease that ran out while this process stood still) or
     * interrupted (max renewals): given back, then tried again */
    log_kv(LOG_WARN, "reservations' sweep lock no longer held", LOG_STR("key", w->leader_key),
           LOG_STR("lockResult", dlock_strerror(rc)), LOG_STR("instance", s->cfg.instance_id));
    dlock_handle *h = w->leader;
    w->leader = NULL;
    service_lock_release(s, &w->lock, w, leader_released, h);
}

int service_sweep_start(service *s, char *err, size_t errlen)
{
    if (s->cfg.sweep_ms <= 0)
        return 0;
    struct sweep *w = calloc(1, sizeof(*w) + SERVICE_SWEEP_BATCH_MAX * sizeof(int64_t));
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->s = s;
    snprintf(w->leader_key, sizeof(w->leader_key), "%ssweep", s->cfg.lock_prefix);
    pthread_mutex_init(&w->mu, NULL);
    w->active = 1;
    s->sweep = w;
    exec_timer_start(s->work, &w->timer, service_now_ms() + s->cfg.sweep_ms, tick);
    return 0;
}

int service_sweep_stop(service *s, int64_t deadline_ms)
{
    struct sweep *w = s->sweep;
    if (w == NULL)
        return 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        atomic_store(&w->stopping, 1);
        if (w->active && exec_timer_stop(s->work, &w->timer))
            w->active = 0; /* it was waiting for its tick: it never runs */
        int active = w->active;
        pthread_mutex_unlock(&w->mu);
        if (!active)
            break;
        if (deadline_ms >= 0 && service_now_ms() >= deadline_ms)
            return -1; /* the drain's time is up: that pass may not hold it longer */
        /* a pass waiting for its items' locks, or a try of the sweep lock,
         * stops waiting (a release goes on) */
        pthread_mutex_lock(&s->mu);
        if (w->pass.lock.registered)
            dlock_cancel(&w->pass.lock.req);
        if (w->lock.registered)
            dlock_cancel(&w->lock.req);
        pthread_mutex_unlock(&s->mu);
        nanosleep(&(struct timespec){0, 5 * 1000000}, NULL);
    }
    if (w->leader) { /* handed on now, not when its lease runs out */
        dlock_release(w->leader);
        w->leader = NULL;
        log_kv(LOG_INFO, "reservations' sweep lock released", LOG_STR("key", w->leader_key),
               LOG_STR("instance", s->cfg.instance_id));
    }
    return 0;
}

void service_sweep_free(service *s)
{
    struct sweep *w = s->sweep;
    if (w == NULL)
        return;
    service_sweep_stop(s, -1);
    pthread_mutex_destroy(&w->mu);
    free(w);
    s->sweep = NULL;
}
