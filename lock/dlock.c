/* dlock.c - the lock library's public API: clients, acquire with waiting,
 * owner-checked release, the run-under-lock helper, counters and errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"

const int dlock_wait_bucket_ms[DLOCK_WAIT_BUCKETS] = {1,   5,    10,   25,   50,    100,
                                                      250, 500, 1000, 2500, 10000, -1};

static _Thread_local char errbuf[256];

int dlock_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
    return code;
}

const char *dlock_errstr(void) { return errbuf; }

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
    default: return "unknown lock error";
    }
}

void dlock_config_defaults(dlock_config *cfg)
{
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
}

#define DLOCK_LEASE_MAX (24 * 3600 * 1000)

static int opts_check(const dlock_opts *o)
{
    if (o->lease_ms < 10 || o->lease_ms > DLOCK_LEASE_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "lease_ms must be 10..%d, got %d", DLOCK_LEASE_MAX,
                          o->lease_ms);
    if (o->wait_ms < 0 || o->retry_ms < 1 || o->max_renewals < 0)
        return dlock_fail(DLOCK_ERR_INVALID,
                          "wait_ms and max_renewals must be >= 0, retry_ms >= 1");
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
    c->pool = dlock_pool_new(cfg->host, cfg->port, cfg->connect_timeout_ms,
                             cfg->command_timeout_ms);
    if (c->pool == NULL || (c->wd = dlock_wd_start(c)) == NULL) {
        dlock_pool_free(c->pool);
        free(c);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory or threads");
    }
    *out = c;
    return DLOCK_OK;
}

void dlock_client_free(dlock_client *c)
{
    if (c == NULL)
        return;
    dlock_wd_stop(c->wd);
    dlock_pool_free(c->pool);
    free(c);
}

/* Runs a script on a pooled connection; NULL (counted, errstr set) on failure. */
static redisReply *script(dlock_client *c, enum dlock_script s, int nkeys, int nargs,
                          const char **argv, const size_t *lens)
{
    redisContext *ctx = dlock_pool_get(c->pool);
    redisReply *r = ctx ? dlock_pool_script(c->pool, ctx, s, nkeys, nargs, argv, lens) : NULL;
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
        return DLOCK_ERR_REDIS;
    redisReply *r = redisCommand(ctx, "PING");
    int rc = (r != NULL && r->type == REDIS_REPLY_STATUS) ? DLOCK_OK : DLOCK_ERR_REDIS;
    if (rc != DLOCK_OK)
        dlock_fail(rc, "Redis did not answer PING: %s", ctx->err ? ctx->errstr : "error reply");
    freeReplyObject(r);
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

/* A pause of 0.5x..1.5x retry_ms, so waiters drift apart instead of retrying in step. */
static int jittered(int retry_ms)
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

/* One SET NX attempt. Returns DLOCK_OK (h->fence set), DLOCK_ERR_TIMEOUT when
 * another owner holds the key, or DLOCK_ERR_REDIS. */
static int try_acquire(dlock_client *c, dlock_handle *h)
{
    char fence_key[DLOCK_KEY_MAX + 8], lease[16];
    size_t klen = strlen(h->key);
    memcpy(fence_key, h->key, klen);
    memcpy(fence_key + klen, ":fence", 7);
    int n = snprintf(lease, sizeof(lease), "%d", h->lease_ms);
    const char *argv[] = {h->key, fence_key, h->token, lease};
    size_t lens[] = {klen, klen + 6, DLOCK_TOKEN_LEN, (size_t)n};

    redisReply *r = script(c, DLOCK_SCRIPT_ACQUIRE, 2, 4, argv, lens);
    if (r == NULL)
        return DLOCK_ERR_REDIS;
    int rc = DLOCK_ERR_REDIS;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        rc = r->element[0]->integer == 1 ? DLOCK_OK : DLOCK_ERR_TIMEOUT;
        if (rc == DLOCK_OK)
            h->fence = r->element[1]->integer;
    } else {
        dlock_fail(rc, "unexpected reply to the acquire script");
    }
    freeReplyObject(r);
    return rc;
}

static dlock_handle *handle_new(dlock_client *c, const char *key, size_t klen, const dlock_opts *o)
{
    dlock_handle *h = calloc(1, sizeof(*h) + klen + 1);
    if (h == NULL || dlock_cond_init(&h->wake) != 0) {
        free(h);
        return NULL;
    }
    h->client = c;
    h->lease_ms = o->lease_ms;
    h->max_renewals = o->max_renewals;
    memcpy(h->key, key, klen + 1);
    make_token(h->token);
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
    dlock_handle *h = handle_new(c, key, klen, &o);
    if (h == NULL)
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");

    int64_t start = dlock_now_ms(), deadline = start + o.wait_ms;
    for (;;) {
        int64_t sent = dlock_now_ms(); /* the lease can't have started before this */
        int rc = try_acquire(c, h);
        int64_t now = dlock_now_ms();
        if (rc == DLOCK_OK) {
            record_wait(c, now - start);
            atomic_fetch_add(&c->stats.acquired, 1);
            dlock_wd_watch(c->wd, h, sent, o.watchdog);
            *out = h;
            return DLOCK_OK;
        }
        if (rc == DLOCK_ERR_TIMEOUT && now >= deadline) {
            record_wait(c, now - start);
            atomic_fetch_add(&c->stats.timeouts, 1);
            rc = dlock_fail(rc, "lock %s still held by another owner after %d ms", key, o.wait_ms);
        }
        if (rc != DLOCK_ERR_TIMEOUT || now >= deadline) {
            handle_free(h);
            return rc;
        }
        int64_t pause = jittered(o.retry_ms);
        sleep_ms(pause < deadline - now ? pause : deadline - now);
    }
}

/* Forgets h in the watchdog, runs the owner-checked delete, frees h. Returns
 * what dlock_release documents; *local gets the holder's own view at release
 * (OK, INTERRUPTED or LOST), which stands when Redis can't be asked. */
static int release(dlock_handle *h, int *local)
{
    dlock_client *c = h->client;
    *local = dlock_wd_forget(c->wd, h);
    const char *argv[] = {h->key, h->token};
    size_t lens[] = {strlen(h->key), DLOCK_TOKEN_LEN};
    redisReply *r = script(c, DLOCK_SCRIPT_RELEASE, 1, 2, argv, lens);
    int rc;
    if (r == NULL)
        rc = DLOCK_ERR_REDIS; /* the lease runs out on its own */
    else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
        rc = *local == DLOCK_ERR_INTERRUPTED ? DLOCK_ERR_INTERRUPTED : DLOCK_OK;
    else
        rc = dlock_fail(DLOCK_ERR_LOST, "lock %s was no longer ours at release", h->key);
    if (rc == DLOCK_ERR_LOST || (rc == DLOCK_ERR_REDIS && *local == DLOCK_ERR_LOST))
        atomic_fetch_add(&c->stats.lost, 1);
    freeReplyObject(r);
    handle_free(h);
    return rc;
}

int dlock_release(dlock_handle *h)
{
    int local;
    return h ? release(h, &local) : DLOCK_OK;
}

int dlock_check(dlock_handle *h) { return dlock_wd_check(h->client->wd, h); }

int dlock_sleep(dlock_handle *h, int ms) { return dlock_wd_sleep(h->client->wd, h, ms); }

int64_t dlock_fence(const dlock_handle *h) { return h->fence; }
const char *dlock_token(const dlock_handle *h) { return h->token; }
const char *dlock_key(const dlock_handle *h) { return h->key; }

int dlock_renewals(const dlock_handle *h) { return dlock_wd_renewals(h->client->wd, h); }

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
    return rc == DLOCK_ERR_REDIS ? local : rc;
}

void dlock_stats_read(dlock_client *c, dlock_stats *s)
{
    s->acquired = atomic_load(&c->stats.acquired);
    s->timeouts = atomic_load(&c->stats.timeouts);
    s->renewals = atomic_load(&c->stats.renewals);
    s->interrupts = atomic_load(&c->stats.interrupts);
    s->lost = atomic_load(&c->stats.lost);
    s->redis_errors = atomic_load(&c->stats.redis_errors);
    s->wait_count = atomic_load(&c->stats.wait_count);
    s->wait_sum_ms = atomic_load(&c->stats.wait_sum_ms);
    for (int i = 0; i < DLOCK_WAIT_BUCKETS; i++)
        s->wait_buckets[i] = atomic_load(&c->stats.wait_buckets[i]);
}
