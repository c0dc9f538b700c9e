/* queue.c - notify mode: threads of one process that want the same key wait
 * in a local FIFO, and only its head contends in Redis. A failed attempt puts
 * the head in the key's Redis queue, so processes get the key in arrival
 * order: a release grants it straight to the first live waiter and publishes
 * that waiter's token on the key's channel, which wakes only its process (a
 * release to nobody wakes every head). The head subscribes *before* its next
 * attempt, so a release in between is seen by that attempt, and also wakes
 * at the earlier of retry_ms and the key's TTL, so a lost message costs at
 * most one interval. A releasing holder hands its lease straight to the next
 * local waiter, up to handoff_max times or handoff_ms, then lets it go
 * through Redis so other processes get their turn. */
#include "queue.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "sync.h"

enum { AGAIN = 1 }; /* contend() made no progress; look again */

/* e's subscription over every server: ACTIVE when any server's is (a
 * release reaches every server, so any of them tells us), else PENDING
 * when any is on its way, else FAILED when any failed, else NONE. */
static int sub_state(const dlock_client *c, const struct dlock_entry *e)
{
    int any[4] = {0};
    for (int i = 0; i < dlock_quorum_size(c->nodes); i++)
        any[e->sub_state[i]] = 1;
    return any[DLOCK_SUB_ACTIVE]    ? DLOCK_SUB_ACTIVE
           : any[DLOCK_SUB_PENDING] ? DLOCK_SUB_PENDING
           : any[DLOCK_SUB_FAILED]  ? DLOCK_SUB_FAILED
                                    : DLOCK_SUB_NONE;
}

/* Asks every server whose subscription is missing or failed for e's channel. */
static void subscribe(dlock_client *c, struct dlock_entry *e)
{
    for (int i = 0; i < dlock_quorum_size(c->nodes); i++)
        if (e->sub_state[i] == DLOCK_SUB_NONE || e->sub_state[i] == DLOCK_SUB_FAILED)
            dlock_sub_subscribe(c->sub[i], e);
}

/* Waits for the subscription to be confirmed, so the next attempt can't miss
 * a release; bounded by retry_ms, after which polling covers for it. */
static void await_subscription(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                               const dlock_opts *o, int64_t deadline)
{
    int64_t until = dlock_now_ms() + o->retry_ms;
    if (until > deadline)
        until = deadline;
    while (sub_state(c, e) == DLOCK_SUB_PENDING && !w->granted && dlock_now_ms() < until)
        dlock_cond_wait_until(&w->cv, &c->mu, until);
}

/* The head's turn in Redis (mu held, released around the attempt). Returns
 * DLOCK_OK when h now holds, AGAIN after waiting a while, or an error. */
static int contend(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                   const dlock_opts *o, int64_t deadline, struct dlock_lease **lp)
{
    int64_t pttl;
    if (*lp == NULL && (*lp = dlock_lease_new(e->key, o)) == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    unsigned long seen = e->releases; /* a release during the attempt must not be missed */
    memcpy(e->wait_token, (*lp)->token, sizeof(e->wait_token));
    pthread_mutex_unlock(&c->mu);     /* w stays head: nobody else here contends meanwhile */
    /* queue in Redis only when we mean to wait: a fail-fast try just looks */
    int rc = dlock_lease_try(c->nodes, *lp, o->wait_ms > 0, &pttl);
    pthread_mutex_lock(&c->mu);
    if (w->granted) /* a holder whose lease came back to life handed it to us meanwhile; */
        return DLOCK_OK; /* our own token, if it took the key, leaves in the clean-up */
    if (rc == DLOCK_OK) {
        dlock_queue_remove(e, w);
        e->holder = w->h;
        dlock_wd_hold(c->wd, w->h, *lp, o->watchdog);
        *lp = NULL;
        return DLOCK_OK;
    }
    int64_t now = dlock_now_ms();
    if (rc != DLOCK_ERR_TIMEOUT || now >= deadline)
        return rc;
    if (e->releases != seen)
        return AGAIN; /* released while we asked: ask again at once */
    if (sub_state(c, e) == DLOCK_SUB_NONE || sub_state(c, e) == DLOCK_SUB_FAILED) {
        subscribe(c, e);
        if (sub_state(c, e) == DLOCK_SUB_PENDING) {
            await_subscription(c, e, w, o, deadline);
            return AGAIN; /* try again at once, now that releases wake us */
        }
    }
    int64_t wake = now + dlock_jitter_ms(o->retry_ms);
    if (pttl >= 0 && now + pttl + 1 < wake)
        wake = now + pttl + 1; /* the key expires before the next retry: be there */
    if (wake > deadline)
        wake = deadline;
    while (e->releases == seen && !w->granted && dlock_now_ms() < wake)
        dlock_cond_wait_until(&w->cv, &c->mu, wake);
    return AGAIN;
}

/* Whether the local holder's lease ran out (lost, or past its local deadline). */
static int holder_expired(const struct dlock_entry *e, int64_t now)
{
    const struct dlock_lease *l = e->holder ? e->holder->lease : NULL;
    return l != NULL && (l->lost || now >= l->valid_until_ms);
}

/* Waits (mu held) until w is granted the lease, or contends when it heads
 * the queue and no valid local holder has the key: a holder whose lease ran
 * out blocks nobody, as it would not across processes. */
static int wait_turn(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                     const dlock_opts *o, int64_t deadline, struct dlock_lease **lp)
{
    for (;;) {
        if (w->granted)
            return DLOCK_OK;
        int64_t now = dlock_now_ms(), until = deadline;
        if (e->head == w && (e->holder == NULL || holder_expired(e, now))) {
            int rc = contend(c, e, w, o, deadline, lp);
            if (rc != AGAIN)
                return rc;
            continue;
        }
        if (now >= deadline)
            return DLOCK_ERR_TIMEOUT;
        if (e->head == w && e->holder->lease->valid_until_ms < until)
            until = e->holder->lease->valid_until_ms; /* look again when it would run out */
        dlock_cond_wait_until(&w->cv, &c->mu, until);
    }
}

int dlock_queue_acquire(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                        int64_t deadline)
{
    struct dlock_waiter w = {.h = h};
    struct dlock_lease *spare = NULL;
    if (dlock_cond_init(&w.cv) != 0)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    struct dlock_entry *e = dlock_keytab_ref(c->keys, key);
    int rc = DLOCK_ERR_NOMEM;
    if (e) {
        h->entry = e;
        dlock_queue_push(e, &w);
        rc = wait_turn(c, e, &w, o, deadline, &spare);
        if (rc != DLOCK_OK) {
            dlock_queue_remove(e, &w);
            dlock_entry_wake_head(e); /* the next in line may contend now */
            dlock_queue_leave(c, e);
            h->entry = NULL;
        }
    }
    /* A token we asked Redis with but do not hold with (we timed out, got the
     * lease by hand-off, or lost the reply) is given up in the background:
     * out of the queue, a SET or grant it may have got undone, and refused
     * should its acquire still arrive. Not when it never reached Redis. */
    if (spare && spare->sent && (o->wait_ms > 0 || rc == DLOCK_ERR_REDIS)) {
        dlock_orphans_add(c->orphans, spare);
        spare = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    free(spare);
    pthread_cond_destroy(&w.cv);
    return e ? rc : dlock_fail(rc, "out of memory");
}

int dlock_queue_handoff(dlock_client *c, dlock_handle *h)
{
    struct dlock_entry *e = h->entry;
    struct dlock_lease *l = h->lease;
    struct dlock_waiter *w = e->head;
    if (w == NULL || l->lost || l->handoffs >= l->handoff_max ||
        dlock_now_ms() - l->acquired_ms >= l->handoff_ms)
        return 0;
    dlock_queue_remove(e, w);
    struct dlock_handle *next = w->h;
    next->lease = l;
    next->seq = ++l->handoffs;
    next->renewals_at_start = l->renewals; /* its own max_renewals budget starts now */
    l->holder = next;
    e->holder = next;
    w->granted = 1;
    pthread_cond_signal(&w->cv);
    dlock_queue_leave(c, e);
    h->entry = NULL;
    dlock_count(&c->counters.handoffs);
    return 1;
}

void dlock_queue_released(dlock_client *c, dlock_handle *h)
{
    (void)c;
    struct dlock_entry *e = h->entry;
    if (e && e->holder == h) { /* not when a waiter took over our expired lease */
        e->holder = NULL;
        e->releases++;
        dlock_entry_wake_head(e); /* it contends, and our PUBLISH wakes it */
    }
}

void dlock_queue_leave(dlock_client *c, struct dlock_entry *e)
{
    for (int i = 0; e->refs == 1 && i < dlock_quorum_size(c->nodes); i++)
        if (e->sub_state[i] == DLOCK_SUB_PENDING || e->sub_state[i] == DLOCK_SUB_ACTIVE)
            dlock_sub_unsubscribe(c->sub[i], e->key);
    dlock_keytab_unref(c->keys, e);
}
