/* shape.c - the two request shapes: one /reduceStock line sent round robin
 * over the items (as loadgen always did), or a cart of random distinct items
 * for /orders, whose lines the answer must repeat. */
#include "loadgen/shape.h"

#include <stdarg.h>
#include <stdio.h>

#include "loadgen/http.h"

static uint64_t next_rand(uint64_t *s)
{
    /* xorshift64*: quantities and carts need spread, not cryptographic quality */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Uniform in [lo, hi] (modulo bias is irrelevant at these ranges). */
static int uniform(uint64_t *rng, int lo, int hi)
{
    return lo + (int)(next_rand(rng) % (uint64_t)(hi - lo + 1));
}

static int is_cart(const lg_shape *s)
{
    return s->lmax > 0;
}

const char *lg_shape_path(const lg_shape *s)
{
    if (s->api)
        return lg_profile_path(s->api, LG_PROFILE_BUY);
    return is_cart(s) ? "/orders" : "/reduceStock";
}

/* A profile's placeholders for a request: each request is its own buyer. */
static void api_vars(const lg_shape *s, const lg_line *lines, const char *request_id,
                     char *buyer, size_t size, lg_profile_vars *v)
{
    snprintf(buyer, size, "b-%s", request_id ? request_id : "");
    *v = (lg_profile_vars){.item = lines ? &s->api_ids[lines[0].item] : NULL,
                           .quantity = lines ? lines[0].quantity : 0,
                           .request = request_id, .buyer = request_id ? buyer : NULL};
}

int lg_shape_head_varies(const lg_shape *s)
{
    return s->api && lg_profile_head_varies(s->api, LG_PROFILE_BUY);
}

int lg_shape_head(const lg_shape *s, const lg_line *lines, const char *request_id,
                  const char *host, char *buf, size_t size)
{
    if (s->api == NULL)
        return lg_http_head(buf, size, "POST", lg_shape_path(s), host, 1);
    char path[LG_PATH_MAX * 2], headers[LG_PROFILE_HEADERS_MAX], buyer[80];
    lg_profile_vars v;
    api_vars(s, lines, request_id, buyer, sizeof(buyer), &v);
    int json;
    int body = lg_profile_has_body(s->api, LG_PROFILE_BUY, &json);
    if (lg_profile_render(s->api, LG_PROFILE_BUY, LG_PROFILE_PATH, &v, path, sizeof(path)) < 0 ||
        lg_profile_render(s->api, LG_PROFILE_BUY, LG_PROFILE_HEADERS, &v, headers,
                          sizeof(headers)) < 0)
        return -1;
    /* without a body the head still ends with a Content-Length (of 0) */
    return lg_http_head_with(buf, size, lg_profile_method(s->api, LG_PROFILE_BUY), path, host,
                             headers, 1, body && json);
}

int lg_shape_valid(const lg_shape *s)
{
    if (s->item_ids == NULL || s->nitems < 1 || s->nitems > LG_LINE_ITEM_MAX + 1 ||
        s->qmin < 1 || s->qmax < s->qmin)
        return 0;
    if (s->api && (s->api_ids == NULL || is_cart(s)))
        return 0;
    return !is_cart(s) || (s->lmin >= 1 && s->lmax >= s->lmin && s->lmax <= s->nitems &&
                           s->lmax <= LG_ORDER_LINES_MAX);
}

/* An item no line of lines[0..n) has yet: draws until one is new, which ends
 * soon since a cart has at most as many lines as there are items. */
static int new_item(const lg_shape *s, uint64_t *rng, const lg_line *lines, int n)
{
    for (;;) {
        int item = uniform(rng, 0, s->nitems - 1), k = 0;
        while (k < n && (int)lines[k].item != item)
            k++;
        if (k == n)
            return item;
    }
}

int lg_shape_draw(const lg_shape *s, long long ticket, uint64_t *rng, lg_line *lines)
{
    int n = is_cart(s) ? uniform(rng, s->lmin, s->lmax) : 1;
    for (int k = 0; k < n; k++) {
        int item = is_cart(s) ? new_item(s, rng, lines, k) : (int)(ticket % s->nitems);
        lines[k].item = (uint32_t)item;
        lines[k].quantity = uniform(rng, s->qmin, s->qmax);
        lines[k].remaining = -1;
        lines[k].seen = 0;
    }
    return n;
}

/* Appends printf-style text to buf at used; -1 once it no longer fits (and
 * from then on). */
__attribute__((format(printf, 4, 5))) static int append(char *buf, size_t size, int used,
                                                         const char *fmt, ...)
{
    if (used < 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, size - (size_t)used, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size - (size_t)used ? -1 : used + n;
}

int lg_shape_body(const lg_shape *s, const lg_line *lines, int n, const char *request_id,
                  char *buf, size_t size)
{
    int used = 0;
    if (s->api) {
        char buyer[80];
        lg_profile_vars v;
        api_vars(s, lines, request_id, buyer, sizeof(buyer), &v);
        buf[0] = '\0';
        return lg_profile_has_body(s->api, LG_PROFILE_BUY, NULL)
                   ? lg_profile_render(s->api, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, buf, size)
                   : 0;
    }
    if (is_cart(s)) {
        used = append(buf, size, used, "{\"requestId\":\"%s\",\"lines\":[", request_id);
        for (int k = 0; k < n; k++)
            used = append(buf, size, used, "%s{\"itemId\":%lld,\"quantity\":%d}", k ? "," : "",
                          s->item_ids[lines[k].item], (int)lines[k].quantity);
        used = append(buf, size, used, "]");
    } else {
        used = append(buf, size, used, "{\"itemId\":%lld,\"quantity\":%d,\"requestId\":\"%s\"",
                      s->item_ids[lines[0].item], (int)lines[0].quantity, request_id);
    }
    if (s->work_ms > 0)
        used = append(buf, size, used, ",\"workMs\":%d", s->work_ms);
    return append(buf, size, used, "}");
}

/* A /reduceStock answer speaks of its one line. */
static void single_answer(long status, const char *body, size_t len, lg_line *line,
                          lg_answer *out)
{
    lg_answer_parse(status, body, len, out);
    if (out->outcome == LG_OUT_OK && out->quantity != line->quantity) {
        out->outcome = LG_OUT_MALFORMED;
        snprintf(out->why, sizeof(out->why), "200 for quantity %lld, asked %d", out->quantity,
                 (int)line->quantity);
    }
    line->remaining = out->remaining;
}

static void cart_answer(const lg_shape *s, long status, const char *body, size_t len,
                        lg_line *lines, int n, lg_answer *out)
{
    lg_answer_line asked[LG_ORDER_LINES_MAX];
    for (int k = 0; k < n; k++) {
        asked[k].item_id = s->item_ids[lines[k].item];
        asked[k].quantity = lines[k].quantity;
    }
    lg_answer_parse_order(status, body, len, asked, n, out);
    for (int k = 0; k < n; k++)
        lines[k].remaining = asked[k].remaining;
}

/* A profile's answer: its rules decide; an ok deducted what was asked. */
static void api_answer(const lg_shape *s, long status, const char *body, size_t len,
                       lg_line *line, lg_answer *out)
{
    lg_profile_classify(s->api, status, body, len, out);
    if (out->outcome == LG_OUT_OK)
        out->quantity = line->quantity;
    line->remaining = out->outcome == LG_OUT_OK ? out->remaining : -1;
}

void lg_shape_answer(const lg_shape *s, long status, const char *body, size_t len,
                     lg_line *lines, int n, lg_answer *out)
{
    if (s->api)
        api_answer(s, status, body, len, &lines[0], out);
    else if (is_cart(s))
        cart_answer(s, status, body, len, lines, n, out);
    else
        single_answer(status, body, len, &lines[0], out);
}
