/* watchdog.c - one thread per client that renews every held lease at
 * lease/3, marks lost leases, and interrupts holders after max_renewals.
 *
 * Renewal is an owner-checked PEXPIRE (a Lua script), so a renewal racing a
 * takeover can never extend someone else's lease. The thread renews one lease
 * at a time on its own connection, outside the mutex; dlock_wd_forget waits
 * for that renewal to finish, so no renewal ever follows a release. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dlock_watchdog {
    dlock_client *c;
    pthread_t thread;
    pthread_cond_t tick; /* the schedule changed, or stop */
    pthread_cond_t idle; /* a renewal finished */
    /* c->mu */
    struct dlock_lease *head;
    int64_t wake_at; /* when the thread wakes next on its own; INT64_MAX when idle */
    int stop;
    redisContext *conn; /* the watchdog thread's alone */
};

enum renew_outcome { RENEWED, NOT_OURS, FAILED };

int dlock_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

void dlock_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ms = at_ms - dlock_now_ms();
    if (ms < 0)
        ms = 0;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

int dlock_holder_state(const struct dlock_handle *h, int64_t now)
{
    if (h->interrupted)
        return DLOCK_ERR_INTERRUPTED;
    if (h->lease->lost || now >= h->lease->valid_until_ms)
        return DLOCK_ERR_LOST;
    return DLOCK_OK;
}

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

/* Ends l's renewals for good and wakes its holder: lost, or (holder only)
 * interrupted after max_renewals. */
static void retire(dlock_watchdog *wd, struct dlock_lease *l, int interrupt)
{
    unlink_lease(wd, l);
    if (interrupt) {
        l->holder->interrupted = 1;
        atomic_fetch_add(&wd->c->stats.interrupts, 1);
    } else {
        l->lost = 1;
    }
    if (l->holder)
        pthread_cond_broadcast(&l->holder->wake);
}

/* Sends the renewal; called without the mutex. */
static enum renew_outcome send_renewal(dlock_watchdog *wd, const struct dlock_lease *l)
{
    char lease[16];
    int n = snprintf(lease, sizeof(lease), "%d", l->lease_ms);
    const char *argv[] = {l->key, l->token, lease};
    size_t lens[] = {strlen(l->key), DLOCK_TOKEN_LEN, (size_t)n};

    if (wd->conn == NULL && (wd->conn = dlock_pool_connect(wd->c->pool)) == NULL) {
        atomic_fetch_add(&wd->c->stats.redis_errors, 1);
        return FAILED;
    }
    redisReply *r = dlock_pool_script(wd->c->pool, wd->conn, DLOCK_SCRIPT_RENEW, 1, 3, argv, lens);
    if (wd->conn->err) { /* reconnect on the next tick */
        redisFree(wd->conn);
        wd->conn = NULL;
    }
    if (r == NULL) {
        atomic_fetch_add(&wd->c->stats.redis_errors, 1);
        return FAILED;
    }
    enum renew_outcome out = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? RENEWED
                                                                                  : NOT_OURS;
    freeReplyObject(r);
    return out;
}

/* Renews l; entered and left with the mutex held, released around the I/O. */
static void renew(dlock_watchdog *wd, struct dlock_lease *l)
{
    int64_t sent = dlock_now_ms();
    l->renewing = 1;
    pthread_mutex_unlock(&wd->c->mu);
    enum renew_outcome out = send_renewal(wd, l);
    pthread_mutex_lock(&wd->c->mu);

    switch (out) {
    case RENEWED:
        l->renewals++;
        l->valid_until_ms = sent + l->lease_ms - dlock_drift_ms(l->lease_ms);
        l->next_renew_ms = sent + l->lease_ms / 3;
        atomic_fetch_add(&wd->c->stats.renewals, 1);
        break;
    case NOT_OURS:
        retire(wd, l, 0);
        break;
    case FAILED: { /* try again soon; the local deadline bounds how long */
        int retry = l->lease_ms / 10;
        l->next_renew_ms = dlock_now_ms() + (retry < 5 ? 5 : retry > 1000 ? 1000 : retry);
        break;
    }
    }
    l->renewing = 0;
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
    pthread_mutex_lock(&wd->c->mu);
    while (!wd->stop) {
        struct dlock_lease *l = earliest(wd);
        int64_t now = dlock_now_ms();
        if (l == NULL) {
            wd->wake_at = INT64_MAX;
            pthread_cond_wait(&wd->tick, &wd->c->mu);
        } else if (l->next_renew_ms > now) {
            wd->wake_at = l->next_renew_ms;
            dlock_cond_wait_until(&wd->tick, &wd->c->mu, l->next_renew_ms);
        } else if (now >= l->valid_until_ms) {
            retire(wd, l, 0); /* renewals kept failing until the lease ran out */
        } else if (holder_used_up(l)) {
            retire(wd, l, 1);
        } else {
            renew(wd, l);
        }
    }
    pthread_mutex_unlock(&wd->c->mu);
    return NULL;
}

dlock_watchdog *dlock_wd_start(dlock_client *c)
{
    dlock_watchdog *wd = calloc(1, sizeof(*wd));
    if (wd == NULL)
        return NULL;
    wd->c = c;
    wd->wake_at = INT64_MAX;
    dlock_cond_init(&wd->tick);
    dlock_cond_init(&wd->idle);
    if (pthread_create(&wd->thread, NULL, run, wd) != 0) {
        pthread_cond_destroy(&wd->idle);
        pthread_cond_destroy(&wd->tick);
        free(wd);
        return NULL;
    }
    return wd;
}

void dlock_wd_stop(dlock_watchdog *wd)
{
    pthread_mutex_lock(&wd->c->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->tick);
    pthread_mutex_unlock(&wd->c->mu);
    pthread_join(wd->thread, NULL);
    if (wd->conn)
        redisFree(wd->conn);
    pthread_cond_destroy(&wd->idle);
    pthread_cond_destroy(&wd->tick);
    free(wd);
}

void dlock_wd_watch(dlock_watchdog *wd, struct dlock_lease *l, int renew_it)
{
    l->renewals = 0;
    l->valid_until_ms = l->acquired_ms + l->lease_ms - dlock_drift_ms(l->lease_ms);
    l->next_renew_ms = l->acquired_ms + l->lease_ms / 3;
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

void dlock_wd_forget(dlock_watchdog *wd, struct dlock_lease *l)
{
    unlink_lease(wd, l);
    while (l->renewing)
        pthread_cond_wait(&wd->idle, &wd->c->mu);
}
