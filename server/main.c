/* main.c - stockd: loads the configuration and the API tokens, opens the
 * service (the store and the lock client), serves HTTP, reads the tokens
 * again on SIGHUP, and on SIGTERM/SIGINT (after --drain-notice-ms with
 * /health at 503, when set) stops accepting, lets in-flight
 * requests finish (releasing their locks), closes the database and exits 0.
 * Under systemd it says so as it goes (notify.h): ready once the database
 * and Redis answer, reloading, stopping. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "server/auth.h"
#include "server/config.h"
#include "server/handlers.h"
#include "server/http.h"
#include "server/log.h"
#include "server/notify.h"
#include "server/service.h"

/* Connections the probe port takes (a load balancer's and a scraper's checks). */
#define PROBE_CONNECTIONS 64

/* Descriptors needed besides the HTTP connections, at the most: the store's
 * connections (a SQLite one holds the database, its WAL and its shared
 * memory; a PostgreSQL one a socket), one each for the workers, the control
 * thread and the PostgreSQL pool; the Redis connections of each server (a
 * pool as large as the threads that ask it, a subscriber, the watchdog);
 * the listening socket, epoll and wake-up pipes of each event thread; logs,
 * and a margin. */
static long fds_reserved(const stockd_config *c)
{
    const service_config *s = &c->service;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long threads = c->http.threads > 0 ? c->http.threads : cores > 0 ? cores : 1;
    long threads_served = service_workers_of(s);
    long conns = threads_served + 2 > s->store.pool_size ? threads_served + 2 : s->store.pool_size;
    long nodes = s->redis.nodes > 0 ? s->redis.nodes : 1;
    long probes = c->probe_port ? 4 + http_connections_taken(PROBE_CONNECTIONS) : 0;
    return 64 + 4 * threads + 4 * conns + nodes * (threads_served + 8) + probes;
}

/* Raises the open-files soft limit to the hard one, and sizes
 * --max-connections to what it leaves after fds_reserved: the most that
 * fit when it is 0, else lowered to that with a warning. A connection
 * refused for want of a descriptor waits in the listen backlog; a store
 * that can't open its file would fail requests. -1 when not even a few
 * connections fit. */
static int fit_connections(stockd_config *c)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    long limit = rl.rlim_cur > 1000000 ? 1000000 : (long)rl.rlim_cur, reserved = fds_reserved(c);
    long fit = limit - reserved, max = (fit - 64) * 16 / 17; /* http_connections_taken(max) <= fit */
    if (max < 16) {
        log_kv(LOG_ERROR, "cannot start: the open-files limit leaves no room for connections",
               LOG_INT("openFilesLimit", limit), LOG_INT("reserved", reserved));
        return -1;
    }
    int asked = c->http.max_connections;
    if (asked == 0 || http_connections_taken(asked) <= fit) {
        c->http.max_connections = asked ? asked : (int)max;
    } else {
        c->http.max_connections = (int)max;
        log_kv(LOG_WARN, "--max-connections lowered to what the open-files limit allows",
               LOG_INT("asked", asked), LOG_INT("maxConnections", max),
               LOG_INT("openFilesLimit", limit), LOG_INT("reserved", reserved));
    }
    log_kv(LOG_INFO, "descriptors", LOG_INT("openFilesLimit", limit),
           LOG_INT("reserved", reserved), LOG_INT("maxConnections", c->http.max_connections));
    return 0;
}

/* ---- the API tokens (issue 27) ---- */

/* The tokens' line: how many of each role, and which roles anyone may use. */
static void log_tokens(enum log_level level, const char *msg, auth *a)
{
    int count[ROUTE_ROLE_COUNT], closed[ROUTE_ROLE_COUNT];
    const char *open[ROUTE_ROLE_COUNT];
    int nopen = 0;
    auth_describe(a, count, closed);
    for (int r = ROUTE_ROLE_BUYER; r < ROUTE_ROLE_COUNT; r++)
        if (!closed[r])
            open[nopen++] = route_role_name(r);
    log_kv(level, msg, LOG_STR("file", auth_path(a)),
           LOG_INT("buyer", count[ROUTE_ROLE_BUYER]), LOG_INT("operator", count[ROUTE_ROLE_OPERATOR]),
           LOG_INT("scrape", count[ROUTE_ROLE_SCRAPE]), LOG_STRS("openRoles", open, nopen));
}

/* --api-tokens-file into *out (NULL without one: every route open, and the
 * log says so). -1 when the file can't be used. */
static int open_tokens(const stockd_config *c, auth **out)
{
    char err[512];
    *out = NULL;
    if (c->api_tokens_file == NULL) {
        log_event(LOG_WARN, "no --api-tokens-file: the API is open, anyone who reaches this "
                  "port can change stock", NULL, 0);
        return 0;
    }
    if (auth_open(c->api_tokens_file, out, err, sizeof(err)) != 0) {
        log_kv(LOG_ERROR, "cannot start: --api-tokens-file", LOG_STR("detail", err));
        return -1;
    }
    log_tokens(LOG_INFO, "api tokens loaded", *out);
    return 0;
}

/* What main serves, as the signals' handling needs it. */
struct served {
    service *svc;
    auth *tokens;
    int port;
    int ready;    /* READY=1 told, or no service manager to tell */
    int stopping; /* STOPPING=1 told */
};

/* SIGHUP: the file again; a file that does not parse leaves the old tokens.
 * A service manager hears RELOADING=1 before and READY=1 after, with how it
 * went, once it was told READY and until the stop (before, it waits for
 * READY still; after, for the exit): else a STATUS= alone. */
static void reload_tokens(struct served *sv)
{
    char err[512], said[600];
    int told = sv->ready && !sv->stopping;
    if (told)
        notify_reloading("reloading the api tokens");
    if (sv->tokens == NULL) {
        log_event(LOG_WARN, "SIGHUP: no --api-tokens-file to read again", NULL, 0);
        snprintf(said, sizeof(said), "no --api-tokens-file to reload");
    } else if (auth_reload(sv->tokens, err, sizeof(err)) != 0) {
        log_kv(LOG_ERROR, "api tokens not reloaded; the old ones stay", LOG_STR("detail", err));
        snprintf(said, sizeof(said), "api tokens NOT reloaded, the old ones stay: %s", err);
    } else {
        log_tokens(LOG_INFO, "api tokens reloaded", sv->tokens);
        snprintf(said, sizeof(said), "api tokens reloaded");
    }
    if (told)
        notify_ready("serving on port %d; %s", sv->port, said);
    else
        notify_status("%s; %s", sv->stopping ? "stopping" : "not ready yet", said);
}

/* How often, until READY=1, main asks the check /health makes whether the
 * database and Redis answer (only when a service manager listens). */
#define READY_CHECK_MS 1000

/* READY=1 once the database and (in redis mode) Redis answer, as /health's
 * check says: a unit ordered after stockd starts only when it can sell,
 * while stockd serves meanwhile (its answers say what is down). Until then
 * a STATUS= says what it waits for. Sets sv->ready. */
static void check_ready(struct served *sv)
{
    service_health h;
    service_check_health(sv->svc, &h);
    if (!h.ok) {
        notify_status("waiting for the database and Redis: storage %s; redis %s", h.storage,
                      h.redis);
        return;
    }
    sv->ready = 1;
    int rc = notify_ready("serving on port %d; storage %s; redis %s", sv->port, h.storage,
                          h.redis);
    if (rc < 0)
        log_kv(LOG_WARN, "cannot tell systemd that stockd is ready",
               LOG_STR("detail", strerror(-rc)));
    else
        log_event(LOG_INFO, "ready: told systemd (the database and Redis answer as /health "
                  "asks them)", NULL, 0);
}

/* Waits for SIGTERM or SIGINT, which every thread blocks (as SIGHUP, which
 * reloads the tokens meanwhile); until READY=1, checking readiness every
 * READY_CHECK_MS. */
static int wait_for_stop(const sigset_t *set, struct served *sv)
{
    sv->ready = !notify_wanted();
    if (!sv->ready)
        check_ready(sv);
    for (;;) {
        int sig = 0;
        if (sv->ready) {
            if (sigwait(set, &sig) != 0)
                continue;
        } else {
            struct timespec ts = {READY_CHECK_MS / 1000, (READY_CHECK_MS % 1000) * 1000000L};
            sig = sigtimedwait(set, NULL, &ts);
            if (sig < 0) {
                check_ready(sv);
                continue;
            }
        }
        if (sig != SIGHUP)
            return sig;
        reload_tokens(sv);
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The stop's notice: for notice_ms every route serves as usual while
 * /health answers 503 "draining", so that a load balancer's checks take
 * the replica out of its pool before the drain refuses anything. SIGHUP
 * still reloads the tokens; a second stop signal cuts the notice short. */
static void give_notice(struct served *sv, int notice_ms, const sigset_t *set)
{
    if (notice_ms <= 0)
        return;
    service_notice_drain(sv->svc);
    notify_status("stopping: drain notice for %d ms, /health answers 503 \"draining\"",
                  notice_ms);
    log_kv(LOG_INFO, "drain notice: /health answers 503 while requests are served as usual",
           LOG_INT("drainNoticeMs", notice_ms));
    int64_t end = now_ms() + notice_ms;
    for (int64_t left; (left = end - now_ms()) > 0;) {
        struct timespec ts = {left / 1000, (long)(left % 1000) * 1000000L};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGHUP) {
            reload_tokens(sv);
        } else if (sig > 0) {
            log_event(LOG_WARN, "second stop signal: the drain notice is cut short", NULL, 0);
            return;
        }
    }
}

/* The probe port's server: one event thread, /health and /metrics only, a
 * few connections; main's thread of deadlines (one thread more in all). */
static int start_probes(const stockd_config *c, service *svc, http_server *main_srv,
                        http_server **out, char *err, size_t errlen)
{
    http_config pc = c->http;
    pc.port = c->probe_port;
    pc.threads = 1;
    pc.probes_only = 1;
    pc.max_connections = PROBE_CONNECTIONS;
    pc.shares = main_srv;
    return http_start(&pc, svc, handlers_answer, out, err, errlen);
}

static void log_listening(const stockd_config *c, const service_config *s)
{
    char db[512];
    log_kv(LOG_INFO, "listening", LOG_STR("bind", c->http.bind), LOG_INT("port", c->http.port),
           LOG_INT("probePort", c->probe_port), /* 0: none */
           LOG_STR("scheme", c->http.tls ? "https" : "http"),
           LOG_STR("lock", service_lock_mode_names[s->lock_mode]),
           LOG_STR("wait", s->lock.wait_mode == DLOCK_WAIT_SPIN ? "spin" : "notify"),
           LOG_STR("batch", s->lock_mode == SERVICE_LOCK_REDIS && s->batch ? "on" : "off"),
           LOG_STR("db", store_db_shown(s->store.db, db, sizeof(db))),
           LOG_STR("sync", s->store.sync_full ? "full" : "normal"),
           LOG_STR("instance", s->instance_id),
           LOG_STR("fencing", s->fencing ? "on" : "OFF(test-only)"),
           LOG_STR("logLevel", log_level_names[c->log_level]),
           LOG_STR("logFormat", log_format_names[c->log_format]));
    if (s->stop_before_write)
        log_event(LOG_WARN, "test fault armed: SIGSTOP once before a write", NULL, 0);
}

#define DB_WAIT_FIRST_MS 500 /* the first pause before trying the database again... */
#define DB_WAIT_MAX_MS 5000  /* ...doubling up to this */
#define STOPPED_WAITING 1    /* open_service: a stop signal came first */

/* Opens the service, trying again for up to --db-wait-s while the database
 * server can't be reached, a warning per attempt (the store's errors name
 * no password). A stop signal ends the wait: STOPPED_WAITING. Else
 * service_open's result, its last. */
static int open_service(stockd_config *c, const sigset_t *stop, service **svc, char *err,
                        size_t errlen)
{
    char db[512];
    store_db_shown(c->service.store.db, db, sizeof(db));
    int64_t end = now_ms() + (int64_t)c->db_wait_s * 1000;
    int pause = DB_WAIT_FIRST_MS;
    for (int attempt = 1;; attempt++) {
        int rc = service_open(&c->service, svc, err, errlen);
        int64_t left = end - now_ms();
        if (rc != SERVICE_OPEN_UNREACHABLE || left <= 0)
            return rc;
        if (pause > left)
            pause = (int)left;
        log_kv(LOG_WARN, "database not reachable yet; trying again", LOG_STR("db", db),
               LOG_INT("attempt", attempt), LOG_INT("retryInMs", pause),
               LOG_INT("waitLeftS", (left + 999) / 1000), LOG_STR("detail", err));
        notify_status("waiting for the database %s (attempt %d): %s", db, attempt, err);
        struct timespec ts = {pause / 1000, (long)(pause % 1000) * 1000000L};
        if (sigtimedwait(stop, NULL, &ts) > 0)
            return STOPPED_WAITING;
        pause = pause * 2 > DB_WAIT_MAX_MS ? DB_WAIT_MAX_MS : pause * 2;
    }
}

int main(int argc, char **argv)
{
    stockd_config c;
    char err[512];
    cfg_defaults(&c);
    int rc = cfg_load(&c, argc, argv, err, sizeof(err));
    if (rc == 1) {
        cfg_usage(stdout);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "stockd: %s\n", err);
        return 2;
    }
    log_set_level(c.log_level);
    log_set_format(c.log_format);
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigset_t signals = stop_signals; /* and SIGHUP, which reloads the tokens */
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL); /* before any thread: all inherit it */
    if (fit_connections(&c) != 0)
        return 1;
    auth *tokens = NULL;
    if (open_tokens(&c, &tokens) != 0)
        return 2;
    c.service.tokens = tokens;

    service *svc = NULL;
    http_server *srv = NULL;
    rc = open_service(&c, &stop_signals, &svc, err, sizeof(err));
    explicit_bzero(c.redis_password, sizeof(c.redis_password)); /* the lock has its copy */
    explicit_bzero(c.db_password, sizeof(c.db_password));       /* and the store its own */
    explicit_bzero(c.sentinel_password, sizeof(c.sentinel_password));
    if (rc == STOPPED_WAITING) {
        notify_stopping("stopped while waiting for the database");
        log_event(LOG_INFO, "stopped while waiting for the database", NULL, 0);
        auth_free(tokens);
        return 0;
    }
    if (rc != 0) {
        char db[512];
        log_kv(LOG_ERROR, rc == SERVICE_OPEN_UNREACHABLE && c.db_wait_s > 0
                              ? "cannot start the service: the database stayed unreachable "
                                "for --db-wait-s"
                              : "cannot start the service",
               LOG_STR("db", store_db_shown(c.service.store.db, db, sizeof(db))),
               LOG_INT("dbWaitS", c.db_wait_s), LOG_STR("detail", err));
        notify_status("cannot start the service: %s", err);
        auth_free(tokens);
        return 1;
    }
    http_server *probes = NULL;
    if (http_start(&c.http, svc, handlers_answer, &srv, err, sizeof(err)) != 0 ||
        (c.probe_port && start_probes(&c, svc, srv, &probes, err, sizeof(err)) != 0)) {
        log_kv(LOG_ERROR, "cannot start HTTP server", LOG_STR("detail", err));
        notify_status("cannot start the HTTP server: %s", err);
        http_stop(srv);
        service_close(svc);
        auth_free(tokens);
        return 1;
    }
    log_listening(&c, &c.service);

    struct served sv = {svc, tokens, c.http.port, 0, 0};
    int sig = wait_for_stop(&signals, &sv);
    const char *signame = sig == SIGINT ? "INT" : "TERM";
    log_kv(LOG_INFO, "stopping", LOG_STR("signal", signame),
           LOG_INT("drainMs", c.drain_ms), LOG_INT("drainNoticeMs", c.drain_notice_ms));
    sv.stopping = 1;
    notify_stopping("stopping on SIG%s: draining (notice %d ms, then up to %d ms for requests "
                    "in flight)", signame, c.drain_notice_ms, c.drain_ms);
    give_notice(&sv, c.drain_notice_ms, &signals);
    http_quiesce(srv);
    if (probes)
        http_quiesce(probes); /* /health says 503 from now on: balancers drop the replica */
    notify_status("stopping: no new requests; draining those in flight for up to %d ms",
                  c.drain_ms);
    int left = service_drain(svc, c.drain_ms);
    if (left > 0) { /* their answers can't be sent any more: don't let them commit */
        service_refuse_commits(svc);
        log_kv(LOG_WARN, "requests still running or being answered at the drain deadline; "
               "those not yet committed will not commit", LOG_INT("count", left));
        notify_status("stopping: %d requests left at the drain's end; closing", left);
    } else {
        notify_status("stopping: drained; closing");
    }
    http_stop(probes); /* first: it uses srv's thread of deadlines */
    http_stop(srv);
    tls_pem_free(&c.tls);
    service_close(svc);
    auth_free(tokens);
    log_event(LOG_INFO, "stopped", NULL, 0);
    return 0;
}
