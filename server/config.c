/* config.c - stockd's settings from one table: defaults, STOCKD_* environment
 * variables, flags, and the --help text all come from it. */
#include "server/config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "server/log.h"

enum opt_type { OPT_INT, OPT_STR, OPT_BOOL, OPT_CHOICE, OPT_LIST }; /* OPT_LIST: a string,
                                                                   * "" allowed (empty list) */

struct opt {
    const char *flag; /* without the leading "--" */
    const char *env;
    enum opt_type type;
    size_t offset;
    int min, max;        /* OPT_INT bounds */
    const char *const *choices; /* OPT_CHOICE: NULL-terminated names, stored as the index */
    const char *help;
};

#define F(field) offsetof(stockd_config, field)
static const char *const sync_modes[] = {"normal", "full", NULL}; /* stored: 1 = full */
static const char *const wait_modes[] = {[DLOCK_WAIT_NOTIFY] = "notify",
                                         [DLOCK_WAIT_SPIN] = "spin", NULL};
static const char *const off_on[] = {"off", "on", NULL};

static const struct opt opts[] = {
    {"bind", "STOCKD_BIND", OPT_STR, F(http.bind), 0, 0, NULL, "listen address"},
    {"port", "STOCKD_PORT", OPT_INT, F(http.port), 1, 65535, NULL, "HTTP port"},
    {"probe-port", "STOCKD_PROBE_PORT", OPT_INT, F(probe_port), 0, 65535, NULL,
     "a second port, on an event thread of its own, that answers GET /health and /metrics "
     "only: a load balancer's or Prometheus's probes never queue behind a flood of orders "
     "on the main port's event threads; 0: none (the main port answers them as always)"},
    {"db", "STOCKD_DB", OPT_STR, F(service.store.db), 0, 0, NULL,
     "the database: a SQLite file path (shared by the replicas of one host), or PostgreSQL "
     "as postgresql://user@host:port/dbname or a libpq conninfo (replicas on several hosts)"},
    {"db-password-file", "STOCKD_DB_PASSWORD_FILE", OPT_STR, F(db_password_file), 0, 0, NULL,
     "PostgreSQL: file holding the password (one line); without it, libpq's own (PGPASSFILE, "
     "~/.pgpass)"},
    {"db-pool", "STOCKD_DB_POOL", OPT_INT, F(service.store.pool_size), 1, 256, NULL,
     "PostgreSQL: connections per replica; a request waits up to busy-timeout-ms for a free "
     "one, then 503 storage_busy"},
    {"db-timeout-ms", "STOCKD_DB_TIMEOUT_MS", OPT_INT, F(service.store.timeout_ms), 100, 600000,
     NULL, "PostgreSQL: bound on one statement (statement_timeout), then 503 storage_busy; a "
     "server that does not answer at all a grace later (a quarter, 1 to 2 s) has its session "
     "dropped, 503 storage_unavailable (a COMMIT's outcome is then looked for); a connect "
     "gets the same bound, shared among the hosts of a multi-host --db, at least 2 s a host "
     "(the conninfo's connect_timeout a host when it sets one)"},
    {"db-wait-s", "STOCKD_DB_WAIT_S", OPT_INT, F(db_wait_s), 0, 86400, NULL,
     "PostgreSQL: at start-up, how long to wait for a server that can't be reached yet "
     "(starting with the stack, restarting), trying again with backoff and logging each "
     "attempt, then exit 1; a refusal (password, database name) exits at once; 0 = try once"},
    {"sync", "STOCKD_SYNC", OPT_CHOICE, F(service.store.sync_full), 0, 0, sync_modes,
     "full fsyncs every commit; normal survives a process crash only (PostgreSQL: "
     "synchronous_commit on or off)"},
    {"busy-timeout-ms", "STOCKD_BUSY_TIMEOUT_MS", OPT_INT, F(service.store.busy_timeout_ms), 0,
     600000, NULL, "how long a write waits for a locked database (SQLite), or a request for "
     "a free connection (PostgreSQL), before 503 storage_busy"},
    {"redis", "STOCKD_REDIS", OPT_STR, F(redis_servers), 0, 0, NULL,
     "Redis as host:port, or several independent servers host:port,host:port,... (at most "
     "7; an odd number): the lock is then held on a majority of them (Redlock). Overrides "
     "--redis-host and --redis-port"},
    {"redis-cluster", "STOCKD_REDIS_CLUSTER", OPT_STR, F(redis_cluster), 0, 0, NULL,
     "a Redis Cluster, by seed nodes host:port[,host:port...] (at most 7): each item's "
     "lock goes to the primary that owns its hash slot (the keys carry {item}), following "
     "MOVED, ASK and failovers. Overrides --redis"},
    {"redis-host", "STOCKD_REDIS_HOST", OPT_STR, F(service.redis.host), 0, 0, NULL,
     "Redis host (one server; see --redis)"},
    {"redis-port", "STOCKD_REDIS_PORT", OPT_INT, F(service.redis.port), 1, 65535, NULL,
     "Redis port"},
    {"redis-user", "STOCKD_REDIS_USER", OPT_STR, F(service.redis.username), 0, 0, NULL,
     "Redis ACL user to authenticate as (default: Redis's default user)"},
    {"redis-password-file", "STOCKD_REDIS_PASSWORD_FILE", OPT_STR, F(redis_password_file), 0, 0,
     NULL, "file holding the Redis password (one line); without it, STOCKD_REDIS_PASSWORD from "
     "the environment, if set. Every Redis connection sends AUTH"},
    {"redis-sentinel", "STOCKD_REDIS_SENTINEL", OPT_STR, F(redis_sentinels), 0, 0, NULL,
     "Redis behind Sentinel: the Sentinels as host:port[,host:port...] (at most 7; port "
     "26379 when left out); the lock's server is the primary they name for --redis-master, "
     "followed across failovers without a restart. Excludes --redis"},
    {"redis-master", "STOCKD_REDIS_MASTER", OPT_STR, F(service.redis.master_name), 0, 0, NULL,
     "with --redis-sentinel: the master's name as the Sentinels monitor it"},
    {"redis-sentinel-password-file", "STOCKD_REDIS_SENTINEL_PASSWORD_FILE", OPT_STR,
     F(sentinel_password_file), 0, 0, NULL, "file holding the Sentinels' own password (one "
     "line), sent as AUTH to each Sentinel only: the data servers keep their own password"},
    {"redis-timeout-ms", "STOCKD_REDIS_TIMEOUT_MS", OPT_INT, F(service.redis.command_timeout_ms),
     2, 60000, NULL, "bound on one Redis command (connects get half); at most lease-ms / 6"},
    {"lock", "STOCKD_LOCK", OPT_CHOICE, F(service.lock_mode), 0, 0, service_lock_mode_names,
     "redis: read-work-write under the distributed lock; none: the same without a lock (races); "
     "atomic: one conditional UPDATE, no lock; db: read-work-write holding the rows' locks "
     "(SELECT ... FOR UPDATE, waiting up to wait-ms; PostgreSQL only)"},
    {"lock-prefix", "STOCKD_LOCK_PREFIX", OPT_STR, F(service.lock_prefix), 0, 0, NULL,
     "lock key prefix; the key is <prefix>{<itemId>}"},
    {"lease-ms", "STOCKD_LEASE_MS", OPT_INT, F(service.lock.lease_ms), DLOCK_LEASE_MIN_MS,
     DLOCK_LEASE_MAX_MS, NULL, "lock lease (TTL); renewed every lease/3"},
    {"wait-ms", "STOCKD_WAIT_MS", OPT_INT, F(service.lock.wait_ms), 0, 600000, NULL,
     "how long a request waits for the lock before 503 lock_timeout; 0 = try once"},
    {"retry-ms", "STOCKD_RETRY_MS", OPT_INT, F(service.lock.retry_ms), 1, 60000, NULL,
     "pause between lock attempts (jittered 0.5x..1.5x)"},
    {"max-renewals", "STOCKD_MAX_RENEWALS", OPT_INT, F(service.lock.max_renewals), 0, 1000000,
     NULL, "renewals before the holder is interrupted; 0 = never"},
    {"wait-mode", "STOCKD_WAIT_MODE", OPT_CHOICE, F(service.lock.wait_mode), 0, 0, wait_modes,
     "notify: waiters queue per item and wake on the release's PUBLISH; spin: each request "
     "polls Redis every retry-ms"},
    {"handoff-max", "STOCKD_HANDOFF_MAX", OPT_INT, F(service.lock.handoff_max), 0, 1000000, NULL,
     "notify mode: hand the lock to a waiting request of this replica up to N times in a row "
     "before releasing it through Redis; 0 = never"},
    {"handoff-ms", "STOCKD_HANDOFF_MS", OPT_INT, F(service.lock.handoff_ms), 0, 600000, NULL,
     "...and no hand-off once the lease is this old, so other replicas get their turn"},
    {"batch", "STOCKD_BATCH", OPT_CHOICE, F(service.batch), 0, 0, off_on,
     "group commit: requests for one item (without workMs) are applied under one lock hold "
     "in one transaction (redis mode)"},
    {"sweep-ms", "STOCKD_SWEEP_MS", OPT_INT, F(service.sweep_ms), 0, 60000, NULL,
     "how often this replica looks for held reservations past their expiresAt and gives "
     "their units back (redis mode: the replica holding the sweep lock <lock-prefix>sweep, "
     "one at a time; other modes: every replica); 0: never (another replica must)"},
    {"sweep-batch", "STOCKD_SWEEP_BATCH", OPT_INT, F(service.sweep_batch), 1,
     SERVICE_SWEEP_BATCH_MAX, NULL,
     "reservations given back per pass of the sweep, at most (each pass one transaction, "
     "under the locks of at most 32 items): passes follow one another for half of each "
     "--sweep-ms at most, so that a mass of lapsed holds never stalls orders"},
    {"no-fencing", "STOCKD_NO_FENCING", OPT_BOOL, F(no_fencing), 0, 0, NULL,
     "TEST ONLY: skip the fencing-token check on writes (lets a stale holder oversell)"},
    {"test-stop-before-write", "STOCKD_TEST_STOP_BEFORE_WRITE", OPT_BOOL,
     F(service.stop_before_write), 0, 0, NULL,
     "TEST ONLY: once, stop this process (SIGSTOP) after the lock check and before the write, "
     "as a GC pause or swap-in at the worst moment would"},
    {"allow-work-ms", "STOCKD_ALLOW_WORK_MS", OPT_BOOL, F(service.allow_work_ms), 0, 0, NULL,
     "honour workMs (simulated work while holding the lock) in requests"},
    {"max-work-ms", "STOCKD_MAX_WORK_MS", OPT_INT, F(service.max_work_ms), 0, RULE_WORK_MS_MAX,
     NULL, "cap on workMs"},
    /* issue 33: reservations */
    {"hold-ms", "STOCKD_HOLD_MS", OPT_INT, F(service.hold_ms), RULE_HOLD_MS_MIN,
     RULE_HOLD_MS_CAP, NULL, "how long a reservation holds its units when POST /reservations "
     "gives no holdMs; at most --max-hold-ms"},
    {"max-hold-ms", "STOCKD_MAX_HOLD_MS", OPT_INT, F(service.max_hold_ms), RULE_HOLD_MS_MIN,
     RULE_HOLD_MS_CAP, NULL, "the longest holdMs a reservation (or its extend) may ask for; "
     "longer is refused with 400"},
    {"instance-id", "STOCKD_INSTANCE_ID", OPT_STR, F(service.instance_id), 0, 0, NULL,
     "name recorded in the ledger (default <hostname>:<port>)"},
    {"max-connections", "STOCKD_MAX_CONNECTIONS", OPT_INT, F(http.max_connections), 0, 1000000,
     NULL, "concurrent HTTP connections; a connection past them has its requests answered 503 "
     "too_many_connections (Retry-After: 1) and is closed. 0: as many as the open-files limit "
     "leaves after what the store and Redis need; a number that does not fit is lowered to what "
     "does, with a warning"},
    {"workers", "STOCKD_WORKERS", OPT_INT, F(service.workers), 0, 256, NULL,
     "service threads: the store's calls, the commits of group commit and the grants of locks "
     "run on them; 0: the number of cores + 6 (with a database server, at most --db-pool - 2, "
     "so that no thread waits for a connection). A request that waits (for a lock, a commit, "
     "its workMs, a row lock) holds none"},
    {"lock-threads", "STOCKD_LOCK_THREADS", OPT_INT, F(service.redis.async_threads), 1, 64, NULL,
     "libdlock's threads that make the Redis calls of the locks waited for without a thread, "
     "however many wait"},
    {"http-threads", "STOCKD_HTTP_THREADS", OPT_INT, F(http.threads), 0, 256, NULL,
     "event threads reading requests and sending answers; 0: one per core"},
    {"max-connections-per-ip", "STOCKD_MAX_CONNECTIONS_PER_IP", OPT_INT, F(http.max_per_ip), 0,
     100000, NULL, "concurrent HTTP connections from one client address; more are refused, so "
     "one client can't take them all; 0 = no limit. Connections from --trusted-proxies don't "
     "count: each client they forward may have this many requests in flight instead (429 "
     "too_many_requests past them)"},
    {"trusted-proxies", "STOCKD_TRUSTED_PROXIES", OPT_LIST, F(trusted_proxies), 0, 0, NULL,
     "proxies (a load balancer) whose X-Forwarded-For is believed, as IPv4 addresses or "
     "networks a.b.c.d/n, comma-separated: from a peer inside them, the client is the "
     "rightmost address of X-Forwarded-For that is not itself trusted, for the log "
     "(client=), --max-connections-per-ip and the metrics; from any other peer the header "
     "is ignored. Empty: trust nobody"},
    {"request-timeout-ms", "STOCKD_REQUEST_TIMEOUT_MS", OPT_INT, F(http.request_timeout_ms), 100,
     3600000, NULL, "a request's headers and body must arrive within this of its request line, "
     "however steadily they trickle; the connection is closed otherwise"},
    {"idle-timeout-s", "STOCKD_IDLE_TIMEOUT_S", OPT_INT, F(http.idle_timeout_s), 1, 3600, NULL,
     "close a connection that sends nothing for this long, or whose next request line takes "
     "longer than this to arrive"},
    {"drain-ms", "STOCKD_DRAIN_MS", OPT_INT, F(drain_ms), 0, 3600000, NULL,
     "on SIGTERM/SIGINT, how long to let in-flight requests finish"},
    {"drain-notice-ms", "STOCKD_DRAIN_NOTICE_MS", OPT_INT, F(drain_notice_ms), 0, 600000, NULL,
     "on SIGTERM/SIGINT, first serve as usual this long while GET /health answers 503 "
     "\"draining\", so that a load balancer's check takes the replica out of its pool before "
     "it refuses anything; then the drain (--drain-ms). 0: no notice"},
    /* issue 27: who may ask what */
    {"api-tokens-file", "STOCKD_API_TOKENS_FILE", OPT_STR, F(api_tokens_file), 0, 0, NULL,
     "the API tokens, one \"ROLE NAME TOKEN\" a line (ROLE buyer, operator or scrape; TOKEN "
     "the token or sha256:HEX of it; # starts a comment), sent as Authorization: Bearer "
     "TOKEN. With it the catalog (POST /items, PUT /items/{id}) needs an operator token, and "
     "buying and /metrics need a buyer's or a scrape token once the file has such a line; "
     "/health stays open. SIGHUP reads it again. Without it every route is open"},
    {"log-level", "STOCKD_LOG_LEVEL", OPT_CHOICE, F(log_level), 0, 0, log_level_names,
     "lowest level logged: info has a line per order (placed, replayed or not placed); warn "
     "keeps the failures that need a look (lock and storage trouble) and quiets the rest; "
     "debug adds a line per HTTP request"},
    {"log-format", "STOCKD_LOG_FORMAT", OPT_CHOICE, F(log_format), 0, 0, log_format_names,
     "text: one logfmt line per event (ts=... level=... msg=\"...\" key=value); json: one JSON "
     "object per line with ts, level, msg and the same fields, for log shippers"},
    /* TLS */
    {"tls-cert", "STOCKD_TLS_CERT", OPT_STR, F(tls_cert_file), 0, 0, NULL,
     "serve HTTPS (TLS 1.2 and 1.3 only) with this PEM certificate (its chain after it); "
     "needs --tls-key"},
    {"tls-key", "STOCKD_TLS_KEY", OPT_STR, F(tls_key_file), 0, 0, NULL,
     "the certificate's PEM private key; refused at start when its file is readable by "
     "group or others, or when it is not the certificate's key"},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

void cfg_defaults(stockd_config *c)
{
    memset(c, 0, sizeof(*c));
    service_config_defaults(&c->service);
    http_config_defaults(&c->http);
    c->drain_ms = 30000;
    /* a server started beside us (compose without health checks, a host's
     * boot, crash recovery) takes seconds to tens of them; a wrong host
     * still fails within a minute, each attempt logged */
    c->db_wait_s = 60;
    c->log_level = LOG_INFO;
    c->log_format = LOG_FORMAT_TEXT;
}

/* Index of value in a NULL-terminated list of names, or -1. */
static int choice_index(const char *const *choices, const char *value)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], value) == 0)
            return i;
    return -1;
}

/* "a|b|c" of a list of names, into buf. */
static const char *choice_list(const char *const *choices, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; choices[i] && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "|" : "", choices[i]);
    return buf;
}

static const char *const booleans[] = {"0", "1", "false", "true", "no", "yes", NULL};

static int set_opt(stockd_config *c, const struct opt *o, const char *value, const char *source,
                   char *err, size_t errlen)
{
    char *field = (char *)c + o->offset;
    char *end, list[128];
    long v;
    switch (o->type) {
    case OPT_STR:
        if (*value == '\0')
            break;
        *(const char **)field = value;
        return 0;
    case OPT_LIST:
        *(const char **)field = value;
        return 0;
    case OPT_BOOL:
        if ((v = choice_index(booleans, value)) < 0)
            break;
        *(int *)field = (int)(v % 2);
        return 0;
    case OPT_CHOICE:
        if ((v = choice_index(o->choices, value)) < 0)
            break;
        *(int *)field = (int)v;
        return 0;
    case OPT_INT:
        v = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || v < o->min || v > o->max)
            break;
        *(int *)field = (int)v;
        return 0;
    }
    const char *want = o->type == OPT_CHOICE ? choice_list(o->choices, list, sizeof(list))
                       : o->type == OPT_BOOL ? "0 or 1"
                                             : "a non-empty string";
    if (o->type == OPT_INT)
        snprintf(err, errlen, "%s: bad value '%s' (want an integer %d..%d)", source, value, o->min,
                 o->max);
    else
        snprintf(err, errlen, "%s: bad value '%s' (want %s)", source, value, want);
    return -1;
}

static const struct opt *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].flag) == len && strncmp(opts[i].flag, name, len) == 0)
            return &opts[i];
    return NULL;
}

static int apply_flags(stockd_config *c, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return 1;
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", arg);
            return -1;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        const struct opt *o = find_flag(name, eq ? (size_t)(eq - name) : strlen(name));
        if (o == NULL) {
            snprintf(err, errlen, "unknown flag '%s' (see --help)", arg);
            return -1;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (value == NULL && o->type == OPT_BOOL)
            value = "1";
        if (value == NULL && (value = i + 1 < argc ? argv[++i] : NULL) == NULL) {
            snprintf(err, errlen, "flag '%s' needs a value", arg);
            return -1;
        }
        if (set_opt(c, o, value, arg, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* A password file's one line, without its line ending, into buf
 * (CFG_SECRET_MAX + 1 bytes); flag names the file in errors. */
static int read_password_file(const char *flag, const char *path, char *buf, char *err,
                              size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "--%s %s: %s", flag, path, strerror(errno));
        return -1;
    }
    size_t n = fread(buf, 1, CFG_SECRET_MAX + 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n == 0 || n > CFG_SECRET_MAX || memchr(buf, '\n', n)) {
        explicit_bzero(buf, CFG_SECRET_MAX + 1);
        snprintf(err, errlen, "--%s %s: want one line of 1..%d bytes", flag, path,
                 CFG_SECRET_MAX);
        return -1;
    }
    buf[n] = '\0';
    return 0;
}

/* The password into c->redis_password, which the lock's config points at. */
static int read_redis_password(stockd_config *c, char *err, size_t errlen)
{
    const char *env = getenv("STOCKD_REDIS_PASSWORD");
    if (c->redis_password_file) {
        if (read_password_file("redis-password-file", c->redis_password_file, c->redis_password,
                               err, errlen) != 0)
            return -1;
    } else if (env) {
        if (*env == '\0' || strlen(env) > CFG_SECRET_MAX) {
            snprintf(err, errlen, "STOCKD_REDIS_PASSWORD: want 1..%d bytes", CFG_SECRET_MAX);
            return -1;
        }
        snprintf(c->redis_password, sizeof(c->redis_password), "%s", env);
        unsetenv("STOCKD_REDIS_PASSWORD");
    }
    c->service.redis.password = c->redis_password[0] ? c->redis_password : NULL;
    return 0;
}

/* --redis-sentinel, --redis-master and the Sentinels' password into the
 * lock's config; dlock_client_new checks the rest of the combination. */
static int apply_sentinels(stockd_config *c, char *err, size_t errlen)
{
    dlock_config *r = &c->service.redis;
    if (c->redis_sentinels == NULL) {
        if (r->master_name || c->sentinel_password_file) {
            snprintf(err, errlen, "--redis-master and --redis-sentinel-password-file need "
                     "--redis-sentinel");
            return -1;
        }
        return 0;
    }
    if (c->redis_servers) {
        snprintf(err, errlen, "--redis and --redis-sentinel exclude each other: with Sentinel, "
                 "the Sentinels name the server");
        return -1;
    }
    if (r->master_name == NULL) {
        snprintf(err, errlen, "--redis-sentinel needs --redis-master NAME");
        return -1;
    }
    if (dlock_config_sentinels(r, c->redis_sentinels) != DLOCK_OK) {
        snprintf(err, errlen, "--redis-sentinel %s: %s", c->redis_sentinels, dlock_errstr());
        return -1;
    }
    if (c->sentinel_password_file) {
        if (read_password_file("redis-sentinel-password-file", c->sentinel_password_file,
                               c->sentinel_password, err, errlen) != 0)
            return -1;
        r->sentinel_password = c->sentinel_password;
    }
    return 0;
}

/* TLS to Redis: a rediss:// address is refused with the reason, rather than
 * taken for a host name that never resolves. */
static int refuse_redis_tls(const stockd_config *c, char *err, size_t errlen)
{
    const char *v[] = {c->redis_servers, c->service.redis.host, c->redis_cluster,
                       c->redis_sentinels};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        if (v[i] && strncasecmp(v[i], "rediss://", 9) == 0) {
            snprintf(err, errlen, "%s: TLS to Redis is not supported: this build's hiredis "
                     "(0.14, Debian bookworm's) has no TLS; keep Redis on a private network or "
                     "behind stunnel and give its plain host:port (docs/operations.md, TLS)",
                     v[i]);
            return -1;
        }
    }
    return 0;
}

/* --tls-cert and --tls-key: both or neither, read and checked (tls.h). */
static int load_tls(stockd_config *c, char *err, size_t errlen)
{
    if (!c->tls_cert_file && !c->tls_key_file)
        return 0;
    if (!c->tls_cert_file || !c->tls_key_file) {
        snprintf(err, errlen, "--tls-cert and --tls-key go together (HTTPS needs both)");
        return -1;
    }
    if (tls_pem_load(&c->tls, c->tls_cert_file, c->tls_key_file, err, errlen) != 0)
        return -1;
    c->http.tls = &c->tls;
    return 0;
}

int cfg_load(stockd_config *c, int argc, char **argv, char *err, size_t errlen)
{
    for (size_t i = 0; i < NOPTS; i++) {
        const char *v = getenv(opts[i].env);
        if (v && set_opt(c, &opts[i], v, opts[i].env, err, errlen) != 0)
            return -1;
    }
    int rc = apply_flags(c, argc, argv, err, errlen);
    if (rc != 0)
        return rc;
    service_config *s = &c->service;
    if (s->instance_id == NULL) {
        char host[256] = "stockd";
        gethostname(host, sizeof(host) - 1);
        snprintf(c->instance_buf, sizeof(c->instance_buf), "%s:%d", host, c->http.port);
        s->instance_id = c->instance_buf;
    }
    if (strlen(s->instance_id) > RULE_INSTANCE_MAX ||
        strlen(s->lock_prefix) > SERVICE_LOCK_PREFIX_MAX) {
        snprintf(err, errlen, "instance id (%d bytes) or lock prefix (%d) too long",
                 RULE_INSTANCE_MAX, SERVICE_LOCK_PREFIX_MAX);
        return -1;
    }
    if (s->hold_ms > s->max_hold_ms) {
        snprintf(err, errlen, "--hold-ms %d is longer than --max-hold-ms %d: the default hold "
                 "must be one a client may ask for", s->hold_ms, s->max_hold_ms);
        return -1;
    }
    int timeout = s->redis.command_timeout_ms, lease = s->lock.lease_ms;
    if (s->lock_mode == SERVICE_LOCK_REDIS && timeout > lease / CFG_RENEWAL_ROOM) {
        snprintf(err, errlen, "--redis-timeout-ms %d is too long for --lease-ms %d: a renewal is "
                 "due at lease/3 and must be able to time out and be retried before the lease "
                 "ends; use --redis-timeout-ms %d or less, or a longer lease",
                 timeout, lease, lease / CFG_RENEWAL_ROOM);
        return -1;
    }
    s->redis.connect_timeout_ms = timeout / 2 > 0 ? timeout / 2 : 1;
    if (refuse_redis_tls(c, err, errlen) != 0)
        return -1;
    if (c->redis_servers && dlock_config_nodes(&s->redis, c->redis_servers) != DLOCK_OK) {
        snprintf(err, errlen, "--redis %s: %s", c->redis_servers, dlock_errstr());
        return -1;
    }
    if (c->redis_cluster && dlock_config_cluster(&s->redis, c->redis_cluster) != DLOCK_OK) {
        snprintf(err, errlen, "--redis-cluster %s: %s", c->redis_cluster, dlock_errstr());
        return -1;
    }
    if (apply_sentinels(c, err, errlen) != 0)
        return -1;
    s->fencing = !c->no_fencing;
    if (c->db_password_file) {
        if (read_password_file("db-password-file", c->db_password_file, c->db_password, err,
                               errlen) != 0)
            return -1;
        s->store.password = c->db_password;
    }
    if (read_redis_password(c, err, errlen) != 0)
        return -1;
    if (proxies_parse(&c->proxies, c->trusted_proxies, err, errlen) != 0)
        return -1;
    c->http.trusted = c->proxies.n ? &c->proxies : NULL;
    return load_tls(c, err, errlen);
}

/* A flag's default in d, as text. */
static void default_text(const stockd_config *d, const struct opt *o, char *buf, size_t size)
{
    const char *field = (const char *)d + o->offset;
    int v = *(const int *)field;
    switch (o->type) {
    case OPT_STR:
    case OPT_LIST: {
        const char *s = *(const char *const *)field;
        snprintf(buf, size, "%s", s ? s : "(unset)");
        break;
    }
    case OPT_BOOL: snprintf(buf, size, "%s", v ? "on" : "off"); break;
    case OPT_INT: snprintf(buf, size, "%d", v); break;
    case OPT_CHOICE: snprintf(buf, size, "%s", o->choices[v]); break;
    }
}

size_t cfg_flag_count(void)
{
    return NOPTS;
}

/* With the defaults of d, made once by the caller. */
static void describe(const stockd_config *d, size_t i, cfg_flag_doc *doc)
{
    const struct opt *o = &opts[i];
    doc->flag = o->flag;
    doc->arg = o->type == OPT_BOOL ? "" : o->type == OPT_INT ? "N" : "VALUE";
    doc->env = o->env;
    doc->help = o->help;
    default_text(d, o, doc->def, sizeof(doc->def));
    doc->choices[0] = '\0';
    if (o->choices)
        choice_list(o->choices, doc->choices, sizeof(doc->choices));
}

void cfg_flag_describe(size_t i, cfg_flag_doc *d)
{
    stockd_config defaults;
    cfg_defaults(&defaults);
    describe(&defaults, i, d);
}

void cfg_usage(FILE *out)
{
    stockd_config d;
    cfg_defaults(&d);
    fprintf(out, "usage: stockd [flags]\n"
                 "Inventory service: POST /reduceStock guarded by a Redis distributed lock.\n"
                 "Every flag can also be set by its environment variable; flags win.\n\n");
    for (size_t i = 0; i < NOPTS; i++) {
        cfg_flag_doc doc;
        describe(&d, i, &doc);
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s%s%s", doc.flag, doc.arg[0] ? " " : "", doc.arg);
        fprintf(out, "  %-26s %-26s default: %s\n      %s%s%s\n", flag, doc.env, doc.def,
                doc.help, doc.choices[0] ? "; one of " : "", doc.choices);
    }
}
