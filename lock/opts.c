/* opts.c - what a caller passes, defaulted and checked before anything
 * reaches Redis: a client's configuration (its servers or Sentinels parsed
 * from a list), an acquisition's options, a key. */
#include "lock/opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lock/err.h"

void dlock_config_defaults(dlock_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->connect_timeout_ms = 500;
    cfg->command_timeout_ms = 1000;
    cfg->async_threads = DLOCK_ASYNC_THREADS_DEFAULT;
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
        return dlock__fail(DLOCK_ERR_INVALID, "lease_ms must be %d..%d, got %d",
                           DLOCK_LEASE_MIN_MS, DLOCK_LEASE_MAX_MS, o->lease_ms);
    if (o->wait_ms < 0 || o->retry_ms < 1 || o->max_renewals < 0 || o->handoff_max < 0 ||
        o->handoff_ms < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "wait_ms, max_renewals and the hand-off bounds "
                                              "must be >= 0, retry_ms >= 1");
    if (o->retry_ms > o->lease_ms) /* a waiter's grace, 2 retry_ms + 100, sizes its grant */
        return dlock__fail(DLOCK_ERR_INVALID, "retry_ms (%d) must not exceed lease_ms (%d): a "
                           "grant to a waiter holds the key for its grace, 2 retry_ms + 100, "
                           "up to a lease", o->retry_ms, o->lease_ms);
    if (o->wait_mode != DLOCK_WAIT_NOTIFY && o->wait_mode != DLOCK_WAIT_SPIN)
        return dlock__fail(DLOCK_ERR_INVALID, "wait_mode must be DLOCK_WAIT_NOTIFY or _SPIN");
    if (o->reentrant != 0 && o->reentrant != 1)
        return dlock__fail(DLOCK_ERR_INVALID, "reentrant must be 0 or 1");
    return DLOCK_OK;
}

/* Parses one "host[:port]" or "[v6]:port" of length len into e (port
 * def_port when none is given). 0 or -1. */
static int parse_endpoint(const char *s, size_t len, int def_port, dlock_endpoint *e)
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
    e->port = def_port;
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

/* Parses "host:port[,host:port...]" into out[0..max-1]: their count, or -1
 * with the error set, what naming them ("Redis server", "Sentinel"). */
static int parse_endpoints(const char *list, int def_port, const char *what,
                           dlock_endpoint *out, int max)
{
    int n = 0;
    for (const char *p = list ? list : "";;) {
        size_t len = strcspn(p, ",");
        if (n == max)
            return dlock__fail(DLOCK_ERR_INVALID, "at most %d %ss", max, what), -1;
        if (parse_endpoint(p, len, def_port, &out[n]) != 0)
            return dlock__fail(DLOCK_ERR_INVALID, "bad %s \"%.*s\": expected host:port "
                               "(or [v6addr]:port)", what, (int)len, p), -1;
        n++;
        if (p[len] == '\0')
            return n;
        p += len + 1;
    }
}

int dlock_config_nodes(dlock_config *cfg, const char *list)
{
    dlock_endpoint nodes[DLOCK_NODES_MAX];
    int n = parse_endpoints(list, 6379, "Redis server", nodes, DLOCK_NODES_MAX);
    if (n < 0)
        return DLOCK_ERR_INVALID;
    memcpy(cfg->node, nodes, (size_t)n * sizeof(*nodes));
    cfg->nodes = n;
    return DLOCK_OK;
}

int dlock_config_cluster(dlock_config *cfg, const char *seeds)
{
    int rc = dlock_config_nodes(cfg, seeds);
    if (rc == DLOCK_OK)
        cfg->cluster = 1;
    return rc;
}

int dlock_config_sentinels(dlock_config *cfg, const char *list)
{
    dlock_endpoint sentinels[DLOCK_SENTINELS_MAX];
    int n = parse_endpoints(list, 26379, "Sentinel", sentinels, DLOCK_SENTINELS_MAX);
    if (n < 0)
        return DLOCK_ERR_INVALID;
    memcpy(cfg->sentinel, sentinels, (size_t)n * sizeof(*sentinels));
    cfg->sentinels = n;
    return DLOCK_OK;
}

/* The Sentinel fields: none, or Sentinels, a master name and no quorum. */
static int sentinel_check(const dlock_config *cfg)
{
    if (cfg->sentinels == 0)
        return DLOCK_OK;
    if (cfg->sentinels < 0 || cfg->sentinels > DLOCK_SENTINELS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "1..%d Sentinels", DLOCK_SENTINELS_MAX);
    for (int i = 0; i < cfg->sentinels; i++)
        if (cfg->sentinel[i].host[0] == '\0' || cfg->sentinel[i].port < 1 ||
            cfg->sentinel[i].port > 65535)
            return dlock__fail(DLOCK_ERR_INVALID, "Sentinel %d: host and port 1..65535 needed",
                               i + 1);
    if (cfg->master_name == NULL || cfg->master_name[0] == '\0' ||
        strlen(cfg->master_name) > DLOCK_MASTER_NAME_MAX ||
        strpbrk(cfg->master_name, " \t\r\n") != NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "with Sentinels, a master name of 1..%d bytes "
                           "without spaces is needed (the name in Sentinel's \"sentinel monitor\")",
                           DLOCK_MASTER_NAME_MAX);
    if (cfg->cluster)
        return dlock__fail(DLOCK_ERR_INVALID, "Sentinel and a Redis Cluster exclude each other: "
                           "a cluster fails its primaries over itself");
    if (cfg->nodes > 1)
        return dlock__fail(DLOCK_ERR_INVALID, "Sentinel and a quorum of %d servers exclude each "
                           "other: Sentinel names one primary", cfg->nodes);
    return DLOCK_OK;
}

int dlock__config_check(const dlock_config *cfg)
{
    int ok = cfg != NULL && cfg->connect_timeout_ms >= 1 && cfg->command_timeout_ms >= 1 &&
             cfg->nodes >= 0 && cfg->nodes <= DLOCK_NODES_MAX &&
             (!cfg->cluster || cfg->nodes > 0); /* a cluster needs its seeds */
    if (ok && cfg->nodes == 0)
        ok = cfg->host != NULL && cfg->port >= 1 && cfg->port <= 65535;
    for (int i = 0; ok && i < cfg->nodes; i++)
        ok = cfg->node[i].host[0] != '\0' && cfg->node[i].port >= 1 && cfg->node[i].port <= 65535;
    if (!ok)
        return dlock__fail(DLOCK_ERR_INVALID, "Redis host, port 1..65535 (for 1..%d servers) and "
                           "timeouts >= 1 ms needed", DLOCK_NODES_MAX);
    if (cfg->async_threads < 1 || cfg->async_threads > DLOCK_ASYNC_THREADS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "async_threads must be 1..%d, got %d",
                           DLOCK_ASYNC_THREADS_MAX, cfg->async_threads);
    return sentinel_check(cfg);
}

int dlock_key_check(const char *key, size_t len)
{
    if (key == NULL || len == 0)
        return dlock__fail(DLOCK_ERR_INVALID, "lock key is empty");
    if (len > DLOCK_KEY_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "lock key is %zu bytes, the limit is %d", len,
                           DLOCK_KEY_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
            return dlock__fail(DLOCK_ERR_INVALID, "lock key has a control byte (0x%02x) at %zu",
                               (unsigned char)key[i], i);
    return DLOCK_OK;
}

int dlock__opts_of(const dlock_opts *opts, dlock_opts *o)
{
    if (opts == NULL)
        dlock_opts_defaults(o);
    else
        *o = *opts;
    return dlock_opts_check(o);
}
