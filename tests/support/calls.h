/* calls.h - HTTP calls to a stockd under test that check their answer, and
 * readers of the JSON it answers with. They fail the running cmocka test
 * (naming the request and what came back) instead of returning errors. */
#ifndef TEST_CALLS_H
#define TEST_CALLS_H

#include <jansson.h>

#include "tests/support/harness.h"

/* One request to s (path like "/items/1", body may be NULL); fails the test
 * unless the status is expect and the answer JSON (HEAD: no body). Returns
 * the answer (json_decref it; NULL for HEAD). */
json_t *th_call(const th_stockd *s, const char *method, const char *path, const char *body,
                long expect);

/* The integer member key of j; fails the test when there is none. */
long long th_jint(json_t *j, const char *key);

/* The string member key of j, or "" when there is none. */
const char *th_jstr(json_t *j, const char *key);

/* A POST /orders body into buf: n lines of items[i] x qty[i], with requestId
 * rid (NULL: none) and workMs. */
void th_order_body(char *buf, size_t size, const long long *items, const int *qty, int n,
                   const char *rid, int work_ms);

/* POST /items {"name": name, "stock": stock} to s; the new item's id. */
long long th_new_item(const th_stockd *s, const char *name, long long stock);

/* The stock of item id, as GET /items/{id} on s answers it. */
long long th_item_stock(const th_stockd *s, long long id);

/* Waits until n requests besides the asking one are inside s (between
 * arrival and answer), as its stockd_inflight_requests says: for a test
 * that queues requests in a known order. Fails the test after 10 s. */
void th_wait_inflight(const th_stockd *s, int n);

/* Sends body as POST /orders to s on a thread of its own (bg; join it with
 * th_bg_reduce_join) and returns once s has it, after the `before`
 * requests sent before it (th_wait_inflight): in that order they queue. */
void th_bg_order_queued(const th_stockd *s, th_bg_reduce *bg, const char *body, int before);

#endif
