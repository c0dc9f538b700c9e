/* dlock.c - the lock library's public API: clients, acquisition (spin mode
 * here, notify mode in queue.c, a thread's nested holds in reentry.c),
 * owner-checked release, the run-under-lock helper and counters; the
 * semaphore's and the read-write lock's waiting and release in sem.c. The
 * layers below: queue.c (notify mode) -> lease.c, watchdog.c, orphans.c,
 * subscriber.c -> quorum.c (one or N servers) -> node.c (one Redis) ->
 * pool.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "err.h"
#include "queue.h"
#include "reentry.h"
#include "sem.h"
#include "sync.h"

const int dlock_wait_bucket_ms[DLOCK_WAIT_BUCKETS] = {1,   5,    10,   25,   50,    100,
                                                      250, 500, 1000, 2500, 10000, -1};
const int dlock_hold_bucket_us[DLOCK_HOLD_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 5000000, 30000000, -1};

void dlock_config_defaults(dlock_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->connect_timeout_ms = 500;
    cfg->command_timeout_ms = 1000;
}

void dlock_opts_defaults(dlock_opts *o)
{
    o->lease_ms = 30000;
    o->wait_ms = 10000;
    o->retry_ms = 100;
    o->max_renewals = 30;
    o->watchdog = 1;
    o->wait_mode = DLOCK_WAIT_NOTIFY;
    o->handoff_max = 8;
    o->handoff_ms = 100;
    o->reentrant = 0;
}

int dlock_opts_check(const dlock_opts *o)
{
    if (o->lease_ms < DLOCK_LEASE_MIN_MS || o->lease_ms > DLOCK_LEASE_MAX_MS)
        return dlock_fail(DLOCK_ERR_INVALID, "lease_ms must be %d..%d, got %d",
                          DLOCK_LEASE_MIN_MS, DLOCK_LEASE_MAX_MS, o->lease_ms);
    if (o->wait_ms < 0 || o->retry_ms < 1 || o->max_renewals < 0 || o->handoff_max < 0 ||
        o->handoff_ms < 0)
        return dlock_fail(DLOCK_ERR_INVALID, "wait_ms, max_renewals and the hand-off bounds "
                                             "must be >= 0, retry_ms >= 1");
    if (o->retry_ms > o->lease_ms) /* a waiter's grace, 2 retry_ms + 100, sizes its grant */
        return dlock_fail(DLOCK_ERR_INVALID, "retry_ms (%d) must not exceed lease_ms (%d): a "
                          "grant to a waiter holds the key for its grace, 2 retry_ms + 100, "
                          "up to a lease", o->retry_ms, o->lease_ms);
    if (o->wait_mode != DLOCK_WAIT_NOTIFY && o->wait_mode != DLOCK_WAIT_SPIN)
        return dlock_fail(DLOCK_ERR_INVALID, "wait_mode must be DLOCK_WAIT_NOTIFY or _SPIN");
    if (o->reentrant != 0 && o->reentrant != 1)
        return dlock_fail(DLOCK_ERR_INVALID, "reentrant must be 0 or 1");
    return DLOCK_OK;
}

/* Parses one "host[:port]" or "[v6]:port" of length len into e. 0 or -1. */
static int parse_endpoint(const char *s, size_t len, dlock_endpoint *e)
{
    const char *host = s, *colon = NULL;
    size_t hlen = len;
    if (len > 0 && s[0] == '[') { /* [v6addr]:port */
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return -1;
        host = s + 1, hlen = (size_t)(close - s - 1);
        colon = close + 1 < s + len ? close + 1 : NULL;
        if (colon && *colon != ':')
            return -1;
    } else if ((colon = memchr(s, ':', len)) != NULL) {
        hlen = (size_t)(colon - s);
        if (memchr(colon + 1, ':', len - hlen - 1)) /* a bare IPv6 address: brackets needed */
            return -1;
    }
    if (hlen == 0 || hlen > DLOCK_HOST_MAX)
        return -1;
    memcpy(e->host, host, hlen);
    e->host[hlen] = '\0';
    e->port = 6379;
    if (colon) {
        char port[8], *end;
        size_t plen = len - (size_t)(colon + 1 - s);
        if (plen == 0 || plen >= sizeof(port))
            return -1;
        memcpy(port, colon + 1, plen);
        port[plen] = '\0';
        errno = 0;
        long p = strtol(port, &end, 10);
        if (*end != '\0' || errno || p < 1 || p > 65535)
            return -1;
        e->port = (int)p;
    }
    return 0;
}

int dlock_config_nodes(dlock_config *cfg, const char *list)
{
    dlock_endpoint nodes[DLOCK_NODES_MAX];
    int n = 0;
    for (const char *p = list ? list : "";;) {
        size_t len = strcspn(p, ",");
        if (n == DLOCK_NODES_MAX)
            return dlock_fail(DLOCK_ERR_INVALID, "at most %d Redis servers", DLOCK_NODES_MAX);
        if (parse_endpoint(p, len, &nodes[n]) != 0)
            return dlock_fail(DLOCK_ERR_INVALID, "bad Redis server \"%.*s\": expected host:port "
                              "(or [v6addr]:port)", (int)len, p);
        n++;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    memcpy(cfg->node, nodes, (size_t)n * sizeof(*nodes));
    cfg->nodes = n;
    return DLOCK_OK;
}

static int config_check(const dlock_config *cfg)
{
    int ok = cfg != NULL && cfg->connect_timeout_ms >= 1 && cfg->command_timeout_ms >= 1 &&
             cfg->nodes >= 0 && cfg->nodes <= DLOCK_NODES_MAX;
    if (ok && cfg->nodes == 0)
        ok = cfg->host != NULL && cfg->port >= 1 && cfg->port <= 65535;
    for (int i = 0; ok && i < cfg->nodes; i++)
        ok = cfg->node[i].host[0] != '\0' && cfg->node[i].port >= 1 && cfg->node[i].port <= 65535;
    return ok ? DLOCK_OK
              : dlock_fail(DLOCK_ERR_INVALID, "Redis host, port 1..65535 (for 1..%d servers) and "
                           "timeouts >= 1 ms needed", DLOCK_NODES_MAX);
}

int dlock_client_new(const dlock_config *cfg, dlock_client **out)
{
    *out = NULL;
    if (config_check(cfg) != DLOCK_OK)
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

int dlock_key_check(const char *key, size_t len)
{
    if (key == NULL || len == 0)
        return dlock_fail(DLOCK_ERR_INVALID, "lock key is empty");
    if (len > DLOCK_KEY_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "lock key is %zu bytes, the limit is %d", len,
                          DLOCK_KEY_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
            return dlock_fail(DLOCK_ERR_INVALID, "lock key has a control byte (0x%02x) at %zu",
                              (unsigned char)key[i], i);
    return DLOCK_OK;
}

static void record_wait(dlock_client *c, int64_t waited_ms)
{
    int b = dlock_bucket_of(dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, waited_ms);
    dlock_count(&c->counters.wait_buckets[b]);
    dlock_count(&c->counters.wait_count);
    atomic_fetch_add(&c->counters.wait_sum_ms, (uint64_t)waited_ms);
}

/* Counts the hold of h, ending now; not one that never held, nor a
 * multi-lock's part (its hold is the set's). */
static void record_hold(const dlock_handle *h)
{
    if (h->held_since_us == 0)
        return;
    dlock_counters *k = &h->client->counters;
    int64_t us = dlock_now_us() - h->held_since_us;
    dlock_count(&k->hold_buckets[dlock_bucket_of(dlock_hold_bucket_us, DLOCK_HOLD_BUCKETS,
                                                 us)]);
    dlock_count(&k->hold_count);
    atomic_fetch_add(&k->hold_sum_us, (uint64_t)us);
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

/* The options to use: opts, or the defaults for NULL; checked. */
static int opts_of(const dlock_opts *opts, dlock_opts *o)
{
    if (opts == NULL)
        dlock_opts_defaults(o);
    else
        *o = *opts;
    return dlock_opts_check(o);
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

/* Counts how an acquisition that began at start ended. */
static int account(dlock_client *c, int rc, int64_t start)
{
    if (rc == DLOCK_OK || rc == DLOCK_ERR_TIMEOUT)
        record_wait(c, dlock_now_ms() - start);
    if (rc == DLOCK_ERR_TIMEOUT)
        dlock_count(&c->counters.timeouts);
    return rc;
}

int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    int rc;
    if (dlock_reenter(c, key, &o, out, &rc))
        return rc;
    int64_t start = dlock_now_ms();
    return account(c, acquire_key(c, key, &o, start + o.wait_ms, out), start);
}

int dlock_claim_acquire(dlock_client *c, const char *key, const struct dlock_claim *cl,
                        const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (opts_of(opts, &o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK ||
        dlock_claim_single(c, cl->what) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    int64_t start = dlock_now_ms();
    return account(c, dlock_claim_wait(c, key, cl, &o, start + o.wait_ms, out), start);
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
    if (opts_of(opts, &o) != DLOCK_OK || canonical_order(keys, n, order) != DLOCK_OK ||
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
        account(c, rc, start);
        return dlock_fail(rc, "%s", why);
    }
    pthread_mutex_lock(&c->mu); /* from now on they are renewed and interrupted as one */
    for (int i = 0; i < n; i++)
        set->parts[i]->parent = set;
    pthread_mutex_unlock(&c->mu);
    set->held_since_us = dlock_now_us();
    *out = set;
    return account(c, DLOCK_OK, start);
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
        record_hold(h);
        return h->parts ? release_set(h, local) : dlock_claim_release(h, local);
    }
    dlock_client *c = h->client;
    pthread_mutex_lock(&c->mu);
    *local = dlock_holder_state(h, dlock_now_ms());
    if (dlock_holds_leave(c->holds, &h)) { /* still held by the thread's other handles: */
        pthread_mutex_unlock(&c->mu);      /* nothing to hand over or give back yet */
        return *local;
    }
    record_hold(h); /* the outermost handle: the hold ends here, whatever the order */
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

int dlock_check(dlock_handle *h)
{
    pthread_mutex_lock(&h->client->mu);
    int st = dlock_holder_state(h, dlock_now_ms());
    pthread_mutex_unlock(&h->client->mu);
    return st;
}

int dlock_sleep(dlock_handle *h, int ms)
{
    dlock_client *c = h->client;
    if (h->outer) /* the watchdog wakes the outermost hold */
        h = h->outer;
    /* now is cut to the millisecond: one more never sleeps short */
    int64_t now = dlock_now_ms(), end = now + (ms > 0 ? ms + 1 : 0);
    int st;
    pthread_mutex_lock(&c->mu);
    while ((st = dlock_holder_state(h, now)) == DLOCK_OK && now < end) {
        /* also wake when the local lease deadline passes: that is a loss too */
        int64_t until = dlock_holder_valid_until(h);
        dlock_cond_wait_until(&h->wake, &c->mu, end < until ? end : until);
        now = dlock_now_ms();
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int dlock_key_count(const dlock_handle *h) { return h->parts ? h->nparts : 1; }
int64_t dlock_fence_at(const dlock_handle *h, int i)
{
    return dlock_holder_at(h, i)->lease->fence;
}
int dlock_handoff_seq_at(const dlock_handle *h, int i) { return dlock_holder_at(h, i)->seq; }
const char *dlock_key_at(const dlock_handle *h, int i)
{
    return dlock_holder_at(h, i)->lease->key;
}
int64_t dlock_fence(const dlock_handle *h) { return dlock_fence_at(h, 0); }
int dlock_handoff_seq(const dlock_handle *h) { return dlock_handoff_seq_at(h, 0); }
const char *dlock_key(const dlock_handle *h) { return dlock_key_at(h, 0); }
const char *dlock_token(const dlock_handle *h) { return dlock_holder_at(h, 0)->lease->token; }

int dlock_renewals(const dlock_handle *h)
{
    int most = 0;
    pthread_mutex_lock(&h->client->mu);
    for (int i = 0; i < dlock_key_count(h); i++) {
        const dlock_handle *p = dlock_holder_at(h, i);
        int n = p->lease->renewals - p->renewals_at_start;
        most = n > most ? n : most;
    }
    pthread_mutex_unlock(&h->client->mu);
    return most;
}

int dlock_hold_count(const dlock_handle *h)
{
    const dlock_handle *o = h->outer ? h->outer : h;
    pthread_mutex_lock(&h->client->mu);
    int n = o->parts ? 1 : o->holds;
    pthread_mutex_unlock(&h->client->mu);
    return n;
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

void dlock_stats_read(dlock_client *c, dlock_stats *s)
{
    const dlock_counters *k = &c->counters;
    s->acquired = atomic_load(&k->acquired);
    s->handoffs = atomic_load(&k->handoffs);
    s->timeouts = atomic_load(&k->timeouts);
    s->renewals = atomic_load(&k->renewals);
    s->interrupts = atomic_load(&k->interrupts);
    s->lost = atomic_load(&k->lost);
    s->redis_errors = atomic_load(&k->redis_errors);
    s->connects = atomic_load(&k->connects);
    s->orphaned = atomic_load(&k->orphaned);
    s->orphans_dropped = atomic_load(&k->orphans_dropped);
    s->wait_count = atomic_load(&k->wait_count);
    s->wait_sum_ms = atomic_load(&k->wait_sum_ms);
    for (int i = 0; i < DLOCK_WAIT_BUCKETS; i++)
        s->wait_buckets[i] = atomic_load(&k->wait_buckets[i]);
    s->hold_count = atomic_load(&k->hold_count);
    s->hold_sum_us = atomic_load(&k->hold_sum_us);
    for (int i = 0; i < DLOCK_HOLD_BUCKETS; i++)
        s->hold_buckets[i] = atomic_load(&k->hold_buckets[i]);
}
