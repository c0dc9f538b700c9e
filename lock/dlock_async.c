/* dlock_async.c - the asynchronous API (dlock_async.h) of a lock and a
 * multi-lock, with the release and the withdrawal every call shares. An
 * acquire is a task of the client's runner that waits as a blocking one
 * does, on the same steps (queue.c's line in notify mode, lock.c's try in
 * spin mode), in the multi-lock's order and under one deadline, with all it
 * needs made at the call. A release hands the lease over on the caller's
 * thread and gives it back in Redis as a task that lives in the handle.
 * Beside it: sem.c and rw.c (their acquires, over claim.c), handle.c (the
 * sleep). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/client.h"
#include "lock/dlock_async.h"
#include "lock/err.h"
#include "lock/lock.h"
#include "lock/opts.h"
#include "lock/queue.h"
#include "lock/sync.h"

/* What the wait for one key needs, made at the call. */
struct ask_key {
    const char *name;
    dlock_handle *h;           /* its holder to be (a multi-lock's part) */
    struct dlock_lease *lease; /* the lease it asks Redis with */
    struct dlock_entry *entry; /* notify mode, a key after the first: its line's entry,
                                * should it have none by the time its turn comes */
};

/* An asynchronous acquire of one key or of a multi-lock's keys. */
struct ask {
    struct dlock_task task;
    dlock_client *c;
    dlock_opts o;
    dlock_req *req;
    int64_t start, deadline;
    int n, i;               /* its keys; the one asked for now */
    int joined;             /* notify mode: w waits in key i's FIFO */
    int rc;                 /* how it ended */
    int noted;              /* req has rc and its text, taken where the failure was seen */
    dlock_handle *set;      /* a multi-lock's */
    struct dlock_waiter w;  /* notify mode */
    struct ask_key key[];   /* n, after which their names' bytes */
};

/* Frees what a's wait made and did not use, and a. */
static void ask_free(struct ask *a)
{
    for (int i = 0; i < a->n; i++) {
        if (a->key[i].h)
            dlock__handle_free(a->key[i].h);
        free(a->key[i].lease);
        free(a->key[i].entry);
    }
    if (a->set)
        dlock__handle_free(a->set);
    free(a);
}

/* The acquire of the n keys in order[] (checked, as o), a multi-lock's when
 * multi is set, with all its wait needs; NULL when out of memory. */
static struct ask *ask_new(dlock_client *c, const char *const *order, int n, int multi,
                           const dlock_opts *o)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += strlen(order[i]) + 1;
    struct ask *a = dlock__zalloc(sizeof(*a) + (size_t)n * sizeof(a->key[0]) + bytes);
    if (a == NULL)
        return NULL;
    a->c = c;
    a->o = *o;
    a->n = n;
    int ok = !multi || (a->set = dlock__lock_set_new(c, o, n)) != NULL;
    char *name = (char *)&a->key[n];
    for (int i = 0; i < n; i++) {
        struct ask_key *k = &a->key[i];
        k->name = strcpy(name, order[i]);
        name += strlen(order[i]) + 1;
        ok = ok && (k->h = dlock__handle_new(c, o)) != NULL &&
             (k->lease = dlock__lease_reserve(k->name, o)) != NULL &&
             (i == 0 || o->wait_mode == DLOCK_WAIT_SPIN ||
              (k->entry = dlock__keytab_spare(k->name)) != NULL);
    }
    if (ok)
        return a;
    ask_free(a);
    return NULL;
}

/* mu held: notify mode: the wait for key i joins its FIFO with the lease
 * made for it. DLOCK_OK, or (the first key only) DLOCK_ERR_NOMEM. */
static int join(struct ask *a)
{
    struct ask_key *k = &a->key[a->i];
    a->w.spare = k->lease;
    a->w.here = a->i == a->n - 1; /* its grant ends the call */
    int rc = dlock__queue_join(a->c, k->h, k->name, &a->o, a->deadline, &a->w, &k->entry);
    if (rc != DLOCK_OK) {
        a->w.spare = NULL;
        return rc;
    }
    k->lease = NULL;
    a->joined = 1;
    return DLOCK_OK;
}

/* Key i's step (mu held): DLOCK_QUEUE_WAIT, or how its wait ended. stop:
 * the wait must end now, with that code (what came meanwhile is held, and
 * goes back at the end). */
static int key_step(struct ask *a, int stop, int64_t *until)
{
    struct ask_key *k = &a->key[a->i];
    if (a->o.wait_mode == DLOCK_WAIT_SPIN) /* between tries it holds nothing */
        return stop ? stop
                    : dlock__lock_spin_step(a->c, k->h, k->name, &a->o, &k->lease, a->deadline,
                                            until);
    int rc = a->joined ? DLOCK_OK : join(a);
    if (rc != DLOCK_OK)
        return rc;
    rc = !stop ? dlock__queue_step(a->c, &a->w, until) : a->w.granted ? DLOCK_OK : stop;
    if (rc == DLOCK_QUEUE_WAIT)
        return rc;
    a->joined = 0;
    return dlock__queue_end(a->c, &a->w, rc);
}

/* The task's step (mu held): its keys one after the other. */
static int ask_step(struct dlock_task *t, int64_t *until)
{
    struct ask *a = (struct ask *)t;
    for (;;) {
        int rc = key_step(a, dlock__task_stop(t), until);
        if (rc == DLOCK_QUEUE_WAIT)
            return DLOCK_TASK_WAIT;
        if (rc != DLOCK_OK) { /* its text now, on this thread: its end may run elsewhere */
            a->rc = rc;
            dlock__req_note(a->req, rc);
            a->noted = 1;
            return DLOCK_TASK_DONE;
        }
        struct ask_key *k = &a->key[a->i];
        dlock__lock_held(a->c, k->h);
        k->h->holds = 1; /* a hold of no thread's: never nested in, nor refused for */
        if (a->set) {
            a->set->parts[a->set->nparts++] = k->h;
            k->h = NULL;
        }
        a->rc = dlock__task_stop(t); /* told while it asked Redis: what it holds goes back */
        if (a->rc != DLOCK_OK || ++a->i == a->n)
            return DLOCK_TASK_DONE;
    }
}

/* The task's end (without mu): hands the holder over, or gives back what a
 * call that failed, or was withdrawn, took, and gives the request back. */
static void ask_end(struct dlock_task *t, enum dlock_end where)
{
    struct ask *a = (struct ask *)t;
    dlock_client *c = a->c;
    dlock_req *req = a->req;
    if (!a->noted)
        dlock__req_note(req, a->rc); /* first: on the thread that saw it end */
    if (a->rc == DLOCK_ERR_TIMEOUT)
        snprintf(req->err, sizeof(req->err), "lock %s still held by another owner after %d ms",
                 a->key[a->i].name, a->o.wait_ms);
    dlock_handle *h = a->set ? a->set : a->key[0].h; /* taken from a: its to give */
    *(a->set ? &a->set : &a->key[0].h) = NULL;
    int held = h->parts != NULL || h->lease != NULL;
    if (a->rc == DLOCK_OK && h->parts)
        dlock__lock_set_formed(h);
    else if (a->rc != DLOCK_OK) {
        int local;
        if (held)
            dlock__lock_release(h, &local);
        else
            dlock__handle_free(h);
        h = NULL;
    }
    req->h = h;
    dlock__count_wait(&c->counters, a->rc, a->start);
    ask_free(a);
    dlock__runner_deliver(c->runner, req, where);
}

/* mu held, a's call just made: when its first step is due. 0: now. A waiter
 * that can only wait (dlock__queue_waits: not the head, or a valid local
 * holder has the key, as when a batch asks while the last one holds) takes
 * it when it would look again, on the runner's timers: no thread is woken
 * to find that out, and a hand-off, a release or that time wakes it. */
static int64_t first_step(const struct ask *a)
{
    int64_t until;
    return a->joined && dlock__queue_waits(&a->w, &until) ? until : 0;
}

/* The asynchronous acquire of the n keys in order[] (checked, as opts), as
 * a multi-lock when multi is set. */
static int ask(dlock_client *c, const char *const *order, int n, int multi,
               const dlock_opts *o, dlock_req *req)
{
    struct ask *a = ask_new(c, order, n, multi, o);
    if (a == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    a->task = (struct dlock_task){.step = ask_step, .end = ask_end};
    a->req = req;
    a->w.task = &a->task;
    a->start = dlock__now_ms();
    a->deadline = a->start + o->wait_ms;
    pthread_mutex_lock(&c->mu);
    /* in notify mode it joins the FIFO here, so waiters are served in the
     * order they asked, whichever thread steps them */
    int rc = o->wait_mode == DLOCK_WAIT_NOTIFY ? join(a) : DLOCK_OK;
    if (rc == DLOCK_OK)
        dlock__runner_add(c->runner, &a->task, req, first_step(a));
    pthread_mutex_unlock(&c->mu);
    if (rc != DLOCK_OK)
        ask_free(a);
    return rc;
}

static int request_ok(const dlock_req *req)
{
    if (req == NULL || req->done == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "an asynchronous call needs a request with done");
    return DLOCK_OK;
}

int dlock_acquire_async(dlock_client *c, const char *key, const dlock_opts *opts, dlock_req *req)
{
    dlock_opts o;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (dlock__opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK ||
        request_ok(req) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    return ask(c, &key, 1, 0, &o, req);
}

int dlock_acquire_multi_async(dlock_client *c, const char *const *keys, int n,
                              const dlock_opts *opts, dlock_req *req)
{
    dlock_opts o;
    const char *order[DLOCK_MULTI_MAX];
    if (dlock__opts_of(opts, &o) != DLOCK_OK || dlock__lock_order(keys, n, order) != DLOCK_OK ||
        request_ok(req) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    return ask(c, order, n, 1, &o, req);
}

int dlock_cancel(dlock_req *req)
{
    if (req == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "no request to withdraw");
    return dlock__runner_cancel(req);
}

/* A release's give-back in Redis: a task that lives in the handle released. */
static dlock_handle *releasing(struct dlock_task *t)
{
    return (dlock_handle *)((char *)t - offsetof(dlock_handle, task));
}

static int give_back_step(struct dlock_task *t, int64_t *until)
{
    (void)until;
    dlock_handle *h = releasing(t);
    h->async_rc = dlock__lock_give_back(h->client, h);
    return DLOCK_TASK_DONE;
}

static void give_back_end(struct dlock_task *t, enum dlock_end where)
{
    dlock_handle *h = releasing(t);
    dlock_runner *r = h->client->runner;
    dlock_req *req = h->req;
    if (req) {
        dlock__req_note(req, h->async_rc);
        req->h = NULL;
    }
    dlock__handle_free(h);
    if (req)
        dlock__runner_deliver(r, req, where);
}

void dlock_release_async(dlock_handle *h, dlock_req *req)
{
    if (req)
        __atomic_store_n(&req->priv, NULL, __ATOMIC_RELEASE); /* never withdrawn */
    if (h == NULL) {
        if (req) {
            dlock__req_note(req, DLOCK_OK);
            req->h = NULL;
            req->done(req);
        }
        return;
    }
    dlock_client *c = h->client;
    struct dlock_task *here = NULL;
    int local, rc;
    pthread_mutex_lock(&c->mu);
    int left = dlock__lock_release_begin(c, &h, &local, &rc, &here);
    if (left == DLOCK_GIVE_BACK) {
        h->req = req;
        h->task = (struct dlock_task){.step = give_back_step, .end = give_back_end};
        dlock__runner_add(c->runner, &h->task, NULL, 0);
    }
    pthread_mutex_unlock(&c->mu);
    dlock__runner_end_here(here);
    if (left == DLOCK_RELEASED && req) {
        dlock__req_note(req, rc);
        req->h = NULL;
        dlock__runner_deliver(c->runner, req, DLOCK_END_CALLER);
    }
}
