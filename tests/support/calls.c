/* calls.c - checked HTTP calls and JSON readers for the integration tests. */
#include "tests/support/calls.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

json_t *th_call(const th_stockd *s, const char *method, const char *path, const char *body,
                long expect)
{
    char url[256];
    th_resp r;
    snprintf(url, sizeof(url), "%s%s", s->url, path);
    th_http(method, url, body, &r);
    if (r.status != expect)
        fail_msg("%s %s %s: status %ld (want %ld) body %s %s", method, path, body ? body : "",
                 r.status, expect, r.body, r.error);
    json_t *j = json_loads(r.body, 0, NULL);
    if (j == NULL && strcmp(method, "HEAD") != 0)
        fail_msg("%s %s: answer is not JSON: %s", method, path, r.body);
    th_resp_free(&r);
    return j;
}

long long th_jint(json_t *j, const char *key)
{
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v))
        fail_msg("no integer \"%s\" in %s", key, json_dumps(j, JSON_COMPACT));
    return json_integer_value(v);
}

const char *th_jstr(json_t *j, const char *key)
{
    const char *v = json_string_value(json_object_get(j, key));
    return v ? v : "";
}

void th_order_body(char *buf, size_t size, const long long *items, const int *qty, int n,
                   const char *rid, int work_ms)
{
    size_t len = (size_t)snprintf(buf, size, "{\"lines\":[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s{\"itemId\":%lld,\"quantity\":%d}",
                                i ? "," : "", items[i], qty[i]);
    len += (size_t)snprintf(buf + len, size - len, "],\"workMs\":%d", work_ms);
    if (rid)
        len += (size_t)snprintf(buf + len, size - len, ",\"requestId\":\"%s\"", rid);
    snprintf(buf + len, size - len, "}");
}

long long th_new_item(const th_stockd *s, const char *name, long long stock)
{
    json_t *body = json_pack("{s:s, s:I}", "name", name, "stock", (json_int_t)stock);
    char *text = json_dumps(body, JSON_COMPACT);
    json_t *j = th_call(s, "POST", "/items", text, 201);
    long long id = th_jint(j, "id");
    json_decref(j);
    json_decref(body);
    free(text);
    return id;
}

long long th_item_stock(const th_stockd *s, long long id)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld?limit=0", id);
    json_t *j = th_call(s, "GET", path, NULL, 200);
    long long stock = th_jint(j, "stock");
    json_decref(j);
    return stock;
}

void th_wait_inflight(const th_stockd *s, int n)
{
    int64_t end = th_now_ms() + 10000;
    double now;
    while ((now = th_metric(s->url, "stockd_inflight_requests")) < n + 1) {
        if (th_now_ms() > end)
            fail_msg("%s: %g requests in flight after 10 s, want %d", s->url, now - 1, n);
        th_sleep_ms(5);
    }
}

void th_bg_order_queued(const th_stockd *s, th_bg_reduce *bg, const char *body, int before)
{
    *bg = (th_bg_reduce){.url = s->url, .order = body};
    th_bg_reduce_start(bg);
    th_wait_inflight(s, before + 1);
}
