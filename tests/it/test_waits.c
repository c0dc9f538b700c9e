/* test_waits.c - no wait holds a thread: requests that wait (for a lock
 * another owner holds, for their workMs, for a cart's many locks) are
 * memory, so that an item nobody locked is served meanwhile, every waiter
 * is served once the lock comes, and the threads stay within their budget.
 * The two cases of issue 31 that stalled a replica, on a real stockd with a
 * real redis-server. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"

/* How long a request may take before it counts as stalled, not slow: the
 * replica used to take 30 s; a loaded CI machine takes a few hundred ms. */
#define STALLED_MS (5000 * TH_SLOWER)

static th_redis redis;
static th_stockd replica;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("waits-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    char db[128];
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *flags[] = {"--allow-work-ms", NULL};
    return th_stockd_start(&replica, &redis, db, dir, flags);
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&replica);
    th_redis_stop(&redis, 0);
    curl_global_cleanup();
    return rc;
}

/* A client on a thread of its own: its requests one after the other, each
 * body in turn. */
struct client {
    const char *method;
    char path[64];
    char body[8][4096];
    int n, sent[8], failed;
    long status;    /* the last answer's */
    int64_t ms;     /* the slowest answer's */
    pthread_t t;
};

static void *run_client(void *arg)
{
    struct client *c = arg;
    char url[160];
    snprintf(url, sizeof(url), "%s%s", replica.url, c->path);
    for (int i = 0; i < c->n; i++) {
        th_resp r;
        int64_t t0 = th_now_ms();
        th_http(c->method, url, c->body[i % 8][0] ? c->body[i % 8] : NULL, &r);
        c->ms = th_now_ms() - t0 > c->ms ? th_now_ms() - t0 : c->ms;
        c->status = r.status;
        if (r.status == 200 || r.status == 201) {
            c->sent[i % 8]++;
        } else {
            c->failed++;
            printf("%s %s: %ld %s\n", c->method, c->path, r.status, r.body ? r.body : r.error);
        }
        th_resp_free(&r);
    }
    return NULL;
}

/* One request on a thread of its own. */
static void start(struct client *c, const char *method, const char *path, const char *body)
{
    *c = (struct client){.method = method, .n = 1};
    snprintf(c->path, sizeof(c->path), "%s", path);
    snprintf(c->body[0], sizeof(c->body[0]), "%s", body ? body : "");
    pthread_create(&c->t, NULL, run_client, c);
}

static void reduce_body(char *buf, size_t size, long long item, int work_ms)
{
    snprintf(buf, size, "{\"itemId\":%lld,\"quantity\":1,\"workMs\":%d}", item, work_ms);
}

/* Threads at most 2 x cores + 16, as /metrics says. */
static void assert_threads_within_budget(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double threads = th_metric(replica.url, "process_threads");
    assert_true(threads > 0);
    if (threads > 2 * cores + 16)
        fail_msg("%.0f threads, more than 2 x %ld cores + 16", threads, cores);
}

/* Item A's lock held by another owner for 6 s; 3 plain orders for A
 * queue, then twice the service threads' worth each of PUT /items/A and of
 * orders for A with workMs: all of them wait for A's lock, none of them on
 * a thread. Item B, which nobody locked, is read and sold meanwhile at once;
 * once the foreign lease lapses, every request for A is served. */
static void test_a_restock_during_a_held_lock_stalls_no_other_item(void **state)
{
    (void)state;
    enum { PLAIN = 3, EACH = 16 };
    long long a = th_new_item(&replica, "held", 100000), b = th_new_item(&replica, "free", 100);
    char key[600], path[64], body[256];
    assert_int_equal(th_redis_int(&redis, "SET %s someone-else PX 6000",
                                  th_item_lock_key(a, key)), 0);
    static struct client plain[PLAIN], restock[EACH], worked[EACH];
    reduce_body(body, sizeof(body), a, 0);
    for (int i = 0; i < PLAIN; i++)
        start(&plain[i], "POST", "/reduceStock", body);
    snprintf(path, sizeof(path), "/items/%lld", a);
    reduce_body(body, sizeof(body), a, 20);
    for (int i = 0; i < EACH; i++) {
        start(&restock[i], "PUT", path, "{\"stock\":100000}");
        start(&worked[i], "POST", "/reduceStock", body);
    }
    th_wait_inflight(&replica, PLAIN + 2 * EACH); /* every one of them waits for A */
    assert_threads_within_budget();

    static struct client read_b, sell_b;
    snprintf(path, sizeof(path), "/items/%lld", b);
    start(&read_b, "GET", path, NULL);
    reduce_body(body, sizeof(body), b, 0);
    start(&sell_b, "POST", "/reduceStock", body);
    pthread_join(read_b.t, NULL);
    pthread_join(sell_b.t, NULL);
    assert_int_equal(read_b.status, 200);
    assert_int_equal(sell_b.status, 200);
    if (read_b.ms > STALLED_MS || sell_b.ms > STALLED_MS)
        fail_msg("item B waited for item A: read %lld ms, order %lld ms", (long long)read_b.ms,
                 (long long)sell_b.ms);
    char owner[64]; /* ...and B was served while A was still held */
    assert_string_equal(th_redis_get(&redis, key, owner, sizeof(owner)), "someone-else");

    for (int i = 0; i < PLAIN; i++)
        pthread_join(plain[i].t, NULL), assert_int_equal(plain[i].status, 200);
    for (int i = 0; i < EACH; i++) {
        pthread_join(restock[i].t, NULL);
        pthread_join(worked[i].t, NULL);
        assert_int_equal(restock[i].status, 200);
        assert_int_equal(worked[i].status, 200);
    }
    assert_int_equal(th_item_stock(&replica, b), 99);
}

/* Carts of every item with work, beside clients ordering single items with
 * work, all of them in a loop: the carts' many locks and the singles' one
 * each are all waited for as memory, in the locks' order of asking, so
 * every order is placed (none refused for a lock it waited too long for)
 * and the stock left is the units sold. */
static void test_carts_with_work_beside_single_orders_all_place(void **state)
{
    (void)state;
    enum { ITEMS = 32, CARTS = 8, CART_ROUNDS = 4, SINGLES = 24, SINGLE_ROUNDS = 8 };
    long long items[ITEMS];
    int qty[ITEMS];
    for (int i = 0; i < ITEMS; i++)
        items[i] = th_new_item(&replica, "mixed", 10000), qty[i] = 1;
    static struct client carts[CARTS], singles[SINGLES];
    for (int k = 0; k < CARTS; k++) {
        carts[k] = (struct client){.method = "POST", .path = "/orders", .n = CART_ROUNDS};
        th_order_body(carts[k].body[0], sizeof(carts[k].body[0]), items, qty, ITEMS, NULL, 20);
        for (int b = 1; b < 8; b++)
            memcpy(carts[k].body[b], carts[k].body[0], sizeof(carts[k].body[0]));
        pthread_create(&carts[k].t, NULL, run_client, &carts[k]);
    }
    for (int k = 0; k < SINGLES; k++) {
        singles[k] = (struct client){.method = "POST", .path = "/reduceStock",
                                     .n = SINGLE_ROUNDS};
        for (int b = 0; b < 8; b++) /* each client over items of its own turn */
            reduce_body(singles[k].body[b], sizeof(singles[k].body[b]),
                        items[(k * 5 + b * 3) % ITEMS], 20);
        pthread_create(&singles[k].t, NULL, run_client, &singles[k]);
    }
    long long sold[ITEMS] = {0};
    int failed = 0;
    for (int k = 0; k < CARTS; k++) {
        pthread_join(carts[k].t, NULL);
        failed += carts[k].failed;
        for (int b = 0; b < 8; b++) /* a cart takes one of every item */
            for (int i = 0; i < ITEMS; i++)
                sold[i] += carts[k].sent[b];
    }
    for (int k = 0; k < SINGLES; k++) {
        pthread_join(singles[k].t, NULL);
        failed += singles[k].failed;
        for (int b = 0; b < 8; b++)
            sold[(k * 5 + b * 3) % ITEMS] += singles[k].sent[b];
    }
    assert_int_equal(failed, 0);
    for (int i = 0; i < ITEMS; i++)
        assert_int_equal(th_item_stock(&replica, items[i]), 10000 - sold[i]);
    assert_threads_within_budget();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_restock_during_a_held_lock_stalls_no_other_item),
        cmocka_unit_test(test_carts_with_work_beside_single_orders_all_place),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
