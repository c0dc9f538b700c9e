/* main.c - stockd: loads the configuration, opens the store and the lock
 * client, serves HTTP, and on SIGTERM/SIGINT stops accepting, lets in-flight
 * requests finish (releasing their locks), closes the database, exits 0. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "batch.h"
#include "config.h"
#include "http.h"
#include "lock/dlock.h"
#include "log.h"
#include "stock.h"
#include "store.h"

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

static int open_locks(stockd_config *c, dlock_client **locks)
{
    *locks = NULL;
    if (c->lock_mode != CFG_LOCK_REDIS)
        return 0;
    dlock_config dc;
    dlock_config_defaults(&dc);
    dc.host = c->redis_host;
    dc.port = c->redis_port;
    dc.command_timeout_ms = c->redis_timeout_ms;
    dc.connect_timeout_ms = c->redis_timeout_ms / 2;
    dc.username = c->redis_user;
    dc.password = c->redis_password[0] ? c->redis_password : NULL;
    int rc = dlock_client_new(&dc, locks);
    explicit_bzero(c->redis_password, sizeof(c->redis_password)); /* the client has its copy */
    if (rc != DLOCK_OK) {
        log_event(LOG_ERROR, "cannot create lock client", "detail=\"%s\"", dlock_errstr());
        return -1;
    }
    /* not fatal: /health says so, requests get 503 (an auth failure is logged there) */
    if ((rc = dlock_ping(*locks)) != DLOCK_OK)
        stock_note_redis(rc);
    return 0;
}

static void stock_config_from(const stockd_config *c, stock_config *sc)
{
    memset(sc, 0, sizeof(*sc));
    sc->lock_mode = c->lock_mode;
    sc->lock_prefix = c->lock_prefix;
    dlock_opts_defaults(&sc->lock);
    sc->lock.lease_ms = c->lease_ms;
    sc->lock.wait_ms = c->wait_ms;
    sc->lock.retry_ms = c->retry_ms;
    sc->lock.max_renewals = c->max_renewals;
    sc->lock.wait_mode = c->wait_mode;
    sc->lock.handoff_max = c->handoff_max;
    sc->lock.handoff_ms = c->handoff_ms;
    sc->fencing = !c->no_fencing;
    sc->stop_before_write = c->stop_before_write;
    sc->allow_work_ms = c->allow_work_ms;
    sc->max_work_ms = c->max_work_ms;
    sc->instance_id = c->instance_id;
}

/* Waits for SIGTERM or SIGINT, which every thread blocks. */
static int wait_for_stop(const sigset_t *set)
{
    int sig = 0;
    while (sigwait(set, &sig) != 0) {
    }
    return sig;
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
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL); /* before any thread: all inherit it */
    raise_fd_limit();

    store *db = NULL;
    dlock_client *locks = NULL;
    batch_queues *batches = NULL;
    http_server *srv = NULL;
    stock_config sc;
    store_config stc = {c.db, c.sync == CFG_SYNC_FULL, c.busy_timeout_ms};
    if (store_open(&stc, &db, err, sizeof(err)) != STORE_OK) {
        log_event(LOG_ERROR, "cannot open the store", "db=%s detail=\"%s\"", c.db, err);
        return 1;
    }
    stock_config_from(&c, &sc);
    http_deps deps = {&c, &sc, db, NULL, NULL};
    if (open_locks(&c, &locks) != 0)
        goto fail;
    deps.locks = locks;
    if (locks && c.batch && (deps.batches = batches = batch_new()) == NULL)
        goto fail;
    if (http_start(&deps, &srv, err, sizeof(err)) != 0) {
        log_event(LOG_ERROR, "cannot start HTTP server", "detail=\"%s\"", err);
        goto fail;
    }
    log_event(LOG_INFO, "listening",
              "bind=%s port=%d lock=%s wait=%s batch=%s db=%s sync=%s instance=%s%s", c.bind,
              c.port, cfg_lock_mode_name(c.lock_mode), c.wait_mode ? "spin" : "notify",
              batches ? "on" : "off", c.db, c.sync == CFG_SYNC_FULL ? "full" : "normal",
              c.instance_id, c.no_fencing ? " fencing=OFF(test-only)" : "");
    if (c.stop_before_write)
        log_event(LOG_WARN, "test fault armed: SIGSTOP once before a write", NULL);

    int sig = wait_for_stop(&stop_signals);
    log_event(LOG_INFO, "stopping", "signal=%s drain_ms=%d", sig == SIGINT ? "INT" : "TERM",
              c.drain_ms);
    http_quiesce(srv);
    int left = http_drain(srv, c.drain_ms);
    if (left > 0) { /* their answers can't be sent any more: don't let them commit */
        stock_refuse_commits();
        log_event(LOG_WARN, "requests still running at the drain deadline; they will not "
                            "commit", "count=%d", left);
    }
    http_stop(srv);
    batch_free(batches);
    dlock_client_free(locks);
    store_close(db);
    log_event(LOG_INFO, "stopped", NULL);
    return 0;
fail:
    batch_free(batches);
    dlock_client_free(locks);
    store_close(db);
    return 1;
}
