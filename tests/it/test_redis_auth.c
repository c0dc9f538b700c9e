/* test_redis_auth.c - stockd against a redis-server that wants a password:
 * from a file and from the environment, an ACL user limited to the lock's
 * keys, channels and commands (DLOCK_ACL_COMMANDS), a wrong or missing
 * password (503 with one log line, nothing deducted), and a password change
 * followed by a restart with the new one. The password never shows in logs,
 * /health, /metrics or --help. */
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
#include <curl/curl.h>

#include "lock/dlock.h"
#include "lock/dlock_rw.h"
#include "lock/dlock_sem.h"
#include "tests/support/harness.h"

#define PASSWORD "pw-4c7e1f0a9b"
#define NEW_PASSWORD "pw-rotated-83d2"
#define ACL_PASSWORD "acl-pw-5e61"
#define LOCK_FLAGS "--lease-ms", "600", "--redis-timeout-ms", "100", "--wait-ms", "2000", \
                   "--allow-work-ms"

static th_redis redis = {.password = PASSWORD};
static char dir[64], db[128];

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("stockd-auth", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    return 0;
}

/* Writes text into dir/name and returns the path (static buffer per name). */
static const char *write_secret(const char *name, const char *text)
{
    static char paths[4][160];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, 160, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
    return path;
}

static long long new_item(const th_stockd *s, long long stock)
{
    char url[128], body[64];
    th_resp r;
    snprintf(url, sizeof(url), "%s/items", s->url);
    snprintf(body, sizeof(body), "{\"name\":\"auth\",\"stock\":%lld}", stock);
    assert_int_equal(th_http("POST", url, body, &r), 0);
    assert_int_equal(r.status, 201);
    json_t *j = json_loads(r.body, 0, NULL);
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    th_resp_free(&r);
    return id;
}

static long long stock_of(const th_stockd *s, long long item)
{
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/items/%lld", s->url, item);
    assert_int_equal(th_http("GET", url, NULL, &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    long long stock = json_integer_value(json_object_get(j, "stock"));
    json_decref(j);
    th_resp_free(&r);
    return stock;
}

/* GET path; the status, with the body in buf. */
static long get(const th_stockd *s, const char *path, char *buf, size_t size)
{
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s%s", s->url, path);
    th_http("GET", url, NULL, &r);
    snprintf(buf, size, "%s", r.body ? r.body : "");
    th_resp_free(&r);
    return r.status;
}

/* Subscribers of the item's release channel, within 2 s. */
static long long release_subscribers(long long item)
{
    long long n = 0;
    for (int64_t end = th_now_ms() + 2000; n == 0 && th_now_ms() < end; th_sleep_ms(20)) {
        redisContext *c = th_redis_connect(&redis);
        char key[DLOCK_KEY_MAX + 1];
        dlock_names names;
        dlock_names_of(th_item_lock_key(item, key), &names);
        redisReply *r = redisCommand(c, "PUBSUB NUMSUB %s", names.channel);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
            n = r->element[1]->integer;
        freeReplyObject(r);
        redisFree(c);
    }
    return n;
}

/* The lock's every path works through authenticated connections: the pool
 * (acquire, release), the watchdog (a workMs past the lease is renewed) and,
 * in notify mode, the subscriber (a waiter of another replica subscribes to
 * the release). */
static void exercise_lock(const th_stockd *s, const th_stockd *other, long long item, int notify)
{
    th_bg_reduce holder = {.url = s->url, .item = item, .work_ms = 700};
    th_bg_reduce waiter = {.url = other->url, .item = item, .work_ms = 0};
    th_bg_reduce_start(&holder);
    th_sleep_ms(100);
    th_bg_reduce_start(&waiter);
    if (notify)
        assert_true(release_subscribers(item) >= 1);
    th_bg_reduce_join(&holder);
    th_bg_reduce_join(&waiter);
    if (holder.status != 200 || waiter.status != 200)
        fail_msg("holder %ld %s / waiter %ld %s", holder.status, holder.body, waiter.status,
                 waiter.body);
}

static void assert_secret_absent(const th_stockd *s, const char *secret)
{
    char body[4096];
    assert_int_equal(get(s, "/health", body, sizeof(body)), 200);
    assert_null(strstr(body, secret));
    assert_int_equal(get(s, "/metrics", body, sizeof(body)), 200);
    assert_null(strstr(body, secret));
    assert_int_equal(th_count_in_file(s->log, secret), 0);
}

static void test_password_file_authenticates_pool_watchdog_and_subscriber(void **state)
{
    (void)state;
    th_stockd s, t;
    const char *flags[] = {LOCK_FLAGS, "--redis-password-file", write_secret("pw", PASSWORD),
                           NULL};
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, flags), 0);
    assert_int_equal(th_stockd_start(&t, &redis, db, dir, flags), 0);
    long long item = new_item(&s, 10);
    exercise_lock(&s, &t, item, 1);
    assert_int_equal(stock_of(&s, item), 8);
    assert_secret_absent(&s, PASSWORD);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    assert_int_equal(th_stockd_stop_clean(&t), 0);
    assert_int_equal(th_count_in_file(s.log, PASSWORD), 0);
}

static void test_password_from_the_environment(void **state)
{
    (void)state;
    th_stockd s, t;
    setenv("STOCKD_REDIS_PASSWORD", PASSWORD, 1);
    const char *flags[] = {LOCK_FLAGS, NULL};
    int started = th_stockd_start(&s, &redis, db, dir, flags) |
                  th_stockd_start(&t, &redis, db, dir, flags);
    unsetenv("STOCKD_REDIS_PASSWORD");
    assert_int_equal(started, 0);
    long long item = new_item(&s, 5);
    exercise_lock(&s, &t, item, 1);
    assert_int_equal(stock_of(&s, item), 3);
    assert_secret_absent(&s, PASSWORD);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    assert_int_equal(th_stockd_stop_clean(&t), 0);
}

static void test_help_never_shows_the_password(void **state)
{
    (void)state;
    char bin[256], out[160];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/help.out", dir);
    const char *argv[] = {bin, "--redis-password-file", write_secret("pw-help", PASSWORD),
                          "--help", NULL};
    setenv("STOCKD_REDIS_PASSWORD", PASSWORD, 1);
    int status = th_run(argv, out, 10000);
    unsetenv("STOCKD_REDIS_PASSWORD");
    assert_int_equal(status, 0);
    assert_true(th_count_in_file(out, "--redis-password-file") == 1);
    assert_int_equal(th_count_in_file(out, PASSWORD), 0);
}

/* Every request fails the same clear way, the log says so once, /health
 * names the cause, and nothing is deducted. */
static void assert_refused(const char *const flags[], const char *why)
{
    th_stockd good, bad;
    const char *good_flags[] = {"--redis-password-file", write_secret("pw", PASSWORD), NULL};
    assert_int_equal(th_stockd_start(&good, &redis, db, dir, good_flags), 0);
    assert_int_equal(th_stockd_start(&bad, &redis, db, dir, flags), 0);
    long long item = new_item(&good, 10);
    char body[1024];
    for (int i = 0; i < 20; i++) {
        assert_int_equal(th_reduce(bad.url, item, 1, 0, body, sizeof(body)), 503);
        assert_non_null(strstr(body, "\"redis_unavailable\""));
        if (strstr(body, "authentication failed") == NULL || strstr(body, why) == NULL)
            fail_msg("answer does not say authentication failed (%s): %s", why, body);
    }
    assert_int_equal(get(&bad, "/health", body, sizeof(body)), 503);
    assert_non_null(strstr(body, "authentication failed"));
    assert_int_equal(stock_of(&bad, item), 10);
    assert_int_equal(th_count_in_file(bad.log, "Redis refuses our credentials"), 1);
    assert_int_equal(th_count_in_file(bad.log, PASSWORD), 0);
    assert_int_equal(th_reduce(good.url, item, 1, 0, NULL, 0), 200); /* Redis itself is fine */
    assert_int_equal(th_stockd_stop_clean(&bad), 0);
    assert_int_equal(th_stockd_stop_clean(&good), 0);
}

static void test_wrong_password_is_a_clear_503_logged_once(void **state)
{
    (void)state;
    const char *flags[] = {"--redis-password-file", write_secret("wrong", "not-the-password"),
                           NULL};
    assert_refused(flags, "WRONGPASS");
}

static void test_missing_password_is_a_clear_503_logged_once(void **state)
{
    (void)state;
    const char *flags[] = {"--log-level", "info", NULL};
    assert_refused(flags, "NOAUTH");
}

/* The semaphore's scripts need no more than DLOCK_ACL_COMMANDS either: a
 * permit taken, renewed, waited for (which subscribes) and released as the
 * ACL user. */
static dlock_client *acl_client(dlock_opts *o)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = redis.port;
    cfg.username = "locker";
    cfg.password = ACL_PASSWORD;
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    dlock_opts_defaults(o);
    o->lease_ms = 150;
    o->wait_ms = 200;
    return c;
}

static void exercise_semaphore(void)
{
    dlock_opts o;
    dlock_client *c = acl_client(&o);
    dlock_handle *h, *other;
    assert_int_equal(dlock_sem_acquire(c, "stock:lock:sem", 1, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "stock:lock:sem", 1, &o, &other), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_sleep(h, 200), DLOCK_OK);
    assert_true(dlock_renewals(h) >= 1);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(c);
}

/* So do the read-write lock's: a reader renewed, a writer that waits (its
 * wish registered, then withdrawn when it gives up), a writer renewed. */
static void exercise_read_write(void)
{
    dlock_opts o;
    dlock_client *c = acl_client(&o);
    dlock_handle *r, *w;
    assert_int_equal(dlock_acquire_read(c, "stock:lock:rw", &o, &r), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(c, "stock:lock:rw", &o, &w), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_sleep(r, 200), DLOCK_OK);
    assert_true(dlock_renewals(r) >= 1);
    assert_int_equal(dlock_release(r), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(c, "stock:lock:rw", &o, &w), DLOCK_OK);
    assert_int_equal(dlock_sleep(w, 200), DLOCK_OK);
    assert_true(dlock_renewals(w) >= 1);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_client_free(c);
}

/* An ACL user that may only run DLOCK_ACL_COMMANDS on keys and channels
 * under the lock prefix: every lock path works, and a prefix outside its
 * keys is refused as an authentication failure. */
static void test_acl_user_limited_to_the_lock_keys(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "ACL SETUSER locker on >%s resetkeys ~stock:lock:* resetchannels "
             "&stock:lock:* %s", ACL_PASSWORD, DLOCK_ACL_COMMANDS);
    redisContext *c = th_redis_connect(&redis);
    redisReply *r = redisCommand(c, cmd);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);

    th_stockd s, peer, outside;
    const char *pw = write_secret("acl-pw", ACL_PASSWORD);
    const char *flags[] = {LOCK_FLAGS, "--redis-user", "locker", "--redis-password-file", pw, NULL};
    const char *outside_flags[] = {"--redis-user", "locker", "--redis-password-file", pw,
                                   "--lock-prefix", "other:", NULL};
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, flags), 0);
    assert_int_equal(th_stockd_start(&peer, &redis, db, dir, flags), 0);
    assert_int_equal(th_stockd_start(&outside, &redis, db, dir, outside_flags), 0);
    long long item = new_item(&s, 10);
    exercise_lock(&s, &peer, item, 1);
    exercise_semaphore();
    exercise_read_write();
    const char *wait_spin[] = {LOCK_FLAGS, "--redis-user", "locker", "--redis-password-file", pw,
                               "--wait-mode", "spin", NULL};
    th_stockd spin;
    assert_int_equal(th_stockd_start(&spin, &redis, db, dir, wait_spin), 0);
    exercise_lock(&spin, &s, item, 0);
    assert_int_equal(stock_of(&s, item), 6);

    char body[1024];
    assert_int_equal(th_reduce(outside.url, item, 1, 0, body, sizeof(body)), 503);
    assert_non_null(strstr(body, "NOPERM"));
    assert_int_equal(stock_of(&s, item), 6);
    assert_int_equal(th_stockd_stop_clean(&spin), 0);
    assert_int_equal(th_stockd_stop_clean(&outside), 0);
    assert_int_equal(th_stockd_stop_clean(&peer), 0);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* CONFIG SET requirepass: a replica restarted with the old password is
 * refused; restarted with the new one, it works. */
static void test_password_change_then_restart_with_the_new_one(void **state)
{
    (void)state;
    th_stockd s;
    const char *old_flags[] = {"--redis-password-file", write_secret("pw-old", PASSWORD), NULL};
    const char *new_flags[] = {"--redis-password-file", write_secret("pw-new", NEW_PASSWORD),
                               NULL};
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, old_flags), 0);
    long long item = new_item(&s, 10);
    assert_int_equal(th_reduce(s.url, item, 1, 0, NULL, 0), 200);
    assert_int_equal(th_redis_int(&redis, "CONFIG SET requirepass %s", NEW_PASSWORD), 0);
    snprintf(redis.password, sizeof(redis.password), "%s", NEW_PASSWORD);
    assert_int_equal(th_stockd_stop_clean(&s), 0);

    char body[1024];
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, old_flags), 0);
    assert_int_equal(th_reduce(s.url, item, 1, 0, body, sizeof(body)), 503);
    assert_non_null(strstr(body, "WRONGPASS"));
    assert_int_equal(th_stockd_stop_clean(&s), 0);

    assert_int_equal(th_stockd_start(&s, &redis, db, dir, new_flags), 0);
    assert_int_equal(th_reduce(s.url, item, 1, 0, NULL, 0), 200);
    assert_int_equal(stock_of(&s, item), 8);
    assert_int_equal(th_stockd_stop_clean(&s), 0);

    assert_int_equal(th_redis_int(&redis, "CONFIG SET requirepass %s", PASSWORD), 0);
    snprintf(redis.password, sizeof(redis.password), "%s", PASSWORD);
}

static void test_unreadable_password_file_is_a_start_up_error(void **state)
{
    (void)state;
    char bin[256], out[160], missing[160];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/missing.out", dir);
    snprintf(missing, sizeof(missing), "%s/no-such-file", dir);
    const char *argv[] = {bin, "--redis-password-file", missing, NULL};
    assert_int_equal(th_run(argv, out, 10000), 2);
    assert_int_equal(th_count_in_file(out, "--redis-password-file"), 1);
    const char *empty[] = {bin, "--redis-password-file", write_secret("empty", ""), NULL};
    assert_int_equal(th_run(empty, out, 10000), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_password_file_authenticates_pool_watchdog_and_subscriber),
        cmocka_unit_test(test_password_from_the_environment),
        cmocka_unit_test(test_help_never_shows_the_password),
        cmocka_unit_test(test_wrong_password_is_a_clear_503_logged_once),
        cmocka_unit_test(test_missing_password_is_a_clear_503_logged_once),
        cmocka_unit_test(test_acl_user_limited_to_the_lock_keys),
        cmocka_unit_test(test_password_change_then_restart_with_the_new_one),
        cmocka_unit_test(test_unreadable_password_file_is_a_start_up_error),
    };
    return cmocka_run_group_tests_name("redis_auth", tests, group_setup, group_teardown);
}
