/* test_lock_turns.c - how processes take turns with a hot key, against a
 * real, private redis-server: a release that puts the process's next local
 * waiter in line, a grant taken on its message's word (and its lease
 * restarted by the watchdog), and a hand-off bound that shrinks when other
 * processes wait. Each client here is another process, as far as the lock
 * can tell. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;

static int group_setup(void **state)
{
    (void)state;
    return redis.pid == 0 && th_redis_start(&redis) != 0 ? -1 : 0;
}

static dlock_client *new_client(void)
{
    dlock_client *c = th_lock_client(&redis);
    assert_non_null(c);
    return c;
}

/* retry_ms also sizes a grant's lease: 2 x retry_ms + 100. */
static dlock_opts opts(int retry_ms, int handoff_max)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = 5000;
    o.wait_ms = 10000;
    o.retry_ms = retry_ms;
    o.handoff_max = handoff_max;
    return o;
}

static long long queued(const char *key)
{
    dlock_names names;
    dlock_names_of(key, &names);
    return th_redis_int(&redis, "ZCARD %s", names.queue);
}

/* How long a grant to the one token in key's line lasts at least: the last
 * field of its entry in key:alive ("deadline:sent:grant"), or -1. */
static long long grant_in_line(const char *key)
{
    dlock_names names;
    dlock_names_of(key, &names);
    redisContext *rc = th_redis_connect(&redis);
    redisReply *r = redisCommand(rc, "HVALS %s", names.alive);
    const char *last = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1
                           ? strrchr(r->element[0]->str, ':') : NULL;
    long long ms = last ? atoll(last + 1) : -1;
    freeReplyObject(r);
    redisFree(rc);
    return ms;
}

struct taker {
    dlock_client *c;
    const char *key;
    dlock_opts o;
    int hold_ms;
    long long scripts_at_hold; /* evalsha calls when it held */
    int64_t fence;
    int rc, sleep_rc;
    pthread_mutex_t *mu; /* the order of holders, when set */
    int *order, *n, id;
};

static void *take(void *arg)
{
    struct taker *t = arg;
    dlock_handle *h;
    if ((t->rc = dlock_acquire(t->c, t->key, &t->o, &h)) != DLOCK_OK)
        return NULL;
    t->scripts_at_hold = th_lock_script_calls(&redis);
    t->fence = dlock_fence(h);
    if (t->mu) {
        pthread_mutex_lock(t->mu);
        t->order[(*t->n)++] = t->id;
        pthread_mutex_unlock(t->mu);
    }
    t->sleep_rc = dlock_sleep(h, t->hold_ms);
    dlock_release(h);
    return NULL;
}

/* A waits once for the key B holds: from then on A listens on the key's
 * channel (for a while after its last waiter), as a process that takes
 * turns with others does. */
static void listen_as_a_waiter(dlock_client *a, dlock_client *b, const char *key,
                               const dlock_opts *o)
{
    dlock_handle *h;
    assert_int_equal(dlock_acquire(b, key, o, &h), DLOCK_OK);
    struct taker x = {a, key, *o, 0, 0, -1, -1, -1, NULL, NULL, NULL, 0};
    pthread_t t;
    pthread_create(&t, NULL, take, &x);
    while (queued(key) != 1)
        th_sleep_ms(2);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(x.rc, DLOCK_OK);
}

/* A1 holds; B (another process) queues in Redis; A2 waits behind A1 in A's
 * local queue. A1's release grants the key to B and, in the same script,
 * puts A2's token in line behind it: A2 never asks Redis itself. B and then
 * A2 hold on their grants' word: from A1's release to A2 holding, the only
 * scripts are the two releases (the old way: A2's own acquire to queue, and
 * a claim each for B and A2, five). */
static void test_a_release_puts_the_next_local_waiter_in_line(void **state)
{
    (void)state;
    const char *key = "t:requeue";
    dlock_client *a = new_client(), *b = new_client();
    /* no hand-off: A1's lease goes back through Redis; retries (and a grant's
     * lease, 4.1 s) long enough that no refresh or renewal runs meanwhile */
    dlock_opts o = opts(2000, 0);
    listen_as_a_waiter(a, b, key, &o);
    dlock_handle *a1;
    assert_int_equal(dlock_acquire(a, key, &o, &a1), DLOCK_OK);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int order[2], n = 0;
    struct taker tb = {b, key, o, 200, 0, -1, -1, -1, &mu, order, &n, 1};
    struct taker ta = {a, key, o, 0, 0, -1, -1, -1, &mu, order, &n, 2};
    pthread_t thb, tha;
    pthread_create(&thb, NULL, take, &tb);
    while (queued(key) != 1) /* B in line in Redis */
        th_sleep_ms(2);
    pthread_create(&tha, NULL, take, &ta);
    th_sleep_ms(200); /* A2 waits behind A1 in A's own queue: nothing to see in Redis */
    assert_int_equal(queued(key), 1);
    long long before = th_lock_script_calls(&redis);
    int64_t fence = dlock_fence(a1);
    assert_int_equal(dlock_release(a1), DLOCK_OK);
    assert_int_equal(queued(key), 1); /* B left the line with the key, A2 took its place */
    assert_int_equal(grant_in_line(key), 4100); /* a grant to A2 lasts its own grace */
    pthread_join(thb, NULL);
    pthread_join(tha, NULL);
    assert_int_equal(tb.rc, DLOCK_OK);
    assert_int_equal(ta.rc, DLOCK_OK);
    assert_int_equal(n, 2);
    assert_int_equal(order[0], 1); /* B first: it was in line first */
    assert_int_equal(order[1], 2);
    assert_true(tb.fence > fence && ta.fence > tb.fence);
    print_message("scripts from A1's release to A2 holding: %lld\n", ta.scripts_at_hold - before);
    assert_int_equal(ta.scripts_at_hold - before, 2);
    assert_int_equal(queued(key), 0);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A grant's lease is short (2 x retry_ms + 100: 300 ms here). A holder that
 * took the key on the grant's word and keeps it twice that long still holds
 * it: the watchdog restarted the lease, and the key's TTL is the holder's
 * whole lease again. */
static void test_a_grant_taken_on_its_word_gets_its_whole_lease(void **state)
{
    (void)state;
    const char *key = "t:granted";
    dlock_client *a = new_client(), *b = new_client();
    dlock_opts o = opts(100, 8);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(a, key, &o, &h), DLOCK_OK);
    struct taker tb = {b, key, o, 600, 0, -1, -1, -1, NULL, NULL, NULL, 0};
    pthread_t thb;
    pthread_create(&thb, NULL, take, &tb);
    while (queued(key) != 1)
        th_sleep_ms(2);
    int64_t fence = dlock_fence(h);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_sleep_ms(400); /* past the grant's 300 ms lease, within B's 600 ms hold */
    assert_true(th_redis_int(&redis, "PTTL %s", key) > 1000);
    pthread_join(thb, NULL);
    assert_int_equal(tb.rc, DLOCK_OK);
    assert_int_equal(tb.sleep_rc, DLOCK_OK); /* held throughout */
    assert_true(tb.fence > fence);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A helper process's body: waits for key (retry_ms 1000, so only a grant
 * wakes it within the test), then says so (RPUSH key:order id), holds it
 * 20 ms and releases it. Returns 0, or 1 when it did not get the key. */
static int wait_turn_and_say_so(int port, const char *key, const char *id)
{
    dlock_client *c = th_lock_client_at(port);
    dlock_opts o = opts(1000, 0);
    dlock_handle *h;
    if (c == NULL || dlock_acquire(c, key, &o, &h) != DLOCK_OK)
        return 1;
    redisContext *rc = redisConnect("127.0.0.1", port);
    freeReplyObject(redisCommand(rc, "RPUSH %s:order %s", key, id));
    redisFree(rc);
    th_sleep_ms(20);
    int rc_release = dlock_release(h);
    dlock_client_free(c);
    return rc_release == DLOCK_OK ? 0 : 1;
}

/* Subscribers of key's release channel. */
static long long listeners(const char *key)
{
    dlock_names names;
    dlock_names_of(key, &names);
    redisContext *rc = th_redis_connect(&redis);
    redisReply *r = redisCommand(rc, "PUBSUB NUMSUB %s", names.channel);
    long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2
                      ? r->element[1]->integer : -1;
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* Two processes wait in line, each with retry_ms 1000 (a grace of 2.1 s
 * in line); the holder's retry_ms is 10. The first waiter's process is
 * stopped when the holder's release grants it the key, and resumes 600 ms
 * later: past the holder's grace (120 ms), well within its own. Its grant
 * must still stand, so it holds first: a grant lasts as long as the
 * waiter's own grace, not only the releaser's. */
static void test_a_waiter_stalled_past_the_releasers_grace_keeps_its_turn(void **state)
{
    (void)state;
    const char *key = "t:stalled";
    char port[16], order[2][8];
    snprintf(port, sizeof(port), "%d", redis.port);
    dlock_client *a = new_client();
    dlock_opts o = opts(10, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(a, key, &o, &h), DLOCK_OK);
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        pid[i] = th_lock_helper((const char *const[]){"--wait-turn", port, key, i ? "1" : "0",
                                                       NULL});
        int64_t until = th_now_ms() + 10000; /* in line, and listening */
        while ((queued(key) != i + 1 || listeners(key) != i + 1) && th_now_ms() < until)
            th_sleep_ms(2);
        assert_int_equal(queued(key), i + 1);
    }
    th_signal(pid[0], SIGSTOP, 0);
    for (int64_t until = th_now_ms() + 5000; th_proc_state(pid[0]) != 'T';) {
        assert_true(th_now_ms() < until);
        th_sleep_ms(2);
    }
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_sleep_ms(600);
    th_signal(pid[0], SIGCONT, 0);
    assert_int_equal(th_wait(pid[0], 20000), 0);
    assert_int_equal(th_wait(pid[1], 20000), 0);
    redisContext *rc = th_redis_connect(&redis);
    redisReply *r = redisCommand(rc, "LRANGE %s:order 0 -1", key);
    for (int i = 0; i < 2; i++)
        snprintf(order[i], sizeof(order[i]), "%s",
                 r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[i]->str : "-");
    freeReplyObject(r);
    redisFree(rc);
    print_message("holders in turn: %s, %s\n", order[0], order[1]);
    assert_string_equal(order[0], "0");
    assert_string_equal(order[1], "1");
    dlock_client_free(a);
}

#define PROCS 4
#define PER_PROC 2
#define ROUNDS 40

struct log {
    pthread_mutex_t mu;
    int64_t fence[PROCS * PER_PROC * ROUNDS];
    int seq[PROCS * PER_PROC * ROUNDS];
    int n;
};

struct worker {
    dlock_client *c;
    struct log *log;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;
    dlock_opts o = opts(100, 8);
    for (int i = 0; i < ROUNDS; i++) {
        dlock_handle *h;
        if (dlock_acquire(w->c, "t:turns", &o, &h) != DLOCK_OK)
            continue;
        pthread_mutex_lock(&w->log->mu); /* in holding order: we hold the lock */
        w->log->fence[w->log->n] = dlock_fence(h);
        w->log->seq[w->log->n++] = dlock_handoff_seq(h);
        pthread_mutex_unlock(&w->log->mu);
        th_sleep_ms(1);
        dlock_release(h);
    }
    return NULL;
}

static int by_int(const void *x, const void *y)
{
    return *(const int *)x - *(const int *)y;
}

/* PER_PROC threads in each of procs clients hammer one key; returns the
 * median number of holders a lease served (a turn), after checking that
 * (fence, seq) grew in holding order. */
static int median_turn(int procs)
{
    static struct log log;
    memset(&log, 0, sizeof(log));
    pthread_mutex_init(&log.mu, NULL);
    dlock_client *c[PROCS];
    struct worker w[PROCS];
    pthread_t t[PROCS * PER_PROC];
    for (int p = 0; p < procs; p++) {
        c[p] = new_client();
        w[p] = (struct worker){c[p], &log};
        for (int i = 0; i < PER_PROC; i++)
            pthread_create(&t[p * PER_PROC + i], NULL, hammer, &w[p]);
    }
    for (int i = 0; i < procs * PER_PROC; i++)
        pthread_join(t[i], NULL);
    for (int p = 0; p < procs; p++)
        dlock_client_free(c[p]);
    assert_int_equal(log.n, procs * PER_PROC * ROUNDS);
    int turns[PROCS * PER_PROC * ROUNDS], nturns = 0;
    for (int i = 0; i < log.n; i++) {
        if (i > 0 && (log.fence[i] < log.fence[i - 1] ||
                      (log.fence[i] == log.fence[i - 1] && log.seq[i] <= log.seq[i - 1])))
            fail_msg("token %d (%lld, %d) not above (%lld, %d)", i, (long long)log.fence[i],
                     log.seq[i], (long long)log.fence[i - 1], log.seq[i - 1]);
        if (i == 0 || log.fence[i] != log.fence[i - 1])
            turns[nturns++] = 0;
        turns[nturns - 1]++;
    }
    pthread_mutex_destroy(&log.mu);
    /* the first and last turns are cut by the start and the end */
    qsort(turns + 1, (size_t)(nturns - 2), sizeof(int), by_int);
    return turns[1 + (nturns - 2) / 2];
}

/* handoff_max 8. Alone, a process serves 9 holders a turn. With 3 other
 * processes of 2 threads taking turns, each turn serves 1.5 x the 8 holders
 * over 3 = 4, so that they wait about 1.5 FIFO waits, not 3.4. */
static void test_the_hand_off_bound_shrinks_when_other_processes_take_turns(void **state)
{
    (void)state;
    int alone = median_turn(1), shared = median_turn(PROCS);
    print_message("median holders a turn: alone %d, %d processes %d\n", alone, PROCS, shared);
    assert_int_equal(alone, 9);
    assert_true(shared <= 4);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--wait-turn") == 0)
        return wait_turn_and_say_so(atoi(argv[2]), argv[3], argv[4]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_release_puts_the_next_local_waiter_in_line),
        cmocka_unit_test(test_a_grant_taken_on_its_word_gets_its_whole_lease),
        cmocka_unit_test(test_a_waiter_stalled_past_the_releasers_grace_keeps_its_turn),
        cmocka_unit_test(test_the_hand_off_bound_shrinks_when_other_processes_take_turns),
    };
    int failed = cmocka_run_group_tests_name("lock, turns between processes", tests,
                                             group_setup, NULL);
    th_redis_stop(&redis, 0);
    return failed;
}
