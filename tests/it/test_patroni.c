/* test_patroni.c - stockd on a PostgreSQL cluster as operators run one:
 * three Patroni-managed nodes on etcd with synchronous_mode, reached through
 * a multi-host conninfo with target_session_attrs=read-write. The leader's
 * Patroni and PostgreSQL are killed mid-sale (as a host is lost): loadgen's
 * verdict must pass (no oversell, no acknowledged order missing from the new
 * leader's ledger, none applied twice, no failure answered for an order that
 * committed: a COMMIT in doubt across the failover is resolved on the new
 * leader or answered commit_unknown), orders resume, and /health and
 * /metrics name the new node (and, on SQLite, none). The outage is measured
 * and printed (bench/patroni.sh records it). One server's failover under a proxy:
 * test_pg_failover.c. */
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
#include "tests/support/lgrun.h"
#include "tests/support/patroni.h"
#include "tests/support/pg.h"

#define REPLICAS 3
#define STOCK 1000000 /* never sold out within the run */
#define FAULT_AT_S 4
/* the run: the fault, the leader key's ttl, the promotion, and orders
 * served for a while after */
#define RUN_S (FAULT_AT_S + TH_PATRONI_TTL + 16)
#define WAIT_MS (30000 * TH_SLOWER) /* generous: only to detect a hang */

static th_redis redis;
static th_patroni cluster;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("patroni-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0 ||
        th_patroni_start(&cluster) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_patroni_stop(&cluster);
    th_redis_stop(&redis, 0);
    return 0;
}

/* What /health of s names as the node it writes to ("" when none). */
static void storage_node(const th_stockd *s, char *buf, size_t size)
{
    json_t *h = th_call(s, "GET", "/health", NULL, 200);
    snprintf(buf, size, "%s", th_jstr(h, "storageNode"));
    json_decref(h);
}

/* Whether s's /metrics has the storage node gauge for node. */
static int metrics_name(const th_stockd *s, const char *node)
{
    char url[96], line[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/metrics", s->url);
    snprintf(line, sizeof(line), "stockd_storage_node_info{node=\"%s\"} 1\n", node);
    int found = th_http("GET", url, NULL, &r) == 0 && r.status == 200 && r.body &&
                strstr(r.body, line) != NULL;
    th_resp_free(&r);
    return found;
}

/* Asserts that every replica writes to node i, by /health and /metrics. */
static void assert_replicas_write_to(const th_stockd *s, int i)
{
    char want[64], got[80];
    snprintf(want, sizeof(want), "127.0.0.1:%d", cluster.node[i].port);
    for (int k = 0; k < REPLICAS; k++) {
        storage_node(&s[k], got, sizeof(got));
        if (strcmp(got, want) != 0)
            fail_msg("replica %d: /health storageNode \"%s\", the leader is %s", k + 1, got, want);
        if (!metrics_name(&s[k], want))
            fail_msg("replica %d: /metrics has no stockd_storage_node_info{node=\"%s\"}", k + 1,
                     want);
    }
}

/* For outage: the answers of one outcome from t0's bucket to the first
 * bucket after t0 with an ok one, into *n; the seconds to that bucket, or
 * -1 when none. */
static double outcome_until_ok(const json_t *report, double t0, const char *outcome,
                               long long *n)
{
    const json_t *tl = json_object_get(report, "timeline");
    const json_t *outs = json_object_get(tl, "outcomes");
    double w = json_number_value(json_object_get(tl, "bucketMs")) / 1000;
    const json_t *ok = json_object_get(outs, "ok"), *mine = json_object_get(outs, outcome);
    *n = 0;
    for (size_t i = (size_t)(t0 / w); w > 0 && i < json_array_size(ok); i++) {
        if ((double)i * w >= t0 && json_integer_value(json_array_get(ok, i)) > 0)
            return (double)i * w - t0;
        *n += json_integer_value(json_array_get(mine, i));
    }
    return -1;
}

/* The outage loadgen saw around the fault that ran at t0 (seconds into the
 * load), from its timeline: seconds from t0 to the first bucket that starts
 * after t0 and holds an ok answer (to a bucket's width), and the error
 * answers in between (every outcome but ok and sold out), commit_unknown
 * among them, and by outcome in by ("12 other_5xx, 1 transport_error").
 * -1 when no ok came after. */
static double outage(const json_t *report, double t0, long long *errors, long long *unknown,
                     char *by, size_t size)
{
    double took = -1;
    size_t used = 0;
    const char *name;
    const json_t *counts;
    *errors = *unknown = 0;
    by[0] = '\0';
    const json_t *outs = json_object_get(json_object_get(report, "timeline"), "outcomes");
    json_object_foreach((json_t *)outs, name, counts) {
        long long n = 0;
        took = outcome_until_ok(report, t0, name, &n);
        if (strcmp(name, "ok") == 0 || strcmp(name, "insufficient_stock") == 0 || n == 0)
            continue;
        *errors += n;
        if (strcmp(name, "commit_unknown") == 0)
            *unknown = n;
        if (used < size)
            used += (size_t)snprintf(by + used, size - used, "%s%lld %s", used ? ", " : "", n,
                                     name);
    }
    return took;
}

/* The new leader's own ledger for item: stock and sold add up to the
 * initial stock, and no requestId holds two orders. */
static void assert_ledger_on(int leader, long long item)
{
    char url[160], sql[320];
    th_patroni_url(&cluster, leader, url, sizeof(url));
    snprintf(sql, sizeof(sql), "SELECT stock + (SELECT coalesce(sum(quantity), 0) FROM "
             "order_lines WHERE item_id = %lld) FROM items WHERE id = %lld", item, item);
    assert_int_equal(th_pg_int(url, sql), STOCK);
    assert_int_equal(th_pg_int(url, "SELECT count(*) - count(DISTINCT request_id) FROM orders "
                                    "WHERE request_id IS NOT NULL"), 0);
}

static void test_a_sale_rides_through_the_loss_of_the_leader(void **state)
{
    (void)state;
    th_stockd s[REPLICAS];
    const char *flags[] = {"--db-timeout-ms", "2000", NULL};
    for (int k = 0; k < REPLICAS; k++)
        if (th_stockd_start(&s[k], &redis, cluster.conninfo, dir, flags) != 0) {
            char *log = th_read_file(s[k].log);
            fail_msg("stockd on %s did not start: %s", cluster.conninfo, log ? log : "no log");
        }
    int leader = th_patroni_leader(&cluster, WAIT_MS);
    assert_true(leader >= 0);
    long long warm = th_new_item(&s[0], "warm-up", 10);
    for (int k = 0; k < REPLICAS; k++)
        assert_int_equal(th_reduce(s[k].url, warm, 1, 0, NULL, 0), 200);
    assert_replicas_write_to(s, leader);

    pid_t patroni = cluster.node[leader].pid, postmaster = th_patroni_postmaster(&cluster, leader);
    assert_true(patroni > 0 && postmaster > 0);
    char targets[256], fault[96], duration[16], stock[16], loadgen[160];
    snprintf(targets, sizeof(targets), "%s,%s,%s", s[0].url, s[1].url, s[2].url);
    snprintf(fault, sizeof(fault), "%d:kill -KILL %d %d", FAULT_AT_S, (int)patroni,
             (int)postmaster);
    snprintf(duration, sizeof(duration), "%ds", RUN_S);
    snprintf(stock, sizeof(stock), "%d", STOCK);
    snprintf(loadgen, sizeof(loadgen), "%s/loadgen", th_build_dir());
    th_lg_outcome o = th_lg_run(loadgen, dir, 0, NULL, (const char *[]){
        "--target", targets, "--stock", stock, "--requests", "0", "--duration", duration,
        "--concurrency", "6", "--rate", "150", "--retry", "--history-ms", "50",
        "--settle-s", "60", "--fault", fault, NULL}, (RUN_S + 120) * 1000 * TH_SLOWER);
    th_patroni_kill(&cluster, leader); /* reaped; its PostgreSQL's last backends gone */

    int now = th_patroni_leader(&cluster, WAIT_MS);
    const json_t *run = json_object_get(json_array_get(json_object_get(o.json, "faults"), 0),
                                        "run");
    double t0 = json_number_value(json_object_get(run, "startSec"));
    long long errors = 0, unknown = 0;
    char by[256] = "";
    double took = o.json ? outage(o.json, t0, &errors, &unknown, by, sizeof(by)) : -1;
    print_message("leader node %d killed at %.2f s into the sale; node %d leads now; first "
                  "order served %.2f s after the kill (to a %.0f ms bucket), %lld answered "
                  "errors meanwhile (%lld commit_unknown; %s); ttl %d s\n", leader + 1, t0,
                  now + 1, took,
                  json_number_value(json_object_get(json_object_get(o.json, "timeline"),
                                                    "bucketMs")),
                  errors, unknown, by[0] ? by : "none", TH_PATRONI_TTL);
    const char *example = json_string_value(
        json_object_get(json_object_get(o.json, "examples"), "other_5xx"));
    if (example)
        print_message("an other_5xx answer: %.300s\n", example);
    assert_int_equal(o.status, 0);
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), "PASS");
    assert_int_equal(json_array_size(json_object_get(o.json, "violations")), 0);
    assert_true(took >= 0); /* orders resumed */
    assert_true(now >= 0 && now != leader);
    long long item = json_integer_value(
        json_object_get(json_array_get(json_object_get(o.json, "items"), 0), "id"));
    assert_ledger_on(now, item);
    assert_replicas_write_to(s, now);
    th_lg_outcome_free(&o);
    for (int k = 0; k < REPLICAS; k++)
        assert_int_equal(th_stockd_stop_clean(&s[k]), 0);
}

/* SQLite has no server to name: neither /health nor /metrics says one. */
static void test_a_replica_on_sqlite_names_no_storage_node(void **state)
{
    (void)state;
    char db[96], url[96];
    th_stockd s;
    th_resp r;
    snprintf(db, sizeof(db), "%s/sqlite.db", dir);
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, NULL), 0);
    json_t *h = th_call(&s, "GET", "/health", NULL, 200);
    assert_null(json_object_get(h, "storageNode"));
    json_decref(h);
    snprintf(url, sizeof(url), "%s/metrics", s.url);
    assert_int_equal(th_http("GET", url, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, "stockd_storage_node_info"));
    th_resp_free(&r);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

int main(void)
{
    if (!th_patroni_available()) { /* scripts/deps.sh installs them */
        fprintf(stderr, "test_patroni: patroni, etcd or PostgreSQL not installed (make deps)\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_sale_rides_through_the_loss_of_the_leader),
        cmocka_unit_test(test_a_replica_on_sqlite_names_no_storage_node),
    };
    return cmocka_run_group_tests_name("patroni", tests, group_setup, group_teardown);
}
