/* lockkit.c - helpers of the lock's integration tests (see lockkit.h). */
#include "tests/support/lockkit.h"

#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

dlock_client *th_lock_client_timeout(int port, int command_timeout_ms)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = port;
    if (command_timeout_ms > 0)
        cfg.command_timeout_ms = command_timeout_ms;
    dlock_client *c;
    return dlock_client_new(&cfg, &c) == DLOCK_OK ? c : NULL;
}

dlock_client *th_lock_client_at(int port) { return th_lock_client_timeout(port, 0); }

dlock_client *th_lock_client(const th_redis *r) { return th_lock_client_at(r->port); }

dlock_client *th_lock_quorum_client(th_redis *r, int n)
{
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (r[i].pid == 0 && th_redis_start(&r[i]) != 0)
            return NULL;
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s127.0.0.1:%d",
                 i ? "," : "", r[i].port);
    }
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.command_timeout_ms = 300;
    dlock_client *c;
    if (dlock_config_nodes(&cfg, list) != DLOCK_OK || dlock_client_new(&cfg, &c) != DLOCK_OK)
        return NULL;
    return c;
}

int th_lock_both_modes(const char *name, const struct CMUnitTest *tests, size_t n,
                       int *wait_mode)
{
    char group[128];
    *wait_mode = DLOCK_WAIT_NOTIFY;
    snprintf(group, sizeof(group), "%s, notify mode", name);
    int failed = _cmocka_run_group_tests(group, tests, n, th_lock_group_setup,
                                         th_lock_group_teardown);
    *wait_mode = DLOCK_WAIT_SPIN;
    snprintf(group, sizeof(group), "%s, spin mode", name);
    return failed + _cmocka_run_group_tests(group, tests, n, th_lock_group_setup,
                                            th_lock_group_teardown);
}

pid_t th_lock_helper(const char *const *args)
{
    static char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    const char *argv[6] = {self};
    for (int i = 0; args[i]; i++)
        argv[i + 1] = args[i];
    pid_t pid = th_spawn(argv, NULL);
    assert_true(pid > 0);
    return pid;
}

long long th_lock_command_int(redisContext *rc, const char *fmt, const char *key,
                              const char *sfx)
{
    redisReply *r = redisCommand(rc, fmt, key, sfx);
    long long v = LLONG_MIN;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r && r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    else if (r && r->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(r);
    return v;
}

int th_lock_hold_until_killed(int port, const char *key, int lease_ms, th_lock_acquire_fn acquire)
{
    dlock_client *c = th_lock_client_at(port);
    dlock_handle *h;
    dlock_opts o = th_lock_opts(lease_ms, 5000, DLOCK_WAIT_NOTIFY);
    o.max_renewals = 0;
    if (c == NULL || acquire(c, key, &o, &h) != DLOCK_OK)
        return 2;
    redisContext *rc = redisConnect("127.0.0.1", port);
    th_lock_command_int(rc, "INCR %s%s", key, ":held");
    for (;;)
        pause();
}

void th_lock_run_helpers(const th_redis *r, const char *flag, const char *key, int mode, int n)
{
    char port[16], wait_mode[16];
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(wait_mode, sizeof(wait_mode), "%d", mode);
    pid_t pids[16];
    assert_true(n <= 16);
    for (int i = 0; i < n; i++)
        pids[i] = th_lock_helper((const char *const[]){flag, port, key, wait_mode, NULL});
    int statuses[16];
    for (int i = 0; i < n; i++)
        statuses[i] = th_wait(pids[i], 120000);
    for (int i = 0; i < n; i++)
        assert_int_equal(statuses[i], 0);
}

static void *run_worker(void *arg)
{
    struct th_lock_worker *w = arg;
    w->failures = w->rc && !w->rc->err ? w->body(w) : 1;
    return NULL;
}

int th_lock_run_workers(int port, int n, const char *key, int mode,
                        int (*body)(struct th_lock_worker *w))
{
    dlock_client *c = th_lock_client_at(port);
    if (c == NULL || n > 64)
        return 2;
    struct th_lock_worker w[64];
    pthread_t t[64];
    for (int i = 0; i < n; i++) {
        w[i] = (struct th_lock_worker){c, redisConnect("127.0.0.1", port), i, key,
                                       th_lock_opts(2000, 60000, mode), 0, body};
        pthread_create(&t[i], NULL, run_worker, &w[i]);
    }
    int failures = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
        redisFree(w[i].rc);
    }
    dlock_client_free(c);
    return failures ? 1 : 0;
}

void th_lock_wait_held(const th_redis *r, const char *key)
{
    char held[DLOCK_KEY_MAX + 8];
    snprintf(held, sizeof(held), "%s:held", key);
    int64_t until = th_now_ms() + 10000;
    while (th_redis_int(r, "GET %s", held) != 1 && th_now_ms() < until)
        th_sleep_ms(5);
    assert_int_equal(th_redis_int(r, "GET %s", held), 1);
}

static th_redis *suite_redis; /* the running suite's, named by its main */
static dlock_client **suite_client;

void th_lock_suite(th_redis *r, dlock_client **c)
{
    suite_redis = r;
    suite_client = c;
}

int th_lock_group_setup(void **state)
{
    (void)state;
    if (suite_redis->pid == 0 && th_redis_start(suite_redis) != 0)
        return -1;
    return (*suite_client = th_lock_client(suite_redis)) ? 0 : -1;
}

int th_lock_group_teardown(void **state)
{
    (void)state;
    dlock_client_free(*suite_client);
    *suite_client = NULL;
    return 0;
}

dlock_opts th_lock_opts(int lease_ms, int wait_ms, int wait_mode)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    o.retry_ms = 10;
    o.wait_mode = wait_mode;
    return o;
}

dlock_client *th_lock_client_behind_proxy(const th_redis *r, th_proxy **proxy)
{
    *proxy = th_proxy_start(r->port);
    assert_non_null(*proxy);
    dlock_client *c = th_lock_client_timeout(th_proxy_port(*proxy), 300);
    assert_non_null(c);
    assert_int_equal(dlock_ping(c), DLOCK_OK);
    return c;
}

int64_t th_lock_unanswered_acquire(const th_redis *r, dlock_client *client, const char *key,
                                   int wait_mode, th_lock_acquire_fn acquire)
{
    th_proxy *proxy;
    dlock_client *slow = th_lock_client_behind_proxy(r, &proxy);
    dlock_opts o = th_lock_opts(30000, 0, wait_mode);
    dlock_handle *h;
    th_proxy_delay_next(proxy, "EVALSHA", 1000);
    assert_int_equal(acquire(slow, key, &o, &h), DLOCK_ERR_REDIS);
    th_sleep_ms(1200); /* the held script has reached Redis and run by now */
    o.wait_ms = 10000;
    int64_t t0 = th_now_ms();
    assert_int_equal(acquire(client, key, &o, &h), DLOCK_OK);
    int64_t waited = th_now_ms() - t0;
    assert_int_equal(th_proxy_delayed(proxy), 1);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(slow);
    th_proxy_stop(proxy);
    return waited;
}

long long th_lock_script_calls(const th_redis *r)
{
    redisContext *rc = th_redis_connect(r);
    redisReply *rep = redisCommand(rc, "INFO commandstats");
    const char *p = rep && rep->type == REDIS_REPLY_STRING
                        ? strstr(rep->str, "cmdstat_evalsha:calls=")
                        : NULL;
    long long calls = p ? atoll(p + 22) : 0;
    freeReplyObject(rep);
    redisFree(rc);
    return calls;
}

struct fifo_waiter {
    dlock_client *c;
    const char *key;
    const dlock_opts *o;
    int id, *order, *n;
    int64_t *got_ms; /* when each waiter got the key (th_now_ms) */
    pthread_mutex_t *mu;
};

static void *fifo_wait(void *arg)
{
    struct fifo_waiter *f = arg;
    dlock_handle *h;
    if (dlock_acquire(f->c, f->key, f->o, &h) == DLOCK_OK) {
        pthread_mutex_lock(f->mu);
        f->order[(*f->n)++] = f->id;
        f->got_ms[f->id] = th_now_ms();
        pthread_mutex_unlock(f->mu);
        th_sleep_ms(20);
        dlock_release(h);
    }
    return NULL;
}

int th_lock_fifo(const th_redis *servers, int nservers, dlock_handle *h, const char *key,
                 const dlock_opts *o, dlock_client *const *waiters, int n, int *order,
                 int64_t *ms)
{
    assert_true(n <= TH_FIFO_MAX);
    dlock_names names;
    dlock_names_of(key, &names);
    pthread_t t[TH_FIFO_MAX];
    struct fifo_waiter f[TH_FIFO_MAX];
    int got = 0;
    int64_t got_ms[TH_FIFO_MAX] = {0};
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; i < n; i++) {
        f[i] = (struct fifo_waiter){waiters[i], key, o, i, order, &got, got_ms, &mu};
        pthread_create(&t[i], NULL, fifo_wait, &f[i]);
        for (int k = 0; k < nservers; k++) /* in line on every server first */
            while (th_redis_int(&servers[k], "ZCARD %s", names.queue) != i + 1)
                th_sleep_ms(2);
    }
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_release(h), DLOCK_OK);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    if (ms)
        *ms = th_now_ms() - t0;
    for (int i = 0; i < got; i++) /* out of order: say when each got it, for the failure */
        if (order[i] != i) {
            for (int k = 0; k < got; k++)
                print_message("waiter %d got the key %lld ms after the release\n", order[k],
                              (long long)(got_ms[order[k]] - t0));
            break;
        }
    return got;
}
