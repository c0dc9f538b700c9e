/* dlock.c - the lock library's blocking API: clients, a lock's and a
 * multi-lock's acquisition (a thread's nested holds in reentry.c) and
 * release, the run-under-lock helper. Beside it in the API: dlock_async.c
 * (the asynchronous calls), sem.c, rw.c, fence.c; below: lock.c (what both
 * APIs share of a lock: spin mode's try, the release), claim.c and handle.c
 * -> queue.c (notify mode) -> lease.c, watchdog.c, orphans.c, subscriber.c
 * -> quorum.c (one or N servers) -> node_ops.c, node.c (one Redis) ->
 * pool.c; opts.c and counters.c check what callers pass and count what
 * happened; runner.c runs the asynchronous calls' steps. */
#include "lock/dlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/client.h"
#include "lock/err.h"
#include "lock/lock.h"
#include "lock/opts.h"
#include "lock/queue.h"
#include "lock/reentry.h"
#include "lock/sync.h"

int dlock_client_new(const dlock_config *cfg, dlock_client **out)
{
    *out = NULL;
    if (dlock__config_check(cfg) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    dlock_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    int ok = (c->nodes = dlock__quorum_new(cfg, &c->counters)) != NULL &&
             (c->keys = dlock__keytab_new()) != NULL && (c->holds = dlock__holds_new()) != NULL &&
             (c->wd = dlock__wd_start(&c->mu, c->nodes, &c->counters)) != NULL &&
             (c->orphans = dlock__orphans_start(c->nodes, &c->counters)) != NULL &&
             (c->runner = dlock__runner_start(&c->mu, cfg->async_threads, cfg->post,
                                              cfg->post_ctx)) != NULL;
    for (int i = 0; ok && i < dlock__quorum_size(c->nodes); i++)
        ok = (c->sub[i] = dlock__sub_start(&c->mu, c->keys, dlock__quorum_node(c->nodes, i), i,
                                           &c->counters)) != NULL;
    if (ok) {
        *out = c;
        return DLOCK_OK;
    }
    dlock_client_free(c);
    return dlock__fail(DLOCK_ERR_NOMEM, "out of memory or threads");
}

void dlock_client_free(dlock_client *c)
{
    if (c == NULL)
        return;
    dlock__runner_stop(c->runner); /* first: ending a call may release a key, or give up a token */
    dlock__orphans_stop(c->orphans);
    for (int i = 0; i < DLOCK_NODES_MAX; i++)
        if (c->sub[i])
            dlock__sub_stop(c->sub[i]);
    if (c->wd)
        dlock__wd_stop(c->wd);
    dlock__keytab_free(c->keys);
    dlock__holds_free(c->holds);
    dlock__quorum_free(c->nodes);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int dlock_ping_each(dlock_client *c, int up[DLOCK_NODES_MAX])
{
    int need;
    if (dlock__quorum_ping(c->nodes, up, &need) >= need)
        return DLOCK_OK;
    return dlock__redis_failure();
}

int dlock_ping(dlock_client *c)
{
    int up[DLOCK_NODES_MAX];
    return dlock_ping_each(c, up);
}

int dlock_node_count(dlock_client *c) { return dlock__quorum_size(c->nodes); }

void dlock_node_info_read(dlock_client *c, int i, dlock_node_info *out)
{
    dlock__node_report(dlock__quorum_node(c->nodes, i), out);
}

/* Spin mode: this thread alone retries every jittered retry_ms. */
static int acquire_spin(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                        int64_t deadline)
{
    struct dlock_lease *l = NULL;
    int64_t until;
    int rc;
    pthread_mutex_lock(&c->mu);
    while ((rc = dlock__lock_spin_step(c, h, key, o, &l, deadline, &until)) == DLOCK_QUEUE_WAIT) {
        pthread_mutex_unlock(&c->mu);
        int64_t pause = until - dlock__now_ms();
        dlock__sleep_ms(pause > 0 ? pause : 0);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* One key until deadline, in o's wait mode; *out the holder. */
static int acquire_key(dlock_client *c, const char *key, const dlock_opts *o, int64_t deadline,
                       dlock_handle **out)
{
    dlock_handle *h = dlock__handle_new(c, o);
    if (h == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    int rc = o->wait_mode == DLOCK_WAIT_SPIN ? acquire_spin(c, h, key, o, deadline)
                                             : dlock__queue_acquire(c, h, key, o, deadline);
    if (rc == DLOCK_OK) {
        dlock__lock_held(c, h);
        pthread_mutex_lock(&c->mu);
        dlock__holds_add(c->holds, h);
        pthread_mutex_unlock(&c->mu);
        *out = h;
        return DLOCK_OK;
    }
    if (rc == DLOCK_ERR_TIMEOUT)
        dlock__fail(rc, "lock %s still held by another owner after %d ms", key, o->wait_ms);
    dlock__handle_free(h);
    return rc;
}

int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (dlock__opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    int rc;
    if (dlock__reenter(c, key, &o, out, &rc))
        return rc;
    int64_t start = dlock__now_ms();
    rc = acquire_key(c, key, &o, start + o.wait_ms, out);
    return dlock__count_wait(&c->counters, rc, start);
}

int dlock_acquire_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                        dlock_handle **out)
{
    dlock_opts o;
    const char *order[DLOCK_MULTI_MAX];
    *out = NULL;
    if (dlock__opts_of(opts, &o) != DLOCK_OK || dlock__lock_order(keys, n, order) != DLOCK_OK ||
        dlock__holds_none(c, order, n) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    dlock_handle *set = dlock__lock_set_new(c, &o, n);
    if (set == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    int64_t start = dlock__now_ms();
    int rc = DLOCK_OK;
    while (rc == DLOCK_OK && set->nparts < n) /* one deadline for them all */
        if ((rc = acquire_key(c, order[set->nparts], &o, start + o.wait_ms,
                              &set->parts[set->nparts])) == DLOCK_OK)
            set->nparts++;
    if (rc != DLOCK_OK) { /* all or nothing: give back what was taken */
        char why[256];
        snprintf(why, sizeof(why), "%s", dlock_errstr());
        dlock_release(set);
        dlock__count_wait(&c->counters, rc, start);
        return dlock__fail(rc, "%s", why);
    }
    dlock__lock_set_formed(set);
    *out = set;
    return dlock__count_wait(&c->counters, DLOCK_OK, start);
}

int dlock_release(dlock_handle *h)
{
    int local;
    return h ? dlock__lock_release(h, &local) : DLOCK_OK;
}

/* Runs fn under the held h and always releases; see dlock_run. */
static int run_held(dlock_handle *h, dlock_fn fn, void *arg, int *fn_rc)
{
    int result = fn(h, arg);
    if (fn_rc)
        *fn_rc = result;
    int local, rc = dlock__lock_release(h, &local);
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

void dlock_stats_read(dlock_client *c, dlock_stats *s) { dlock__counters_read(&c->counters, s); }
