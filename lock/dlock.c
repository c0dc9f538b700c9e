/* dlock.c - the lock library's public API: clients, acquisition of a lock
 * and of a multi-lock (spin mode here, notify mode in queue.c, a thread's
 * nested holds in reentry.c), owner-checked release (a semaphore's and a
 * read-write lock's in claim.c), the run-under-lock helper. Beside it in
 * the API: sem.c, rw.c, fence.c; below: claim.c and handle.c -> queue.c
 * (notify mode) -> lease.c, watchdog.c, orphans.c, subscriber.c ->
 * quorum.c (one or N servers) -> node_ops.c, node.c (one Redis) -> pool.c;
 * opts.c and counters.c check what callers pass and count what happened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/claim.h"
#include "lock/client.h"
#include "lock/err.h"
#include "lock/opts.h"
#include "lock/queue.h"
#include "lock/reentry.h"
#include "lock/sync.h"

int dlock_client_new(const dlock_config *cfg, dlock_client **out)
{
    *out = NULL;
    if (dlock_config_check(cfg) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    dlock_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    int ok = (c->nodes = dlock_quorum_new(cfg, &c->counters)) != NULL &&
             (c->keys = dlock_keytab_new()) != NULL && (c->holds = dlock_holds_new()) != NULL &&
             (c->wd = dlock_wd_start(&c->mu, c->nodes, &c->counters)) != NULL &&
             (c->orphans = dlock_orphans_start(c->nodes, &c->counters)) != NULL &&
             (c->runner = dlock_runner_start(&c->mu, cfg->async_threads)) != NULL;
    for (int i = 0; ok && i < dlock_quorum_size(c->nodes); i++)
        ok = (c->sub[i] = dlock_sub_start(&c->mu, c->keys, dlock_quorum_node(c->nodes, i), i,
                                          &c->counters)) != NULL;
    if (ok) {
        *out = c;
        return DLOCK_OK;
    }
    dlock_client_free(c);
    return dlock_fail(DLOCK_ERR_NOMEM, "out of memory or threads");
}

void dlock_client_free(dlock_client *c)
{
    if (c == NULL)
        return;
    dlock_runner_stop(c->runner); /* first: ending a wait may release a key, or give up a token */
    dlock_orphans_stop(c->orphans);
    for (int i = 0; i < DLOCK_NODES_MAX; i++)
        if (c->sub[i])
            dlock_sub_stop(c->sub[i]);
    if (c->wd)
        dlock_wd_stop(c->wd);
    dlock_keytab_free(c->keys);
    dlock_holds_free(c->holds);
    dlock_quorum_free(c->nodes);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int dlock_ping_each(dlock_client *c, int up[DLOCK_NODES_MAX])
{
    int need;
    if (dlock_quorum_ping(c->nodes, up, &need) >= need)
        return DLOCK_OK;
    return dlock_redis_failure();
}

int dlock_ping(dlock_client *c)
{
    int up[DLOCK_NODES_MAX];
    return dlock_ping_each(c, up);
}

int dlock_node_count(dlock_client *c) { return dlock_quorum_size(c->nodes); }

void dlock_node_info_read(dlock_client *c, int i, dlock_node_info *out)
{
    dlock_node_report(dlock_quorum_node(c->nodes, i), out);
}

/* Spin mode's step (mu held, released around the try): one try for h with
 * *lp (made at the first). Returns DLOCK_QUEUE_WAIT with *until the next
 * try, or how the wait ended (*lp then held by h, given up, or freed). */
static int spin_step(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                     struct dlock_lease **lp, int64_t deadline, int64_t *until)
{
    struct dlock_lease *l = *lp;
    if (l == NULL && (l = *lp = dlock_lease_new(key, o)) == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    int64_t pttl;
    pthread_mutex_unlock(&c->mu);
    int rc = dlock_lease_try(c->nodes, l, 0, &pttl); /* spin: polls, never queues */
    pthread_mutex_lock(&c->mu);
    int64_t now = dlock_now_ms();
    if (rc == DLOCK_ERR_TIMEOUT && now < deadline) {
        int64_t pause = dlock_jitter_ms(o->retry_ms);
        *until = now + (pause < deadline - now ? pause : deadline - now);
        return DLOCK_QUEUE_WAIT;
    }
    *lp = NULL;
    if (rc == DLOCK_OK)
        dlock_wd_hold(c->wd, h, l, o->watchdog);
    else if (rc == DLOCK_ERR_REDIS && l->sent) /* the SET may have run, or still run */
        dlock_orphans_add(c->orphans, l);
    else
        free(l);
    return rc;
}

/* Spin mode: this thread alone retries every jittered retry_ms. */
static int acquire_spin(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                        int64_t deadline)
{
    struct dlock_lease *l = NULL;
    int64_t until;
    int rc;
    pthread_mutex_lock(&c->mu);
    while ((rc = spin_step(c, h, key, o, &l, deadline, &until)) == DLOCK_QUEUE_WAIT) {
        pthread_mutex_unlock(&c->mu);
        int64_t pause = until - dlock_now_ms();
        dlock_sleep_ms(pause > 0 ? pause : 0);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* h has just got its key: counted, its hold timed from now. */
static void key_held(dlock_client *c, dlock_handle *h)
{
    dlock_count(&c->counters.acquired);
    h->held_since_us = dlock_now_us();
}

/* One key until deadline, in o's wait mode; *out the holder. */
static int acquire_key(dlock_client *c, const char *key, const dlock_opts *o, int64_t deadline,
                       dlock_handle **out)
{
    dlock_handle *h = dlock_handle_new(c, o);
    if (h == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    int rc = o->wait_mode == DLOCK_WAIT_SPIN ? acquire_spin(c, h, key, o, deadline)
                                             : dlock_queue_acquire(c, h, key, o, deadline);
    if (rc == DLOCK_OK) {
        key_held(c, h);
        pthread_mutex_lock(&c->mu);
        dlock_holds_add(c->holds, h);
        pthread_mutex_unlock(&c->mu);
        *out = h;
        return DLOCK_OK;
    }
    if (rc == DLOCK_ERR_TIMEOUT)
        dlock_fail(rc, "lock %s still held by another owner after %d ms", key, o->wait_ms);
    dlock_handle_free(h);
    return rc;
}

int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (dlock_opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    int rc;
    if (dlock_reenter(c, key, &o, out, &rc))
        return rc;
    int64_t start = dlock_now_ms();
    rc = acquire_key(c, key, &o, start + o.wait_ms, out);
    return dlock_count_wait(&c->counters, rc, start);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* keys sorted into order[] (the canonical order every multi-lock takes its
 * keys in), each checked, none twice. */
static int canonical_order(const char *const *keys, int n, const char **order)
{
    if (n < 1 || n > DLOCK_MULTI_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "a multi-lock holds 1..%d keys, not %d",
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
            return dlock_fail(DLOCK_ERR_INVALID, "key %s appears twice", order[i]);
    return DLOCK_OK;
}

/* A multi-lock whose parts are all held: from now on they are renewed and
 * interrupted as one. */
static void set_formed(dlock_handle *set)
{
    pthread_mutex_lock(&set->client->mu);
    for (int i = 0; i < set->nparts; i++)
        set->parts[i]->parent = set;
    pthread_mutex_unlock(&set->client->mu);
    set->held_since_us = dlock_now_us();
}

/* A multi-lock's handle with room for n parts, or NULL when out of memory. */
static dlock_handle *set_new(dlock_client *c, const dlock_opts *o, int n)
{
    dlock_handle *set = dlock_handle_new(c, o);
    if (set && (set->parts = calloc((size_t)n, sizeof(*set->parts))) == NULL) {
        dlock_handle_free(set);
        return NULL;
    }
    return set;
}

int dlock_acquire_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                        dlock_handle **out)
{
    dlock_opts o;
    const char *order[DLOCK_MULTI_MAX];
    *out = NULL;
    if (dlock_opts_of(opts, &o) != DLOCK_OK || canonical_order(keys, n, order) != DLOCK_OK ||
        dlock_holds_none(c, order, n) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    dlock_handle *set = set_new(c, &o, n);
    if (set == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    int64_t start = dlock_now_ms();
    int rc = DLOCK_OK;
    while (rc == DLOCK_OK && set->nparts < n) /* one deadline for them all */
        if ((rc = acquire_key(c, order[set->nparts], &o, start + o.wait_ms,
                              &set->parts[set->nparts])) == DLOCK_OK)
            set->nparts++;
    if (rc != DLOCK_OK) { /* all or nothing: give back what was taken */
        char why[256];
        snprintf(why, sizeof(why), "%s", dlock_errstr());
        dlock_release(set);
        dlock_count_wait(&c->counters, rc, start);
        return dlock_fail(rc, "%s", why);
    }
    set_formed(set);
    *out = set;
    return dlock_count_wait(&c->counters, DLOCK_OK, start);
}

static int release(dlock_handle *h, int *local);

/* How bad a release's result is: a multi-lock reports its worst part's. */
static int severity(int rc)
{
    return rc == DLOCK_ERR_LOST ? 3 : rc == DLOCK_ERR_INTERRUPTED ? 2 : rc != DLOCK_OK ? 1 : 0;
}

/* Releases every part of a multi-lock, last key first. Frees h. */
static int release_set(dlock_handle *h, int *local)
{
    dlock_client *c = h->client;
    pthread_mutex_lock(&c->mu);
    *local = h->nparts ? dlock_holder_state(h, dlock_now_ms()) : DLOCK_OK;
    for (int i = 0; i < h->nparts; i++) {
        h->parts[i]->parent = NULL; /* each goes its own way: hand-off, or back to Redis */
        h->parts[i]->held_since_us = 0; /* counted as the set's hold */
    }
    pthread_mutex_unlock(&c->mu);
    int rc = DLOCK_OK, part_local;
    for (int i = h->nparts - 1; i >= 0; i--) {
        int part_rc = release(h->parts[i], &part_local);
        rc = severity(part_rc) > severity(rc) ? part_rc : rc;
    }
    dlock_handle_free(h);
    return rc;
}

/* Hands h's lease to a local waiter, or gives it back to Redis. Frees h.
 * Returns what dlock_release documents; *local gets the holder's own view at
 * release (OK, INTERRUPTED or LOST), which stands when Redis can't be asked. */
static int release(dlock_handle *h, int *local)
{
    if (h->parts || (h->lease && h->lease->kind != DLOCK_LEASE_LOCK)) {
        dlock_count_hold(&h->client->counters, h->held_since_us);
        return h->parts ? release_set(h, local) : dlock_claim_release(h, local);
    }
    dlock_client *c = h->client;
    pthread_mutex_lock(&c->mu);
    *local = dlock_holder_state(h, dlock_now_ms());
    if (dlock_holds_leave(c->holds, &h)) { /* still held by the thread's other handles: */
        pthread_mutex_unlock(&c->mu);      /* nothing to hand over or give back yet */
        return *local;
    }
    /* the outermost handle: the hold ends here, whatever the order */
    dlock_count_hold(&c->counters, h->held_since_us);
    struct dlock_lease *l = h->lease;
    struct dlock_entry *e = h->entry;
    if (e && *local == DLOCK_OK && dlock_queue_handoff(c, h)) {
        pthread_mutex_unlock(&c->mu);
        dlock_handle_free(h);
        return DLOCK_OK;
    }
    l->holder = NULL;
    dlock_wd_forget(c->wd, l);
    struct dlock_next next;
    int requeue = dlock_queue_released(c, h, &next), queued = 0;
    pthread_mutex_unlock(&c->mu);

    int rc = dlock_lease_release(c->nodes, l, 0, requeue ? &next : NULL, &queued);
    if (rc == DLOCK_OK && *local == DLOCK_ERR_INTERRUPTED)
        rc = DLOCK_ERR_INTERRUPTED;
    if (rc == DLOCK_ERR_LOST || (rc == DLOCK_ERR_REDIS && *local == DLOCK_ERR_LOST))
        dlock_count(&c->counters.lost);
    pthread_mutex_lock(&c->mu);
    if (requeue)
        dlock_queue_requeued(c, e, queued);
    if (e)
        dlock_queue_leave(c, e);
    pthread_mutex_unlock(&c->mu);
    if (rc == DLOCK_ERR_REDIS) /* retried in the background; the key is still ours */
        dlock_orphans_add(c->orphans, l);
    else
        free(l);
    dlock_handle_free(h);
    return rc;
}

int dlock_release(dlock_handle *h)
{
    int local;
    return h ? release(h, &local) : DLOCK_OK;
}

/* Runs fn under the held h and always releases; see dlock_run. */
static int run_held(dlock_handle *h, dlock_fn fn, void *arg, int *fn_rc)
{
    int result = fn(h, arg);
    if (fn_rc)
        *fn_rc = result;
    int local, rc = release(h, &local);
    /* fn already ran: a release that could not reach Redis leaves the lease to
     * expire, and what the holder knew at the end is the honest answer */
    return rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH ? local : rc;
}

int dlock_run(dlock_client *c, const char *key, const dlock_opts *opts, dlock_fn fn, void *arg,
              int *fn_rc)
{
    dlock_handle *h;
    int rc = dlock_acquire(c, key, opts, &h);
    return rc == DLOCK_OK ? run_held(h, fn, arg, fn_rc) : rc;
}

int dlock_run_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                    dlock_fn fn, void *arg, int *fn_rc)
{
    dlock_handle *h;
    int rc = dlock_acquire_multi(c, keys, n, opts, &h);
    return rc == DLOCK_OK ? run_held(h, fn, arg, fn_rc) : rc;
}

void dlock_stats_read(dlock_client *c, dlock_stats *s) { dlock_counters_read(&c->counters, s); }

/* An asynchronous acquire of one key or of a multi-lock's keys (a task of
 * runner.h): each key waits as a blocking acquire's, on the same steps, in
 * the multi-lock's order, under one deadline. */
struct ask {
    struct dlock_task task;
    dlock_client *c;
    dlock_opts o;
    dlock_acquired_fn *done;
    void *arg;
    int64_t start, deadline;
    int n, i;                 /* its keys; the one asked for now */
    int joined;               /* notify mode: w waits in key i's FIFO */
    int rc;                   /* how it ended */
    dlock_handle *h;          /* key i's holder to be; a lone key's holder once held */
    dlock_handle *set;        /* a multi-lock's */
    struct dlock_waiter w;    /* notify mode */
    struct dlock_lease *spin; /* spin mode: the lease it tries with */
    char *keys[];             /* n copies, after which their bytes */
};

/* Key i's step (mu held): DLOCK_QUEUE_WAIT, or how its wait ended. closing:
 * the client is being freed, the wait ends now. */
static int ask_key(struct ask *a, int closing, int64_t *until)
{
    dlock_client *c = a->c;
    if (a->h == NULL && (a->h = dlock_handle_new(c, &a->o)) == NULL)
        return DLOCK_ERR_NOMEM;
    if (a->o.wait_mode == DLOCK_WAIT_SPIN) {
        if (!closing)
            return spin_step(c, a->h, a->keys[a->i], &a->o, &a->spin, a->deadline, until);
        free(a->spin); /* between tries it holds nothing and queues nowhere */
        a->spin = NULL;
        return DLOCK_ERR_CLOSED;
    }
    int rc = DLOCK_OK;
    if (!a->joined && (rc = dlock_queue_join(c, a->h, a->keys[a->i], &a->o, a->deadline,
                                             &a->w)) != DLOCK_OK)
        return rc;
    a->joined = 1;
    rc = !closing ? dlock_queue_step(c, &a->w, until) : a->w.granted ? DLOCK_OK
                                                                      : DLOCK_ERR_CLOSED;
    if (rc == DLOCK_QUEUE_WAIT)
        return rc;
    a->joined = 0;
    return dlock_queue_end(c, &a->w, rc);
}

/* The task's step (mu held): its keys one after the other. */
static int ask_step(struct dlock_task *t, int64_t *until)
{
    struct ask *a = (struct ask *)t;
    int closing = dlock_task_stop(t) == DLOCK_ERR_CLOSED;
    for (;;) {
        int rc = ask_key(a, closing, until);
        if (rc == DLOCK_QUEUE_WAIT)
            return DLOCK_TASK_WAIT;
        if (rc != DLOCK_OK) {
            if (a->h)
                dlock_handle_free(a->h);
            a->h = NULL;
            a->rc = rc;
            return DLOCK_TASK_DONE;
        }
        key_held(a->c, a->h);
        a->h->holds = 1; /* a hold of no thread's: never nested in, nor refused for */
        if (a->set) {
            a->set->parts[a->set->nparts++] = a->h;
            a->h = NULL;
        }
        a->rc = closing ? DLOCK_ERR_CLOSED : DLOCK_OK; /* what it holds goes back */
        if (closing || ++a->i == a->n)
            return DLOCK_TASK_DONE;
    }
}

/* The task's end (without mu): hands the holder over, or gives back what a
 * failed multi-lock took, and tells the caller. A key that came while the
 * client is being freed goes back too: nothing may hold through a freed
 * client. */
static void ask_done(struct dlock_task *t, int closing)
{
    struct ask *a = (struct ask *)t;
    dlock_handle *h = a->set ? a->set : a->h;
    int local;
    if (closing && a->rc == DLOCK_OK)
        a->rc = DLOCK_ERR_CLOSED;
    if (a->rc == DLOCK_OK && a->set)
        set_formed(a->set);
    else if (a->rc != DLOCK_OK && h) {
        release(h, &local);
        h = NULL;
    }
    dlock_count_wait(&a->c->counters, a->rc, a->start);
    a->done(a->rc, h, a->arg);
    free(a);
}

/* The asynchronous acquire of the n keys in order[] (checked, as opts), as
 * a multi-lock when multi is set. */
static int ask(dlock_client *c, const char *const *order, int n, int multi,
               const dlock_opts *o, dlock_acquired_fn *done, void *arg)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += strlen(order[i]) + 1;
    struct ask *a = calloc(1, sizeof(*a) + (size_t)n * sizeof(char *) + bytes);
    if (a == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    *a = (struct ask){.task = {.step = ask_step, .end = ask_done}, .c = c, .o = *o,
                      .done = done, .arg = arg, .start = dlock_now_ms(), .n = n,
                      .w = {.task = &a->task}};
    char *name = (char *)&a->keys[n];
    for (int i = 0; i < n; i++) {
        a->keys[i] = strcpy(name, order[i]);
        name += strlen(order[i]) + 1;
    }
    if ((multi && (a->set = set_new(c, o, n)) == NULL) ||
        (o->wait_mode == DLOCK_WAIT_NOTIFY && (a->h = dlock_handle_new(c, o)) == NULL))
        goto nomem;
    a->deadline = a->start + o->wait_ms;
    pthread_mutex_lock(&c->mu);
    /* in notify mode it joins the FIFO here, so waiters are served in the
     * order they asked, whichever thread steps them */
    int rc = a->h ? dlock_queue_join(c, a->h, order[0], &a->o, a->deadline, &a->w) : DLOCK_OK;
    a->joined = a->h != NULL && rc == DLOCK_OK;
    if (rc == DLOCK_OK)
        dlock_runner_add(c->runner, &a->task);
    pthread_mutex_unlock(&c->mu);
    if (rc == DLOCK_OK)
        return DLOCK_OK;
nomem:
    if (a->h)
        dlock_handle_free(a->h);
    if (a->set)
        dlock_handle_free(a->set);
    free(a);
    return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
}

int dlock_acquire_async(dlock_client *c, const char *key, const dlock_opts *opts,
                        dlock_acquired_fn *done, void *arg)
{
    dlock_opts o;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (dlock_opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    if (done == NULL)
        return dlock_fail(DLOCK_ERR_INVALID, "an asynchronous acquire needs its callback");
    return ask(c, &key, 1, 0, &o, done, arg);
}

int dlock_acquire_multi_async(dlock_client *c, const char *const *keys, int n,
                              const dlock_opts *opts, dlock_acquired_fn *done, void *arg)
{
    dlock_opts o;
    const char *order[DLOCK_MULTI_MAX];
    if (dlock_opts_of(opts, &o) != DLOCK_OK || canonical_order(keys, n, order) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    if (done == NULL)
        return dlock_fail(DLOCK_ERR_INVALID, "an asynchronous acquire needs its callback");
    return ask(c, order, n, 1, &o, done, arg);
}
