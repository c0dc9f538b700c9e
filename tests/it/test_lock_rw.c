/* test_lock_rw.c - the read-write lock against a real, private
 * redis-server, in both wait modes: readers overlap, a writer excludes
 * readers and writers, a crashed reader's (a --read process SIGKILLed)
 * lease runs out and a writer gets in, a writer gets in under a steady
 * stream of readers, a GET+SET counter under write locks never changes
 * under a read lock (W=32 over 4 --mix processes), max_renewals for both,
 * fences grow over reads and writes. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#define THREADS 8 /* per process: W = 32 */
#define ROUNDS 10 /* holds each worker takes, one in ten a write */

static th_redis redis;
static dlock_client *client; /* the running group's */
static int wait_mode;        /* the running group's, set by main */

/* ---- the helper processes ---- */

/* A write: GET key:counter, a pause, SET it one higher, under the write lock. */
static int write_once(struct th_lock_worker *w)
{
    dlock_handle *h;
    if (dlock_acquire_write(w->c, w->key, &w->o, &h) != DLOCK_OK)
        return 1;
    long long v = th_lock_command_int(w->rc, "GET %s%s", w->key, ":counter");
    int bad = dlock_sleep(h, 2) != DLOCK_OK;
    redisReply *r = redisCommand(w->rc, "SET %s:counter %lld", w->key, v + 1);
    freeReplyObject(r);
    th_lock_command_int(w->rc, "INCR %s%s", w->key, ":writes");
    return bad + (dlock_release(h) != DLOCK_OK);
}

/* A read: the counter must not move while the read lock is held. */
static int read_once(struct th_lock_worker *w)
{
    dlock_handle *h;
    if (dlock_acquire_read(w->c, w->key, &w->o, &h) != DLOCK_OK)
        return 1;
    long long before = th_lock_command_int(w->rc, "GET %s%s", w->key, ":counter");
    int bad = dlock_sleep(h, 3) != DLOCK_OK;
    if (th_lock_command_int(w->rc, "GET %s%s", w->key, ":counter") != before)
        th_lock_command_int(w->rc, "INCR %s%s", w->key, ":moved");
    return bad + (dlock_release(h) != DLOCK_OK);
}

/* --mix: ROUNDS holds, one in ten a write. */
static int mix(struct th_lock_worker *w)
{
    int failures = 0;
    for (int i = 0; i < ROUNDS; i++)
        failures += (i + w->id) % 10 == 0 ? write_once(w) : read_once(w);
    return failures;
}

/* ---- the tests ---- */

static dlock_opts opts(int lease_ms, int wait_ms)
{
    return th_lock_opts(lease_ms, wait_ms, wait_mode);
}

/* key with the group's mode appended, in buf. */
static const char *keyed(char *buf, size_t size, const char *key)
{
    snprintf(buf, size, "%s:%s", key, wait_mode == DLOCK_WAIT_SPIN ? "spin" : "notify");
    return buf;
}

/* Readers that hold at once: each thread takes a read lock and waits, holding
 * it, until all have one or a generous bound passed. */
struct overlap {
    const char *key;
    atomic_int holding, most;
    int failures;
};

static void *read_and_wait(void *arg)
{
    struct overlap *v = arg;
    dlock_opts o = opts(5000, 5000);
    dlock_handle *h;
    if (dlock_acquire_read(client, v->key, &o, &h) != DLOCK_OK) {
        v->failures++; /* counted racily, but only ever 0 when none failed */
        return NULL;
    }
    int now = atomic_fetch_add(&v->holding, 1) + 1;
    for (int most = atomic_load(&v->most); now > most;)
        atomic_compare_exchange_weak(&v->most, &most, now);
    int64_t until = th_now_ms() + 5000;
    while (atomic_load(&v->most) < 4 && th_now_ms() < until)
        th_sleep_ms(2);
    atomic_fetch_sub(&v->holding, 1);
    dlock_release(h);
    return NULL;
}

static void test_readers_hold_at_once(void **state)
{
    (void)state;
    char key[64];
    struct overlap v = {keyed(key, sizeof(key), "rw:overlap"), 0, 0, 0};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, read_and_wait, &v);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(v.failures, 0);
    assert_int_equal(atomic_load(&v.most), 4); /* measured: all four held at once */
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", key), 0);
}

static void test_a_writer_excludes_readers_and_writers(void **state)
{
    (void)state;
    char key[64];
    keyed(key, sizeof(key), "rw:exclude");
    dlock_opts o = opts(5000, 100);
    dlock_handle *r1, *r2, *w, *other;
    assert_int_equal(dlock_acquire_read(client, key, &o, &r1), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(client, key, &o, &r2), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(client, key, &o, &w), DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(dlock_errstr(), "write lock"));
    assert_int_equal(dlock_release(r1), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(client, key, &o, &w), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_release(r2), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(client, key, &o, &w), DLOCK_OK);
    assert_string_equal(dlock_key(w), key);
    assert_int_equal(dlock_acquire_read(client, key, &o, &other), DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(dlock_errstr(), "read lock"));
    assert_int_equal(dlock_acquire_write(client, key, &o, &other), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(client, key, &o, &other), DLOCK_OK);
    assert_int_equal(dlock_release(other), DLOCK_OK);
}

/* A writer that won't wait only looks: one script, no wish left to keep
 * readers out, nothing to withdraw (and no wake-up of every reader). */
static void test_a_fail_fast_writer_only_looks(void **state)
{
    (void)state;
    char key[64], wishes[80];
    keyed(key, sizeof(key), "rw:failfast");
    snprintf(wishes, sizeof(wishes), "%s:writers", key);
    dlock_opts o = opts(5000, 0);
    dlock_handle *r, *w;
    assert_int_equal(dlock_acquire_read(client, key, &o, &r), DLOCK_OK);
    long long before = th_lock_script_calls(&redis);
    assert_int_equal(dlock_acquire_write(client, key, &o, &w), DLOCK_ERR_TIMEOUT);
    assert_int_equal(th_lock_script_calls(&redis) - before, 1);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", wishes), 0);
    assert_int_equal(dlock_release(r), DLOCK_OK);
}

/* A write lock whose acquire got no answer is released in the background,
 * not left to keep every reader and writer out for its 30 s lease. */
static void test_an_unanswered_write_acquire_does_not_keep_the_key(void **state)
{
    (void)state;
    char key[64];
    keyed(key, sizeof(key), "rw:orphan");
    int64_t waited =
        th_lock_unanswered_acquire(&redis, client, key, wait_mode, dlock_acquire_write);
    print_message("waited %lld ms for it (its lease: 30 s)\n", (long long)waited);
    assert_true(waited < 5000); /* released by the orphans' tries, the next within 2 s */
}

static void test_a_crashed_readers_lease_runs_out_and_a_writer_gets_in(void **state)
{
    (void)state;
    char key[64], port[16];
    keyed(key, sizeof(key), "rw:crash");
    snprintf(port, sizeof(port), "%d", redis.port);
    /* a 2 s lease, renewed every 667 ms: at least 1.3 s of it is left when the
     * reader dies, room for the "not yet" look however slow the machine */
    pid_t pid = th_lock_helper((const char *const[]){"--read", port, key, "2000", NULL});
    th_lock_wait_held(&redis, key);
    th_signal(pid, SIGKILL, 5000);
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire_write(client, key, &o, &h), DLOCK_ERR_TIMEOUT); /* not yet */
    o.wait_ms = 6000; /* due within 2 s: hang bound only */
    assert_int_equal(dlock_acquire_write(client, key, &o, &h), DLOCK_OK); /* its lease ran out */
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

/* A steady stream of overlapping readers from several threads, each on a
 * client of its own (another process, as far as the lock can tell). */
struct stream {
    const char *key;
    atomic_int stop;
    atomic_long reads;
};

static void *read_on(void *arg)
{
    struct stream *s = arg;
    dlock_client *c = th_lock_client(&redis);
    dlock_opts o = opts(5000, 10000);
    while (c && !atomic_load(&s->stop)) {
        dlock_handle *h;
        if (dlock_acquire_read(c, s->key, &o, &h) != DLOCK_OK)
            continue;
        atomic_fetch_add(&s->reads, 1);
        dlock_sleep(h, 30);
        dlock_release(h);
    }
    dlock_client_free(c);
    return NULL;
}

static void test_a_writer_gets_in_under_a_stream_of_readers(void **state)
{
    (void)state;
    char key[64];
    struct stream s = {keyed(key, sizeof(key), "rw:stream"), 0, 0};
    pthread_t t[6];
    for (int i = 0; i < 6; i++) {
        pthread_create(&t[i], NULL, read_on, &s);
        th_sleep_ms(5); /* staggered: some reader always holds */
    }
    int64_t until = th_now_ms() + 10000; /* a bound, so a broken read lock fails, not hangs */
    while (atomic_load(&s.reads) < 20 && th_now_ms() < until)
        th_sleep_ms(5);
    if (atomic_load(&s.reads) < 20) {
        atomic_store(&s.stop, 1);
        for (int i = 0; i < 6; i++)
            pthread_join(t[i], NULL);
        fail_msg("the readers made %ld reads in 10 s", (long)atomic_load(&s.reads));
    }
    /* The bound (lock/README.md, "Fairness"): the readers present drain,
     * each holding 30 ms; 2 s is only there to catch a hang, and a writer
     * that loses to the stream waits all of it. */
    dlock_opts o = opts(5000, 2000);
    dlock_handle *w;
    int rc = dlock_acquire_write(client, key, &o, &w);
    long reads_meanwhile = atomic_load(&s.reads);
    if (rc == DLOCK_OK) {
        assert_int_equal(th_redis_int(&redis, "ZCARD %s", key), 0); /* no reader inside */
        assert_int_equal(dlock_release(w), DLOCK_OK);
    }
    atomic_store(&s.stop, 1);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(atomic_load(&s.reads) > reads_meanwhile); /* readers went on after it */
}

static void test_a_counter_never_moves_under_a_read_lock(void **state)
{
    (void)state;
    char key[64], name[96];
    keyed(key, sizeof(key), "rw:counter");
    /* every hold granted and kept in each process */
    th_lock_run_helpers(&redis, "--mix", key, wait_mode, PROCESSES);
    snprintf(name, sizeof(name), "%s:writes", key);
    long long writes = th_redis_int(&redis, "GET %s", name);
    assert_int_equal(writes, PROCESSES * THREADS * ROUNDS / 10);
    snprintf(name, sizeof(name), "%s:counter", key);
    assert_int_equal(th_redis_int(&redis, "GET %s", name), writes); /* no write lost */
    snprintf(name, sizeof(name), "%s:moved", key);
    assert_true(th_redis_int(&redis, "GET %s", name) <= 0); /* -1: never set */
}

static void interrupted_after_two(int write)
{
    char key[64];
    keyed(key, sizeof(key), write ? "rw:interrupt:w" : "rw:interrupt:r");
    dlock_opts o = opts(900, 1000); /* interrupted at ~900 ms, 600 ms before the lease ends */
    o.max_renewals = 2;
    dlock_handle *h;
    int rc = write ? dlock_acquire_write(client, key, &o, &h)
                   : dlock_acquire_read(client, key, &o, &h);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_sleep(h, 10000), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_renewals(h), 2);
    assert_int_equal(dlock_check(h), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(h), DLOCK_ERR_INTERRUPTED);
}

static void test_max_renewals_interrupts_a_reader_and_a_writer(void **state)
{
    (void)state;
    interrupted_after_two(0);
    interrupted_after_two(1);
}

static void test_renewal_keeps_a_writer_past_several_leases(void **state)
{
    (void)state;
    char key[64];
    keyed(key, sizeof(key), "rw:renew");
    /* renewed every 200 ms: one late by less than 400 ms is still in time */
    dlock_opts o = opts(600, 1000);
    dlock_handle *h, *other;
    assert_int_equal(dlock_acquire_write(client, key, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_sleep(h, 2000), DLOCK_OK); /* past three leases, ~10 renewals */
    assert_true(dlock_renewals(h) >= 3);
    o.wait_ms = 0;
    assert_int_equal(dlock_acquire_read(client, key, &o, &other), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

static void test_fences_grow_over_reads_and_writes(void **state)
{
    (void)state;
    char key[64];
    keyed(key, sizeof(key), "rw:fence");
    dlock_opts o = opts(5000, 1000);
    dlock_handle *a, *b, *w, *d;
    assert_int_equal(dlock_acquire_read(client, key, &o, &a), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(client, key, &o, &b), DLOCK_OK);
    assert_true(dlock_fence(b) > dlock_fence(a));
    int64_t last = dlock_fence(b);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(client, key, &o, &w), DLOCK_OK);
    assert_true(dlock_fence(w) > last);
    last = dlock_fence(w);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(client, key, &o, &d), DLOCK_OK);
    assert_true(dlock_fence(d) > last);
    assert_int_equal(dlock_release(d), DLOCK_OK);
}

static void test_a_writer_whose_lease_ran_out_and_was_taken_is_lost(void **state)
{
    (void)state;
    char key[64];
    keyed(key, sizeof(key), "rw:lost");
    dlock_opts o = opts(100, 0);
    o.watchdog = 0;
    dlock_handle *h, *other;
    assert_int_equal(dlock_acquire_write(client, key, &o, &h), DLOCK_OK);
    th_sleep_ms(150);
    assert_int_equal(dlock_check(h), DLOCK_ERR_LOST);
    o.lease_ms = 30000;
    assert_int_equal(dlock_acquire_write(client, key, &o, &other), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(other), DLOCK_OK);
}

static void test_bad_arguments_and_a_quorum_are_refused(void **state)
{
    (void)state;
    dlock_handle *h = (dlock_handle *)1;
    assert_int_equal(dlock_acquire_read(client, "", NULL, &h), DLOCK_ERR_INVALID);
    assert_null(h);
    dlock_opts o = opts(1, 100); /* below DLOCK_LEASE_MIN_MS */
    assert_int_equal(dlock_acquire_write(client, "rw:bad", &o, &h), DLOCK_ERR_INVALID);
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_nodes(&cfg, "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"), DLOCK_OK);
    dlock_client *q;
    assert_int_equal(dlock_client_new(&cfg, &q), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(q, "rw:bad", NULL, &h), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "single Redis server"));
    assert_int_equal(dlock_acquire_write(q, "rw:bad", NULL, &h), DLOCK_ERR_INVALID);
    dlock_client_free(q);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--mix") == 0)
        return th_lock_run_workers(atoi(argv[2]), THREADS, argv[3], atoi(argv[4]), mix);
    if (argc == 5 && strcmp(argv[1], "--read") == 0)
        return th_lock_hold_until_killed(atoi(argv[2]), argv[3], atoi(argv[4]),
                                         dlock_acquire_read);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_hold_at_once),
        cmocka_unit_test(test_a_writer_excludes_readers_and_writers),
        cmocka_unit_test(test_a_fail_fast_writer_only_looks),
        cmocka_unit_test(test_an_unanswered_write_acquire_does_not_keep_the_key),
        cmocka_unit_test(test_a_crashed_readers_lease_runs_out_and_a_writer_gets_in),
        cmocka_unit_test(test_a_writer_gets_in_under_a_stream_of_readers),
        cmocka_unit_test(test_a_counter_never_moves_under_a_read_lock),
        cmocka_unit_test(test_max_renewals_interrupts_a_reader_and_a_writer),
        cmocka_unit_test(test_renewal_keeps_a_writer_past_several_leases),
        cmocka_unit_test(test_fences_grow_over_reads_and_writes),
        cmocka_unit_test(test_a_writer_whose_lease_ran_out_and_was_taken_is_lost),
        cmocka_unit_test(test_bad_arguments_and_a_quorum_are_refused),
    };
    th_lock_suite(&redis, &client);
    int failed = th_lock_both_modes("read-write lock", tests, sizeof(tests) / sizeof(tests[0]),
                                    &wait_mode);
    th_redis_stop(&redis, 0);
    return failed;
}
