/* queue.c - notify mode: threads of one process that want the same key wait
 * in a local FIFO, and only its head contends in Redis. A failed attempt puts
 * the head in the key's Redis queue, so processes get the key in arrival
 * order: a release grants it straight to the first live waiter and publishes
 * that waiter's token on the key's channel, which wakes only its process (a
 * release to nobody wakes every head). The head subscribes *before* its next
 * attempt, so a release in between is seen by that attempt, and also wakes
 * at the earlier of retry_ms and the key's TTL, so a lost message costs at
 * most one interval. A releasing holder hands its lease straight to the next
 * local waiter, up to a bound (dlock__handoff_bound: handoff_max, less when
 * other processes take turns) or handoff_ms, then lets it go through Redis
 * so other processes get their turn.
 *
 * A turn of the key between processes costs one script: the release that
 * grants it to the next process also puts this process's next waiter in
 * line (requeue), and with one server the grantee holds on the grant's
 * message alone (take_grant), its lease restarted later by the watchdog.
 *
 * A wait is steps (dlock__queue_step), each as far as it goes without
 * sleeping; what a head waits for between them is its phase (a
 * subscription's confirmation, a release), so the same steps serve a
 * blocking thread and an asynchronous acquire, which holds no thread. */
#include "lock/queue.h"

#include <stdlib.h>
#include <string.h>

#include "lock/err.h"
#include "lock/sync.h"

enum { AGAIN = 2 }; /* contend() made no progress; look again */

/* What the head's turn waits for after a failed attempt (a waiter's phase). */
enum { TURN, LISTEN, PAUSE };

/* e's subscription over every server: ACTIVE when any server's is (a
 * release reaches every server, so any of them tells us), else PENDING
 * when any is on its way, else FAILED when any failed, else NONE. */
static int sub_state(const dlock_client *c, const struct dlock_entry *e)
{
    int any[4] = {0};
    for (int i = 0; i < dlock__quorum_size(c->nodes); i++)
        any[e->sub_state[i]] = 1;
    return any[DLOCK_SUB_ACTIVE]    ? DLOCK_SUB_ACTIVE
           : any[DLOCK_SUB_PENDING] ? DLOCK_SUB_PENDING
           : any[DLOCK_SUB_FAILED]  ? DLOCK_SUB_FAILED
                                    : DLOCK_SUB_NONE;
}

/* Server i's subscriber, started now for a cluster's primary found after
 * the client started; NULL when it cannot be (its waiters poll). */
static dlock_subscriber *subscriber(dlock_client *c, int i)
{
    if (c->sub[i] == NULL)
        c->sub[i] = dlock__sub_start(&c->mu, c->keys, dlock__quorum_node(c->nodes, i), i,
                                     &c->counters);
    return c->sub[i];
}

/* Asks every server that carries e's channel (all, or a cluster's owner of
 * its slot) and whose subscription is missing or failed for it. */
static void subscribe(dlock_client *c, struct dlock_entry *e)
{
    for (int i = 0; i < dlock__quorum_size(c->nodes); i++)
        if ((e->sub_state[i] == DLOCK_SUB_NONE || e->sub_state[i] == DLOCK_SUB_FAILED) &&
            dlock__quorum_listens(c->nodes, e->key, i) && subscriber(c, i))
            dlock__sub_subscribe(c->sub[i], e);
}

/* Subscribes e's release channel when it is not (and not on its way).
 * Returns 1 when a confirmation is pending: the next attempt should wait for
 * it (bounded by retry_ms, after which polling covers for it) so that it
 * can't miss a release, and follow at once; else 0. */
static int listen_begin(dlock_client *c, struct dlock_entry *e)
{
    if (sub_state(c, e) != DLOCK_SUB_NONE && sub_state(c, e) != DLOCK_SUB_FAILED)
        return 0;
    subscribe(c, e);
    return sub_state(c, e) == DLOCK_SUB_PENDING;
}

/* Until when a head waits for its subscription's confirmation. */
static int64_t listen_until(const dlock_opts *o, int64_t deadline)
{
    int64_t until = dlock__now_ms() + o->retry_ms;
    return until < deadline ? until : deadline;
}

/* The other processes that took turns with this one for e's key since it
 * last took it from Redis: the grants to their waiters' tokens it heard
 * (on any server: each server publishes each grant). Starts the count anew. */
static int turns_of_others(dlock_client *c, struct dlock_entry *e)
{
    unsigned most = 0;
    for (int i = 0; i < dlock__quorum_size(c->nodes); i++) {
        most = e->others[i] > most ? e->others[i] : most;
        e->others[i] = 0;
    }
    return most < 1000 ? (int)most : 1000;
}

/* The rule of lock/README.md, "How long a turn is". q counts the other
 * processes by the grants to their tokens this process heard (each queues
 * one token per key, and each turn of theirs is a grant). Each of the q
 * waits for about q turns (a lease and its hand-offs, a cohort) before its
 * own comes round, where strict FIFO over the W = (q + 1)(n + 1) holders
 * (the others taken to be like this one) would make it wait about W holds:
 * a cohort of 1.5 W / q keeps that within 1.5 FIFO waits, the rest of 2x
 * left for the turns' own latency. It bites only when processes are many
 * for their workers: W=8 over 4 processes, 4 holders a turn; W=32 over 4,
 * 16, so handoff_max. */
int dlock__handoff_bound(int handoff_max, int q, int n)
{
    if (q <= 0 || handoff_max == 0)
        return handoff_max;
    int64_t cohort = 3 * (int64_t)(q + 1) * (n + 1) / (2 * (int64_t)q);
    return cohort - 1 < 1 ? 1 : cohort - 1 < handoff_max ? (int)cohort - 1 : handoff_max;
}

/* w's lease to ask Redis with, made when it has none (a blocking waiter's
 * first attempt), its token drawn when it has none yet (one made at an
 * asynchronous acquire's call): 0, or -1 when out of memory. */
static int spare_ready(const struct dlock_entry *e, struct dlock_waiter *w)
{
    if (w->spare == NULL)
        return (w->spare = dlock__lease_new(e->key, w->o)) != NULL ? 0 : -1;
    dlock__lease_ready(w->spare);
    return 0;
}

/* The head's attempt in Redis (mu held, released around it): rc of the
 * acquire, *pttl and *seen (releases before it) for the wait after it. A
 * releasing holder that already put w's token in line (requeue DONE) saves
 * it: that is a failed attempt that queued, as of when the release went. */
static int attempt(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                   int64_t *pttl, unsigned long *seen)
{
    struct dlock_lease *l = w->spare;
    int requeued = e->requeue == DLOCK_REQUEUE_DONE &&
                   memcmp(e->wait_token, l->token, DLOCK_TOKEN_LEN) == 0;
    e->requeue = DLOCK_REQUEUE_NONE; /* one for a waiter that left is void */
    *pttl = -1;
    if (requeued) {
        *seen = e->requeue_seen;
        return DLOCK_ERR_TIMEOUT;
    }
    *seen = e->releases; /* a release during the attempt must not be missed */
    memcpy(e->wait_token, l->token, sizeof(e->wait_token));
    w->contending = 1;
    pthread_mutex_unlock(&c->mu); /* w stays head: nobody else here contends meanwhile */
    /* queue in Redis only when we mean to wait: a fail-fast try just looks */
    int rc = dlock__lease_try(c->nodes, l, w->o->wait_ms > 0, pttl);
    pthread_mutex_lock(&c->mu);
    w->contending = 0;
    return rc;
}

/* w, the head, holds its lease (w->spare) from Redis now (mu held). */
static void hold(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w)
{
    dlock__queue_remove(e, w);
    e->holder = w->h;
    w->spare->queued = turns_of_others(c, e);
    w->spare->handoff_bound =
        dlock__handoff_bound(w->spare->handoff_max, w->spare->queued, e->refs - 1);
    dlock__wd_hold(c->wd, w->h, w->spare, w->o->watchdog);
    w->spare = NULL;
}

/* Takes a grant to w's token on its message's word (mu held). With one
 * server the message says all that the claim would: the fence, and that
 * the key is ours for the grant's lease from the grant on - which came
 * after this process sent the script that last wrote the token's deadline
 * (the grant echoes that script's stamp: granted_after), however late the
 * message comes. The watchdog restarts the lease at a third of the grant's,
 * off the head's path. Not with several servers (the head must claim a
 * majority), nor without the watchdog, nor with less than a quarter of the
 * grant left: the head then claims it in Redis. Returns 1 when w holds. */
static int take_grant(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w)
{
    struct dlock_lease *l = w->spare;
    int64_t fence = e->granted_fence, since = e->granted_after, now = dlock__now_ms();
    int ms = e->granted_ms;
    e->granted_fence = 0; /* heard once, used once */
    if (fence <= 0 || since <= 0 || memcmp(e->granted, l->token, DLOCK_TOKEN_LEN) != 0 ||
        dlock__quorum_votes(c->nodes) || !w->o->watchdog ||
        since + ms - dlock__drift_ms(ms) - now < ms / 4)
        return 0;
    l->fence = fence;
    l->acquired_ms = since;
    l->granted_ms = ms;
    hold(c, e, w);
    return 1;
}

/* The head's turn in Redis (mu held, released around the attempt). Returns
 * DLOCK_OK when h now holds, an error, or AGAIN with w's phase set: what
 * to wait for before looking again (LISTEN: the subscription's
 * confirmation, PAUSE: a release, each until w->phase_until). */
static int contend(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w)
{
    int64_t pttl;
    unsigned long seen;
    if (spare_ready(e, w) != 0)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (take_grant(c, e, w))
        return DLOCK_OK;
    int rc = attempt(c, e, w, &pttl, &seen);
    if (w->granted) /* a holder whose lease came back to life handed it to us meanwhile; */
        return DLOCK_OK; /* our own token, if it took the key, leaves in the clean-up */
    if (rc == DLOCK_OK) {
        hold(c, e, w);
        return DLOCK_OK;
    }
    int64_t now = dlock__now_ms();
    if (rc != DLOCK_ERR_TIMEOUT || now >= w->deadline)
        return rc;
    dlock__queue_retry(c, e, w, now, pttl, seen);
    return AGAIN;
}

void dlock__queue_retry(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                        int64_t now, int64_t pttl, unsigned long seen)
{
    const dlock_opts *o = w->o;
    w->phase = TURN;
    if (e->releases != seen)
        return; /* released while we asked: ask again at once */
    if (listen_begin(c, e)) { /* try again once confirmed: releases wake us from then on */
        w->phase = LISTEN;
        w->phase_until = listen_until(o, w->deadline);
        return;
    }
    int64_t wake = now + dlock__jitter_ms(o->retry_ms);
    if (pttl >= 0 && now + pttl + 1 < wake)
        wake = now + pttl + 1; /* it expires before the next retry: be there */
    w->phase = PAUSE;
    w->phase_until = wake < w->deadline ? wake : w->deadline;
    w->seen = seen;
}

/* Whether the local holder's lease ran out (lost, or past its local deadline). */
static int holder_expired(const struct dlock_entry *e, int64_t now)
{
    const struct dlock_lease *l = e->holder ? e->holder->lease : NULL;
    return l != NULL && (l->lost || now >= l->valid_until_ms);
}

int dlock__queue_held_back(const dlock_client *c, const struct dlock_entry *e,
                           struct dlock_waiter *w, int64_t now, int64_t *until)
{
    int waiting = w->phase == LISTEN  ? sub_state(c, e) == DLOCK_SUB_PENDING
                  : w->phase == PAUSE ? e->releases == w->seen
                                      : 0;
    if (waiting && now < w->phase_until) {
        *until = w->phase_until;
        return 1;
    }
    w->phase = TURN;
    return 0;
}

/* Whether w may contend at now (mu held): when it heads the queue and no
 * valid local holder has the key - a holder whose lease ran out blocks
 * nobody, as it would not across processes - unless the last holder's
 * release is putting it in line (it waits for that instead). Else *until:
 * when to look again at the latest (its deadline, or sooner the holder's
 * lease end for the head). */
static int turn_now(const struct dlock_entry *e, const struct dlock_waiter *w, int64_t now,
                    int64_t *until)
{
    int mine = e->head == w && e->requeue != DLOCK_REQUEUE_PENDING;
    if (mine && (e->holder == NULL || holder_expired(e, now)))
        return 1;
    *until = w->deadline;
    if (mine && e->holder->lease->valid_until_ms < *until)
        *until = e->holder->lease->valid_until_ms; /* look again when it would run out */
    return 0;
}

/* w's turn (mu held): w is granted the lease, or contends when its turn is
 * now (turn_now). */
int dlock__queue_step(dlock_client *c, struct dlock_waiter *w, int64_t *until)
{
    struct dlock_entry *e = w->h->entry;
    for (;;) {
        if (w->granted)
            return DLOCK_OK;
        int64_t now = dlock__now_ms();
        if (dlock__queue_held_back(c, e, w, now, until))
            return DLOCK_QUEUE_WAIT;
        if (turn_now(e, w, now, until)) {
            int rc = contend(c, e, w);
            if (rc != AGAIN)
                return rc;
            continue;
        }
        return now >= w->deadline ? DLOCK_ERR_TIMEOUT : DLOCK_QUEUE_WAIT;
    }
}

int dlock__queue_waits(const struct dlock_waiter *w, int64_t *until)
{
    int64_t now = dlock__now_ms();
    return !w->granted && w->phase == TURN && !turn_now(w->h->entry, w, now, until) &&
           now < w->deadline;
}

int dlock__queue_join(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                      int64_t deadline, struct dlock_waiter *w, struct dlock_entry **spare)
{
    struct dlock_entry *e = dlock__keytab_ref(c->keys, key, spare);
    if (e == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    w->h = h;
    w->o = o;
    w->deadline = deadline;
    w->phase = TURN;
    w->granted = w->contending = 0;
    h->entry = e;
    dlock__queue_push(e, w);
    return DLOCK_OK;
}

int dlock__queue_end(dlock_client *c, struct dlock_waiter *w, int rc)
{
    const dlock_opts *o = w->o;
    if (rc != DLOCK_OK) {
        struct dlock_entry *e = w->h->entry;
        if (!w->granted) /* a granted waiter is out of the line already */
            dlock__queue_remove(e, w);
        dlock__entry_wake_head(e); /* the next in line may contend now */
        dlock__queue_leave(c, e);
        w->h->entry = NULL;
    }
    /* A token we asked Redis with but do not hold with (we timed out, got the
     * lease by hand-off, or lost the reply) is given up in the background:
     * out of the queue, a SET or grant it may have got undone, and refused
     * should its acquire still arrive. Not when it never reached Redis. */
    if (w->spare && w->spare->sent && (o->wait_ms > 0 || rc == DLOCK_ERR_REDIS))
        dlock__orphans_add(c->orphans, w->spare);
    else
        free(w->spare);
    w->spare = NULL;
    return rc;
}

int dlock__queue_acquire(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                         int64_t deadline)
{
    struct dlock_waiter w = {0};
    if (dlock__cond_init(&w.cv) != 0)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    int rc = dlock__queue_join(c, h, key, o, deadline, &w, NULL);
    if (rc == DLOCK_OK) {
        int64_t until;
        while ((rc = dlock__queue_step(c, &w, &until)) == DLOCK_QUEUE_WAIT)
            dlock__cond_wait_until(&w.cv, &c->mu, until);
        dlock__queue_end(c, &w, rc);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

int dlock__queue_handoff(dlock_client *c, dlock_handle *h, struct dlock_task **here)
{
    struct dlock_entry *e = h->entry;
    struct dlock_lease *l = h->lease;
    struct dlock_waiter *w = e->head;
    if (w == NULL || l->lost || l->handoffs >= l->handoff_bound ||
        dlock__now_ms() - l->acquired_ms >= l->handoff_ms)
        return 0;
    dlock__queue_remove(e, w);
    struct dlock_handle *next = w->h;
    next->lease = l;
    next->seq = ++l->handoffs;
    next->renewals_at_start = l->renewals; /* its own max_renewals budget starts now */
    l->holder = next;
    e->holder = next;
    w->granted = 1;
    dlock__queue_leave(c, e);
    h->entry = NULL;
    dlock__count(&c->counters.handoffs);
    /* an asynchronous acquire that this grant ends ends here, its done posted from
     * this thread (the caller's executor's, as likely as not), no runner woken */
    if (w->here && dlock__runner_step_here(w->task)) {
        w->task->ready_next = *here;
        *here = w->task;
    } else {
        dlock__waiter_wake(w);
    }
    return 1;
}

/* Whether the release of e's lease can put the head w in Redis's line for
 * it (see dlock__queue_released), giving w a lease to be queued with. */
static int can_requeue(struct dlock_entry *e, struct dlock_waiter *w)
{
    if (w == NULL || w->contending || w->granted || w->o->wait_ms == 0)
        return 0;
    return spare_ready(e, w) == 0; /* out of memory: it contends itself */
}

int dlock__queue_released(dlock_client *c, dlock_handle *h, struct dlock_next *next)
{
    (void)c;
    struct dlock_entry *e = h->entry;
    if (e == NULL || e->holder != h) /* not when a waiter took over our expired lease */
        return 0;
    e->holder = NULL;
    e->releases++;
    struct dlock_waiter *w = e->head;
    if (!can_requeue(e, w)) {
        dlock__entry_wake_head(e); /* it contends, and our PUBLISH wakes it */
        return 0;
    }
    w->spare->sent = 1; /* from now on it may be in line: given up if not used */
    memcpy(e->wait_token, w->spare->token, sizeof(e->wait_token));
    memcpy(next->token, w->spare->token, sizeof(next->token));
    next->queue_ms = dlock__grace_ms(w->spare->retry_ms);
    next->grant_ms = dlock__lease_grant_ms(w->spare);
    next->queue_score = w->spare->queue_score;
    e->requeue = DLOCK_REQUEUE_PENDING;
    e->requeue_seen = e->releases; /* a grant to it from now on wakes it */
    return 1;
}

void dlock__queue_requeued(dlock_client *c, struct dlock_entry *e, int queued)
{
    (void)c;
    if (e->requeue == DLOCK_REQUEUE_PENDING)
        e->requeue = queued ? DLOCK_REQUEUE_DONE : DLOCK_REQUEUE_NONE;
    dlock__entry_wake_head(e); /* it waits for a grant now, or contends itself */
}

void dlock__queue_leave(dlock_client *c, struct dlock_entry *e)
{
    for (int i = 0; e->refs == 1 && i < dlock__quorum_size(c->nodes); i++)
        if (c->sub[i] &&
            (e->sub_state[i] == DLOCK_SUB_PENDING || e->sub_state[i] == DLOCK_SUB_ACTIVE))
            dlock__sub_unsubscribe(c->sub[i], e->key);
    dlock__keytab_unref(c->keys, e);
}
