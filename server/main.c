/* main.c - stockd: loads the configuration, opens the service (the store
 * and the lock client), serves HTTP, and on SIGTERM/SIGINT stops accepting,
 * lets in-flight requests finish (releasing their locks), closes the
 * database and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "config.h"
#include "http.h"
#include "log.h"
#include "service.h"

/* One thread per connection and a socket each: allow as many descriptors as
 * the hard limit permits. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Waits for SIGTERM or SIGINT, which every thread blocks. */
static int wait_for_stop(const sigset_t *set)
{
    int sig = 0;
    while (sigwait(set, &sig) != 0) {
    }
    return sig;
}

static void log_listening(const stockd_config *c, const service_config *s)
{
    char db[512];
    log_kv(LOG_INFO, "listening", LOG_STR("bind", c->http.bind), LOG_INT("port", c->http.port),
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
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL); /* before any thread: all inherit it */
    raise_fd_limit();

    service *svc = NULL;
    http_server *srv = NULL;
    rc = service_open(&c.service, &svc, err, sizeof(err));
    explicit_bzero(c.redis_password, sizeof(c.redis_password)); /* the lock has its copy */
    explicit_bzero(c.db_password, sizeof(c.db_password));       /* and the store its own */
    if (rc != 0) {
        char db[512];
        log_kv(LOG_ERROR, "cannot start the service",
               LOG_STR("db", store_db_shown(c.service.store.db, db, sizeof(db))),
               LOG_STR("detail", err));
        return 1;
    }
    if (http_start(&c.http, svc, &srv, err, sizeof(err)) != 0) {
        log_kv(LOG_ERROR, "cannot start HTTP server", LOG_STR("detail", err));
        service_close(svc);
        return 1;
    }
    log_listening(&c, &c.service);

    int sig = wait_for_stop(&stop_signals);
    log_kv(LOG_INFO, "stopping", LOG_STR("signal", sig == SIGINT ? "INT" : "TERM"),
           LOG_INT("drainMs", c.drain_ms));
    http_quiesce(srv);
    int left = service_drain(svc, c.drain_ms);
    if (left > 0) { /* their answers can't be sent any more: don't let them commit */
        service_refuse_commits(svc);
        log_kv(LOG_WARN, "requests still running at the drain deadline; they will not commit",
               LOG_INT("count", left));
    }
    http_stop(srv);
    service_close(svc);
    log_event(LOG_INFO, "stopped", NULL, 0);
    return 0;
}
