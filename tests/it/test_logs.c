/* test_logs.c - the log an operator follows orders by, read from real
 * replicas' stderr: one line per order with its requestId, items, lock keys
 * and the fencing tokens it was written under (checked against the ledger);
 * a requestId built to forge fields comes back as one value; no password
 * (Redis's, PostgreSQL's from a file or in the URL) and no request body ever
 * shows; in JSON every line parses; one grep of a requestId finds the order
 * on each replica it touched; a stale holder's refusal names its key and
 * its older token. */
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
#include "tests/support/logline.h"
#include "tests/support/pg.h"

#define REDIS_PASSWORD "redis-pw-7f3a91c2"
#define BODY_MARK "BODYMARK-5d2c"
/* A requestId meant to forge a field and end its value: printable ASCII,
 * so the service accepts it. */
#define HOSTILE_ID "RID-9e41\" level=error msg=\"forged \\ x=y"
#define LEASE "--lease-ms", "1000", "--redis-timeout-ms", "100"

static th_redis redis = {.password = REDIS_PASSWORD};
static th_pg pg;
static char dir[64], redis_pw[128], db_pw[128];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
}

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("logs-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(redis_pw, sizeof(redis_pw), "%s/redis-pw", dir);
    snprintf(db_pw, sizeof(db_pw), "%s/db-pw", dir);
    write_file(redis_pw, REDIS_PASSWORD);
    write_file(db_pw, TH_PG_SECRET);
    return th_pg_available() && th_pg_start(&pg) != 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    th_pg_stop(&pg, SIGINT);
    return 0;
}

/* A replica on db with the Redis password from its file, then flags. */
static void start(th_stockd *s, const char *db, const char *const flags[])
{
    const char *argv[32] = {"--redis-password-file", redis_pw};
    int n = 2;
    for (int i = 0; flags && flags[i] && n < 31; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    assert_int_equal(th_stockd_start(s, &redis, db, dir, argv), 0);
}

/* POSTs an order as JSON (so that any requestId is sent as it is); the answer. */
static json_t *order(const th_stockd *s, const char *path, json_t *body, long expect)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_t *answer = th_call(s, "POST", path, text, expect);
    free(text);
    json_decref(body);
    return answer;
}

static json_t *reduce(const th_stockd *s, long long item, int quantity, const char *id,
                      long expect)
{
    return order(s, "/reduceStock",
                 json_pack("{s:I, s:i, s:s}", "itemId", item, "quantity", quantity, "requestId",
                           id),
                 expect);
}

/* The ledger's tokens for order id: "fence,fence" and "seq,seq", its lines'
 * in their order. */
static void ledger_tokens(const th_stockd *s, long long id, char *fences, char *seqs,
                          size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/orders/%lld", id);
    json_t *o = th_call(s, "GET", path, NULL, 200), *line;
    size_t i, f = 0, q = 0;
    json_array_foreach(json_object_get(o, "lines"), i, line) {
        f += (size_t)snprintf(fences + f, size - f, "%s%lld", i ? "," : "", th_jint(line, "fence"));
        q += (size_t)snprintf(seqs + q, size - q, "%s%lld", i ? "," : "", th_jint(line, "fenceSeq"));
    }
    json_decref(o);
}

/* The one text line of log whose requestId is id, with these members. */
static void expect_order_line(const char *log, const char *id, const char *msg,
                              const char *outcome, th_logfmt *l)
{
    int n = th_log_find(log, "requestId", id, l);
    if (n != 1)
        fail_msg("%d lines with requestId %s in:\n%s", n, id, log);
    assert_string_equal(th_logfmt_get(l, "msg", NULL), msg);
    assert_string_equal(th_logfmt_get(l, "outcome", NULL), outcome);
    assert_int_equal(th_logfmt_count(l, "level"), 1);
    assert_non_null(th_logfmt_get(l, "ms", NULL));
}

/* What may never be in a log: the passwords and any part of a body. */
static void expect_no_secret(const char *log)
{
    assert_null(strstr(log, REDIS_PASSWORD));
    assert_null(strstr(log, TH_PG_SECRET));
    assert_null(strstr(log, BODY_MARK));
}

/* Malformed bodies carrying the marker, on every route that reads one. */
static void send_bad_bodies(const th_stockd *s, long long item)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", item);
    json_decref(th_call(s, "POST", "/reduceStock",
                        "{\"itemId\":1,\"quantity\":1,\"requestId\":\"" BODY_MARK, 400));
    json_decref(th_call(s, "POST", "/reduceStock", "{\"itemId\":\"" BODY_MARK "\",\"quantity\":1}",
                        400));
    json_decref(th_call(s, "POST", "/reduceStock",
                        "{\"itemId\":1,\"quantity\":1,\"requestId\":\"" BODY_MARK "\\u0001\"}",
                        400));
    json_decref(th_call(s, "POST", "/orders", "{\"lines\":[{\"" BODY_MARK "\":2}]}", 400));
    json_decref(th_call(s, "POST", "/items", "{\"name\":\"" BODY_MARK, 400));
    json_decref(th_call(s, "PUT", path, BODY_MARK, 400));
}

/* Text, at debug: Redis and PostgreSQL both with passwords (a file, and in
 * a URL's query), every kind of order, malformed bodies. */
static void test_text_lines_follow_each_order_and_show_no_secret(void **state)
{
    (void)state;
    if (!th_pg_available())
        th_skip("no PostgreSQL server installed (make deps installs it)");
    char url[256], url_pw[300], key[64];
    assert_int_equal(th_pg_create_db(&pg, "logs_text", url, sizeof(url)), 0);
    snprintf(url, sizeof(url), "postgresql://stock_secret@127.0.0.1:%d/logs_text", pg.port);
    snprintf(url_pw, sizeof(url_pw), "%s?password=" TH_PG_SECRET, url);
    const char *a_flags[] = {"--db-password-file", db_pw, "--log-level", "debug",
                             "--instance-id", "replica-a", NULL};
    const char *b_flags[] = {"--log-level", "debug", "--instance-id", "replica-b", NULL};
    th_stockd a, b;
    start(&a, url, a_flags);
    start(&b, url_pw, b_flags);
    long long item = th_new_item(&a, "logged", 10), other = th_new_item(&a, "other", 10);
    send_bad_bodies(&a, item);
    send_bad_bodies(&b, item);
    json_t *placed = reduce(&a, item, 2, HOSTILE_ID, 200);
    long long id = th_jint(placed, "orderId");
    json_decref(placed);
    json_decref(reduce(&b, item, 2, HOSTILE_ID, 200)); /* a retry on b: replayed */
    json_t *cart = order(&a, "/orders",
                         json_pack("{s:[{s:I,s:i},{s:I,s:i}], s:s}", "lines", "itemId", other,
                                   "quantity", 1, "itemId", item, "quantity", 1, "requestId",
                                   "cart-1"),
                         201);
    long long cart_id = th_jint(cart, "orderId");
    json_decref(cart);
    json_decref(reduce(&a, item, 100, "too-many", 409));
    char fences[256], seqs[256], cart_fences[256], cart_seqs[256], keys[128];
    ledger_tokens(&a, id, fences, seqs, sizeof(fences));
    ledger_tokens(&a, cart_id, cart_fences, cart_seqs, sizeof(cart_fences));
    assert_int_equal(th_stockd_stop_clean(&a), 0);
    assert_int_equal(th_stockd_stop_clean(&b), 0);

    char *log_a = th_read_file(a.log), *log_b = th_read_file(b.log);
    th_logfmt l;
    expect_no_secret(log_a);
    expect_no_secret(log_b);
    assert_non_null(strstr(log_b, "?password=***")); /* the listening line's db= */
    expect_order_line(log_a, HOSTILE_ID, "order placed", "ok", &l);
    assert_string_equal(th_logfmt_get(&l, "keys", NULL), th_item_lock_key(item, key));
    assert_string_equal(th_logfmt_get(&l, "fences", NULL), fences);
    assert_string_equal(th_logfmt_get(&l, "fenceSeqs", NULL), seqs);
    assert_string_equal(th_logfmt_get(&l, "units", NULL), "2");
    assert_string_equal(th_logfmt_get(&l, "instance", NULL), "replica-a");
    assert_int_equal(atoll(th_logfmt_get(&l, "orderId", NULL)), id);

    expect_order_line(log_b, HOSTILE_ID, "order replayed", "replayed", &l);
    assert_string_equal(th_logfmt_get(&l, "placedBy", NULL), "replica-a");
    assert_string_equal(th_logfmt_get(&l, "fences", NULL), fences); /* as first written */

    expect_order_line(log_a, "cart-1", "order placed", "ok", &l);
    snprintf(keys, sizeof(keys), "stock:lock:{%lld},stock:lock:{%lld}", other, item);
    assert_string_equal(th_logfmt_get(&l, "keys", NULL), keys);
    assert_string_equal(th_logfmt_get(&l, "fences", NULL), cart_fences);
    assert_string_equal(th_logfmt_get(&l, "fenceSeqs", NULL), cart_seqs);
    assert_non_null(strchr(cart_fences, ','));

    expect_order_line(log_a, "too-many", "order not placed", "insufficient_stock", &l);
    assert_non_null(th_logfmt_get(&l, "fences", NULL)); /* read under its lock */
    free(log_a);
    free(log_b);
}

/* JSON through the environment variable: every line parses, and an
 * order's line has each member with its JSON type; a lock timeout names
 * the key it waited for and has no token. */
static void test_json_lines_parse_and_name_each_order_s_lock(void **state)
{
    (void)state;
    char db[128], body[256], key[64];
    snprintf(db, sizeof(db), "%s/json.db", dir);
    const char *flags[] = {"--log-level", "debug", "--allow-work-ms", "--wait-ms", "300", NULL};
    th_stockd s;
    setenv("STOCKD_LOG_FORMAT", "json", 1);
    start(&s, db, flags);
    unsetenv("STOCKD_LOG_FORMAT");
    long long item = th_new_item(&s, "json", 10);
    send_bad_bodies(&s, item);
    json_t *placed = reduce(&s, item, 1, HOSTILE_ID, 200);
    long long id = th_jint(placed, "orderId");
    json_decref(placed);
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1}],"
             "\"requestId\":\"holder-1\",\"workMs\":1500}", item);
    th_bg_reduce holder = {.url = s.url, .order = body};
    assert_int_equal(th_wait_item_unlocked(&redis, item, 5000), 0); /* the order before's */
    th_bg_reduce_start(&holder);
    assert_int_equal(th_wait_item_locked(&redis, item, 5000), 0);
    json_decref(reduce(&s, item, 1, "waiter-1", 503));
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 201);
    char fences[64], seqs[64];
    ledger_tokens(&s, id, fences, seqs, sizeof(fences));
    assert_int_equal(th_stockd_stop_clean(&s), 0);

    char *log = th_read_file(s.log);
    int n;
    expect_no_secret(log);
    json_t *j = th_log_find_json(log, "requestId", HOSTILE_ID, &n);
    assert_int_equal(n, 1);
    assert_string_equal(th_jstr(j, "msg"), "order placed");
    assert_string_equal(th_jstr(j, "level"), "info");
    assert_string_equal(th_jstr(j, "outcome"), "ok");
    assert_int_equal(th_jint(j, "orderId"), id);
    assert_int_equal(th_jint(j, "units"), 1);
    assert_true(json_is_real(json_object_get(j, "ms")));
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "items"), 0)), item);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "keys"), 0)),
                        th_item_lock_key(item, key));
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "fences"), 0)),
                     atoll(fences));
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "fenceSeqs"), 0)),
                     atoll(seqs));
    json_decref(j);

    j = th_log_find_json(log, "requestId", "waiter-1", &n);
    assert_int_equal(n, 1);
    assert_string_equal(th_jstr(j, "level"), "warn");
    assert_string_equal(th_jstr(j, "outcome"), "lock_timeout");
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "keys"), 0)), key);
    assert_null(json_object_get(j, "fences")); /* it never held the lock */
    json_decref(j);
    json_decref(th_log_find_json(log, "msg", "request", &n)); /* debug: one per request */
    assert_true(n >= 10);
    free(log);
}

/* A retry on another replica: grepping both replicas' logs for the
 * requestId finds where it was placed and where it was answered again, with
 * the same order and token. */
static void test_one_grep_of_a_request_id_finds_the_order_on_every_replica(void **state)
{
    (void)state;
    char db[128], grep[64], key_fence[128], key[64];
    snprintf(db, sizeof(db), "%s/grep.db", dir);
    th_stockd r[2];
    const char *flags[2][3] = {{"--instance-id", "r1", NULL}, {"--instance-id", "r2", NULL}};
    start(&r[0], db, flags[0]);
    start(&r[1], db, flags[1]);
    long long item = th_new_item(&r[0], "grep", 10);
    json_decref(reduce(&r[0], item, 1, "grep-me-1", 200));
    json_decref(reduce(&r[1], item, 1, "grep-me-1", 200));
    json_decref(reduce(&r[1], item, 1, "grep-me-10", 200)); /* not a match */
    assert_int_equal(th_stockd_stop_clean(&r[0]), 0);
    assert_int_equal(th_stockd_stop_clean(&r[1]), 0);

    const char *msgs[2] = {"msg=\"order placed\"", "msg=\"order replayed\""};
    snprintf(grep, sizeof(grep), "requestId=grep-me-1 "); /* what an operator types */
    for (int i = 0; i < 2; i++) {
        char *log = th_read_file(r[i].log), *hit = strstr(log, grep);
        assert_non_null(hit);
        assert_null(strstr(hit + 1, grep)); /* one line per replica */
        char *end = strchr(hit, '\n'), *start_of_line = hit;
        while (start_of_line > log && start_of_line[-1] != '\n')
            start_of_line--;
        *end = '\0';
        assert_non_null(strstr(start_of_line, msgs[i]));
        assert_non_null(strstr(start_of_line, " orderId=1 "));
        /* the key and token join it to the other replica's line */
        th_logfmt l;
        assert_int_equal(th_logfmt_parse(start_of_line, &l), 0);
        if (i == 0)
            snprintf(key_fence, sizeof(key_fence), " fences=%s fenceSeqs=0 keys=%s",
                     th_logfmt_get(&l, "fences", NULL), th_item_lock_key(item, key));
        assert_non_null(strstr(start_of_line, key_fence));
        free(log);
    }
}

/* A holder stalled past its lease is refused by fencing: its line says
 * lock_lost with its key and its token, older than the token of the
 * replica that deducted meanwhile. */
static void test_a_stale_holder_s_refusal_names_its_key_and_older_token(void **state)
{
    (void)state;
    char db[128], body[256], key[64];
    snprintf(db, sizeof(db), "%s/stale.db", dir);
    const char *stale_flags[] = {LEASE, "--allow-work-ms", "--test-stop-before-write", NULL};
    const char *fresh_flags[] = {LEASE, NULL};
    th_stockd stale, fresh;
    start(&stale, db, stale_flags);
    start(&fresh, db, fresh_flags);
    long long item = th_new_item(&fresh, "stale", 10);
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1}],"
             "\"requestId\":\"stale-1\",\"workMs\":1}", item); /* workMs: not batched */
    th_bg_reduce bg = {.url = stale.url, .order = body};
    th_bg_reduce_start(&bg);
    for (int64_t end = th_now_ms() + 5000; th_proc_state(stale.pid) != 'T';) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    th_sleep_ms(1300); /* past its lease */
    json_decref(reduce(&fresh, item, 1, "fresh-1", 200));
    th_signal(stale.pid, SIGCONT, 0);
    th_bg_reduce_join(&bg);
    assert_int_equal(bg.status, 503);
    assert_int_equal(th_stockd_stop_clean(&stale), 0);
    assert_int_equal(th_stockd_stop_clean(&fresh), 0);

    char *log_stale = th_read_file(stale.log), *log_fresh = th_read_file(fresh.log);
    th_logfmt l;
    expect_order_line(log_stale, "stale-1", "order not placed", "lock_lost", &l);
    assert_string_equal(th_logfmt_get(&l, "level", NULL), "warn");
    assert_string_equal(th_logfmt_get(&l, "keys", NULL), th_item_lock_key(item, key));
    assert_non_null(strstr(th_logfmt_get(&l, "detail", NULL), "refused by fencing"));
    long long old_fence = atoll(th_logfmt_get(&l, "fences", NULL));
    expect_order_line(log_fresh, "fresh-1", "order placed", "ok", &l);
    assert_true(atoll(th_logfmt_get(&l, "fences", NULL)) > old_fence);
    assert_true(old_fence > 0);
    free(log_stale);
    free(log_fresh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_lines_follow_each_order_and_show_no_secret),
        cmocka_unit_test(test_json_lines_parse_and_name_each_order_s_lock),
        cmocka_unit_test(test_one_grep_of_a_request_id_finds_the_order_on_every_replica),
        cmocka_unit_test(test_a_stale_holder_s_refusal_names_its_key_and_older_token),
    };
    return cmocka_run_group_tests_name("logs", tests, group_setup, group_teardown);
}
