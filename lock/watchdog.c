/* watchdog.c - one thread per client that renews every held lock at lease/3,
 * marks lost leases, and interrupts holders after max_renewals.
 *
 * Renewal is an owner-checked PEXPIRE (a Lua script), so a renewal that races
 * with a takeover can never extend someone else's lease. The thread renews one
 * handle at a time on its own connection, outside the mutex; dlock_wd_forget
 * waits for that renewal to finish, so no renewal ever follows a release. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dlock_watchdog {
    dlock_client *client;
    pthread_t thread;
    pthread_mutex_t mu;  /* guards everything below and the handles' mu-protected fields */
    pthread_cond_t tick; /* the schedule changed, or stop */
    pthread_cond_t idle; /* a renewal finished */
    dlock_handle *head;  /* handles to renew */
    int stop;
    redisContext *conn; /* used by the watchdog thread only */
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

/* Waits on cv until woken or until the monotonic time at_ms. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ms)
{
    struct timespec ts = dlock_deadline_ts(at_ms - dlock_now_ms());
    pthread_cond_timedwait(cv, mu, &ts);
}

static void unlink_handle(dlock_watchdog *wd, dlock_handle *h)
{
    if (!h->watched)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        wd->head = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    h->watched = 0;
}

static int state(const dlock_handle *h, int64_t now)
{
    if (h->interrupted)
        return DLOCK_ERR_INTERRUPTED;
    if (h->lost || now >= h->valid_until_ms)
        return DLOCK_ERR_LOST;
    return DLOCK_OK;
}

/* Ends h's renewals for good and wakes its sleepers. */
static void retire(dlock_watchdog *wd, dlock_handle *h, int interrupted)
{
    unlink_handle(wd, h);
    if (interrupted) {
        h->interrupted = 1;
        atomic_fetch_add(&wd->client->stats.interrupts, 1);
    } else {
        h->lost = 1;
    }
    pthread_cond_broadcast(&h->wake);
}

/* Sends the renewal; called without the mutex. */
static enum renew_outcome send_renewal(dlock_watchdog *wd, const char *key, const char *token,
                                       int lease_ms)
{
    char lease[16];
    int n = snprintf(lease, sizeof(lease), "%d", lease_ms);
    const char *argv[] = {key, token, lease};
    size_t lens[] = {strlen(key), DLOCK_TOKEN_LEN, (size_t)n};

    if (wd->conn == NULL && (wd->conn = dlock_pool_connect(wd->client->pool)) == NULL) {
        atomic_fetch_add(&wd->client->stats.redis_errors, 1);
        return FAILED;
    }
    redisReply *r = dlock_pool_script(wd->client->pool, wd->conn, DLOCK_SCRIPT_RENEW, 1, 3, argv,
                                      lens);
    if (wd->conn->err) { /* reconnect on the next tick */
        redisFree(wd->conn);
        wd->conn = NULL;
    }
    if (r == NULL) {
        atomic_fetch_add(&wd->client->stats.redis_errors, 1);
        return FAILED;
    }
    enum renew_outcome out = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? RENEWED
                                                                                  : NOT_OURS;
    freeReplyObject(r);
    return out;
}

/* Renews h; entered and left with the mutex held, released around the I/O. */
static void renew(dlock_watchdog *wd, dlock_handle *h)
{
    int64_t sent = dlock_now_ms();
    h->renewing = 1;
    pthread_mutex_unlock(&wd->mu);
    enum renew_outcome out = send_renewal(wd, h->key, h->token, h->lease_ms);
    pthread_mutex_lock(&wd->mu);

    switch (out) {
    case RENEWED:
        h->renewals++;
        h->valid_until_ms = sent + h->lease_ms - dlock_drift_ms(h->lease_ms);
        h->next_renew_ms = sent + h->lease_ms / 3;
        atomic_fetch_add(&wd->client->stats.renewals, 1);
        break;
    case NOT_OURS:
        retire(wd, h, 0);
        break;
    case FAILED: { /* try again soon; the local deadline bounds how long */
        int retry = h->lease_ms / 10;
        h->next_renew_ms = dlock_now_ms() + (retry < 5 ? 5 : retry > 1000 ? 1000 : retry);
        break;
    }
    }
    h->renewing = 0;
    pthread_cond_broadcast(&wd->idle);
}

static dlock_handle *earliest(dlock_watchdog *wd)
{
    dlock_handle *best = NULL;
    for (dlock_handle *h = wd->head; h; h = h->next)
        if (best == NULL || h->next_renew_ms < best->next_renew_ms)
            best = h;
    return best;
}

static void *run(void *arg)
{
    dlock_watchdog *wd = arg;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        dlock_handle *h = earliest(wd);
        int64_t now = dlock_now_ms();
        if (h == NULL)
            pthread_cond_wait(&wd->tick, &wd->mu);
        else if (h->next_renew_ms > now)
            wait_until(&wd->tick, &wd->mu, h->next_renew_ms);
        else if (now >= h->valid_until_ms)
            retire(wd, h, 0); /* renewals kept failing until the lease ran out */
        else if (h->max_renewals > 0 && h->renewals >= h->max_renewals)
            retire(wd, h, 1);
        else
            renew(wd, h);
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

dlock_watchdog *dlock_wd_start(dlock_client *c)
{
    dlock_watchdog *wd = calloc(1, sizeof(*wd));
    if (wd == NULL)
        return NULL;
    wd->client = c;
    pthread_mutex_init(&wd->mu, NULL);
    dlock_cond_init(&wd->tick);
    dlock_cond_init(&wd->idle);
    if (pthread_create(&wd->thread, NULL, run, wd) != 0) {
        pthread_cond_destroy(&wd->idle);
        pthread_cond_destroy(&wd->tick);
        pthread_mutex_destroy(&wd->mu);
        free(wd);
        return NULL;
    }
    return wd;
}

void dlock_wd_stop(dlock_watchdog *wd)
{
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->tick);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    if (wd->conn)
        redisFree(wd->conn);
    pthread_cond_destroy(&wd->idle);
    pthread_cond_destroy(&wd->tick);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
}

void dlock_wd_watch(dlock_watchdog *wd, dlock_handle *h, int64_t acquired_ms, int renew_it)
{
    pthread_mutex_lock(&wd->mu);
    h->renewals = 0;
    h->valid_until_ms = acquired_ms + h->lease_ms - dlock_drift_ms(h->lease_ms);
    h->next_renew_ms = acquired_ms + h->lease_ms / 3;
    if (renew_it) {
        h->prev = NULL;
        h->next = wd->head;
        if (wd->head)
            wd->head->prev = h;
        wd->head = h;
        h->watched = 1;
        pthread_cond_signal(&wd->tick);
    }
    pthread_mutex_unlock(&wd->mu);
}

int dlock_wd_forget(dlock_watchdog *wd, dlock_handle *h)
{
    pthread_mutex_lock(&wd->mu);
    unlink_handle(wd, h);
    while (h->renewing)
        pthread_cond_wait(&wd->idle, &wd->mu);
    int st = state(h, dlock_now_ms());
    pthread_mutex_unlock(&wd->mu);
    return st;
}

int dlock_wd_check(dlock_watchdog *wd, dlock_handle *h)
{
    pthread_mutex_lock(&wd->mu);
    int st = state(h, dlock_now_ms());
    pthread_mutex_unlock(&wd->mu);
    return st;
}

int dlock_wd_sleep(dlock_watchdog *wd, dlock_handle *h, int ms)
{
    int64_t now = dlock_now_ms(), end = now + (ms > 0 ? ms : 0);
    int st;
    pthread_mutex_lock(&wd->mu);
    while ((st = state(h, now)) == DLOCK_OK && now < end) {
        /* also wake when the local lease deadline passes: that is a loss too */
        wait_until(&h->wake, &wd->mu, end < h->valid_until_ms ? end : h->valid_until_ms);
        now = dlock_now_ms();
    }
    pthread_mutex_unlock(&wd->mu);
    return st;
}

int dlock_wd_renewals(dlock_watchdog *wd, const dlock_handle *h)
{
    pthread_mutex_lock(&wd->mu);
    int n = h->renewals;
    pthread_mutex_unlock(&wd->mu);
    return n;
}
