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
             (c->orphans = dlock_orphans_start(c->nodes, &c->counters)) != NULL;
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
    if (dlock_quorum_ping(c->nodes, up) >= dlock_quorum_majority(c->nodes))
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

/* Spin mode: this thread alone retries every jittered retry_ms. */
static int acquire_spin(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                        int64_t deadline)
{
    struct dlock_lease *l = dlock_lease_new(key, o);
    if (l == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    for (;;) {
        int64_t pttl;
        int rc = dlock_lease_try(c->nodes, l, 0, &pttl); /* spin: polls, never queues */
        if (rc == DLOCK_OK) {
            pthread_mutex_lock(&c->mu);
            dlock_wd_hold(c->wd, h, l, o->watchdog);
            pthread_mutex_unlock(&c->mu);
            return DLOCK_OK;
        }
        int64_t now = dlock_now_ms();
        if (rc == DLOCK_ERR_REDIS && l->sent) { /* the SET may have run, or still run */
            dlock_orphans_add(c->orphans, l);
            return rc;
        }
        if (rc != DLOCK_ERR_TIMEOUT || now >= deadline) {
            free(l);
            return rc;
        }
        int64_t pause = dlock_jitter_ms(o->retry_ms);
        dlock_sleep_ms(pause < deadline - now ? pause : deadline - now);
    }
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
        dlock_count(&c->counters.acquired);
        h->held_since_us = dlock_now_us();
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

int dlock_acquire_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                        dlock_handle **out)
{
    dlock_opts o;
    const char *order[DLOCK_MULTI_MAX];
    *out = NULL;
    if (dlock_opts_of(opts, &o) != DLOCK_OK || canonical_order(keys, n, order) != DLOCK_OK ||
        dlock_holds_none(c, order, n) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    dlock_handle *set = dlock_handle_new(c, &o);
    if (set == NULL || (set->parts = calloc((size_t)n, sizeof(*set->parts))) == NULL) {
        if (set)
            dlock_handle_free(set);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
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
    pthread_mutex_lock(&c->mu); /* from now on they are renewed and interrupted as one */
    for (int i = 0; i < n; i++)
        set->parts[i]->parent = set;
    pthread_mutex_unlock(&c->mu);
    set->held_since_us = dlock_now_us();
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
