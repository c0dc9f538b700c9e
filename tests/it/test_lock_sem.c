/* test_lock_sem.c - the semaphore with leases against a real, private
 * redis-server, in both wait modes: never more than N holders under W=32
 * workers over 4 processes (each worker process is this binary, run with
 * --workers), a crashed holder's permit (a --hold process SIGKILLed)
 * returns after its lease, renewal keeps a permit, max_renewals
 * interrupts, a full semaphore times out, bad arguments are refused. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/harness.h"
#include "tests/lockkit.h"

#define PROCESSES 4
#define THREADS 8   /* per process: W = 32 */
#define ROUNDS 5    /* permits each worker takes */
#define PERMITS 3

static th_redis redis;
static dlock_client *client; /* the running group's */
static int wait_mode;        /* the running group's, set by main */

/* The key's counters for the contention test: holders now, times a holder
 * saw more than N, and permits granted. */
#define HOLDERS ":holders"
#define OVER ":over"
#define GRANTED ":granted"

/* ---- the helper processes ---- */

struct worker {
    dlock_client *c;
    int port;
    const char *key;
    dlock_opts o;
    int failures;
};

static long long command_int(redisContext *rc, const char *fmt, const char *key, const char *sfx)
{
    redisReply *r = redisCommand(rc, fmt, key, sfx);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
    freeReplyObject(r);
    return v;
}

/* One worker: ROUNDS times take a permit, count itself in, hold a moment,
 * count itself out, release. */
static void *work(void *arg)
{
    struct worker *w = arg;
    redisContext *rc = redisConnect("127.0.0.1", w->port);
    for (int i = 0; rc && !rc->err && i < ROUNDS; i++) {
        dlock_handle *h;
        if (dlock_sem_acquire(w->c, w->key, PERMITS, &w->o, &h) != DLOCK_OK) {
            w->failures++;
            continue;
        }
        command_int(rc, "INCR %s%s", w->key, GRANTED);
        if (command_int(rc, "INCR %s%s", w->key, HOLDERS) > PERMITS)
            command_int(rc, "INCR %s%s", w->key, OVER);
        w->failures += dlock_sleep(h, 3) != DLOCK_OK;
        command_int(rc, "DECR %s%s", w->key, HOLDERS);
        w->failures += dlock_release(h) != DLOCK_OK;
    }
    if (rc == NULL || rc->err)
        w->failures++;
    redisFree(rc);
    return NULL;
}

/* --workers port key mode: THREADS workers on a client of this process's
 * own. Exits 0 when every worker got every permit it asked for. */
static int run_workers(int port, const char *key, int mode)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = port;
    dlock_client *c;
    if (dlock_client_new(&cfg, &c) != DLOCK_OK)
        return 2;
    struct worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){c, port, key, th_lock_opts(2000, 60000, mode), 0};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
    }
    dlock_client_free(c);
    return failures ? 1 : 0;
}

/* --hold port key lease_ms: takes one permit of 1, says so (key:held), and
 * holds it until killed. */
static int run_holder(int port, const char *key, int lease_ms)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = port;
    dlock_client *c;
    dlock_handle *h;
    dlock_opts o = th_lock_opts(lease_ms, 5000, DLOCK_WAIT_NOTIFY);
    o.max_renewals = 0;
    if (dlock_client_new(&cfg, &c) != DLOCK_OK || dlock_sem_acquire(c, key, 1, &o, &h) != DLOCK_OK)
        return 2;
    redisContext *rc = redisConnect("127.0.0.1", port);
    command_int(rc, "INCR %s%s", key, ":held");
    for (;;)
        pause();
}

/* Starts this binary as a helper with args (NULL-terminated, at most 4). */
static pid_t helper(const char *const *args)
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

/* ---- the tests ---- */

static dlock_opts opts(int lease_ms, int wait_ms)
{
    return th_lock_opts(lease_ms, wait_ms, wait_mode);
}

static long long value(const char *key, const char *sfx)
{
    char name[128];
    snprintf(name, sizeof(name), "%s%s", key, sfx);
    return th_redis_int(&redis, "GET %s", name);
}

static void test_never_more_than_n_holders_of_32_workers_over_4_processes(void **state)
{
    (void)state;
    const char *key = wait_mode == DLOCK_WAIT_SPIN ? "sem:many:spin" : "sem:many:notify";
    char port[16], mode[16];
    snprintf(port, sizeof(port), "%d", redis.port);
    snprintf(mode, sizeof(mode), "%d", wait_mode);
    pid_t pids[PROCESSES];
    for (int i = 0; i < PROCESSES; i++)
        pids[i] = helper((const char *const[]){"--workers", port, key, mode, NULL});
    int statuses[PROCESSES];
    for (int i = 0; i < PROCESSES; i++) /* stopped by PID after a generous bound */
        statuses[i] = th_wait(pids[i], 120000);
    for (int i = 0; i < PROCESSES; i++)
        assert_int_equal(statuses[i], 0); /* every worker got every permit */
    assert_int_equal(value(key, GRANTED), PROCESSES * THREADS * ROUNDS);
    assert_true(value(key, OVER) <= 0); /* -1: never set */
    assert_int_equal(value(key, HOLDERS), 0);
    assert_int_equal(th_redis_int(&redis, "ZCARD %s", key), 0); /* every permit came back */
}

static void test_a_crashed_holders_permit_returns_after_its_lease(void **state)
{
    (void)state;
    const char *key = wait_mode == DLOCK_WAIT_SPIN ? "sem:crash:spin" : "sem:crash:notify";
    char port[16];
    snprintf(port, sizeof(port), "%d", redis.port);
    pid_t pid = helper((const char *const[]){"--hold", port, key, "300", NULL});
    int64_t until = th_now_ms() + 10000;
    while (value(key, ":held") != 1 && th_now_ms() < until)
        th_sleep_ms(5);
    assert_int_equal(value(key, ":held"), 1);
    th_signal(pid, SIGKILL, 5000);
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_sem_acquire(client, key, 1, &o, &h), DLOCK_ERR_TIMEOUT); /* not yet */
    o.wait_ms = 5000;
    assert_int_equal(dlock_sem_acquire(client, key, 1, &o, &h), DLOCK_OK); /* its lease ran out */
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

static void test_renewal_keeps_a_permit_past_several_leases(void **state)
{
    (void)state;
    dlock_opts o = opts(150, 1000);
    dlock_handle *h, *other;
    assert_int_equal(dlock_sem_acquire(client, "sem:renew", 1, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_sleep(h, 700), DLOCK_OK);
    assert_true(dlock_renewals(h) >= 3);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_true(th_redis_int(&redis, "ZSCORE sem:renew %s", dlock_token(h)) > 0);
    o.wait_ms = 0;
    assert_int_equal(dlock_sem_acquire(client, "sem:renew", 1, &o, &other), DLOCK_ERR_TIMEOUT);
    assert_string_equal(dlock_key(h), "sem:renew");
    assert_int_equal((int)strlen(dlock_token(h)), DLOCK_TOKEN_LEN);
    assert_true(dlock_fence(h) > 0);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS sem:renew"), 0);
}

static void test_max_renewals_interrupts_the_holder(void **state)
{
    (void)state;
    dlock_opts o = opts(150, 1000);
    o.max_renewals = 2;
    dlock_handle *h;
    assert_int_equal(dlock_sem_acquire(client, "sem:interrupt", 2, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_sleep(h, 10000), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_renewals(h), 2);
    assert_int_equal(dlock_check(h), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(h), DLOCK_ERR_INTERRUPTED);
}

static void test_all_permits_held_times_out_and_a_release_lets_a_waiter_in(void **state)
{
    (void)state;
    dlock_opts o = opts(30000, 100);
    dlock_handle *a, *b, *c;
    dlock_stats before, after;
    assert_int_equal(dlock_sem_acquire(client, "sem:full", 2, &o, &a), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(client, "sem:full", 2, &o, &b), DLOCK_OK);
    assert_true(dlock_fence(b) > dlock_fence(a));
    dlock_stats_read(client, &before);
    assert_int_equal(dlock_sem_acquire(client, "sem:full", 2, &o, &c), DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(dlock_errstr(), "permits"));
    dlock_stats_read(client, &after);
    assert_int_equal(after.timeouts, before.timeouts + 1);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(client, "sem:full", 2, &o, &c), DLOCK_OK);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    assert_int_equal(dlock_release(c), DLOCK_OK);
}

static void test_a_permit_that_expired_and_was_taken_is_lost(void **state)
{
    (void)state;
    dlock_opts o = opts(100, 0);
    o.watchdog = 0;
    dlock_handle *h, *other;
    assert_int_equal(dlock_sem_acquire(client, "sem:lost", 1, &o, &h), DLOCK_OK);
    th_sleep_ms(150);
    assert_int_equal(dlock_check(h), DLOCK_ERR_LOST);
    o.lease_ms = 30000;
    assert_int_equal(dlock_sem_acquire(client, "sem:lost", 1, &o, &other), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(other), DLOCK_OK);
}

static void test_bad_arguments_are_refused(void **state)
{
    (void)state;
    dlock_handle *h = (dlock_handle *)1;
    assert_int_equal(dlock_sem_acquire(client, "sem:bad", 0, NULL, &h), DLOCK_ERR_INVALID);
    assert_null(h);
    assert_non_null(strstr(dlock_errstr(), "permits_total"));
    assert_int_equal(dlock_sem_acquire(client, "sem:bad", -3, NULL, &h), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_sem_acquire(client, "", 1, NULL, &h), DLOCK_ERR_INVALID);
    dlock_opts o = opts(1, 100); /* below DLOCK_LEASE_MIN_MS */
    assert_int_equal(dlock_sem_acquire(client, "sem:bad", 1, &o, &h), DLOCK_ERR_INVALID);
    /* a quorum is refused before anything is sent (nothing listens there) */
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_nodes(&cfg, "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"), DLOCK_OK);
    dlock_client *q;
    assert_int_equal(dlock_client_new(&cfg, &q), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(q, "sem:bad", 1, NULL, &h), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "single Redis server"));
    dlock_client_free(q);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--workers") == 0)
        return run_workers(atoi(argv[2]), argv[3], atoi(argv[4]));
    if (argc == 5 && strcmp(argv[1], "--hold") == 0)
        return run_holder(atoi(argv[2]), argv[3], atoi(argv[4]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_more_than_n_holders_of_32_workers_over_4_processes),
        cmocka_unit_test(test_a_crashed_holders_permit_returns_after_its_lease),
        cmocka_unit_test(test_renewal_keeps_a_permit_past_several_leases),
        cmocka_unit_test(test_max_renewals_interrupts_the_holder),
        cmocka_unit_test(test_all_permits_held_times_out_and_a_release_lets_a_waiter_in),
        cmocka_unit_test(test_a_permit_that_expired_and_was_taken_is_lost),
        cmocka_unit_test(test_bad_arguments_are_refused),
    };
    th_lock_suite(&redis, &client);
    wait_mode = DLOCK_WAIT_NOTIFY;
    int failed = cmocka_run_group_tests_name("semaphore, notify mode", tests,
                                             th_lock_group_setup, th_lock_group_teardown);
    wait_mode = DLOCK_WAIT_SPIN;
    failed += cmocka_run_group_tests_name("semaphore, spin mode", tests, th_lock_group_setup,
                                          th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
