/* test_cluster.c - the lock over a real Redis Cluster (three primaries, a
 * replica each, made by redis-cli --cluster create): keys of many slots
 * each locked on its owner, a key without a hash tag refused, a waiter
 * woken by a sharded release, a multi-lock across shards, a read lock and a
 * permit, a slot moved by hand mid-run (ASK while it migrates, MOVED
 * after, both counted), a slot moved in phases under load with one holder
 * at a time and no failed wait, a primary killed and locking going on on
 * its promoted replica; then three stockd replicas on the cluster under
 * loadgen, carts across shards, PASS, an item whose slot migrates answered
 * 200 throughout, and PASS again with a primary killed mid-run. The kills
 * come last: they change the cluster for good. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "lock/cluster.h"
#include "lock/dlock.h"
#include "lock/dlock_rw.h"
#include "lock/dlock_sem.h"
#include "tests/support/cluster.h"
#include "tests/support/logline.h"
#include "tests/support/stack.h"

#define PRIMARIES 3

static th_cluster cluster;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("cluster-it", dir, sizeof(dir)) != 0)
        return -1;
    return th_cluster_start(&cluster, PRIMARIES, 1);
}

static int group_teardown(void **state)
{
    (void)state;
    th_cluster_stop(&cluster);
    return 0;
}

static dlock_client *cluster_client(void)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_cluster(&cfg, cluster.seeds), DLOCK_OK);
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    return c;
}

static dlock_opts quick_opts(void)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = 5000;
    o.wait_ms = 5000;
    o.retry_ms = 20;
    return o;
}

/* Acquires key and releases it; its fence. */
static int64_t lock_once(dlock_client *c, const char *key, const dlock_opts *o)
{
    dlock_handle *h;
    int rc = dlock_acquire(c, key, o, &h);
    if (rc != DLOCK_OK)
        fail_msg("acquire %s: %s (%s)", key, dlock_strerror(rc), dlock_errstr());
    int64_t fence = dlock_fence(h);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    return fence;
}

/* The client's slots are Redis's own (CLUSTER KEYSLOT), hash tags' edge
 * cases included: an empty tag hashes the whole key, the first "}" closes. */
static void test_a_keys_slot_is_the_one_redis_computes(void **state)
{
    (void)state;
    const char *keys[] = {"123456789", "stock:lock:{42}", "{user1000}.following", "foo{}{bar}",
                          "foo{{bar}}zap", "foo{bar}{zap}", "{", "}{x}", "a{b", ""};
    for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
        assert_int_equal(dlock__slot_of(keys[i], NULL),
                         th_redis_int(&cluster.node[0], "CLUSTER KEYSLOT %s", keys[i]));
    assert_int_equal(dlock__slot_of("123456789", NULL), 0x31c3 % 16384); /* CRC16's check */
}

static void test_keys_of_many_slots_are_locked_each_on_its_owner(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    dlock_opts o = quick_opts();
    long long before[PRIMARIES];
    for (int i = 0; i < PRIMARIES; i++)
        before[i] = th_cluster_evalsha_calls(&cluster, i);
    for (int i = 0; i < 300; i++) {
        char key[32];
        snprintf(key, sizeof(key), "many:{%d}", i);
        assert_true(lock_once(c, key, &o) > 0);
    }
    for (int i = 0; i < PRIMARIES; i++) /* each about a third: 2 scripts a lock */
        assert_true(th_cluster_evalsha_calls(&cluster, i) - before[i] > 100);
    dlock_stats st;
    dlock_stats_read(c, &st);
    assert_int_equal(st.acquired, 300);
    assert_int_equal(st.redis_errors, 0);
    assert_int_equal(dlock_ping(c), DLOCK_OK);
    dlock_client_free(c);
}

static void test_a_key_without_a_hash_tag_is_refused(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    dlock_handle *h;
    dlock_opts o = quick_opts();
    assert_int_equal(dlock_acquire(c, "no-tag", &o, &h), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "hash tag"));
    dlock_client_free(c);
}

struct waiter {
    dlock_client *c;
    const char *key;
    int64_t got_ms;
    int rc;
};

static void *wait_for(void *arg)
{
    struct waiter *w = arg;
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = 30000, o.retry_ms = 10000, o.wait_ms = 30000; /* polls far apart */
    dlock_handle *h;
    w->rc = dlock_acquire(w->c, w->key, &o, &h);
    w->got_ms = th_now_ms();
    if (w->rc == DLOCK_OK)
        dlock_release(h);
    return NULL;
}

/* The waiter polls every 5..15 s: it gets the key within 4 s of the
 * release only because the release's SPUBLISH woke it, through the
 * SSUBSCRIBE on the key's own shard. */
static void test_a_waiter_is_woken_by_its_shards_release(void **state)
{
    (void)state;
    char tag[16], key[32], channel[64];
    int slot;
    th_cluster_tag_on(&cluster, 1, 0, tag, &slot);
    snprintf(key, sizeof(key), "wake:{%s}", tag);
    snprintf(channel, sizeof(channel), "%s:released", key);
    dlock_client *holder = cluster_client(), *other = cluster_client();
    dlock_opts o = quick_opts();
    o.lease_ms = 30000;
    dlock_handle *h;
    assert_int_equal(dlock_acquire(holder, key, &o, &h), DLOCK_OK);
    struct waiter w = {.c = other, .key = key};
    pthread_t t;
    pthread_create(&t, NULL, wait_for, &w);
    int subscribed = 0;
    for (int64_t end = th_now_ms() + 5000; !subscribed && th_now_ms() < end; th_sleep_ms(20)) {
        redisContext *rc = th_redis_connect(&cluster.node[1]);
        redisReply *r = redisCommand(rc, "PUBSUB SHARDNUMSUB %s", channel);
        subscribed = r && r->elements == 2 && r->element[1]->integer >= 1;
        freeReplyObject(r);
        redisFree(rc);
    }
    assert_true(subscribed);
    th_sleep_ms(200);
    int64_t released = th_now_ms();
    assert_int_equal(dlock_release(h), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.got_ms - released < 4000);
    dlock_client_free(holder);
    dlock_client_free(other);
}

static void test_a_multi_lock_takes_each_key_on_its_shard(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    char tags[PRIMARIES][16], keys[PRIMARIES][48];
    const char *names[PRIMARIES];
    int slot;
    for (int i = 0; i < PRIMARIES; i++) {
        th_cluster_tag_on(&cluster, i, 100, tags[i], &slot);
        snprintf(keys[i], sizeof(keys[i]), "cart:{%s}", tags[i]);
        names[i] = keys[i];
    }
    dlock_opts o = quick_opts();
    dlock_handle *h;
    assert_int_equal(dlock_acquire_multi(c, names, PRIMARIES, &o, &h), DLOCK_OK);
    for (int i = 0; i < PRIMARIES; i++) {
        assert_int_equal(th_redis_int(&cluster.node[i], "EXISTS %s", keys[i]), 1);
        assert_true(dlock_fence_at(h, i) > 0);
    }
    assert_int_equal(dlock_release(h), DLOCK_OK);
    for (int i = 0; i < PRIMARIES; i++)
        assert_int_equal(th_redis_int(&cluster.node[i], "EXISTS %s", keys[i]), 0);
    dlock_client_free(c);
}

static void test_a_read_lock_and_a_permit_over_the_cluster(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    dlock_opts o = quick_opts();
    dlock_handle *r, *w, *p, *q;
    assert_int_equal(dlock_acquire_read(c, "rw:{a}", &o, &r), DLOCK_OK);
    o.wait_ms = 0;
    assert_int_equal(dlock_acquire_write(c, "rw:{a}", &o, &w), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_release(r), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(c, "rw:{a}", &o, &w), DLOCK_OK);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem:{b}", 1, &o, &p), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem:{b}", 1, &o, &q), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_release(p), DLOCK_OK);
    dlock_client_free(c);
}

/* A slot moved from its owner to another primary while a lock in it is
 * held. Its keys moved, the source answers ASK for them and the holder's
 * renewals (one key each) follow it to the target, after ASKING; a script
 * of five keys, of which some are missing at the target, would get
 * TRYAGAIN there until the move ends (Redis's rule for keys split by a
 * migration). Once the slot is given over, the release meets MOVED, and
 * the fence counter came along with the keys. */
static void test_a_slot_moved_by_hand_meets_ask_then_moved(void **state)
{
    (void)state;
    char tag[16], key[32];
    int slot;
    th_cluster_tag_on(&cluster, 0, 200, tag, &slot);
    snprintf(key, sizeof(key), "mig:{%s}", tag);
    dlock_client *c = cluster_client();
    dlock_opts o = quick_opts();
    int64_t first = lock_once(c, key, &o);
    dlock_handle *h;
    o.lease_ms = 900; /* renewed every 300 ms */
    o.max_renewals = 0;
    assert_int_equal(dlock_acquire(c, key, &o, &h), DLOCK_OK);

    assert_int_equal(th_cluster_migrate_begin(&cluster, slot, 0, 1), 0);
    assert_int_equal(th_cluster_migrate_keys(&cluster, slot, 0, 1), 0);
    dlock_stats st;
    for (int64_t end = th_now_ms() + 10000; th_now_ms() < end; th_sleep_ms(50)) {
        dlock_stats_read(c, &st);
        if (st.asked > 0)
            break;
    }
    assert_true(st.asked > 0);
    th_sleep_ms(1000); /* more than a lease: only the renewals through ASK keep it */
    assert_int_equal(dlock_check(h), DLOCK_OK);

    /* The importing node lost its scripts (a restart, SCRIPT FLUSH): the
     * body sent instead goes after ASKING too, or node 1 would answer it
     * with MOVED and a renewal would fail. */
    dlock_stats_read(c, &st);
    uint64_t errors = st.redis_errors;
    assert_int_equal(th_redis_int(&cluster.node[1], "SCRIPT FLUSH"), 0);
    int renewed = dlock_renewals(h);
    for (int64_t end = th_now_ms() + 5000; dlock_renewals(h) < renewed + 2 && th_now_ms() < end;)
        th_sleep_ms(20);
    assert_true(dlock_renewals(h) >= renewed + 2);
    dlock_stats_read(c, &st);
    assert_int_equal(st.redis_errors, errors);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(th_cluster_migrate_end(&cluster, slot, 0, 1), 0);

    assert_int_equal(dlock_release(h), DLOCK_OK); /* MOVED, redone at node 1 */
    o = quick_opts();
    assert_true(lock_once(c, key, &o) > first);
    dlock_stats_read(c, &st);
    print_message("moved %llu, asked %llu\n", (unsigned long long)st.moved,
                  (unsigned long long)st.asked);
    assert_true(st.moved > 0);
    assert_int_equal(th_cluster_owner(&cluster, slot), 1);
    dlock_client_free(c);
}

/* ---- a slot migrating under load ---- */

/* Threads that lock one key again and again, each on a client of its own
 * (as processes would), while its slot migrates: every acquire must succeed
 * within its wait, and never two hold the key at once (each checks that it
 * is alone inside and that its fence is above the last one seen). */
struct churn {
    dlock_client *c;
    const char *key;
    _Atomic int *stop, *inside;
    _Atomic int64_t *last_fence;
    _Atomic int taken; /* read while it runs */
    int failed, overlaps, backwards;
    char why[160];
};

static void *churn_run(void *arg)
{
    struct churn *t = arg;
    dlock_opts o = quick_opts();
    o.lease_ms = 2000;
    o.wait_ms = 1000 * TH_SLOWER; /* see migrate_in_phases */
    while (!atomic_load(t->stop)) {
        dlock_handle *h;
        int rc = dlock_acquire(t->c, t->key, &o, &h);
        if (rc != DLOCK_OK) {
            if (t->failed++ == 0)
                snprintf(t->why, sizeof(t->why), "%s (%s)", dlock_strerror(rc), dlock_errstr());
            continue;
        }
        atomic_fetch_add(&t->taken, 1);
        t->overlaps += atomic_fetch_add(t->inside, 1) != 0;
        int64_t fence = dlock_fence(h), last = atomic_exchange(t->last_fence, fence);
        t->backwards += fence <= last;
        th_sleep_ms(2);
        atomic_fetch_sub(t->inside, 1);
        dlock_release(h);
    }
    return NULL;
}

/* Moves key's slot from node from to node to by hand, in the phases a
 * migration under load goes through: the slot marked (the source has all it
 * had: a call naming keys it has and keys it never had gets TRYAGAIN), the
 * fence counter moved alone (as when a batch of redis-cli's ends between a
 * lock's keys: TRYAGAIN at the source for every call of the lock), each
 * split_ms long, which a wait must outlast; the rest moved (the source
 * answers ASK, and the importing node takes the scripts that name only
 * their first key) for ask_ms, longer than a wait, so that calls must
 * succeed in that phase; then the slot given over (MOVED). *moved_at: how
 * many acquires count (may be NULL) had counted when the last keys moved. */
static void migrate_in_phases(const char *key, int slot, int from, int to, int split_ms,
                              int ask_ms, int (*count)(void *), void *arg, int *moved_at)
{
    char fence[64];
    snprintf(fence, sizeof(fence), "%s:fence", key);
    assert_int_equal(th_cluster_migrate_begin(&cluster, slot, from, to), 0);
    th_sleep_ms(split_ms);
    assert_int_equal(th_cluster_migrate_key(&cluster, fence, from, to), 0);
    th_sleep_ms(split_ms);
    assert_int_equal(th_cluster_migrate_keys(&cluster, slot, from, to), 0);
    if (count)
        *moved_at = count(arg);
    th_sleep_ms(ask_ms);
    assert_int_equal(th_cluster_migrate_end(&cluster, slot, from, to), 0);
}

struct churners {
    struct churn t[4];
    int n;
};

static int churned(void *arg)
{
    struct churners *all = arg;
    int taken = 0;
    for (int i = 0; i < all->n; i++)
        taken += atomic_load(&all->t[i].taken);
    return taken;
}

/* A key locked without a pause by threads on clients of their own while
 * its slot migrates (migrate_in_phases): locking goes on through every
 * phase, one holder at a time. */
static void test_a_slot_migrating_under_load_keeps_one_holder_and_locks(void **state)
{
    (void)state;
    char tag[16], key[32];
    int slot;
    th_cluster_tag_on(&cluster, 1, 400, tag, &slot);
    snprintf(key, sizeof(key), "churn:{%s}", tag);
    _Atomic int stop = 0, inside = 0;
    _Atomic int64_t last_fence = 0;
    struct churners all = {.n = 4};
    pthread_t th[4];
    for (int i = 0; i < all.n; i++) {
        all.t[i] = (struct churn){.c = cluster_client(), .key = key, .stop = &stop,
                                  .inside = &inside, .last_fence = &last_fence};
        pthread_create(&th[i], NULL, churn_run, &all.t[i]);
    }
    th_sleep_ms(300);
    int before = churned(&all), moved_at;
    migrate_in_phases(key, slot, 1, 0, 300 * TH_SLOWER, 2000 * TH_SLOWER, churned, &all,
                      &moved_at);
    int during = churned(&all);
    th_sleep_ms(300);
    atomic_store(&stop, 1);
    int failed = 0, overlaps = 0, backwards = 0;
    dlock_stats st, sum = {0};
    for (int i = 0; i < all.n; i++) {
        struct churn *t = &all.t[i];
        pthread_join(th[i], NULL);
        failed += t->failed, overlaps += t->overlaps, backwards += t->backwards;
        if (t->failed)
            print_message("thread %d: %d failed, first: %s\n", i, t->failed, t->why);
        dlock_stats_read(t->c, &st);
        sum.asked += st.asked, sum.moved += st.moved, sum.tryagain += st.tryagain;
        dlock_client_free(t->c);
    }
    print_message("%d acquires (%d while migrating, %d of them after its keys moved), %d "
                  "failed; asked %llu, tryagain %llu, moved %llu\n", churned(&all),
                  during - before, during - moved_at, failed, (unsigned long long)sum.asked,
                  (unsigned long long)sum.tryagain, (unsigned long long)sum.moved);
    assert_int_equal(failed, 0);
    assert_int_equal(overlaps, 0);
    assert_int_equal(backwards, 0);
    assert_true(during - moved_at > 0);
    assert_true(sum.tryagain > 0);
    assert_true(sum.asked > 0);
    assert_true(sum.moved > 0);
    assert_int_equal(th_cluster_owner(&cluster, slot), 0);
}

/* The owner of a key SIGKILLed: its replica is promoted (node timeout 1 s)
 * and the client finds it by the map; the fence keeps growing. */
static void test_a_primary_killed_and_locking_goes_on(void **state)
{
    (void)state;
    char tag[16], key[32];
    int slot;
    th_cluster_tag_on(&cluster, 2, 300, tag, &slot);
    snprintf(key, sizeof(key), "kill:{%s}", tag);
    dlock_client *c = cluster_client();
    dlock_opts o = quick_opts();
    int64_t before = lock_once(c, key, &o);
    th_sleep_ms(200); /* the counter reaches the replica */
    th_redis_stop(&cluster.node[2], 1);
    int64_t after = 0, killed = th_now_ms();
    int refused = 0;
    for (int64_t end = th_now_ms() + 20000; after == 0 && th_now_ms() < end;) {
        dlock_handle *h;
        o.wait_ms = 500;
        int rc = dlock_acquire(c, key, &o, &h);
        if (rc == DLOCK_OK) {
            after = dlock_fence(h);
            assert_int_equal(dlock_release(h), DLOCK_OK);
        } else {
            refused++;
            th_sleep_ms(100);
        }
    }
    print_message("fence %lld before the kill, %lld after, %d refusals and %lld ms later\n",
                  (long long)before, (long long)after, refused, (long long)(th_now_ms() - killed));
    assert_true(after > before);
    assert_int_equal(th_cluster_wait_ok(&cluster, slot, 10000), 0);
    o.wait_ms = 5000;
    for (int i = 0; i < 30; i++) { /* every shard, the promoted one too */
        char k[32];
        snprintf(k, sizeof(k), "after:{%d}", i);
        lock_once(c, k, &o);
    }
    assert_int_equal(dlock_ping(c), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- stockd on the cluster ---- */

/* loadgen over 24 fresh items, carts of 1 to 3 lines, against targets. */
static pid_t loadgen_carts(const th_stack *s, const char *name, const char *targets,
                           const char *duration)
{
    static char bin[256], json[160], out[160];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    snprintf(json, sizeof(json), "%s/%s.json", s->dir, name);
    snprintf(out, sizeof(out), "%s/%s.out", s->dir, name);
    const char *argv[] = {bin, "--target", targets, "--items", "24", "--stock", "100000",
                          "--cart-lines", "1-3", "-d", duration, "-n", "0", "-c", "12",
                          "--json", json, "--timeout-ms", "20000", NULL};
    return th_spawn(argv, out);
}

static void cluster_stack(th_stack *s, const char *name)
{
    const char *all[] = {"--redis-cluster", cluster.seeds, NULL};
    th_stack_start(s, dir, NULL, name, all, NULL, 100000);
}

/* cluster_stack, with waits for the lock of wait_ms, and each Redis command
 * given 500 ms: the stack's 150 once ran out during a migration on a busy
 * machine (make test-fresh beside make mutants), an answer redis_unavailable
 * that this test counts as a failure. The lease grows with it (a command may
 * take a sixth of it at most). */
static void cluster_stack_waiting(th_stack *s, const char *name, int wait_ms)
{
    char wait[16];
    snprintf(wait, sizeof(wait), "%d", wait_ms);
    const char *all[] = {"--redis-cluster", cluster.seeds, "--wait-ms", wait, "--lease-ms",
                         "3000", "--redis-timeout-ms", "500", NULL};
    th_stack_start(s, dir, NULL, name, all, NULL, 100000);
}

static void test_stockd_on_the_cluster_passes_with_carts_across_shards(void **state)
{
    (void)state;
    th_stack s;
    char targets[600];
    cluster_stack(&s, "cluster-carts");
    snprintf(targets, sizeof(targets), "%s,%s", s.r[0].url, s.targets);
    th_loadgen_expect(&s, loadgen_carts(&s, "cluster-carts", targets, "3s"), "cluster-carts", 0);
    assert_true(th_loadgen_outcome(&s, "cluster-carts", "ok") > 0);
    assert_int_equal(th_loadgen_outcome(&s, "cluster-carts", "redis_unavailable"), 0);
    th_stack_stop(&s);
}

/* The slot of the stack's item's lock key migrates by hand
 * (migrate_in_phases) while loadgen orders that item from every replica:
 * each order is answered 200 (none lock_timeout, none redis_unavailable),
 * and the verdict (no lost update, the stock as the answers say) passes.
 * Each phase of the move lasts longer than an order may wait for the
 * lock. */
static void test_stockd_orders_an_item_whose_slot_migrates(void **state)
{
    (void)state;
    th_stack s;
    char targets[600], key[64];
    cluster_stack_waiting(&s, "cluster-migrate", 1500 * TH_SLOWER);
    snprintf(targets, sizeof(targets), "%s,%s", s.r[0].url, s.targets);
    snprintf(key, sizeof(key), "stock:lock:{%lld}", s.item);
    int slot = dlock__slot_of(key, NULL), from = th_cluster_owner(&cluster, slot);
    int to = from == 0 ? 1 : 0;
    assert_true(from >= 0);
    char secs[16];
    snprintf(secs, sizeof(secs), "%ds", 2 + 4 * TH_SLOWER);
    pid_t lg = th_loadgen_start(&s, "cluster-migrate", targets, secs, "12", "1");
    th_sleep_ms(1000);
    migrate_in_phases(key, slot, from, to, 400 * TH_SLOWER, 2500 * TH_SLOWER, NULL, NULL, NULL);
    th_loadgen_expect(&s, lg, "cluster-migrate", 0);
    static const char *const bad[] = {"lock_timeout", "lock_interrupted", "lock_lost",
                                      "redis_unavailable", "other_4xx", "other_5xx",
                                      "commit_unknown", "transport_error", "malformed"};
    long long ok = th_loadgen_outcome(&s, "cluster-migrate", "ok");
    print_message("slot %d from node %d to %d under load: %lld ok\n", slot, from, to, ok);
    assert_true(ok > 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        if (th_loadgen_outcome(&s, "cluster-migrate", bad[i]) != 0)
            fail_msg("%lld answered %s while the slot migrated",
                     th_loadgen_outcome(&s, "cluster-migrate", bad[i]), bad[i]);
    assert_int_equal(th_cluster_owner(&cluster, slot), to);
    th_stack_stop(&s);
}

/* One replica's log lines msg (a logfmt log): how many; *bad counts those
 * without a node, or (with_detail) with an empty detail, the first of
 * which is printed. */
static int redis_lines(const th_stockd *r, const char *msg, int with_detail, int *bad)
{
    char *text = th_read_file(r->log), line[4096];
    const char *next = text ? text : "";
    int count = 0;
    while (th_next_line(&next, line, sizeof(line))) {
        th_logfmt l;
        int found;
        const char *m = th_logfmt_parse(line, &l) == 0 ? th_logfmt_get(&l, "msg", &found) : NULL;
        if (m == NULL || strcmp(m, msg) != 0)
            continue;
        count++;
        const char *node = th_logfmt_get(&l, "node", &found);
        const char *detail = th_logfmt_get(&l, "detail", &found);
        if (node == NULL || node[0] == '\0' || (with_detail && (!detail || !detail[0])))
            if ((*bad)++ == 0)
                print_message("%s: %s\n", r->log, line);
    }
    free(text);
    return count;
}

/* One primary stops answering, a few times, for less than the cluster's node
 * timeout (no failover), while carts over every shard go on through group
 * commit: each replica logs that node unreachable, with the failure's
 * detail, and reachable again, once a stop each at most; the other shards'
 * successes in between do not flip it back and forth. */
static void test_one_shards_failures_log_that_node_once_with_its_detail(void **state)
{
    (void)state;
    enum { STOPS = 3 };
    th_stack s;
    char targets[600];
    cluster_stack(&s, "cluster-stops");
    snprintf(targets, sizeof(targets), "%s,%s", s.r[0].url, s.targets);
    pid_t lg = loadgen_carts(&s, "cluster-stops", targets, "5s");
    int victim = th_cluster_owner(&cluster, 0);
    assert_true(victim >= 0);
    th_sleep_ms(1000);
    for (int i = 0; i < STOPS; i++) {
        th_signal(cluster.node[victim].pid, SIGSTOP, 0);
        th_sleep_ms(400);
        th_signal(cluster.node[victim].pid, SIGCONT, 0);
        th_sleep_ms(600);
    }
    th_loadgen_expect(&s, lg, "cluster-stops", 0);
    int down = 0, bad = 0;
    for (int i = 0; i < TH_REPLICAS; i++) {
        int unreachable = redis_lines(&s.r[i], "Redis unreachable", 1, &bad);
        int again = redis_lines(&s.r[i], "Redis reachable again", 0, &bad);
        print_message("replica %d: %d unreachable, %d reachable again\n", i, unreachable,
                      again);
        assert_true(unreachable <= STOPS + 1);
        assert_true(again <= STOPS + 1);
        down += unreachable;
    }
    assert_int_equal(bad, 0); /* each names its node, and says why */
    assert_true(down > 0);    /* the stops were seen */
    assert_int_equal(th_cluster_wait_ok(&cluster, 0, 10000), 0);
    th_stack_stop(&s);
}

static void test_stockd_passes_with_a_primary_killed_mid_run(void **state)
{
    (void)state;
    th_stack s;
    char targets[600];
    cluster_stack(&s, "cluster-kill");
    snprintf(targets, sizeof(targets), "%s,%s", s.r[0].url, s.targets);
    pid_t lg = loadgen_carts(&s, "cluster-kill", targets, "6s");
    th_sleep_ms(1500);
    int victim = th_cluster_owner(&cluster, 0); /* a live primary: slot 0's */
    assert_true(victim >= 0);
    th_redis_stop(&cluster.node[victim], 1);
    th_loadgen_expect(&s, lg, "cluster-kill", 0);
    print_message("with a primary killed: %lld ok, %lld redis_unavailable\n",
                  th_loadgen_outcome(&s, "cluster-kill", "ok"),
                  th_loadgen_outcome(&s, "cluster-kill", "redis_unavailable"));
    assert_true(th_loadgen_outcome(&s, "cluster-kill", "ok") > 0);
    assert_int_equal(th_cluster_wait_ok(&cluster, 0, 10000), 0);
    th_loadgen_expect(&s, loadgen_carts(&s, "cluster-after", targets, "2s"), "cluster-after", 0);
    assert_int_equal(th_loadgen_outcome(&s, "cluster-after", "redis_unavailable"), 0);
    th_stack_stop(&s);
}

int main(void)
{
    if (!th_have("redis-cli")) {
        printf("skip: redis-cli is not installed\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_keys_slot_is_the_one_redis_computes),
        cmocka_unit_test(test_keys_of_many_slots_are_locked_each_on_its_owner),
        cmocka_unit_test(test_a_key_without_a_hash_tag_is_refused),
        cmocka_unit_test(test_a_waiter_is_woken_by_its_shards_release),
        cmocka_unit_test(test_a_multi_lock_takes_each_key_on_its_shard),
        cmocka_unit_test(test_a_read_lock_and_a_permit_over_the_cluster),
        cmocka_unit_test(test_a_slot_moved_by_hand_meets_ask_then_moved),
        cmocka_unit_test(test_a_slot_migrating_under_load_keeps_one_holder_and_locks),
        cmocka_unit_test(test_stockd_on_the_cluster_passes_with_carts_across_shards),
        cmocka_unit_test(test_stockd_orders_an_item_whose_slot_migrates),
        cmocka_unit_test(test_one_shards_failures_log_that_node_once_with_its_detail),
        cmocka_unit_test(test_a_primary_killed_and_locking_goes_on),
        cmocka_unit_test(test_stockd_passes_with_a_primary_killed_mid_run),
    };
    return cmocka_run_group_tests_name("cluster", tests, group_setup, group_teardown);
}
