/* lock.c - what the two APIs (dlock.c, dlock_async.c) share of a lock and a
 * multi-lock: spin mode's try, the bookkeeping of a key just held, the
 * multi-lock's handle and its key order, and the release, in two parts so
 * that an asynchronous one can do the first on the caller's thread and the
 * second on the runner's: what needs no Redis (a nested hold's end, the
 * hand-off to a local waiter, which may end that waiter's asynchronous call
 * right here), then the give-back in Redis, which a semaphore's or
 * read-write lock's lease also goes through (claim.c). */
#include "lock/lock.h"

#include <stdlib.h>
#include <string.h>

#include "lock/claim.h"
#include "lock/err.h"
#include "lock/queue.h"
#include "lock/reentry.h"
#include "lock/sync.h"

int dlock__lock_spin_step(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                          struct dlock_lease **lp, int64_t deadline, int64_t *until)
{
    struct dlock_lease *l = *lp;
    if (l == NULL && (l = *lp = dlock__lease_new(key, o)) == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__lease_ready(l); /* one made beforehand draws its token now */
    int64_t pttl;
    pthread_mutex_unlock(&c->mu);
    int rc = dlock__lease_try(c->nodes, l, 0, &pttl); /* spin: polls, never queues */
    pthread_mutex_lock(&c->mu);
    int64_t now = dlock__now_ms();
    if (rc == DLOCK_ERR_TIMEOUT && now < deadline) {
        int64_t pause = dlock__jitter_ms(o->retry_ms);
        *until = now + (pause < deadline - now ? pause : deadline - now);
        return DLOCK_QUEUE_WAIT;
    }
    *lp = NULL;
    if (rc == DLOCK_OK)
        dlock__wd_hold(c->wd, h, l, o->watchdog);
    else if (rc == DLOCK_ERR_REDIS && l->sent) /* the SET may have run, or still run */
        dlock__orphans_add(c->orphans, l);
    else
        free(l);
    return rc;
}

void dlock__lock_held(dlock_client *c, dlock_handle *h)
{
    dlock__count(&c->counters.acquired);
    h->held_since_us = dlock__now_us();
}

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int dlock__lock_order(const char *const *keys, int n, const char **order)
{
    if (keys == NULL || n < 1 || n > DLOCK_MULTI_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "a multi-lock holds 1..%d keys, not %d",
                           DLOCK_MULTI_MAX, n);
    for (int i = 0; i < n; i++) {
        size_t len = keys[i] ? strnlen(keys[i], DLOCK_KEY_MAX + 1) : 0;
        if (dlock_key_check(keys[i], len) != DLOCK_OK)
            return DLOCK_ERR_INVALID;
        order[i] = keys[i];
    }
    qsort(order, (size_t)n, sizeof(*order), by_key);
    for (int i = 1; i < n; i++)
        if (strcmp(order[i - 1], order[i]) == 0)
            return dlock__fail(DLOCK_ERR_INVALID, "key %s appears twice", order[i]);
    return DLOCK_OK;
}

dlock_handle *dlock__lock_set_new(dlock_client *c, const dlock_opts *o, int n)
{
    dlock_handle *set = dlock__handle_new(c, o);
    if (set && (set->parts = calloc((size_t)n, sizeof(*set->parts))) == NULL) {
        dlock__handle_free(set);
        return NULL;
    }
    return set;
}

void dlock__lock_set_formed(dlock_handle *set)
{
    pthread_mutex_lock(&set->client->mu);
    for (int i = 0; i < set->nparts; i++)
        set->parts[i]->parent = set;
    pthread_mutex_unlock(&set->client->mu);
    set->held_since_us = dlock__now_us();
}

static int severity(int rc)
{
    return rc == DLOCK_ERR_LOST ? 3 : rc == DLOCK_ERR_INTERRUPTED ? 2 : rc != DLOCK_OK ? 1 : 0;
}

int dlock__lock_worse(int rc, int than) { return severity(rc) > severity(than) ? rc : than; }

/* A lock's first part (mu held): the thread's hold ends, or goes on in
 * other handles; a lease whose holder is in good standing goes to the
 * key's next local waiter when the hand-off bounds allow. */
static int lock_begin(dlock_client *c, dlock_handle **hp, int *rc, struct dlock_task **here)
{
    dlock_handle *h = *hp;
    *rc = h->at_release;
    if (dlock__holds_leave(c->holds, hp)) /* still held by the thread's other handles: */
        return DLOCK_RELEASED;          /* nothing to hand over or give back yet */
    h = *hp; /* the outermost handle: the hold ends here, whatever the order */
    h->at_release = *rc;
    dlock__count_hold(&c->counters, h->held_since_us);
    if (h->entry && *rc == DLOCK_OK && dlock__queue_handoff(c, h, here)) {
        dlock__handle_free(h);
        return DLOCK_RELEASED;
    }
    return DLOCK_GIVE_BACK;
}

/* A multi-lock's first part (mu held): its keys leave it, each handed to a
 * local waiter where the bounds allow; those left go back in Redis. */
static int set_begin(dlock_client *c, dlock_handle *set, int *rc, struct dlock_task **here)
{
    dlock__count_hold(&c->counters, set->held_since_us);
    set->async_rc = DLOCK_OK;
    int left = 0;
    for (int i = 0; i < set->nparts; i++) {
        set->parts[i]->parent = NULL;       /* each goes its own way */
        set->parts[i]->held_since_us = 0;   /* counted as the set's hold */
    }
    for (int i = set->nparts - 1; i >= 0; i--) {
        dlock_handle *p = set->parts[i];
        int part_rc;
        p->at_release = dlock__holder_state(p, dlock__now_ms());
        if (lock_begin(c, &p, &part_rc, here) == DLOCK_RELEASED) {
            set->parts[i] = NULL;
            set->async_rc = dlock__lock_worse(part_rc, set->async_rc);
        } else {
            left++;
        }
    }
    if (left)
        return DLOCK_GIVE_BACK;
    *rc = set->async_rc;
    dlock__handle_free(set);
    return DLOCK_RELEASED;
}

int dlock__lock_release_begin(dlock_client *c, dlock_handle **hp, int *local, int *rc,
                              struct dlock_task **here)
{
    dlock_handle *h = *hp, *hold = h->outer ? h->outer : h;
    if (hold->sleeper) {
        *local = DLOCK_OK;
        *rc = dlock__fail(DLOCK_ERR_INVALID, "the hold is sleeping (dlock_sleep_async): "
                          "release it once that call's done has run");
        return DLOCK_RELEASED;
    }
    *local = h->at_release = dlock__holder_state(h, dlock__now_ms());
    if (h->parts)
        return set_begin(c, h, rc, here);
    if (h->lease && h->lease->kind != DLOCK_LEASE_LOCK) {
        dlock__count_hold(&c->counters, h->held_since_us);
        return DLOCK_GIVE_BACK;
    }
    return lock_begin(c, hp, rc, here);
}

/* A lock's lease back to Redis (mu held, released around the script): to
 * the next waiter in line, perhaps this process's next local waiter put in
 * line by the same script, or deleted. */
static int lock_give_back(dlock_client *c, dlock_handle *h)
{
    struct dlock_lease *l = h->lease;
    struct dlock_entry *e = h->entry;
    l->holder = NULL;
    dlock__wd_forget(c->wd, l); /* no renewal may follow the release */
    struct dlock_next next;
    int requeue = dlock__queue_released(c, h, &next), queued = 0;
    pthread_mutex_unlock(&c->mu);
    int rc = dlock__lease_release(c->nodes, l, 0, requeue ? &next : NULL, &queued);
    if (rc == DLOCK_OK && h->at_release == DLOCK_ERR_INTERRUPTED)
        rc = DLOCK_ERR_INTERRUPTED;
    if (rc == DLOCK_ERR_LOST || (rc == DLOCK_ERR_REDIS && h->at_release == DLOCK_ERR_LOST))
        dlock__count(&c->counters.lost);
    pthread_mutex_lock(&c->mu);
    if (requeue)
        dlock__queue_requeued(c, e, queued);
    if (e)
        dlock__queue_leave(c, e);
    if (rc == DLOCK_ERR_REDIS) /* retried in the background; the key is still ours */
        dlock__orphans_add(c->orphans, l);
    else
        free(l);
    return rc;
}

int dlock__lock_give_back(dlock_client *c, dlock_handle *h)
{
    if (h->parts == NULL)
        return h->lease->kind == DLOCK_LEASE_LOCK ? lock_give_back(c, h)
                                                  : dlock__claim_give_back(c, h);
    int rc = h->async_rc;
    for (int i = h->nparts - 1; i >= 0; i--) /* last key first */
        if (h->parts[i]) {
            rc = dlock__lock_worse(lock_give_back(c, h->parts[i]), rc);
            dlock__handle_free(h->parts[i]);
            h->parts[i] = NULL;
        }
    return rc;
}

int dlock__lock_release(dlock_handle *h, int *local)
{
    dlock_client *c = h->client;
    struct dlock_task *here = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    if (dlock__lock_release_begin(c, &h, local, &rc, &here) == DLOCK_GIVE_BACK) {
        rc = dlock__lock_give_back(c, h);
        dlock__handle_free(h);
    }
    pthread_mutex_unlock(&c->mu);
    dlock__runner_end_here(here);
    return rc;
}
