/* claim.c - the claims that are not a plain lock: a semaphore's permits
 * (sem.c) and a read-write lock's readers and writer (rw.c), each a lease
 * taken by a script of its own (claim.h: struct dlock_claim). Here is what
 * they share: the checks, the waiting, the handle and the release. Waiting
 * in notify mode: the threads of one process that want the key queue in
 * its local FIFO (keytab.h), only the head asks Redis, and a release heard
 * on the key's channel (subscriber.c) or made here wakes it. A head that
 * gets in wakes the next at once: permits (or room for readers) may be left. */
#include "lock/claim.h"

#include <stdlib.h>
#include <string.h>

#include "lock/claim_quorum.h"
#include "lock/err.h"
#include "lock/opts.h"
#include "lock/queue.h"
#include "lock/sync.h"

/* Spin mode: this thread alone retries every jittered retry_ms. */
static int wait_spin(dlock_client *c, struct dlock_lease *l, const struct dlock_claim *cl,
                     const dlock_opts *o, int64_t deadline)
{
    for (;;) {
        int64_t pttl;
        int rc = cl->attempt(c, l, cl, o->wait_ms > 0, &pttl);
        int64_t now = dlock_now_ms();
        if (rc != DLOCK_ERR_TIMEOUT || now >= deadline)
            return rc;
        int64_t pause = dlock_jitter_ms(o->retry_ms);
        dlock_sleep_ms(pause < deadline - now ? pause : deadline - now);
    }
}

/* Notify mode, as w in e's FIFO (mu held, released around each attempt):
 * waits to head it, then tries until a permit, a failure or deadline. A
 * waiter that never got to the head still tries once at its deadline. */
static int contend(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                   struct dlock_lease *l, const struct dlock_claim *cl, const dlock_opts *o,
                   int64_t deadline)
{
    for (;;) {
        while (e->head != w && dlock_now_ms() < deadline)
            dlock_cond_wait_until(&w->cv, &c->mu, deadline);
        unsigned long seen = e->releases; /* one during the attempt must not be missed */
        int64_t pttl = -1;
        pthread_mutex_unlock(&c->mu);
        int rc = cl->attempt(c, l, cl, o->wait_ms > 0, &pttl);
        pthread_mutex_lock(&c->mu);
        int64_t now = dlock_now_ms();
        if (rc != DLOCK_ERR_TIMEOUT || now >= deadline)
            return rc;
        if (e->releases != seen || dlock_queue_listen(c, e, w, o, deadline))
            continue; /* released meanwhile, or now subscribed: ask again at once */
        int64_t wake = now + dlock_jitter_ms(o->retry_ms);
        if (pttl >= 0 && now + pttl + 1 < wake)
            wake = now + pttl + 1; /* a permit's lease runs out first: be there */
        if (wake > deadline)
            wake = deadline;
        while (e->releases == seen && dlock_now_ms() < wake)
            dlock_cond_wait_until(&w->cv, &c->mu, wake);
    }
}

static int wait_notify(dlock_client *c, struct dlock_lease *l, const struct dlock_claim *cl,
                       const dlock_opts *o, int64_t deadline)
{
    struct dlock_waiter w;
    memset(&w, 0, sizeof(w));
    if (dlock_cond_init(&w.cv) != 0)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    struct dlock_entry *e = dlock_keytab_ref(c->keys, l->key);
    int rc = DLOCK_ERR_NOMEM;
    if (e != NULL) {
        dlock_queue_push(e, &w);
        rc = contend(c, e, &w, l, cl, o, deadline);
        dlock_queue_remove(e, &w);
        dlock_entry_wake_head(e); /* the next tries now: a permit may be left */
        dlock_queue_leave(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w.cv);
    return e ? rc : dlock_fail(rc, "out of memory");
}

/* Waits until deadline for a claim on key (o checked, key valid). Returns
 * as dlock_acquire does; *out set on DLOCK_OK. */
static int claim_wait(dlock_client *c, const char *key, const struct dlock_claim *cl,
                      const dlock_opts *o, int64_t deadline, dlock_handle **out)
{
    dlock_handle *h = dlock_handle_new(c, o);
    struct dlock_lease *l = h ? dlock_lease_new_in(key, cl->suffix, cl->kind, o) : NULL;
    if (l == NULL) {
        if (h)
            dlock_handle_free(h);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    l->need = dlock_claim_quorum_need(c->nodes, cl->permits);
    int rc = o->wait_mode == DLOCK_WAIT_SPIN ? wait_spin(c, l, cl, o, deadline)
                                             : wait_notify(c, l, cl, o, deadline);
    if (rc != DLOCK_OK) {
        if (cl->give_up && rc == DLOCK_ERR_TIMEOUT && o->wait_ms > 0) /* after a failure, */
            cl->give_up(c, l); /* the mark runs out */
        if (rc == DLOCK_ERR_REDIS && l->sent) /* an unanswered attempt may have taken it */
            dlock_orphans_add(c->orphans, l);
        else
            free(l);
        dlock_handle_free(h);
        if (rc == DLOCK_ERR_TIMEOUT)
            dlock_fail(rc, "%s %s: %s after %d ms", cl->what, key, cl->busy, o->wait_ms);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    dlock_wd_hold(c->wd, h, l, o->watchdog);
    h->holds = 1;
    pthread_mutex_unlock(&c->mu);
    dlock_count(&c->counters.acquired);
    h->held_since_us = dlock_now_us();
    *out = h;
    return DLOCK_OK;
}

int dlock_claim_acquire(dlock_client *c, const char *key, const struct dlock_claim *cl,
                        const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (dlock_opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    int64_t start = dlock_now_ms();
    int rc = claim_wait(c, key, cl, &o, start + o.wait_ms, out);
    return dlock_count_wait(&c->counters, rc, start);
}

int dlock_claim_release(dlock_handle *h, int *local)
{
    dlock_client *c = h->client;
    struct dlock_lease *l = h->lease;
    pthread_mutex_lock(&c->mu);
    *local = dlock_holder_state(h, dlock_now_ms());
    l->holder = NULL;
    dlock_wd_forget(c->wd, l); /* no renewal may follow the release */
    pthread_mutex_unlock(&c->mu);

    int rc = dlock_claim_quorum_give_back(c->nodes, l);
    if (rc == DLOCK_OK && *local == DLOCK_ERR_INTERRUPTED)
        rc = DLOCK_ERR_INTERRUPTED;
    if (rc == DLOCK_ERR_LOST || (rc == DLOCK_ERR_REDIS && *local == DLOCK_ERR_LOST))
        dlock_count(&c->counters.lost);
    pthread_mutex_lock(&c->mu);
    struct dlock_entry *e = dlock_keytab_find(c->keys, l->key, strlen(l->key));
    if (e != NULL) { /* a local waiter need not wait for the PUBLISH to come back */
        e->releases++;
        dlock_entry_wake_head(e);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == DLOCK_ERR_REDIS) /* retried in the background, as a lock's is */
        dlock_orphans_add(c->orphans, l);
    else
        free(l);
    dlock_handle_free(h);
    return rc;
}
