/* test_sentinel.c - the lock on a primary watched by Sentinel (one primary,
 * two replicas, three real redis-sentinel processes): libdlock finds the
 * primary, follows a failover without a restart, and says clearly when the
 * master name is wrong or no Sentinel answers; stockd replicas under load
 * keep every verdict PASS while the primary is killed, or stopped past
 * down-after and then comes back as a replica. How long the service
 * answered 503 during each failover is printed (lock/README.md records it).
 * A fake Sentinel says what real ones can't be made to: a replica's address
 * (no write goes there), and a switch while the old primary stays up (its
 * idle connections are dropped). */
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/sentinel.h"
#include "tests/support/stack.h"

#define FAILOVER_BOUND_MS (20000 * TH_SLOWER) /* a hang, not a timing claim */

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    if (!th_have("redis-sentinel")) /* `make deps` installs it; an older checkout may lack it */
        return 0;
    return th_tempdir("sentinel-test", dir, sizeof(dir));
}

/* Skips the running test without redis-sentinel (`make deps` installs it). */
static void need_sentinel(void)
{
    if (!th_have("redis-sentinel"))
        th_skip("redis-sentinel is not installed (make deps)");
}

/* Prints the VERDICT part of loadgen's output for run name. */
static void print_verdict(const char *name)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/%s.out", dir, name);
    char *out = th_read_file(path), *verdict = out ? strstr(out, "VERDICT") : NULL;
    print_message("loadgen: %s\n", verdict ? verdict : "(no verdict)");
    free(out);
}

static dlock_client *client_on(const char *sentinels, const char *master)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_sentinels(&cfg, sentinels), DLOCK_OK);
    cfg.master_name = master;
    cfg.connect_timeout_ms = 200;
    cfg.command_timeout_ms = 300;
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    return c;
}

static dlock_opts quick(int lease_ms, int wait_ms)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    o.retry_ms = 20;
    return o;
}

/* Acquires key, tells whether data server r holds it while held, releases;
 * the fence, or -1 when it could not be had. */
static int64_t lock_on(dlock_client *c, const char *key, const th_redis *r, int *held_there)
{
    dlock_opts o = quick(2000, 0);
    dlock_handle *h;
    if (dlock_acquire(c, key, &o, &h) != DLOCK_OK)
        return -1;
    *held_there = th_redis_int(r, "EXISTS %s", key) == 1;
    int64_t fence = dlock_fence(h);
    dlock_release(h);
    return fence;
}

/* A master name the Sentinels do not monitor, then no Sentinel at all:
 * each a DLOCK_ERR_REDIS whose text says which. */
static void expect_clear_errors(const th_sentinels *s)
{
    dlock_client *c = client_on(s->list, "nosuch");
    assert_int_equal(dlock_ping(c), DLOCK_ERR_REDIS);
    if (strstr(dlock_errstr(), "knows no master named \"nosuch\"") == NULL)
        fail_msg("unclear error: %s", dlock_errstr());
    dlock_client_free(c);

    char nobody[32];
    snprintf(nobody, sizeof(nobody), "127.0.0.1:%d", th_free_port());
    c = client_on(nobody, TH_SENTINEL_MASTER);
    assert_int_equal(dlock_ping(c), DLOCK_ERR_REDIS);
    if (strstr(dlock_errstr(), "no Sentinel named the primary") == NULL ||
        strstr(dlock_errstr(), nobody) == NULL)
        fail_msg("unclear error: %s", dlock_errstr());
    dlock_client_free(c);
}

static void test_the_client_follows_the_primary_and_says_what_is_wrong(void **state)
{
    (void)state;
    need_sentinel();
    th_sentinels s;
    th_sentinels_start(&s);
    expect_clear_errors(&s);
    dlock_client *c = client_on(s.list, TH_SENTINEL_MASTER);
    assert_int_equal(dlock_ping(c), DLOCK_OK);
    dlock_node_info info;
    dlock_node_info_read(c, 0, &info);
    assert_string_equal(info.name, "sentinel:" TH_SENTINEL_MASTER);
    int there = 0;
    int64_t before = lock_on(c, "sentinel:{1}", &s.data[0], &there);
    assert_true(before > 0);
    assert_true(there); /* on the first primary */

    th_redis_stop(&s.data[0], 1);
    int64_t killed = th_now_ms(), named = -1, fence = -1;
    while ((fence = lock_on(c, "sentinel:{1}", &s.data[0], &there)) < 0) {
        assert_true(th_now_ms() - killed < FAILOVER_BOUND_MS);
        if (named < 0 && th_sentinels_primary(&s) > 0) /* when a Sentinel names another */
            named = th_now_ms() - killed;
        th_sleep_ms(20);
    }
    int64_t took = th_now_ms() - killed;
    int now = th_sentinels_primary(&s);
    assert_true(now > 0);
    assert_true(lock_on(c, "sentinel:{1}", &s.data[now], &there) > before);
    assert_true(there); /* on the new primary, the same client, no restart */
    print_message("libdlock: a Sentinel named the new primary %lld ms after the kill, the "
                  "first lock on it came %lld ms after the kill (down-after %d ms)\n",
                  (long long)named, (long long)took, TH_SENTINEL_DOWN_MS);
    assert_true(fence > 0);
    dlock_client_free(c);
    th_sentinels_stop(&s);
}

static void test_sentinel_settings_are_checked(void **state)
{
    (void)state;
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_sentinels(&cfg, "a,b:26380,[::1]:7000"), DLOCK_OK);
    assert_int_equal(cfg.sentinels, 3);
    assert_int_equal(cfg.sentinel[0].port, 26379); /* Sentinel's port when left out */
    assert_int_equal(dlock_config_sentinels(&cfg, "a:x"), DLOCK_ERR_INVALID);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_ERR_INVALID); /* no master name */
    assert_non_null(strstr(dlock_errstr(), "master name"));
    cfg.master_name = "m";
    assert_int_equal(dlock_config_nodes(&cfg, "a:1,b:2,c:3"), DLOCK_OK);
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "exclude each other"));
    assert_null(c);
}

static const char *write_file(const char *name, const char *text)
{
    static char paths[4][160];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof(paths[0]), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
    return path;
}

#define DATA_PW "data-secret-4f2a"
#define SENTINEL_PW "sentinel-secret-9c1e"

/* The Sentinels and the data servers each with a password of their own,
 * both read from files: stockd sells, a wrong Sentinel password is an
 * authentication error, and neither password reaches the log. */
static void test_sentinel_and_data_passwords_come_from_files(void **state)
{
    (void)state;
    need_sentinel();
    th_sentinels s;
    th_sentinels_start_auth(&s, DATA_PW, SENTINEL_PW);
    const char *flags[] = {"--redis-sentinel", s.list, "--redis-master", TH_SENTINEL_MASTER,
                           "--redis-password-file", write_file("data.pw", DATA_PW),
                           "--redis-sentinel-password-file",
                           write_file("sentinel.pw", SENTINEL_PW), NULL};
    char db[160];
    snprintf(db, sizeof(db), "%s/auth.db", dir);
    th_stockd st;
    assert_int_equal(th_stockd_start(&st, NULL, db, dir, flags), 0);
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/items", st.url);
    th_http("POST", url, "{\"name\":\"auth\",\"stock\":5}", &r);
    assert_int_equal(r.status, 201);
    th_resp_free(&r);
    char body[256];
    long status = th_reduce(st.url, 1, 1, 0, body, sizeof(body));
    if (status != 200)
        fail_msg("no sale through Sentinel with passwords: %ld %s", status, body);

    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_sentinels(&cfg, s.list), DLOCK_OK);
    cfg.master_name = TH_SENTINEL_MASTER;
    cfg.password = DATA_PW;
    cfg.sentinel_password = "not-the-sentinel-pw";
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    assert_int_equal(dlock_ping(c), DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_errstr(), "refused AUTH"));
    assert_null(strstr(dlock_errstr(), "not-the-sentinel-pw")); /* never in a text */
    dlock_client_free(c);

    assert_int_equal(th_stockd_stop_clean(&st), 0);
    char *log = th_read_file(st.log);
    assert_non_null(log);
    assert_null(strstr(log, DATA_PW));
    assert_null(strstr(log, SENTINEL_PW));
    free(log);
    th_sentinels_stop(&s);
}

/* How long the service answered 503 (any 503 outcome) during the run: from
 * the first timeline bucket with one to the end of the last, in ms. */
static double unavailable_ms(const th_stack *st, const char *name)
{
    static const char *const kinds[] = {"redis_unavailable", "lock_lost", "lock_timeout",
                                        "lock_interrupted", NULL};
    char path[160];
    snprintf(path, sizeof(path), "%s/%s.json", st->dir, name);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *tl = json_object_get(j, "timeline");
    double width = json_number_value(json_object_get(tl, "bucketMs"));
    long first = -1, last = -1;
    for (int k = 0; kinds[k]; k++) {
        json_t *arr = json_object_get(json_object_get(tl, "outcomes"), kinds[k]);
        for (size_t i = 0; i < json_array_size(arr); i++)
            if (json_integer_value(json_array_get(arr, i)) > 0) {
                first = first < 0 || (long)i < first ? (long)i : first;
                last = (long)i > last ? (long)i : last;
            }
    }
    json_decref(j);
    return first < 0 ? 0 : (double)(last - first + 1) * width;
}

/* Three stockd replicas on the Sentinel-watched primary under load; the
 * primary fails (fault: SIGKILL, or SIGSTOP past down-after, SIGCONT once
 * failed over). The verdict must be PASS. */
static void failover_under_load(const char *name, int sig)
{
    th_sentinels s;
    th_sentinels_start(&s);
    const char *all[] = {"--redis-sentinel", s.list, "--redis-master", TH_SENTINEL_MASTER, NULL};
    th_stack st;
    th_stack_start(&st, dir, NULL, name, all, NULL, 100000);
    char targets[512];
    snprintf(targets, sizeof(targets), "%s,%s", st.r[0].url, st.targets);
    pid_t lg = th_loadgen_start(&st, name, targets, "5s", "12", "0");
    th_sleep_ms(1000);
    int64_t failed = th_now_ms();
    if (sig == SIGKILL)
        th_redis_stop(&s.data[0], 1);
    else
        th_signal(s.data[0].pid, SIGSTOP, 0);
    int now = th_sentinels_wait_failover(&s, 0, FAILOVER_BOUND_MS);
    assert_true(now > 0);
    int64_t switched = th_now_ms() - failed;
    if (sig == SIGSTOP) {
        th_signal(s.data[0].pid, SIGCONT, 0);
        for (int64_t end = th_now_ms() + FAILOVER_BOUND_MS;; th_sleep_ms(50)) {
            redisContext *c = th_redis_connect(&s.data[0]);
            redisReply *r = c && !c->err ? redisCommand(c, "ROLE") : NULL;
            int replica = r && r->type == REDIS_REPLY_ARRAY &&
                          strcmp(r->element[0]->str, "slave") == 0;
            freeReplyObject(r);
            redisFree(c);
            if (replica)
                break; /* Sentinel made it a replica of the new primary */
            assert_true(th_now_ms() < end);
        }
    }
    th_loadgen_expect(&st, lg, name, 0);
    assert_true(th_loadgen_outcome(&st, name, "ok") > 0);
    for (int i = 0; i < TH_REPLICAS; i++) /* each replica on the new primary, not restarted */
        for (int64_t end = th_now_ms() + FAILOVER_BOUND_MS;; th_sleep_ms(50)) {
            char body[256];
            long status = th_reduce(st.r[i].url, st.item, 1, 0, body, sizeof(body));
            if (status == 200)
                break;
            if (th_now_ms() > end)
                fail_msg("replica %d never sold again: %ld %s", i, status, body);
        }
    print_message("%s: Sentinel switched after %lld ms; 503s for %.0f ms of the run "
                  "(lock_lost %lld, redis_unavailable %lld, lock_timeout %lld, ok %lld)\n",
                  name, (long long)switched, unavailable_ms(&st, name),
                  th_loadgen_outcome(&st, name, "lock_lost"),
                  th_loadgen_outcome(&st, name, "redis_unavailable"),
                  th_loadgen_outcome(&st, name, "lock_timeout"),
                  th_loadgen_outcome(&st, name, "ok"));
    print_verdict(name);
    th_stack_stop(&st);
    th_sentinels_stop(&s);
}

static void test_stockd_follows_a_killed_primary_under_load(void **state)
{
    (void)state;
    need_sentinel();
    failover_under_load("sentinel-kill", SIGKILL);
}

static void test_stockd_follows_a_primary_stopped_past_down_after(void **state)
{
    (void)state;
    need_sentinel();
    failover_under_load("sentinel-stop", SIGSTOP);
}

/* The failover fencing is for: replica 0 of stockd takes the item's lock
 * and stops (SIGSTOP) before its write, its lease of 10 s still running;
 * the lock key is then deleted on both Redis replicas, as if it had never
 * reached them (asynchronous replication), and the primary is killed.
 * Sentinel promotes a replica without the lock: the other stockd replicas
 * get it there and sell; then replica 0 resumes and writes. With fencing
 * the store refuses that stale write (503 lock_lost) and the verdict is
 * PASS; without, it overwrites their deductions and loadgen finds the
 * oversell (FAIL), or the test would prove nothing. */
static void stale_holder_after_failover(int fencing)
{
    const char *name = fencing ? "sentinel-fenced" : "sentinel-unfenced";
    th_sentinels s;
    th_sentinels_start(&s);
    const char *all[] = {"--redis-sentinel", s.list, "--redis-master", TH_SENTINEL_MASTER,
                         "--lease-ms", "10000", NULL};
    const char *first[] = {"--test-stop-before-write", "--busy-timeout-ms", "20000",
                           fencing ? NULL : "--no-fencing", NULL};
    th_stack st;
    th_stack_start(&st, dir, NULL, name, all, first, 100000);
    th_bg_reduce stale = {.url = st.r[0].url, .item = st.item, .work_ms = 1}; /* not batched */
    th_bg_reduce_start(&stale);
    for (int64_t end = th_now_ms() + 5000; th_proc_state(st.r[0].pid) != 'T';) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    char run[16]; /* long enough to see the sales after the failover, however slow */
    snprintf(run, sizeof(run), "%ds", 5 * TH_SLOWER);
    pid_t lg = th_loadgen_start(&st, name, st.targets, run, "4", "0");
    th_sleep_ms(300);
    char key[DLOCK_KEY_MAX + 1];
    th_item_lock_key(st.item, key);
    assert_int_equal(th_redis_int(&s.data[0], "EXISTS %s", key), 1); /* replica 0 holds it */
    for (int i = 1; i < TH_SENTINEL_DATA; i++) { /* replicated first, then taken back */
        for (int64_t end = th_now_ms() + 5000; th_redis_int(&s.data[i], "EXISTS %s", key) != 1;
             th_sleep_ms(20))
            if (th_now_ms() > end)
                fail_msg("the lock never reached the replica on port %d", s.data[i].port);
        assert_int_equal(th_redis_int(&s.data[i], "CONFIG SET replica-read-only no"), 0);
        assert_int_equal(th_redis_int(&s.data[i], "DEL %s", key), 1);
    }
    th_redis_stop(&s.data[0], 1); /* the failover */
    int now = th_sentinels_wait_failover(&s, 0, FAILOVER_BOUND_MS);
    assert_true(now > 0);
    /* the others get the lock from the new primary, and sell: the stale write
     * overwrites a sale only once there is one, which a busy machine may be
     * slow to make (a fixed wait then saw no oversell) */
    long long at_failover = th_stack_stock(&st);
    for (int64_t end = th_now_ms() + FAILOVER_BOUND_MS; th_stack_stock(&st) >= at_failover;
         th_sleep_ms(50))
        if (th_now_ms() > end)
            fail_msg("no sale on the new primary within %d ms", FAILOVER_BOUND_MS);
    th_sleep_ms(300); /* and a few more */
    th_signal(st.r[0].pid, SIGCONT, 0);
    th_bg_reduce_join(&stale);
    print_message("the stale holder's answer: %ld %s\n", stale.status, stale.body);
    if (fencing) {
        th_loadgen_expect(&st, lg, name, 0);
        if (stale.status != 503 || strstr(stale.body, "\"lock_lost\"") == NULL)
            fail_msg("the stale write was not refused by fencing: %ld %s", stale.status,
                     stale.body);
    } else {
        th_loadgen_expect(&st, lg, name, 1); /* its write overwrote the others' deductions */
        assert_int_equal(stale.status, 200);
    }
    assert_true(th_loadgen_outcome(&st, name, "ok") > 0);
    print_verdict(name);
    th_stack_stop(&st);
    th_sentinels_stop(&s);
}

/* ---- what real Sentinels can't be made to say: a fake one ---- */

static dlock_client *client_of(const th_fake_sentinel *f)
{
    char list[32];
    snprintf(list, sizeof(list), "127.0.0.1:%d", f->port);
    return client_on(list, TH_SENTINEL_MASTER);
}

/* Whether INFO section on r holds text: 1 or 0. */
static int info_has(const th_redis *r, const char *section, const char *text)
{
    redisContext *c = th_redis_connect(r);
    redisReply *rep = c && !c->err ? redisCommand(c, "INFO %s", section) : NULL;
    int has = rep && rep->str && strstr(rep->str, text) != NULL;
    freeReplyObject(rep);
    redisFree(c);
    return has;
}

/* A stale answer: the Sentinel names a replica (writable, so that a write
 * sent there would land and be seen). The client checks ROLE before it
 * uses a connection: the acquire fails, saying why, and no script reaches
 * the replica. */
static void test_a_sentinel_that_names_a_replica_gets_no_write_sent_to_it(void **state)
{
    (void)state;
    th_redis primary = {0}, replica = {0};
    assert_int_equal(th_redis_start(&primary), 0);
    assert_int_equal(th_redis_start(&replica), 0);
    assert_int_equal(th_redis_int(&replica, "REPLICAOF 127.0.0.1 %d", primary.port), 0);
    assert_int_equal(th_redis_int(&replica, "CONFIG SET replica-read-only no"), 0);
    /* in sync first: a full sync after the write would wipe it from sight */
    for (int64_t end = th_now_ms() + 10000 * TH_SLOWER;
         !info_has(&replica, "replication", "master_link_status:up"); th_sleep_ms(20))
        if (th_now_ms() > end)
            fail_msg("the replica on port %d never synced", replica.port);
    th_fake_sentinel f;
    th_fake_sentinel_start(&f, replica.port);
    dlock_client *c = client_of(&f);
    dlock_opts o = quick(2000, 0);
    dlock_handle *h = NULL;
    assert_int_equal(dlock_acquire(c, "stale:answer", &o, &h), DLOCK_ERR_REDIS);
    if (strstr(dlock_errstr(), "is not the primary (ROLE slave)") == NULL)
        fail_msg("unclear error: %s", dlock_errstr());
    assert_int_equal(th_redis_int(&replica, "DBSIZE"), 0);
    assert_false(info_has(&replica, "commandstats", "cmdstat_eval"));
    dlock_client_free(c);
    th_fake_sentinel_stop(&f);
    th_redis_stop(&replica, 0);
    th_redis_stop(&primary, 0);
}

/* A failover whose old primary stays up, a master still, cut off from the
 * Sentinels: at the +switch-master, the connections idle in the pool to
 * the old primary are dropped, and the next lock goes to the new one. */
static void test_an_old_primary_left_running_gets_no_write_after_the_switch(void **state)
{
    (void)state;
    th_redis old = {0}, new = {0};
    assert_int_equal(th_redis_start(&old), 0);
    assert_int_equal(th_redis_start(&new), 0);
    th_fake_sentinel f;
    th_fake_sentinel_start(&f, old.port);
    dlock_client *c = client_of(&f);
    th_fake_sentinel_wait_subscribed(&f, 1); /* its watcher listens for the switch */
    int held = 0;
    assert_true(lock_on(c, "cut:before", &old, &held) > 0);
    assert_true(held); /* and its connection is idle in the pool now */
    th_fake_sentinel_switch(&f, new.port);
    th_sleep_ms(1000 * TH_SLOWER); /* the watcher reads the message: microseconds */
    assert_true(lock_on(c, "cut:after", &new, &held) > 0);
    assert_true(held);
    dlock_names names;
    dlock_names_of("cut:after", &names);
    assert_int_equal(th_redis_int(&old, "EXISTS %s", names.fence), 0);
    dlock_client_free(c);
    th_fake_sentinel_stop(&f);
    th_redis_stop(&new, 0);
    th_redis_stop(&old, 0);
}

static void test_a_stale_holder_after_a_failover_is_refused_by_fencing(void **state)
{
    (void)state;
    need_sentinel();
    stale_holder_after_failover(1);
}

static void test_the_same_failover_without_fencing_oversells(void **state)
{
    (void)state;
    need_sentinel();
    stale_holder_after_failover(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sentinel_settings_are_checked),
        cmocka_unit_test(test_the_client_follows_the_primary_and_says_what_is_wrong),
        cmocka_unit_test(test_sentinel_and_data_passwords_come_from_files),
        cmocka_unit_test(test_stockd_follows_a_killed_primary_under_load),
        cmocka_unit_test(test_stockd_follows_a_primary_stopped_past_down_after),
        cmocka_unit_test(test_a_stale_holder_after_a_failover_is_refused_by_fencing),
        cmocka_unit_test(test_the_same_failover_without_fencing_oversells),
        cmocka_unit_test(test_a_sentinel_that_names_a_replica_gets_no_write_sent_to_it),
        cmocka_unit_test(test_an_old_primary_left_running_gets_no_write_after_the_switch),
    };
    return cmocka_run_group_tests_name("sentinel", tests, group_setup, NULL);
}
