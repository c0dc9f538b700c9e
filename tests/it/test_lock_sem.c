/* test_lock_sem.c - the semaphore with leases against a real, private
 * redis-server, in both wait modes: never more than N holders under W=32
 * workers over 4 processes (each worker process is this binary, run with
 * --workers), a crashed holder's permit (a --hold process SIGKILLed)
 * returns after its lease, renewal keeps a permit, max_renewals
 * interrupts, a full semaphore times out, bad arguments are refused. */
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
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

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

/* One worker: ROUNDS times take a permit, count itself in, hold a moment,
 * count itself out, release. */
static int work(struct th_lock_worker *w)
{
    int failures = 0;
    for (int i = 0; i < ROUNDS; i++) {
        dlock_handle *h;
        if (dlock_sem_acquire(w->c, w->key, PERMITS, &w->o, &h) != DLOCK_OK) {
            failures++;
            continue;
        }
        th_lock_command_int(w->rc, "INCR %s%s", w->key, GRANTED);
        if (th_lock_command_int(w->rc, "INCR %s%s", w->key, HOLDERS) > PERMITS)
            th_lock_command_int(w->rc, "INCR %s%s", w->key, OVER);
        failures += dlock_sleep(h, 3) != DLOCK_OK;
        th_lock_command_int(w->rc, "DECR %s%s", w->key, HOLDERS);
        failures += dlock_release(h) != DLOCK_OK;
    }
    return failures;
}

/* --hold's acquisition: the one permit of a semaphore of 1. */
static int take_one_of_one(dlock_client *c, const char *key, const dlock_opts *o,
                           dlock_handle **out)
{
    return dlock_sem_acquire(c, key, 1, o, out);
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
    /* every worker got every permit */
    th_lock_run_helpers(&redis, "--workers", key, wait_mode, PROCESSES);
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
    /* a 2 s lease, renewed every 667 ms: at least 1.3 s of it is left when the
     * holder dies, room for the "not yet" look however slow the machine */
    pid_t pid = th_lock_helper((const char *const[]){"--hold", port, key, "2000", NULL});
    th_lock_wait_held(&redis, key);
    th_signal(pid, SIGKILL, 5000);
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_sem_acquire(client, key, 1, &o, &h), DLOCK_ERR_TIMEOUT); /* not yet */
    o.wait_ms = 6000; /* due within 2 s: hang bound only */
    assert_int_equal(dlock_sem_acquire(client, key, 1, &o, &h), DLOCK_OK); /* its lease ran out */
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

/* A permit whose acquire got no answer is released in the background, not
 * left for its 30 s lease. */
static void test_an_unanswered_acquire_does_not_keep_the_permit(void **state)
{
    (void)state;
    const char *key = wait_mode == DLOCK_WAIT_SPIN ? "sem:orphan:spin" : "sem:orphan:notify";
    int64_t waited = th_lock_unanswered_acquire(&redis, client, key, wait_mode, take_one_of_one);
    print_message("waited %lld ms for it (its lease: 30 s)\n", (long long)waited);
    assert_true(waited < 5000); /* released by the orphans' tries, the next within 2 s */
}

static void test_renewal_keeps_a_permit_past_several_leases(void **state)
{
    (void)state;
    /* renewed every 200 ms: one late by less than 400 ms is still in time */
    dlock_opts o = opts(600, 1000);
    dlock_handle *h, *other;
    assert_int_equal(dlock_sem_acquire(client, "sem:renew", 1, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_sleep(h, 2000), DLOCK_OK); /* past three leases, ~10 renewals */
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
    dlock_opts o = opts(900, 1000); /* interrupted at ~900 ms, 600 ms before the lease ends */
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
        return th_lock_run_workers(atoi(argv[2]), THREADS, argv[3], atoi(argv[4]), work);
    if (argc == 5 && strcmp(argv[1], "--hold") == 0)
        return th_lock_hold_until_killed(atoi(argv[2]), argv[3], atoi(argv[4]), take_one_of_one);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_more_than_n_holders_of_32_workers_over_4_processes),
        cmocka_unit_test(test_a_crashed_holders_permit_returns_after_its_lease),
        cmocka_unit_test(test_an_unanswered_acquire_does_not_keep_the_permit),
        cmocka_unit_test(test_renewal_keeps_a_permit_past_several_leases),
        cmocka_unit_test(test_max_renewals_interrupts_the_holder),
        cmocka_unit_test(test_all_permits_held_times_out_and_a_release_lets_a_waiter_in),
        cmocka_unit_test(test_a_permit_that_expired_and_was_taken_is_lost),
        cmocka_unit_test(test_bad_arguments_are_refused),
    };
    th_lock_suite(&redis, &client);
    int failed = th_lock_both_modes("semaphore", tests, sizeof(tests) / sizeof(tests[0]),
                                    &wait_mode);
    th_redis_stop(&redis, 0);
    return failed;
}
