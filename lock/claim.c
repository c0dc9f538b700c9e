/* claim.c - the claims that are not a plain lock: a semaphore's permits
 * (sem.c) and a read-write lock's readers and writer (rw.c), each a lease
 * taken by a script of its own (claim.h: struct dlock_claim). Here is what
 * they share: the checks, the waiting, the handle and the give-back. Waiting
 * in notify mode: the waiters of one process that want the key queue in its
 * local FIFO (keytab.h), only the head asks Redis, and a release heard on
 * the key's channel (subscriber.c) or made here wakes it; between attempts
 * the head waits in queue.c's phases. A head that gets in wakes the next at
 * once: permits (or room for readers) may be left. A wait is steps, as a
 * lock's is: a blocking caller's thread runs them, sleeping between them,
 * and an asynchronous acquire's run on the client's runner. */
#include "lock/claim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/claim_quorum.h"
#include "lock/err.h"
#include "lock/opts.h"
#include "lock/queue.h"
#include "lock/sync.h"

/* One claim's wait: its lease and handle to be, and in notify mode its
 * place w in the key's FIFO (e). */
struct wait {
    const struct dlock_claim *cl;
    const dlock_opts *o;
    dlock_handle *h;
    struct dlock_lease *l;
    struct dlock_entry *e;
    struct dlock_waiter w;
    int64_t deadline;
    int64_t next_try; /* spin mode: when it tries again */
};

/* Makes what cw's wait for key needs (cw's cl, o and deadline set): 0, or
 * -1 when out of memory. */
static int wait_new(dlock_client *c, struct wait *cw, const char *key)
{
    const struct dlock_claim *cl = cw->cl;
    cw->h = dlock__handle_new(c, cw->o);
    cw->l = cw->h ? dlock__lease_new_in(key, cl->suffix, cl->kind, cw->o) : NULL;
    if (cw->l == NULL) {
        if (cw->h)
            dlock__handle_free(cw->h);
        return -1;
    }
    cw->l->need = dlock__claim_quorum_need(c->nodes, cl->permits);
    return 0;
}

/* mu held: in notify mode, cw joins its key's FIFO. DLOCK_OK, or
 * DLOCK_ERR_NOMEM. */
static int wait_join(dlock_client *c, struct wait *cw)
{
    if (cw->o->wait_mode == DLOCK_WAIT_SPIN)
        return DLOCK_OK;
    if ((cw->e = dlock__keytab_ref(c->keys, cw->l->key, NULL)) == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    cw->w.o = cw->o;
    cw->w.deadline = cw->deadline;
    dlock__queue_push(cw->e, &cw->w);
    return DLOCK_OK;
}

/* Whether cw, in notify mode, waits behind its line's head at now: until its
 * deadline (a release that makes it the head wakes it sooner), when it
 * tries once whatever its place. */
static int behind_head(const struct wait *cw, int64_t now)
{
    return cw->e && cw->e->head != &cw->w && now < cw->deadline;
}

/* mu held (released around each attempt): cw's turn as far as it goes: an
 * attempt when it heads the FIFO (or spin mode's pause is over), a waiter
 * that never got to the head still trying once at its deadline. Returns
 * DLOCK_QUEUE_WAIT with *until (cw is woken sooner when a release comes),
 * or how the wait ended. */
static int wait_step(dlock_client *c, struct wait *cw, int64_t *until)
{
    struct dlock_entry *e = cw->e;
    for (;;) {
        int64_t now = dlock__now_ms();
        if (e == NULL && now < cw->next_try) {
            *until = cw->next_try;
            return DLOCK_QUEUE_WAIT;
        }
        if (e && dlock__queue_held_back(c, e, &cw->w, now, until))
            return DLOCK_QUEUE_WAIT;
        if (behind_head(cw, now)) {
            *until = cw->deadline;
            return DLOCK_QUEUE_WAIT;
        }
        unsigned long seen = e ? e->releases : 0; /* one during the attempt must not be missed */
        int64_t pttl = -1;
        pthread_mutex_unlock(&c->mu);
        int rc = cw->cl->attempt(c, cw->l, cw->cl, cw->o->wait_ms > 0, &pttl);
        pthread_mutex_lock(&c->mu);
        now = dlock__now_ms();
        if (rc != DLOCK_ERR_TIMEOUT || now >= cw->deadline)
            return rc;
        if (e) {
            dlock__queue_retry(c, e, &cw->w, now, pttl, seen);
        } else {
            int64_t pause = dlock__jitter_ms(cw->o->retry_ms);
            cw->next_try = now + (pause < cw->deadline - now ? pause : cw->deadline - now);
        }
    }
}

/* mu held: cw's wait ended with rc. It leaves the FIFO, whose next head
 * tries now (a permit may be left); on DLOCK_OK its handle holds the lease,
 * renewed from now on. */
static void wait_leave(dlock_client *c, struct wait *cw, int rc)
{
    if (cw->e) {
        dlock__queue_remove(cw->e, &cw->w);
        dlock__entry_wake_head(cw->e);
        dlock__queue_leave(c, cw->e);
        cw->e = NULL;
    }
    if (rc != DLOCK_OK)
        return;
    dlock__wd_hold(c->wd, cw->h, cw->l, cw->o->watchdog);
    cw->h->holds = 1;
    cw->l = NULL;
    dlock__count(&c->counters.acquired);
    cw->h->held_since_us = dlock__now_us();
}

/* Without mu: what a wait that ended with rc and got nothing leaves: a
 * writer's wish withdrawn (waiting ended, no failure: the mark would run
 * out), a token an unanswered attempt may have taken to the orphans thread;
 * the lease and handle freed. */
static void wait_fail(dlock_client *c, struct wait *cw, int rc)
{
    int gave_up = rc == DLOCK_ERR_TIMEOUT || rc == DLOCK_ERR_CANCELLED || rc == DLOCK_ERR_CLOSED;
    if (cw->cl->give_up && gave_up && cw->o->wait_ms > 0)
        cw->cl->give_up(c, cw->l);
    if (rc == DLOCK_ERR_REDIS && cw->l->sent)
        dlock__orphans_add(c->orphans, cw->l);
    else
        free(cw->l);
    dlock__handle_free(cw->h);
}

/* A wait that timed out, in words. */
static int timed_out(char *buf, size_t size, const char *key, const struct dlock_claim *cl,
                     const dlock_opts *o)
{
    snprintf(buf, size, "%s %s: %s after %d ms", cl->what, key, cl->busy, o->wait_ms);
    return DLOCK_ERR_TIMEOUT;
}

/* Waits until deadline for a claim on key (o checked, key valid). Returns
 * as dlock_acquire does; *out set on DLOCK_OK. */
static int claim_wait(dlock_client *c, const char *key, const struct dlock_claim *cl,
                      const dlock_opts *o, int64_t deadline, dlock_handle **out)
{
    struct wait cw = {.cl = cl, .o = o, .deadline = deadline};
    if (dlock__cond_init(&cw.w.cv) != 0)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (wait_new(c, &cw, key) != 0) {
        pthread_cond_destroy(&cw.w.cv);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&c->mu);
    int rc = wait_join(c, &cw);
    if (rc == DLOCK_OK) {
        int64_t until;
        while ((rc = wait_step(c, &cw, &until)) == DLOCK_QUEUE_WAIT)
            dlock__cond_wait_until(&cw.w.cv, &c->mu, until);
        wait_leave(c, &cw, rc);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&cw.w.cv);
    if (rc == DLOCK_OK) {
        *out = cw.h;
        return DLOCK_OK;
    }
    wait_fail(c, &cw, rc);
    if (rc == DLOCK_ERR_TIMEOUT) {
        char why[256];
        timed_out(why, sizeof(why), key, cl, o);
        dlock__fail(rc, "%s", why);
    }
    return rc;
}

/* The options into *o and key, checked as every acquire checks them. */
static int checked(const char *key, const dlock_opts *opts, dlock_opts *o)
{
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (dlock__opts_of(opts, o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    return DLOCK_OK;
}

int dlock__claim_acquire(dlock_client *c, const char *key, const struct dlock_claim *cl,
                         const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    if (checked(key, opts, &o) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    int64_t start = dlock__now_ms();
    int rc = claim_wait(c, key, cl, &o, start + o.wait_ms, out);
    return dlock__count_wait(&c->counters, rc, start);
}

/* An asynchronous claim: its wait's steps as a task of the client's runner. */
struct claim_call {
    struct dlock_task task;
    dlock_client *c;
    struct dlock_claim cl;
    dlock_opts o;
    dlock_req *req;
    int64_t start;
    int rc;  /* how it ended */
    int noted; /* req has rc and its text, taken where the failure was seen */
    int got; /* its handle holds (a grant that came as it was withdrawn goes back) */
    struct wait cw;
};

static int call_step(struct dlock_task *t, int64_t *until)
{
    struct claim_call *a = (struct claim_call *)t;
    int stop = dlock__task_stop(t);
    int rc = stop ? stop : wait_step(a->c, &a->cw, until);
    if (rc == DLOCK_QUEUE_WAIT)
        return DLOCK_TASK_WAIT;
    wait_leave(a->c, &a->cw, rc);
    a->got = rc == DLOCK_OK;
    stop = dlock__task_stop(t); /* told while it asked Redis: what it got goes back */
    a->rc = rc == DLOCK_OK && stop ? stop : rc;
    if (a->rc != DLOCK_OK) { /* its text now, on this thread: its end may run elsewhere */
        dlock__req_note(a->req, a->rc);
        a->noted = 1;
    }
    return DLOCK_TASK_DONE;
}

static void call_end(struct dlock_task *t, enum dlock_end where)
{
    struct claim_call *a = (struct claim_call *)t;
    dlock_client *c = a->c;
    dlock_req *req = a->req;
    if (!a->noted)
        dlock__req_note(req, a->rc);
    if (a->rc == DLOCK_ERR_TIMEOUT)
        timed_out(req->err, sizeof(req->err), a->cw.l->key, &a->cl, &a->o);
    req->h = a->rc == DLOCK_OK ? a->cw.h : NULL;
    if (a->got && a->rc != DLOCK_OK) {
        dlock_handle *h = a->cw.h;
        pthread_mutex_lock(&c->mu);
        h->at_release = dlock__holder_state(h, dlock__now_ms());
        dlock__count_hold(&c->counters, h->held_since_us);
        dlock__claim_give_back(c, h);
        pthread_mutex_unlock(&c->mu);
        dlock__handle_free(h);
    } else if (!a->got) {
        wait_fail(c, &a->cw, a->rc);
    }
    dlock__count_wait(&c->counters, a->rc, a->start);
    free(a);
    dlock__runner_deliver(c->runner, req, where);
}

int dlock__claim_acquire_async(dlock_client *c, const char *key, const struct dlock_claim *cl,
                               const dlock_opts *opts, dlock_req *req)
{
    dlock_opts o;
    if (checked(key, opts, &o) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    if (req == NULL || req->done == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "an asynchronous call needs a request with done");
    struct claim_call *a = dlock__zalloc(sizeof(*a));
    if (a == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    *a = (struct claim_call){.task = {.step = call_step, .end = call_end}, .c = c, .cl = *cl,
                             .o = o, .req = req, .start = dlock__now_ms()};
    a->cw = (struct wait){.cl = &a->cl, .o = &a->o, .deadline = a->start + o.wait_ms,
                          .w = {.task = &a->task}};
    if (wait_new(c, &a->cw, key) != 0) {
        free(a);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&c->mu);
    int rc = wait_join(c, &a->cw);
    if (rc == DLOCK_OK) /* behind the head, it sleeps on the runner's timers from the start */
        dlock__runner_add(c->runner, &a->task, req,
                          behind_head(&a->cw, dlock__now_ms()) ? a->cw.deadline : 0);
    pthread_mutex_unlock(&c->mu);
    if (rc != DLOCK_OK) {
        wait_fail(c, &a->cw, rc);
        free(a);
    }
    return rc;
}

int dlock__claim_give_back(dlock_client *c, dlock_handle *h)
{
    struct dlock_lease *l = h->lease;
    l->holder = NULL;
    dlock__wd_forget(c->wd, l); /* no renewal may follow the release */
    pthread_mutex_unlock(&c->mu);
    int rc = dlock__claim_quorum_give_back(c->nodes, l);
    if (rc == DLOCK_OK && h->at_release == DLOCK_ERR_INTERRUPTED)
        rc = DLOCK_ERR_INTERRUPTED;
    if (rc == DLOCK_ERR_LOST || (rc == DLOCK_ERR_REDIS && h->at_release == DLOCK_ERR_LOST))
        dlock__count(&c->counters.lost);
    pthread_mutex_lock(&c->mu);
    struct dlock_entry *e = dlock__keytab_find(c->keys, l->key, strlen(l->key));
    if (e != NULL) { /* a local waiter need not wait for the PUBLISH to come back */
        e->releases++;
        dlock__entry_wake_head(e);
    }
    if (rc == DLOCK_ERR_REDIS) /* retried in the background, as a lock's is */
        dlock__orphans_add(c->orphans, l);
    else
        free(l);
    return rc;
}
