/* test_lock_rw.c - the read-write lock against a real, private
 * redis-server, in both wait modes: readers overlap, a writer excludes
 * readers and writers, a crashed reader's (a --read process SIGKILLed)
 * lease runs out and a writer gets in, a writer gets in under a steady
 * stream of readers, a GET+SET counter under write locks never changes
 * under a read lock (W=32 over 4 --mix processes), max_renewals for both,
 * fences grow over reads and writes. Then over 3 servers as a quorum:
 * exclusion across clients, a waiting writer keeps new readers out, a
 * writer never holds with anyone under racing threads, one server down
 * still works and two down are refused. */
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
#include "lock/dlock_rw.h"
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

static void test_bad_arguments_are_refused(void **state)
{
    (void)state;
    dlock_handle *h = (dlock_handle *)1;
    assert_int_equal(dlock_acquire_read(client, "", NULL, &h), DLOCK_ERR_INVALID);
    assert_null(h);
    dlock_opts o = opts(1, 100); /* below DLOCK_LEASE_MIN_MS */
    assert_int_equal(dlock_acquire_write(client, "rw:bad", &o, &h), DLOCK_ERR_INVALID);
}

/* ---- over a quorum of 3 servers (notify mode) ---- */

#define NODES 3
static th_redis nodes[NODES];

/* On how many servers key's readers' ZSET holds token (kept: a released
 * handle is gone), and key's writer's key holds h's. */
static int reader_on(const char *key, const char *token)
{
    int n = 0;
    for (int i = 0; i < NODES; i++)
        n += nodes[i].pid && th_redis_int(&nodes[i], "ZSCORE %s %s", key, token) > 0;
    return n;
}

static int writer_on(const char *key, dlock_handle *h)
{
    char name[128], buf[64];
    snprintf(name, sizeof(name), "%s:writer", key);
    int n = 0;
    for (int i = 0; i < NODES; i++)
        n += nodes[i].pid && strcmp(th_redis_get(&nodes[i], name, buf, sizeof(buf)),
                                    dlock_token(h)) == 0;
    return n;
}

/* Two clients (two processes, as far as the lock can tell): a writer keeps
 * the other's readers and writer out, readers of both hold at once. */
static void test_over_three_servers_readers_share_and_a_writer_excludes(void **state)
{
    (void)state;
    const char *key = "rwq:exclude";
    dlock_client *a = th_lock_quorum_client(nodes, NODES), *b = th_lock_quorum_client(nodes, NODES);
    assert_non_null(a);
    assert_non_null(b);
    dlock_opts now = opts(5000, 0), soon = opts(5000, 200);
    dlock_handle *w, *r1, *r2, *x;
    assert_int_equal(dlock_acquire_write(a, key, &now, &w), DLOCK_OK);
    assert_int_equal(writer_on(key, w), NODES);
    assert_int_equal(dlock_acquire_read(b, key, &soon, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_acquire_write(b, key, &soon, &x), DLOCK_ERR_TIMEOUT);
    int64_t fence = dlock_fence(w);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(b, key, &now, &r1), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(a, key, &now, &r2), DLOCK_OK);
    char t1[64], t2[64];
    snprintf(t1, sizeof(t1), "%s", dlock_token(r1));
    snprintf(t2, sizeof(t2), "%s", dlock_token(r2));
    assert_int_equal(reader_on(key, t1), NODES);
    assert_true(dlock_fence(r1) > fence);
    assert_true(dlock_fence(r2) > dlock_fence(r1)); /* the counters kept in step */
    assert_int_equal(dlock_acquire_write(a, key, &now, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_release(r1), DLOCK_OK);
    assert_int_equal(dlock_release(r2), DLOCK_OK);
    assert_int_equal(reader_on(key, t1) + reader_on(key, t2), 0);
    assert_int_equal(dlock_acquire_write(b, key, &soon, &w), DLOCK_OK);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A reader of one client holds; a writer of another waits, and keeps a
 * third client's new readers out until it got in and left. */
struct waiting_writer {
    dlock_client *c;
    int rc;
    atomic_int done;
};

static void *write_when_let_in(void *arg)
{
    struct waiting_writer *ww = arg;
    dlock_opts o = opts(5000, 10000);
    dlock_handle *h;
    if ((ww->rc = dlock_acquire_write(ww->c, "rwq:fair", &o, &h)) == DLOCK_OK) {
        atomic_store(&ww->done, 1);
        th_sleep_ms(100);
        ww->rc = dlock_release(h);
    }
    atomic_store(&ww->done, 2);
    return NULL;
}

static void test_over_three_servers_a_waiting_writer_keeps_new_readers_out(void **state)
{
    (void)state;
    dlock_client *a = th_lock_quorum_client(nodes, NODES), *c = th_lock_quorum_client(nodes, NODES);
    struct waiting_writer ww = {.c = th_lock_quorum_client(nodes, NODES)};
    dlock_opts now = opts(5000, 0);
    dlock_handle *r, *x;
    assert_int_equal(dlock_acquire_read(a, "rwq:fair", &now, &r), DLOCK_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_when_let_in, &ww), 0);
    int64_t until = th_now_ms() + 10000; /* the writer's wish is on every server */
    while (th_redis_int(&nodes[NODES - 1], "ZCARD rwq:fair:writers") < 1 && th_now_ms() < until)
        th_sleep_ms(5);
    assert_int_equal(dlock_acquire_read(c, "rwq:fair", &now, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(atomic_load(&ww.done), 0);
    assert_int_equal(dlock_release(r), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(ww.rc, DLOCK_OK);
    assert_int_equal(dlock_acquire_read(c, "rwq:fair", &now, &x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(c);
    dlock_client_free(ww.c);
}

/* One server down: two of three still make a majority, for readers and
 * writers, their renewals and their releases. Two down: refused at once. */
static void test_over_three_servers_one_down_works_and_two_down_is_refused(void **state)
{
    (void)state;
    const char *key = "rwq:down";
    dlock_client *a = th_lock_quorum_client(nodes, NODES), *b = th_lock_quorum_client(nodes, NODES);
    th_redis_stop(&nodes[0], 1);
    dlock_opts now = opts(300, 0); /* renewed every 100 ms */
    dlock_handle *w, *r, *x;
    assert_int_equal(dlock_acquire_write(a, key, &now, &w), DLOCK_OK);
    assert_int_equal(writer_on(key, w), NODES - 1);
    assert_int_equal(dlock_acquire_read(b, key, &now, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_sleep(w, 1000), DLOCK_OK); /* past three leases */
    assert_int_equal(dlock_release(w), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(b, key, &now, &r), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(a, key, &now, &x), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_sleep(r, 1000), DLOCK_OK);
    assert_int_equal(dlock_release(r), DLOCK_OK);

    th_redis_stop(&nodes[1], 1);
    dlock_opts wait = opts(5000, 2000);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire_read(b, key, &wait, &x), DLOCK_ERR_REDIS);
    assert_true(th_now_ms() - t0 < 1500); /* no majority: at once, not after wait_ms */
    assert_non_null(strstr(dlock_errstr(), "needs 2 of 3 Redis servers"));
    assert_int_equal(dlock_acquire_write(a, key, &wait, &x), DLOCK_ERR_REDIS);
    assert_int_equal(th_redis_int(&nodes[2], "EXISTS %s:writer", key), 0); /* given back */
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A store refused a holder's fence: the raise over three servers whose
 * counters differ (one is ahead) takes the highest answer, writes it back
 * where the lease is the holder's (key:writer for a writer, the readers'
 * ZSET for a reader), and the holder keeps its lock. */
static void test_over_three_servers_a_fence_raise_keeps_a_writer_and_a_reader(void **state)
{
    (void)state;
    const char *key = "rwq:raise";
    dlock_client *a = th_lock_quorum_client(nodes, NODES);
    dlock_opts now = opts(5000, 0);
    for (int write = 1; write >= 0; write--) {
        dlock_handle *h;
        assert_int_equal(write ? dlock_acquire_write(a, key, &now, &h)
                               : dlock_acquire_read(a, key, &now, &h), DLOCK_OK);
        int64_t floor = dlock_fence(h) + 1000;
        assert_int_equal(th_redis_int(&nodes[0], "SET %s:fence %lld", key, (long long)floor + 50),
                         0);
        assert_int_equal(dlock_fence_raise(h, floor), DLOCK_OK);
        assert_int_equal(dlock_fence(h), floor + 51); /* the ahead server's answer */
        for (int i = 0; i < NODES; i++)
            assert_true(th_redis_int(&nodes[i], "GET %s:fence", key) >= floor + 51);
        assert_int_equal(dlock_check(h), DLOCK_OK);
        assert_int_equal(dlock_release(h), DLOCK_OK);
    }
    dlock_client_free(a);
}

/* Threads of two clients take read and write locks at random over the
 * quorum; each counts itself in while it holds: a writer must never see
 * another holder, a reader never a writer. */
struct census {
    dlock_client *c;
    atomic_int *readers, *writers, *violations, *failures;
    int id;
};

static void *read_and_write(void *arg)
{
    struct census *k = arg;
    dlock_opts o = opts(2000, 30000);
    for (int i = 0; i < ROUNDS; i++) {
        int write = (i + k->id) % 3 == 0;
        dlock_handle *h;
        int rc = write ? dlock_acquire_write(k->c, "rwq:census", &o, &h)
                       : dlock_acquire_read(k->c, "rwq:census", &o, &h);
        if (rc != DLOCK_OK) {
            atomic_fetch_add(k->failures, 1);
            continue;
        }
        atomic_int *mine = write ? k->writers : k->readers;
        atomic_fetch_add(mine, 1);
        for (int look = 0; look < 2; look++, th_sleep_ms(2)) /* as it comes in, and later */
            if (write ? atomic_load(k->readers) > 0 || atomic_load(k->writers) > 1
                      : atomic_load(k->writers) > 0)
                atomic_fetch_add(k->violations, 1);
        atomic_fetch_sub(mine, 1);
        if (dlock_release(h) != DLOCK_OK)
            atomic_fetch_add(k->failures, 1);
    }
    return NULL;
}

static void test_over_three_servers_a_writer_never_holds_with_anyone(void **state)
{
    (void)state;
    enum { CLIENTS = 2, PER = 4 };
    atomic_int readers = 0, writers = 0, violations = 0, failures = 0;
    dlock_client *c[CLIENTS];
    struct census k[CLIENTS * PER];
    pthread_t t[CLIENTS * PER];
    for (int i = 0; i < CLIENTS; i++)
        assert_non_null(c[i] = th_lock_quorum_client(nodes, NODES));
    for (int i = 0; i < CLIENTS * PER; i++) {
        k[i] = (struct census){c[i % CLIENTS], &readers, &writers, &violations, &failures, i};
        assert_int_equal(pthread_create(&t[i], NULL, read_and_write, &k[i]), 0);
    }
    for (int i = 0; i < CLIENTS * PER; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&violations), 0);
    assert_int_equal(atomic_load(&failures), 0);
    for (int i = 0; i < CLIENTS; i++)
        dlock_client_free(c[i]);
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
        cmocka_unit_test(test_bad_arguments_are_refused),
    };
    const struct CMUnitTest over_quorum[] = {
        cmocka_unit_test(test_over_three_servers_readers_share_and_a_writer_excludes),
        cmocka_unit_test(test_over_three_servers_a_waiting_writer_keeps_new_readers_out),
        cmocka_unit_test(test_over_three_servers_a_writer_never_holds_with_anyone),
        cmocka_unit_test(test_over_three_servers_a_fence_raise_keeps_a_writer_and_a_reader),
        cmocka_unit_test(test_over_three_servers_one_down_works_and_two_down_is_refused),
    };
    th_lock_suite(&redis, &client);
    int failed = th_lock_both_modes("read-write lock", tests, sizeof(tests) / sizeof(tests[0]),
                                    &wait_mode);
    failed += cmocka_run_group_tests_name("read-write lock over 3 servers", over_quorum,
                                          quorum_setup, quorum_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
