/* test_pg_outage.c - PostgreSQL stalled or away, as stockd sees it. A
 * server that stops answering (a proxy holds every byte both ways, as a
 * network that drops packets or a frozen host would) costs a request at
 * most --db-timeout-ms and a grace, and the item's lock is released with
 * it; while no session can be opened, requests are answered at once and
 * one thread reconnects; and a stockd started before its database waits
 * for it (--db-wait-s). The server restarted under load: test_postgres.c;
 * a COMMIT in doubt: tests/unit/test_store.c. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define RECOVER_MS 20000     /* generous: the reconnector's next attempt, on a loaded host */
#define AT_ONCE_REQUESTS 100
#define CONNECTS_MAX 10 /* while down: the reconnector's, not one per request */

static th_redis redis;
static th_pg pg;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("pg-outage", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0 ||
        th_pg_start(&pg) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    th_pg_stop(&pg, SIGINT);
    return 0;
}

/* A fresh database name on pg behind a new proxy (*proxy), and a stockd on
 * it with statements bounded at 1 s. */
static void start_behind_proxy(const char *name, th_proxy **proxy, th_stockd *s)
{
    char url[192], db[256];
    assert_int_equal(th_pg_create_db(&pg, name, url, sizeof(url)), 0);
    *proxy = th_proxy_start(pg.port);
    assert_non_null(*proxy);
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d/%s", th_proxy_port(*proxy), name);
    const char *flags[] = {"--db-timeout-ms", "1000", "--lease-ms", "1000", "--redis-timeout-ms",
                           "150", "--allow-work-ms", NULL};
    assert_int_equal(th_stockd_start(s, &redis, db, dir, flags), 0);
}

/* The item's stock and sold, read back: they add up to what it started with. */
static void assert_ledger_adds_up(const th_stockd *s, long long item, long long initial)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld?limit=0", item);
    json_t *j = th_call(s, "GET", path, NULL, 200);
    assert_int_equal(th_jint(j, "stock") + th_jint(j, "sold"), initial);
    json_decref(j);
}

/* The server stops answering while requests for one item are in group
 * commit: each is answered 503 storage_unavailable once its statement has
 * waited --db-timeout-ms and a grace (not the minutes TCP would take), the
 * item's lock is given back, and once the server answers again the item
 * is served again with a ledger that adds up. */
static void test_a_stalled_server_costs_its_timeout_and_the_lock_is_released(void **state)
{
    (void)state;
    th_proxy *proxy;
    th_stockd s;
    start_behind_proxy("stalled", &proxy, &s);
    long long item = th_new_item(&s, "stalled", 100);
    assert_int_equal(th_reduce(s.url, item, 1, 0, NULL, 0), 200);
    th_proxy_stall(proxy, 1);
    th_bg_reduce bg[4];
    int64_t t0 = th_now_ms();
    for (int i = 0; i < 4; i++) {
        bg[i] = (th_bg_reduce){.url = s.url, .item = item};
        th_bg_reduce_start(&bg[i]);
    }
    for (int i = 0; i < 4; i++)
        th_bg_reduce_join(&bg[i]);
    int64_t took = th_now_ms() - t0;
    /* given back while the server still stalls: group commit lets the lock
     * go just after its answers, so wait an instant, not the database */
    int locked = th_wait_item_unlocked(&redis, item, 2000 * TH_SLOWER) != 0;
    th_proxy_stall(proxy, 0);
    print_message("4 requests on a stalled server answered in %lld ms (--db-timeout-ms 1000)\n",
                  (long long)took);
    for (int i = 0; i < 4; i++) {
        if (bg[i].status != 503 || strstr(bg[i].body, "storage_unavailable") == NULL)
            fail_msg("request %d: %ld %s", i, bg[i].status, bg[i].body);
    }
    assert_int_equal(locked, 0);
    assert_int_equal(th_reduce_until_served(s.url, item, RECOVER_MS), 200);
    assert_ledger_adds_up(&s, item, 100);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    th_proxy_stop(proxy);
}

static int cmp_ms(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether s's /health names a storageNode and its /metrics the node's
 * gauge (1 each), for a server that was lost must not be named. */
static int names_storage_node(const th_stockd *s)
{
    char url[96];
    th_resp r;
    int n = 0;
    snprintf(url, sizeof(url), "%s/health", s->url);
    if (th_http("GET", url, NULL, &r) == 0 && r.body && strstr(r.body, "\"storageNode\""))
        n++;
    th_resp_free(&r);
    snprintf(url, sizeof(url), "%s/metrics", s->url);
    if (th_http("GET", url, NULL, &r) == 0 && r.body && strstr(r.body, "stockd_storage_node_info{"))
        n++;
    th_resp_free(&r);
    return n;
}

/* Once a session could not be opened (the server accepts connections and
 * then says nothing), every request that needs one is answered 503 at
 * once, with Retry-After and the reason, while one thread reconnects: the
 * proxy sees a few connections, not one per request; /health and /metrics
 * name no storage node meanwhile (not the one it can't reach). The answers'
 * p99 is printed (the target is 100 ms; no wall-clock assert). */
static void test_while_no_session_opens_requests_are_answered_at_once(void **state)
{
    (void)state;
    th_proxy *proxy;
    th_stockd s;
    start_behind_proxy("unreachable", &proxy, &s);
    long long item = th_new_item(&s, "unreachable", 100);
    assert_int_equal(names_storage_node(&s), 2);
    assert_true(th_pg_int(pg.url, "SELECT count(pg_terminate_backend(pid)) FROM "
                                  "pg_stat_activity WHERE datname = 'unreachable' AND "
                                  "application_name = 'stockd'") > 0);
    th_proxy_stall(proxy, 1);
    /* Until the pool knows: a request on a session it still took for alive
     * fails on its own, and the first that has to connect waits for it. */
    char body[512] = "";
    for (int warm = 0; !strstr(body, "reconnecting in the background"); warm++) {
        if (warm == 10)
            fail_msg("no answer said the server is being reconnected to: %s", body);
        assert_int_equal(th_reduce(s.url, item, 1, 0, body, sizeof(body)), 503);
    }
    int before = th_proxy_accepted(proxy);
    int64_t ms[AT_ONCE_REQUESTS];
    int n = 0, connects = 0;
    char url[96], req[96];
    snprintf(url, sizeof(url), "%s/reduceStock", s.url);
    snprintf(req, sizeof(req), "{\"itemId\":%lld,\"quantity\":1}", item);
    for (; n < AT_ONCE_REQUESTS && connects <= CONNECTS_MAX; n++) {
        th_resp r;
        int64_t t0 = th_now_ms();
        th_http("POST", url, req, &r);
        ms[n] = th_now_ms() - t0;
        if (r.status != 503 || strstr(r.body, "storage_unavailable") == NULL ||
            strstr(r.body, "reconnecting in the background") == NULL || !r.retry_after[0])
            fail_msg("request %d: %ld %s", n, r.status, r.body);
        th_resp_free(&r);
        connects = th_proxy_accepted(proxy) - before;
    }
    assert_int_equal(names_storage_node(&s), 0); /* not the server it can't reach */
    th_proxy_stall(proxy, 0);
    qsort(ms, (size_t)n, sizeof(ms[0]), cmp_ms);
    print_message("%d answers while down: p50 %lld ms, p99 %lld ms, max %lld ms; %d connects "
                  "meanwhile\n", n, (long long)ms[n / 2], (long long)ms[n * 99 / 100],
                  (long long)ms[n - 1], connects);
    assert_int_equal(n, AT_ONCE_REQUESTS);
    assert_true(connects <= CONNECTS_MAX);
    assert_int_equal(th_reduce_until_served(s.url, item, RECOVER_MS), 200);
    assert_ledger_adds_up(&s, item, 100);
    assert_int_equal(names_storage_node(&s), 2); /* named again once a session was used */
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    th_proxy_stop(proxy);
}

/* Lines of text holding needle. */
static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* A password file for stock_secret, in dir. */
static const char *secret_file(void)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/pg-secret", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(TH_PG_SECRET "\n", f);
    fclose(f);
    return path;
}

/* stockd started while PostgreSQL is down waits for it (--db-wait-s),
 * logging each attempt without the password, and serves once it is up. */
static void test_stockd_started_before_its_database_waits_for_it(void **state)
{
    (void)state;
    char url[192], db[256], bin[160], port[16], log[160];
    assert_int_equal(th_pg_create_db(&pg, "late", url, sizeof(url)), 0);
    snprintf(db, sizeof(db), "postgresql://stock_secret@127.0.0.1:%d/late", pg.port);
    th_pg_stop(&pg, SIGINT);
    th_stockd s = {.port = th_free_port()};
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(port, sizeof(port), "%d", s.port);
    snprintf(s.url, sizeof(s.url), "http://127.0.0.1:%d", s.port);
    snprintf(log, sizeof(log), "%s/late.log", dir);
    const char *argv[] = {bin, "--port", port, "--db", db, "--db-password-file", secret_file(),
                          "--lock", "atomic", "--db-wait-s", "60", NULL};
    s.pid = th_spawn(argv, log);
    int attempts = 0;
    for (int64_t end = th_now_ms() + RECOVER_MS; attempts < 2 && th_now_ms() < end;
         th_sleep_ms(50)) {
        char *text = th_read_file(log);
        attempts = count_lines_with(text, "database not reachable yet");
        free(text);
    }
    int up = th_pg_start(&pg);
    json_t *h = NULL;
    for (int64_t end = th_now_ms() + RECOVER_MS; h == NULL && th_now_ms() < end; th_sleep_ms(100)) {
        th_resp r;
        char health[96];
        snprintf(health, sizeof(health), "%s/health", s.url);
        if (th_http("GET", health, NULL, &r) == 0 && r.status == 200)
            h = json_loads(r.body, 0, NULL);
        th_resp_free(&r);
    }
    char *text = th_read_file(log);
    assert_int_equal(up, 0);
    assert_true(attempts >= 2);
    assert_non_null(h);
    json_decref(h);
    assert_non_null(strstr(text, "attempt=1"));
    assert_null(strstr(text, TH_PG_SECRET));
    free(text);
    long long item = th_new_item(&s, "late", 5);
    assert_int_equal(th_reduce(s.url, item, 1, 0, NULL, 0), 200);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* A database that never comes: stockd gives up after --db-wait-s, exit 1,
 * saying so. */
static void test_stockd_gives_up_on_a_database_that_never_comes(void **state)
{
    (void)state;
    char db[128], bin[160], out[160], port[16];
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d/never", th_free_port());
    snprintf(port, sizeof(port), "%d", th_free_port());
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/never.log", dir);
    const char *argv[] = {bin, "--port", port, "--db", db, "--lock", "atomic", "--db-wait-s",
                          "2", NULL};
    assert_int_equal(th_run(argv, out, 30000), 1);
    char *text = th_read_file(out);
    assert_true(count_lines_with(text, "database not reachable yet") >= 2);
    assert_non_null(strstr(text, "the database stayed unreachable for --db-wait-s"));
    assert_non_null(strstr(text, "dbWaitS=2"));
    free(text);
}

/* SIGTERM while stockd waits for its database: it stops at once, exit 0. */
static void test_a_stop_signal_ends_the_wait(void **state)
{
    (void)state;
    char db[128], bin[160], log[160], port[16];
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d/never", th_free_port());
    snprintf(port, sizeof(port), "%d", th_free_port());
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(log, sizeof(log), "%s/stopped.log", dir);
    const char *argv[] = {bin, "--port", port, "--db", db, "--lock", "atomic", "--db-wait-s",
                          "600", NULL};
    pid_t pid = th_spawn(argv, log);
    int attempts = 0;
    for (int64_t end = th_now_ms() + RECOVER_MS; attempts < 1 && th_now_ms() < end;
         th_sleep_ms(50)) {
        char *text = th_read_file(log);
        attempts = count_lines_with(text, "database not reachable yet");
        free(text);
    }
    assert_int_equal(th_signal(pid, SIGTERM, RECOVER_MS), 0);
    char *text = th_read_file(log);
    assert_true(attempts >= 1);
    assert_non_null(strstr(text, "stopped while waiting for the database"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_stalled_server_costs_its_timeout_and_the_lock_is_released),
        cmocka_unit_test(test_while_no_session_opens_requests_are_answered_at_once),
        cmocka_unit_test(test_stockd_started_before_its_database_waits_for_it),
        cmocka_unit_test(test_stockd_gives_up_on_a_database_that_never_comes),
        cmocka_unit_test(test_a_stop_signal_ends_the_wait),
    };
    return cmocka_run_group_tests_name("pg_outage", tests, group_setup, group_teardown);
}
