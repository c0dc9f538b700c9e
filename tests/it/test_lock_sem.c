/* test_lock_sem.c - the semaphore with leases against a real, private
 * redis-server, in both wait modes: never more than N holders under W=32
 * workers over 4 processes (each worker process is this binary, run with
 * --workers), a crashed holder's permit (a --hold process SIGKILLed)
 * returns after its lease, renewal keeps a permit, max_renewals
 * interrupts, a full semaphore times out, bad arguments are refused. Then
 * over 3 servers as a quorum: never more than P of 16 racing threads hold
 * (P = 1 and 2), a permit of 2 is had on every server and lost when it
 * loses one, one server down costs a semaphore of 2 but not one of 1. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "lock/dlock_sem.h"
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
}

/* ---- over a quorum of 3 servers (notify mode) ---- */

#define NODES 3
static th_redis nodes[NODES];

/* On how many servers h's permit is a member of key. */
static int permit_on(const char *key, dlock_handle *h)
{
    int n = 0;
    for (int i = 0; i < NODES; i++)
        n += nodes[i].pid && th_redis_int(&nodes[i], "ZSCORE %s %s", key, dlock_token(h)) > 0;
    return n;
}

/* Threads of several clients race for the permits of one semaphore; each
 * counts itself in while it holds and notes the most it saw at once. */
struct race {
    dlock_client *c;
    const char *key;
    int permits;
    atomic_int *holders, *most, *failures;
};

static void *take_permits(void *arg)
{
    struct race *r = arg;
    dlock_opts o = opts(2000, 60000);
    for (int i = 0; i < ROUNDS; i++) {
        dlock_handle *h;
        if (dlock_sem_acquire(r->c, r->key, r->permits, &o, &h) != DLOCK_OK) {
            atomic_fetch_add(r->failures, 1);
            continue;
        }
        int now = atomic_fetch_add(r->holders, 1) + 1;
        for (int most = atomic_load(r->most); now > most;)
            atomic_compare_exchange_weak(r->most, &most, now);
        th_sleep_ms(3);
        atomic_fetch_sub(r->holders, 1);
        if (dlock_release(h) != DLOCK_OK)
            atomic_fetch_add(r->failures, 1);
    }
    return NULL;
}

/* 4 clients of 4 threads on a semaphore of permits: never more hold. */
static void race_for(const char *key, int permits)
{
    enum { CLIENTS = 4, PER = 4 };
    atomic_int holders = 0, most = 0, failures = 0;
    dlock_client *c[CLIENTS];
    struct race r[CLIENTS * PER];
    pthread_t t[CLIENTS * PER];
    for (int i = 0; i < CLIENTS; i++)
        assert_non_null(c[i] = th_lock_quorum_client(nodes, NODES));
    for (int i = 0; i < CLIENTS * PER; i++) {
        r[i] = (struct race){c[i % CLIENTS], key, permits, &holders, &most, &failures};
        assert_int_equal(pthread_create(&t[i], NULL, take_permits, &r[i]), 0);
    }
    for (int i = 0; i < CLIENTS * PER; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&failures), 0);
    assert_true(atomic_load(&most) <= permits);
    assert_true(atomic_load(&most) >= 1);
    for (int i = 0; i < NODES; i++)
        assert_int_equal(th_redis_int(&nodes[i], "ZCARD %s", key), 0); /* all came back */
    for (int i = 0; i < CLIENTS; i++)
        dlock_client_free(c[i]);
}

static void test_over_three_servers_never_more_than_one_of_one_holds(void **state)
{
    (void)state;
    race_for("semq:race1", 1);
}

static void test_over_three_servers_never_more_than_two_of_two_hold(void **state)
{
    (void)state;
    race_for("semq:race2", 2);
}

/* With 2 permits on 3 servers a permit is had on all 3: three holders on
 * 2 servers each would use 6 = 3 x 2 places, one more than the 2 permits. */
static void test_over_three_servers_a_permit_of_two_is_had_on_every_server(void **state)
{
    (void)state;
    dlock_client *a = th_lock_quorum_client(nodes, NODES), *b = th_lock_quorum_client(nodes, NODES);
    dlock_opts now = opts(5000, 0);
    dlock_handle *h1, *h2, *x;
    assert_int_equal(dlock_sem_acquire(a, "semq:every", 2, &now, &h1), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(b, "semq:every", 2, &now, &h2), DLOCK_OK);
    assert_int_equal(permit_on("semq:every", h1), NODES);
    assert_int_equal(permit_on("semq:every", h2), NODES);
    assert_true(dlock_fence(h2) > dlock_fence(h1));
    /* a third finds both permits taken on every server; what it took, it gave back */
    th_redis_int(&nodes[0], "ZREM semq:every %s", dlock_token(h1)); /* a place free on one */
    assert_int_equal(dlock_sem_acquire(b, "semq:every", 2, &now, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(th_redis_int(&nodes[0], "ZCARD semq:every"), 1);
    assert_int_equal(dlock_release(h2), DLOCK_OK);
    assert_int_equal(dlock_release(h1), DLOCK_ERR_LOST); /* 2 of 3 places left: not enough */
    dlock_client_free(a);
    dlock_client_free(b);
}

/* One server down: a semaphore of 1 still works on the two left; one of 2
 * is refused at once, saying why. Two down: one of 1 is refused too. */
static void test_over_three_servers_one_down_costs_a_semaphore_of_two(void **state)
{
    (void)state;
    dlock_client *a = th_lock_quorum_client(nodes, NODES), *b = th_lock_quorum_client(nodes, NODES);
    th_redis_stop(&nodes[0], 1);
    dlock_opts now = opts(300, 0), wait = opts(5000, 2000);
    dlock_handle *h, *x;
    assert_int_equal(dlock_sem_acquire(a, "semq:down1", 1, &now, &h), DLOCK_OK);
    assert_int_equal(permit_on("semq:down1", h), NODES - 1);
    assert_int_equal(dlock_sem_acquire(b, "semq:down1", 1, &now, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_sleep(h, 1000), DLOCK_OK); /* renewed past three leases */
    assert_int_equal(dlock_release(h), DLOCK_OK);

    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sem_acquire(b, "semq:down2", 2, &wait, &x), DLOCK_ERR_REDIS);
    assert_true(th_now_ms() - t0 < 1500); /* at once, not after wait_ms */
    assert_non_null(strstr(dlock_errstr(), "needs 3 of 3 Redis servers"));
    assert_non_null(strstr(dlock_errstr(), "N x P / (P + 1)"));
    for (int i = 1; i < NODES; i++)
        assert_int_equal(th_redis_int(&nodes[i], "ZCARD semq:down2"), 0); /* given back */

    th_redis_stop(&nodes[1], 1);
    assert_int_equal(dlock_sem_acquire(b, "semq:down1", 1, &wait, &x), DLOCK_ERR_REDIS);
    assert_non_null(strstr(dlock_errstr(), "needs 2 of 3 Redis servers"));
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A permit of 2 held on all 3 servers whose renewals can reach only 2 of
 * them is lost once its lease runs out: it no longer counts on enough. */
static void test_over_three_servers_a_permit_of_two_that_loses_a_server_is_lost(void **state)
{
    (void)state;
    dlock_client *a = th_lock_quorum_client(nodes, NODES);
    dlock_opts o = opts(300, 0);
    dlock_handle *h;
    assert_int_equal(dlock_sem_acquire(a, "semq:lose", 2, &o, &h), DLOCK_OK);
    th_redis_stop(&nodes[2], 1);
    assert_int_equal(dlock_sleep(h, 2000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_check(h), DLOCK_ERR_LOST);
    dlock_release(h); /* what it says is beside the point; the permits go back */
    dlock_client_free(a);
}

static int quorum_setup(void **state)
{
    (void)state;
    wait_mode = DLOCK_WAIT_NOTIFY;
    for (int i = 0; i < NODES; i++)
        if (nodes[i].pid == 0 && th_redis_start(&nodes[i]) != 0)
            return -1;
    return 0;
}

static int quorum_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        if (nodes[i].pid)
            th_redis_stop(&nodes[i], 0);
    return 0;
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
    const struct CMUnitTest over_quorum[] = {
        cmocka_unit_test(test_over_three_servers_never_more_than_one_of_one_holds),
        cmocka_unit_test(test_over_three_servers_never_more_than_two_of_two_hold),
        cmocka_unit_test(test_over_three_servers_a_permit_of_two_is_had_on_every_server),
        cmocka_unit_test(test_over_three_servers_a_permit_of_two_that_loses_a_server_is_lost),
        cmocka_unit_test(test_over_three_servers_one_down_costs_a_semaphore_of_two),
    };
    th_lock_suite(&redis, &client);
    int failed = th_lock_both_modes("semaphore", tests, sizeof(tests) / sizeof(tests[0]),
                                    &wait_mode);
    failed += cmocka_run_group_tests_name("semaphore over 3 servers", over_quorum, quorum_setup,
                                          quorum_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
