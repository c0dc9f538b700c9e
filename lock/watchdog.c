/* watchdog.c - one thread per client that renews every held lease at
 * lease/3, marks lost leases, and interrupts holders after max_renewals.
 *
 * Renewal is an owner-checked PEXPIRE (a Lua script), so a renewal racing a
 * takeover can never extend someone else's lease. The thread renews one lease
 * at a time on its own connection, outside the mutex; dlock__wd_forget waits
 * for that renewal to finish, so no renewal ever follows a release. */
#include "lock/watchdog.h"

#include <stdlib.h>

#include "lock/sync.h"

struct dlock_watchdog {
    pthread_mutex_t *mu; /* the client's */
    dlock_quorum *quorum;
    dlock_counters *counters;
    pthread_t thread;
    pthread_cond_t tick; /* the schedule changed, or stop */
    pthread_cond_t idle; /* a renewal finished */
    /* mu */
    struct dlock_lease *head;
    int64_t wake_at; /* when the thread wakes next on its own; INT64_MAX when idle */
    int stop;
    redisContext *conn[DLOCK_NODES_MAX]; /* the watchdog thread's alone, one per server */
};

static void unlink_lease(dlock_watchdog *wd, struct dlock_lease *l)
{
    if (!l->watched)
        return;
    if (l->prev)
        l->prev->next = l->next;
    else
        wd->head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
    l->watched = 0;
}

/* Wakes whoever sleeps on h, a thread (dlock_sleep) or a task
 * (dlock_sleep_async): on h itself, and on the multi-lock it is part of. */
static void wake_holder(dlock_handle *h)
{
    for (int i = 0; h && i < 2; h = h->parent, i++) {
        pthread_cond_broadcast(&h->wake);
        if (h->sleeper)
            dlock__runner_wake(h->sleeper);
    }
}

/* Ends l's renewals for good and wakes its holder: lost, or (holder only)
 * interrupted after max_renewals, which for a part of a multi-lock
 * interrupts every part: max_renewals counts for the set. */
static void retire(dlock_watchdog *wd, struct dlock_lease *l, int interrupt)
{
    unlink_lease(wd, l);
    if (interrupt) {
        l->holder->interrupted = 1;
        dlock__count(&wd->counters->interrupts);
        dlock_handle *set = l->holder->parent;
        for (int i = 0; set && i < set->nparts; i++)
            if (!set->parts[i]->interrupted && set->parts[i]->lease->watched)
                retire(wd, set->parts[i]->lease, 1);
    } else {
        l->lost = 1;
    }
    wake_holder(l->holder);
}

/* The leases to renew with l: l alone, or every watched part of the
 * multi-lock its holder belongs to (one schedule, one round trip for all). */
static int renewal_group(struct dlock_lease *l, struct dlock_lease **out)
{
    const dlock_handle *set = l->holder ? l->holder->parent : NULL;
    int n = 0;
    out[n++] = l;
    for (int i = 0; set && i < set->nparts; i++) {
        struct dlock_lease *p = set->parts[i]->lease;
        if (p != l && p->watched && !p->renewing)
            out[n++] = p;
    }
    return n;
}

/* Applies one lease's renewal result (mu held). The lease counts from when
 * the renewal was sent, so with several servers from before the slowest of
 * the majority renewed it. */
static void renewal_done(dlock_watchdog *wd, struct dlock_lease *l, int rc, int64_t sent)
{
    l->renewing = 0;
    if (rc == DLOCK_OK) {
        if (l->granted_ms == 0) { /* the first after a grant only restarts the lease */
            l->renewals++;
            dlock__count(&wd->counters->renewals);
        }
        l->granted_ms = 0;
        l->valid_until_ms = sent + l->lease_ms - dlock__drift_ms(l->lease_ms);
        l->next_renew_ms = sent + l->lease_ms / 3;
    } else if (rc == DLOCK_ERR_LOST) {
        retire(wd, l, 0);
    } else { /* try again soon; the local deadline bounds how long */
        int retry = l->lease_ms / 10;
        l->next_renew_ms = dlock__now_ms() + (retry < 5 ? 5 : retry > 1000 ? 1000 : retry);
    }
}

/* Renews l (with its group); entered and left with mu held, released around
 * the I/O. */
static void renew(dlock_watchdog *wd, struct dlock_lease *l)
{
    struct dlock_lease *group[DLOCK_MULTI_MAX];
    dlock_node_renewal r[DLOCK_MULTI_MAX];
    int rcs[DLOCK_MULTI_MAX], n = renewal_group(l, group);
    for (int i = 0; i < n; i++) {
        group[i]->renewing = 1;
        r[i] = (dlock_node_renewal){group[i]->target, group[i]->token, group[i]->lease_ms,
                                    dlock__lease_renew_script(group[i]), group[i]->need};
    }
    int64_t sent = dlock__now_ms();
    pthread_mutex_unlock(wd->mu);
    dlock__quorum_renew(wd->quorum, wd->conn, n, r, rcs);
    pthread_mutex_lock(wd->mu);
    for (int i = 0; i < n; i++)
        renewal_done(wd, group[i], rcs[i], sent);
    pthread_cond_broadcast(&wd->idle);
}

static struct dlock_lease *earliest(dlock_watchdog *wd)
{
    struct dlock_lease *best = NULL;
    for (struct dlock_lease *l = wd->head; l; l = l->next)
        if (best == NULL || l->next_renew_ms < best->next_renew_ms)
            best = l;
    return best;
}

static int holder_used_up(const struct dlock_lease *l)
{
    const struct dlock_handle *h = l->holder;
    return h && h->max_renewals > 0 && l->renewals - h->renewals_at_start >= h->max_renewals;
}

static void *run(void *arg)
{
    dlock_watchdog *wd = arg;
    pthread_mutex_lock(wd->mu);
    while (!wd->stop) {
        struct dlock_lease *l = earliest(wd);
        int64_t now = dlock__now_ms();
        if (l == NULL) {
            wd->wake_at = INT64_MAX;
            pthread_cond_wait(&wd->tick, wd->mu);
        } else if (l->next_renew_ms > now) {
            wd->wake_at = l->next_renew_ms;
            dlock__cond_wait_until(&wd->tick, wd->mu, l->next_renew_ms);
        } else if (now >= l->valid_until_ms) {
            retire(wd, l, 0); /* renewals kept failing until the lease ran out */
        } else if (holder_used_up(l)) {
            retire(wd, l, 1);
        } else {
            renew(wd, l);
        }
    }
    pthread_mutex_unlock(wd->mu);
    return NULL;
}

dlock_watchdog *dlock__wd_start(pthread_mutex_t *mu, dlock_quorum *q, dlock_counters *counters)
{
    dlock_watchdog *wd = calloc(1, sizeof(*wd));
    if (wd == NULL)
        return NULL;
    wd->mu = mu;
    wd->quorum = q;
    wd->counters = counters;
    wd->wake_at = INT64_MAX;
    dlock__cond_init(&wd->tick);
    dlock__cond_init(&wd->idle);
    if (pthread_create(&wd->thread, NULL, run, wd) != 0) {
        pthread_cond_destroy(&wd->idle);
        pthread_cond_destroy(&wd->tick);
        free(wd);
        return NULL;
    }
    return wd;
}

void dlock__wd_stop(dlock_watchdog *wd)
{
    pthread_mutex_lock(wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->tick);
    pthread_mutex_unlock(wd->mu);
    pthread_join(wd->thread, NULL);
    for (int i = 0; i < DLOCK_NODES_MAX; i++)
        if (wd->conn[i])
            redisFree(wd->conn[i]);
    pthread_cond_destroy(&wd->idle);
    pthread_cond_destroy(&wd->tick);
    free(wd);
}

void dlock__wd_hold(dlock_watchdog *wd, dlock_handle *h, struct dlock_lease *l, int renew_it)
{
    h->lease = l;
    h->seq = 0;
    h->renewals_at_start = 0;
    l->holder = h;
    l->renewals = 0;
    l->valid_until_ms = l->acquired_ms + l->lease_ms - dlock__drift_ms(l->lease_ms);
    l->next_renew_ms = l->acquired_ms + l->lease_ms / 3;
    if (l->granted_ms > 0) { /* the key is ours for the grant's lease: restarted at a third
                              * of that, as a lease is renewed - a short turn never is */
        l->valid_until_ms = l->acquired_ms + l->granted_ms - dlock__drift_ms(l->granted_ms);
        l->next_renew_ms = l->acquired_ms + l->granted_ms / 3;
    }
    if (!renew_it)
        return;
    l->prev = NULL;
    l->next = wd->head;
    if (wd->head)
        wd->head->prev = l;
    wd->head = l;
    l->watched = 1;
    if (l->next_renew_ms < wd->wake_at) /* otherwise it wakes early enough anyway */
        pthread_cond_signal(&wd->tick);
}

void dlock__wd_lost(dlock_watchdog *wd, struct dlock_lease *l) { retire(wd, l, 0); }

void dlock__wd_forget(dlock_watchdog *wd, struct dlock_lease *l)
{
    unlink_lease(wd, l);
    while (l->renewing)
        pthread_cond_wait(&wd->idle, wd->mu);
}
