/* test_pg_hosts.c - stockd on a multi-host conninfo (host=a,b) whose first
 * host accepts connections and never answers, as a frozen old primary does
 * (a proxy that passes no byte): each host gets a bound of its own, so
 * stockd starts on the next host, reconnects there after its sessions are
 * cut, and looks a COMMIT in doubt up there in time; a read-only host on
 * the way is passed over for target_session_attrs=read-write. The bound:
 * --db-timeout-ms shared among the hosts, or connect_timeout a host, every
 * stalled host named in the error (store_postgres_io.c). */
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

#define RECOVER_MS 30000 /* generous: each new session waits out the stalled host first */

static th_redis redis;
static th_pg pg;
static th_proxy *stalled; /* accepts, and passes no byte either way */
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("pg-hosts", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0 ||
        th_pg_start(&pg) != 0 || (stalled = th_proxy_start(pg.port)) == NULL)
        return -1;
    th_proxy_stall(stalled, 1);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_proxy_stop(stalled);
    th_redis_stop(&redis, 0);
    th_pg_stop(&pg, SIGINT);
    return 0;
}

/* A stockd on db with statements bounded at 1 s: a host's connect gets
 * 2 s (the least bound), whatever the hosts. */
static void start_on(const char *db, th_stockd *s)
{
    const char *flags[] = {"--db-timeout-ms", "1000", NULL};
    assert_int_equal(th_stockd_start(s, &redis, db, dir, flags), 0);
}

/* The first host stalls: stockd starts on the second (its migrations run
 * there), and once every session it has there is cut (a restart, a
 * failover's fence), the new ones are opened there too and orders go
 * through. The stalled host was tried each time: it is first. */
static void test_stockd_starts_and_reconnects_past_a_host_that_stalls(void **state)
{
    (void)state;
    char url[192], db[256];
    th_stockd s;
    assert_int_equal(th_pg_create_db(&pg, "hosts", url, sizeof(url)), 0);
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d,127.0.0.1:%d/hosts",
             th_proxy_port(stalled), pg.port);
    int tried = th_proxy_accepted(stalled);
    int64_t t0 = th_now_ms();
    start_on(db, &s);
    print_message("started past the stalled host in %lld ms\n", (long long)(th_now_ms() - t0));
    assert_true(th_proxy_accepted(stalled) > tried);
    long long item = th_new_item(&s, "hosts", 100);
    assert_int_equal(th_reduce(s.url, item, 1, 0, NULL, 0), 200);
    tried = th_proxy_accepted(stalled);
    assert_true(th_pg_int(pg.url, "SELECT count(pg_terminate_backend(pid)) FROM "
                                  "pg_stat_activity WHERE datname = 'hosts' AND "
                                  "application_name = 'stockd'") > 0);
    t0 = th_now_ms();
    assert_int_equal(th_reduce_until_served(s.url, item, RECOVER_MS), 200);
    print_message("served again %lld ms after its sessions were cut\n",
                  (long long)(th_now_ms() - t0));
    assert_true(th_proxy_accepted(stalled) > tried);
    assert_int_equal(th_pg_int(url, "SELECT stock FROM items WHERE name = 'hosts'"), 98);
    assert_int_equal(th_item_stock(&s, item), 98);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* A COMMIT whose answer comes too late (the proxy in front of the live
 * host holds it past --db-timeout-ms and its grace, then delivers it): the
 * doubt is resolved on a fresh session, which must get past the stalled
 * host in time - the order committed, and is answered 200, not
 * commit_unknown after the look-up's 10 s. Should the COMMIT reach the
 * server only after the look-up ended its session (a machine slower by a
 * second), nothing was written and the answer must say so. */
static void test_a_commit_in_doubt_is_resolved_past_a_host_that_stalls(void **state)
{
    (void)state;
    char url[192], db[256], body[512];
    th_stockd s;
    assert_int_equal(th_pg_create_db(&pg, "doubt", url, sizeof(url)), 0);
    th_proxy *live = th_proxy_start(pg.port);
    assert_non_null(live);
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d,127.0.0.1:%d/doubt",
             th_proxy_port(stalled), th_proxy_port(live));
    start_on(db, &s);
    long long item = th_new_item(&s, "doubt", 100);
    assert_int_equal(th_reduce(s.url, item, 1, 0, NULL, 0), 200);
    /* a second past the 2 s its answer is awaited, a second before the
     * fresh session gets past the stalled host's 2 s */
    th_proxy_delay_next(live, "COMMIT", 3000);
    int64_t t0 = th_now_ms();
    long status = th_reduce(s.url, item, 1, 0, body, sizeof(body));
    print_message("a COMMIT in doubt answered %ld in %lld ms: %s\n", status,
                  (long long)(th_now_ms() - t0), body);
    assert_int_equal(th_proxy_delayed(live), 1);
    assert_null(strstr(body, "commit_unknown"));
    long long stock = th_pg_int(url, "SELECT stock FROM items WHERE name = 'doubt'");
    if (status != 200) { /* resolved too: nothing written */
        assert_int_equal(status, 503);
        assert_non_null(strstr(body, "storage_unavailable"));
    }
    assert_int_equal(stock, status == 200 ? 98 : 99);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    th_proxy_stop(live);
}

/* target_session_attrs=read-write holds across the hosts that stall: the
 * walk that goes on past the stalled host skips a read-only one (a second
 * server whose database defaults to read-only transactions) and starts on
 * the writable one. */
static void test_a_read_only_host_after_a_stalled_one_is_passed_over(void **state)
{
    (void)state;
    char url[192], ro_url[192], db[320];
    th_pg ro = {0};
    th_stockd s;
    assert_int_equal(th_pg_start(&ro), 0);
    int made = th_pg_create_db(&ro, "rw", ro_url, sizeof(ro_url)) == 0 &&
               th_pg_exec(ro.url, "ALTER DATABASE rw SET default_transaction_read_only = on") == 0;
    assert_int_equal(th_pg_create_db(&pg, "rw", url, sizeof(url)), 0);
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/rw"
             "?target_session_attrs=read-write", th_proxy_port(stalled), ro.port, pg.port);
    int started = made ? th_stockd_start(&s, &redis, db, dir, (const char *[]){
                             "--db-timeout-ms", "1000", NULL}) : -1;
    long long n = started == 0 ? th_pg_int(url, "SELECT count(*) FROM stockd_schema") : -3;
    long long on_ro = th_pg_int(ro.url, "SELECT count(*) FROM pg_stat_activity WHERE "
                                        "datname = 'rw' AND application_name = 'stockd'");
    if (started == 0)
        assert_int_equal(th_stockd_stop_clean(&s), 0);
    th_pg_stop(&ro, SIGINT);
    assert_true(made);
    assert_int_equal(started, 0);
    assert_true(n > 0); /* migrated on the writable host */
    assert_int_equal(on_ro, 0);
}

/* stockd started once (--db-wait-s 0) on two hosts that both stall, with
 * --db-timeout-ms timeout and the conninfo's tail: exit 1, and the log
 * line in *text (free it). */
static int start_on_two_stalled(const char *timeout, const char *tail, char **text)
{
    static int run;
    char db[256], bin[160], out[160], port[16];
    th_proxy *second = th_proxy_start(pg.port);
    assert_non_null(second);
    th_proxy_stall(second, 1);
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d,127.0.0.1:%d/hosts%s",
             th_proxy_port(stalled), th_proxy_port(second), tail);
    snprintf(port, sizeof(port), "%d", th_free_port());
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/two-stalled-%d.log", dir, run++);
    const char *argv[] = {bin, "--port", port, "--db", db, "--lock", "atomic", "--db-wait-s",
                          "0", "--db-timeout-ms", timeout, NULL};
    int rc = th_run(argv, out, 60000);
    th_proxy_stop(second);
    *text = th_read_file(out);
    return rc;
}

/* Each host's bound: --db-timeout-ms shared among the hosts (5000 over two:
 * 2500 each), or the conninfo's connect_timeout (seconds) a host, and the
 * error names every host that stalled. */
static void test_each_host_gets_a_share_of_the_timeout_or_connect_timeout(void **state)
{
    (void)state;
    char *shared, *own, each[64];
    assert_int_equal(start_on_two_stalled("5000", "", &shared), 1);
    assert_int_equal(start_on_two_stalled("8000", "?connect_timeout=2", &own), 1);
    snprintf(each, sizeof(each), "port %d failed: no answer within 2500 ms",
             th_proxy_port(stalled));
    assert_non_null(strstr(shared, each));
    assert_non_null(strstr(shared, "failed: no answer within 2500 ms; connection to server at"));
    snprintf(each, sizeof(each), "port %d failed: no answer within 2000 ms",
             th_proxy_port(stalled));
    assert_non_null(strstr(own, each));
    assert_non_null(strstr(own, "failed: no answer within 2000 ms; connection to server at"));
    const char *line = strstr(own, "cannot connect");
    assert_non_null(line);
    print_message("%.*s\n", (int)strcspn(line, "\n"), line);
    assert_non_null(strstr(line, "failed: no answer within 2000 ms\"")); /* nothing after */
    free(shared);
    free(own);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stockd_starts_and_reconnects_past_a_host_that_stalls),
        cmocka_unit_test(test_a_commit_in_doubt_is_resolved_past_a_host_that_stalls),
        cmocka_unit_test(test_a_read_only_host_after_a_stalled_one_is_passed_over),
        cmocka_unit_test(test_each_host_gets_a_share_of_the_timeout_or_connect_timeout),
    };
    return cmocka_run_group_tests_name("pg_hosts", tests, group_setup, group_teardown);
}
