/* dlock.c - the lock library's public API: clients, acquisition (spin mode
 * here, notify mode in queue.c), owner-checked release, the run-under-lock
 * helper, counters and errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"

const int dlock_wait_bucket_ms[DLOCK_WAIT_BUCKETS] = {1,   5,    10,   25,   50,    100,
                                                      250, 500, 1000, 2500, 10000, -1};

static _Thread_local char errbuf[256];
static _Thread_local int errcode;

int dlock_fail(int code, const char *fmt, ...)
{
    va_list ap;
    errcode = code;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
    return code;
}

const char *dlock_errstr(void) { return errbuf; }

int dlock_redis_failure(void) { return errcode == DLOCK_ERR_AUTH ? DLOCK_ERR_AUTH : DLOCK_ERR_REDIS; }

const char *dlock_strerror(int code)
{
    switch (code) {
    case DLOCK_OK: return "ok";
    case DLOCK_ERR_TIMEOUT: return "lock wait timed out";
    case DLOCK_ERR_REDIS: return "Redis unavailable";
    case DLOCK_ERR_LOST: return "lock lost";
    case DLOCK_ERR_INTERRUPTED: return "lock holder interrupted after max renewals";
    case DLOCK_ERR_INVALID: return "invalid argument";
    case DLOCK_ERR_NOMEM: return "out of memory";
    case DLOCK_ERR_AUTH: return "Redis authentication failed";
    default: return "unknown lock error";
    }
}

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
}

#define DLOCK_LEASE_MAX (24 * 3600 * 1000)

static int opts_check(const dlock_opts *o)
{
    if (o->lease_ms < 10 || o->lease_ms > DLOCK_LEASE_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "lease_ms must be 10..%d, got %d", DLOCK_LEASE_MAX,
                          o->lease_ms);
    if (o->wait_ms < 0 || o->retry_ms < 1 || o->max_renewals < 0 || o->handoff_max < 0 ||
        o->handoff_ms < 0)
        return dlock_fail(DLOCK_ERR_INVALID, "wait_ms, max_renewals and the hand-off bounds "
                                             "must be >= 0, retry_ms >= 1");
    if (o->wait_mode != DLOCK_WAIT_NOTIFY && o->wait_mode != DLOCK_WAIT_SPIN)
        return dlock_fail(DLOCK_ERR_INVALID, "wait_mode must be DLOCK_WAIT_NOTIFY or _SPIN");
    return DLOCK_OK;
}

int dlock_client_new(const dlock_config *cfg, dlock_client **out)
{
    *out = NULL;
    if (cfg == NULL || cfg->host == NULL || cfg->port < 1 || cfg->port > 65535 ||
        cfg->connect_timeout_ms < 1 || cfg->command_timeout_ms < 1)
        return dlock_fail(DLOCK_ERR_INVALID, "Redis host, port 1..65535 and timeouts >= 1 ms needed");
    dlock_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->pool = dlock_pool_new(cfg);
    c->keys = dlock_keytab_new();
    if (c->pool && c->keys && (c->wd = dlock_wd_start(c)) != NULL &&
        (c->sub = dlock_sub_start(c)) != NULL && (c->orphans = dlock_orphans_start(c)) != NULL) {
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
    if (c->sub)
        dlock_sub_stop(c->sub);
    if (c->wd)
        dlock_wd_stop(c->wd);
    dlock_keytab_free(c->keys);
    dlock_pool_free(c->pool);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Runs a script on a pooled connection; NULL (counted, errstr set) on
 * failure. *sent tells whether it may have run: not when no connection could
 * be had or Redis refused our credentials. */
static redisReply *script(dlock_client *c, enum dlock_script s, int nkeys, int nargs,
                          const char **argv, const size_t *lens, int *sent)
{
    redisContext *ctx = dlock_pool_get(c->pool);
    redisReply *r = ctx ? dlock_pool_script(c->pool, ctx, s, nkeys, nargs, argv, lens) : NULL;
    *sent = r != NULL || (ctx != NULL && dlock_redis_failure() != DLOCK_ERR_AUTH);
    if (ctx)
        dlock_pool_put(c->pool, ctx);
    if (r == NULL)
        atomic_fetch_add(&c->stats.redis_errors, 1);
    return r;
}

int dlock_ping(dlock_client *c)
{
    redisContext *ctx = dlock_pool_get(c->pool);
    if (ctx == NULL)
        return dlock_redis_failure();
    int rc = dlock_pool_ping(ctx);
    dlock_pool_put(c->pool, ctx);
    return rc;
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

static void make_token(char out[DLOCK_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[DLOCK_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) { /* getrandom only fails on EINTR here */
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DLOCK_TOKEN_LEN] = '\0';
}

int dlock_jitter_ms(int retry_ms)
{
    static _Thread_local uint64_t state;
    while (state == 0)
        if (getrandom(&state, sizeof(state), 0) != sizeof(state))
            state = 0;
    state ^= state << 13, state ^= state >> 7, state ^= state << 17; /* xorshift64 */
    return retry_ms / 2 + (int)(state % (uint64_t)(retry_ms + 1));
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void record_wait(dlock_client *c, int64_t waited_ms)
{
    int b = 0;
    while (b < DLOCK_WAIT_BUCKETS - 1 && waited_ms > dlock_wait_bucket_ms[b])
        b++;
    atomic_fetch_add(&c->stats.wait_buckets[b], 1);
    atomic_fetch_add(&c->stats.wait_count, 1);
    atomic_fetch_add(&c->stats.wait_sum_ms, (uint64_t)waited_ms);
}

struct dlock_lease *dlock_lease_new(dlock_client *c, const char *key, const dlock_opts *o)
{
    size_t klen = strlen(key);
    struct dlock_lease *l = calloc(1, sizeof(*l) + klen + 1);
    if (l == NULL)
        return NULL;
    l->client = c;
    l->lease_ms = o->lease_ms;
    l->retry_ms = o->retry_ms;
    l->handoff_max = o->handoff_max;
    l->handoff_ms = o->handoff_ms;
    memcpy(l->key, key, klen + 1);
    make_token(l->token);
    return l;
}

/* The five keys a lock uses, derived from its name. */
struct keys {
    char fence[DLOCK_KEY_MAX + 8], queue[DLOCK_KEY_MAX + 8], alive[DLOCK_KEY_MAX + 8],
        gone[DLOCK_KEY_MAX + 8];
    size_t len[5];
};

static void keys_of(const char *key, struct keys *k)
{
    size_t n = strlen(key);
    k->len[0] = n;
    k->len[1] = (size_t)snprintf(k->fence, sizeof(k->fence), "%s:fence", key);
    k->len[2] = (size_t)snprintf(k->queue, sizeof(k->queue), "%s:queue", key);
    k->len[3] = (size_t)snprintf(k->alive, sizeof(k->alive), "%s:alive", key);
    k->len[4] = (size_t)snprintf(k->gone, sizeof(k->gone), "%s:gone", key);
}

/* How long the fence counter and the gone set outlive their last write. */
static int keep_ms(int lease_ms)
{
    int64_t ms = (int64_t)lease_ms * DLOCK_KEEP_LEASES;
    return ms < INT32_MAX ? (int)ms : INT32_MAX;
}

int dlock_try_acquire(dlock_client *c, struct dlock_lease *l, int queue, int64_t *pttl)
{
    struct keys k;
    char lease[16], queue_ms[16], keep[16];
    keys_of(l->key, &k);
    int n = snprintf(lease, sizeof(lease), "%d", l->lease_ms);
    int q = snprintf(queue_ms, sizeof(queue_ms), "%d", queue ? dlock_grace_ms(l->retry_ms) : 0);
    int kp = snprintf(keep, sizeof(keep), "%d", keep_ms(l->lease_ms));
    const char *argv[] = {l->key, k.fence, k.queue, k.alive, k.gone, l->token, lease, queue_ms,
                          keep};
    size_t lens[] = {k.len[0], k.len[1], k.len[2], k.len[3], k.len[4], DLOCK_TOKEN_LEN,
                     (size_t)n, (size_t)q, (size_t)kp};

    int64_t sent_at = dlock_now_ms(); /* the lease can't have started before this */
    int sent;
    redisReply *r = script(c, DLOCK_SCRIPT_ACQUIRE, 5, 9, argv, lens, &sent);
    l->sent |= sent;
    if (r == NULL)
        return dlock_redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        rc = r->element[0]->integer == 1 ? DLOCK_OK : DLOCK_ERR_TIMEOUT;
        if (rc == DLOCK_OK)
            l->fence = r->element[1]->integer, l->acquired_ms = sent_at;
        else
            *pttl = r->element[1]->integer;
    } else {
        dlock_fail(rc, "unexpected reply to the acquire script");
    }
    freeReplyObject(r);
    return rc;
}

int dlock_release_in_redis(dlock_client *c, const struct dlock_lease *l, int leaving)
{
    struct keys k;
    char channel[DLOCK_CHANNEL_MAX], grant[16], keep[16];
    keys_of(l->key, &k);
    size_t clen = dlock_channel(l->key, channel);
    int grace = dlock_grace_ms(l->retry_ms);
    int g = snprintf(grant, sizeof(grant), "%d", grace < l->lease_ms ? grace : l->lease_ms);
    int kp = snprintf(keep, sizeof(keep), "%d", keep_ms(l->lease_ms));
    const char *argv[] = {l->key, k.fence, k.queue, k.alive, k.gone, l->token, channel, grant,
                          leaving ? "1" : "0", keep};
    size_t lens[] = {k.len[0], k.len[1], k.len[2], k.len[3], k.len[4], DLOCK_TOKEN_LEN, clen,
                     (size_t)g, 1, (size_t)kp};
    int sent;
    redisReply *r = script(c, DLOCK_SCRIPT_RELEASE, 5, 10, argv, lens, &sent);
    if (r == NULL) /* on DLOCK_ERR_REDIS the caller hands the lease to the watchdog */
        return dlock_redis_failure();
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    if (rc == DLOCK_ERR_LOST && !leaving)
        dlock_fail(rc, "lock %s was no longer ours at release", l->key);
    freeReplyObject(r);
    return rc;
}

void dlock_hold(dlock_client *c, struct dlock_handle *h, struct dlock_lease *l, int renew)
{
    h->lease = l;
    h->seq = 0;
    h->renewals_at_start = 0;
    l->holder = h;
    dlock_wd_watch(c->wd, l, renew);
}

/* Spin mode: this thread alone retries every jittered retry_ms. */
static int acquire_spin(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                        int64_t deadline)
{
    struct dlock_lease *l = dlock_lease_new(c, key, o);
    if (l == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    for (;;) {
        int64_t pttl;
        int rc = dlock_try_acquire(c, l, 0, &pttl); /* spin: polls, never queues */
        if (rc == DLOCK_OK) {
            pthread_mutex_lock(&c->mu);
            dlock_hold(c, h, l, o->watchdog);
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
        sleep_ms(pause < deadline - now ? pause : deadline - now);
    }
}

static dlock_handle *handle_new(dlock_client *c, const dlock_opts *o)
{
    dlock_handle *h = calloc(1, sizeof(*h));
    if (h == NULL || dlock_cond_init(&h->wake) != 0) {
        free(h);
        return NULL;
    }
    h->client = c;
    h->max_renewals = o->max_renewals;
    return h;
}

static void handle_free(dlock_handle *h)
{
    pthread_cond_destroy(&h->wake);
    free(h);
}

int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out)
{
    dlock_opts o;
    *out = NULL;
    if (opts == NULL)
        dlock_opts_defaults(&o);
    else
        o = *opts;
    size_t klen = key ? strnlen(key, DLOCK_KEY_MAX + 1) : 0;
    if (opts_check(&o) != DLOCK_OK || dlock_key_check(key, klen) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    dlock_handle *h = handle_new(c, &o);
    if (h == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");

    int64_t start = dlock_now_ms(), deadline = start + o.wait_ms;
    int rc = o.wait_mode == DLOCK_WAIT_SPIN ? acquire_spin(c, h, key, &o, deadline)
                                            : dlock_queue_acquire(c, h, key, &o, deadline);
    if (rc == DLOCK_OK || rc == DLOCK_ERR_TIMEOUT)
        record_wait(c, dlock_now_ms() - start);
    if (rc == DLOCK_OK) {
        atomic_fetch_add(&c->stats.acquired, 1);
        *out = h;
        return DLOCK_OK;
    }
    if (rc == DLOCK_ERR_TIMEOUT) {
        atomic_fetch_add(&c->stats.timeouts, 1);
        dlock_fail(rc, "lock %s still held by another owner after %d ms", key, o.wait_ms);
    }
    handle_free(h);
    return rc;
}

/* Hands h's lease to a local waiter, or gives it back to Redis. Frees h.
 * Returns what dlock_release documents; *local gets the holder's own view at
 * release (OK, INTERRUPTED or LOST), which stands when Redis can't be asked. */
static int release(dlock_handle *h, int *local)
{
    dlock_client *c = h->client;
    struct dlock_lease *l = h->lease;
    struct dlock_entry *e = h->entry;
    pthread_mutex_lock(&c->mu);
    *local = dlock_holder_state(h, dlock_now_ms());
    if (e && *local == DLOCK_OK && dlock_queue_handoff(c, h)) {
        pthread_mutex_unlock(&c->mu);
        handle_free(h);
        return DLOCK_OK;
    }
    l->holder = NULL;
    dlock_wd_forget(c->wd, l);
    if (e && e->holder == h) { /* not when a waiter took over our expired lease */
        e->holder = NULL;
        e->releases++;
        if (e->head)
            pthread_cond_signal(&e->head->cv); /* it contends, and our PUBLISH wakes it */
    }
    pthread_mutex_unlock(&c->mu);

    int rc = dlock_release_in_redis(c, l, 0);
    if (rc == DLOCK_OK && *local == DLOCK_ERR_INTERRUPTED)
        rc = DLOCK_ERR_INTERRUPTED;
    if (rc == DLOCK_ERR_LOST || (rc == DLOCK_ERR_REDIS && *local == DLOCK_ERR_LOST))
        atomic_fetch_add(&c->stats.lost, 1);
    pthread_mutex_lock(&c->mu);
    if (e)
        dlock_queue_leave(c, e);
    if (rc == DLOCK_ERR_REDIS) /* retried in the background; the key is still ours */
        dlock_orphans_add(c->orphans, l);
    else
        free(l);
    pthread_mutex_unlock(&c->mu);
    handle_free(h);
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
    /* now is cut to the millisecond: one more never sleeps short */
    int64_t now = dlock_now_ms(), end = now + (ms > 0 ? ms + 1 : 0);
    int st;
    pthread_mutex_lock(&c->mu);
    while ((st = dlock_holder_state(h, now)) == DLOCK_OK && now < end) {
        /* also wake when the local lease deadline passes: that is a loss too */
        int64_t until = h->lease->valid_until_ms;
        dlock_cond_wait_until(&h->wake, &c->mu, end < until ? end : until);
        now = dlock_now_ms();
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int64_t dlock_fence(const dlock_handle *h) { return h->lease->fence; }
int dlock_handoff_seq(const dlock_handle *h) { return h->seq; }
const char *dlock_token(const dlock_handle *h) { return h->lease->token; }
const char *dlock_key(const dlock_handle *h) { return h->lease->key; }

int dlock_renewals(const dlock_handle *h)
{
    pthread_mutex_lock(&h->client->mu);
    int n = h->lease->renewals - h->renewals_at_start;
    pthread_mutex_unlock(&h->client->mu);
    return n;
}

int dlock_run(dlock_client *c, const char *key, const dlock_opts *opts, dlock_fn fn, void *arg,
              int *fn_rc)
{
    dlock_handle *h;
    int rc = dlock_acquire(c, key, opts, &h);
    if (rc != DLOCK_OK)
        return rc;
    int result = fn(h, arg);
    if (fn_rc)
        *fn_rc = result;
    int local;
    rc = release(h, &local);
    /* fn already ran: a release that could not reach Redis leaves the lease to
     * expire, and what the holder knew at the end is the honest answer */
    return rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH ? local : rc;
}

void dlock_stats_read(dlock_client *c, dlock_stats *s)
{
    s->acquired = atomic_load(&c->stats.acquired);
    s->handoffs = atomic_load(&c->stats.handoffs);
    s->timeouts = atomic_load(&c->stats.timeouts);
    s->renewals = atomic_load(&c->stats.renewals);
    s->interrupts = atomic_load(&c->stats.interrupts);
    s->lost = atomic_load(&c->stats.lost);
    s->redis_errors = atomic_load(&c->stats.redis_errors);
    s->connects = dlock_pool_connects(c->pool);
    s->orphaned = atomic_load(&c->stats.orphaned);
    s->orphans_dropped = atomic_load(&c->stats.orphans_dropped);
    s->wait_count = atomic_load(&c->stats.wait_count);
    s->wait_sum_ms = atomic_load(&c->stats.wait_sum_ms);
    for (int i = 0; i < DLOCK_WAIT_BUCKETS; i++)
        s->wait_buckets[i] = atomic_load(&c->stats.wait_buckets[i]);
}
