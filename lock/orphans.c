/* orphans.c - the clean-up thread for tokens whose state in Redis is unknown
 * (see orphans.h). A pending token is a lease on a list of its own, with
 * next_renew_ms as its next try, valid_until_ms as the time after which a
 * permit's, reader's or writer's key must have expired anyway, and renewals
 * counting its tries. */
#include "lock/orphans.h"

#include <stdlib.h>

#include "lock/claim_quorum.h"
#include "lock/sync.h"

#define BACKOFF_FIRST_MS 50
#define BACKOFF_MAX_MS 2000

struct dlock_orphans {
    dlock_quorum *quorum;
    dlock_counters *counters;
    pthread_t thread;
    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t wake;
    struct dlock_lease *head; /* in arrival order; linked through next */
    int count;
    int stop;
    int failures;        /* give-backs in a row that Redis did not answer */
    int64_t quiet_until; /* after one of those: no token is tried before this */
};

/* 50 ms after a failure, doubling up to 2 s. Each token backs off on its
 * own, and all of them together after a give-back Redis did not answer: a
 * Redis out of reach gets one try per backoff from this thread (soon one
 * each 2 s) however many tokens wait, and lock tokens stay for a whole
 * outage. */
static int64_t backoff_ms(int tries)
{
    int64_t ms = BACKOFF_FIRST_MS;
    while (--tries > 0 && ms < BACKOFF_MAX_MS)
        ms *= 2;
    return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

static struct dlock_lease *earliest(dlock_orphans *o)
{
    struct dlock_lease *best = NULL;
    for (struct dlock_lease *l = o->head; l; l = l->next)
        if (best == NULL || l->next_renew_ms < best->next_renew_ms)
            best = l;
    return best;
}

static void unlink_orphan(dlock_orphans *o, struct dlock_lease *l)
{
    struct dlock_lease **p = &o->head;
    while (*p != l)
        p = &(*p)->next;
    *p = l->next;
    l->next = NULL;
    o->count--;
}

static void append(dlock_orphans *o, struct dlock_lease *l)
{
    struct dlock_lease **p = &o->head;
    while (*p)
        p = &(*p)->next;
    *p = l;
    l->next = NULL;
    o->count++;
}

/* Whether l must be tried again after its give-back answered rc. A lock's
 * token is done with only once Redis answered (a majority, with several
 * servers): released or not ours, it is marked gone there, so its acquire,
 * wherever it still is, can never take the key. However long Redis stays
 * out of reach until then, the token stays: dropped after its lease, as it
 * was, its acquire could still arrive late (a partition that heals, a
 * proxy) and hold the key for nobody for a whole lease. A permit's,
 * reader's or writer's release has no gone mark: it is tried while its
 * lease may still run and Redis could not be asked - or answered that the
 * token holds nothing, as an acquire of it still on its way may yet take a
 * permit or the key. */
static int give_back_again(const struct dlock_lease *l, int rc, int64_t now)
{
    if (l->kind == DLOCK_LEASE_LOCK)
        return rc != DLOCK_OK && rc != DLOCK_ERR_LOST;
    return (rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_LOST) && now < l->valid_until_ms;
}

/* Tries l's release once, without the mutex; it goes back on the list with
 * its next try when give_back_again says so. */
static void try_one(dlock_orphans *o, struct dlock_lease *l)
{
    unlink_orphan(o, l);
    pthread_mutex_unlock(&o->mu);
    int rc = dlock__claim_quorum_give_back(o->quorum, l);
    pthread_mutex_lock(&o->mu);
    int64_t now = dlock__now_ms();
    int unanswered = rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH;
    o->failures = unanswered ? o->failures + 1 : 0;
    o->quiet_until = unanswered ? now + backoff_ms(o->failures) : 0;
    if (give_back_again(l, rc, now) && !o->stop) {
        l->next_renew_ms = now + backoff_ms(++l->renewals);
        append(o, l);
    } else {
        free(l);
    }
}

static void *run(void *arg)
{
    dlock_orphans *o = arg;
    pthread_mutex_lock(&o->mu);
    while (!o->stop) {
        struct dlock_lease *l = earliest(o);
        if (l == NULL) {
            pthread_cond_wait(&o->wake, &o->mu);
            continue;
        }
        int64_t at = l->next_renew_ms > o->quiet_until ? l->next_renew_ms : o->quiet_until;
        if (at > dlock__now_ms())
            dlock__cond_wait_until(&o->wake, &o->mu, at);
        else
            try_one(o, l);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

dlock_orphans *dlock__orphans_start(dlock_quorum *q, dlock_counters *counters)
{
    dlock_orphans *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->quorum = q;
    o->counters = counters;
    pthread_mutex_init(&o->mu, NULL);
    dlock__cond_init(&o->wake);
    if (pthread_create(&o->thread, NULL, run, o) != 0) {
        pthread_cond_destroy(&o->wake);
        pthread_mutex_destroy(&o->mu);
        free(o);
        return NULL;
    }
    return o;
}

void dlock__orphans_stop(dlock_orphans *o)
{
    if (o == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    while (o->head) {
        struct dlock_lease *l = o->head;
        o->head = l->next;
        free(l);
    }
    pthread_cond_destroy(&o->wake);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

void dlock__orphans_add(dlock_orphans *o, struct dlock_lease *l)
{
    int64_t now = dlock__now_ms();
    l->next_renew_ms = now;                /* first try: at once */
    l->valid_until_ms = now + l->lease_ms; /* a permit's: after that it expired anyway */
    l->renewals = 0;
    struct dlock_lease *dropped = NULL;
    pthread_mutex_lock(&o->mu);
    if (o->count >= DLOCK_ORPHANS_MAX) { /* Redis is in deep trouble; the oldest lease expires */
        dropped = o->head;
        unlink_orphan(o, dropped);
    }
    append(o, l);
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
    dlock__count(&o->counters->orphaned);
    if (dropped)
        dlock__count(&o->counters->orphans_dropped);
    free(dropped);
}
