/* http.c - HTTP/1.1 for loadgen's client: URLs to addresses, request heads,
 * and answers through http_parser's callbacks, which only copy what the
 * caller keeps (the body, two headers) and stop the parser at the end of the
 * answer, so bytes after it are never taken for part of it. */
#include "loadgen/http.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { HDR_NONE, HDR_RETRY_AFTER, HDR_CONTENT_TYPE };

/* Splits "host[:port]" (host possibly "[v6]") at hostport into name and port. */
static int split_host(const char *hostport, size_t len, char *name, size_t nsize, char *port,
                      size_t psize, const char *default_port)
{
    const char *colon;
    const char *end = hostport + len;
    if (len > 0 && hostport[0] == '[') {
        const char *close = memchr(hostport, ']', len);
        if (close == NULL || (close + 1 < end && close[1] != ':'))
            return -1;
        snprintf(name, nsize, "%.*s", (int)(close - hostport - 1), hostport + 1);
        colon = close + 1 < end ? close + 1 : NULL;
    } else {
        colon = memchr(hostport, ':', len);
        snprintf(name, nsize, "%.*s", (int)((colon ? colon : end) - hostport), hostport);
    }
    if (colon == NULL || colon + 1 == end) {
        snprintf(port, psize, "%s", default_port);
        return name[0] ? 0 : -1;
    }
    size_t plen = (size_t)(end - colon - 1);
    if (plen >= psize || strspn(colon + 1, "0123456789") < plen)
        return -1;
    snprintf(port, psize, "%.*s", (int)plen, colon + 1);
    return name[0] ? 0 : -1;
}

size_t lg_http_scheme(const char *url)
{
    return strncmp(url, "http://", 7) == 0 ? 7 : strncmp(url, "https://", 8) == 0 ? 8 : 0;
}

int lg_http_resolve(const char *url, lg_http_addr *a, const char **path, lg_err *err)
{
    char port[8];
    memset(a, 0, sizeof(*a));
    size_t scheme = lg_http_scheme(url);
    if (scheme == 0)
        return lg_errf(err, LG_ERR_USAGE, "%s: not an http:// or https:// URL", url);
    a->tls = scheme == sizeof("https://") - 1;
    const char *hostport = url + scheme, *name = a->name;
    size_t len = strcspn(hostport, "/");
    if (path)
        *path = hostport + len;
    if (len >= sizeof(a->host) || split_host(hostport, len, a->name, sizeof(a->name), port,
                                             sizeof(port), a->tls ? "443" : "80") != 0)
        return lg_errf(err, LG_ERR_USAGE, "%s: expected http[s]://host[:port]", url);
    snprintf(a->host, sizeof(a->host), "%.*s", (int)len, hostport);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(name, port, &hints, &res);
    if (rc != 0)
        return lg_errf(err, LG_ERR_TRANSPORT, "%s: cannot resolve %s: %s", url, name,
                       gai_strerror(rc));
    for (struct addrinfo *ai = res; ai && a->n < LG_HTTP_ADDRS; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(a->sa[0]))
            continue;
        memcpy(&a->sa[a->n], ai->ai_addr, ai->ai_addrlen);
        a->salen[a->n++] = ai->ai_addrlen;
    }
    freeaddrinfo(res);
    if (a->n == 0)
        return lg_errf(err, LG_ERR_TRANSPORT, "%s: %s has no usable address", url, name);
    return LG_OK;
}

/* "Authorization: Bearer ...\r\n", or "": set once, before threads, and
 * read-only afterwards (lg_http_set_token). */
static char bearer[LG_TOKEN_MAX + 32];

void lg_http_set_token(const char *token)
{
    if (token[0])
        snprintf(bearer, sizeof(bearer), "Authorization: Bearer %.*s\r\n", LG_TOKEN_MAX, token);
    else
        bearer[0] = '\0';
}

int lg_http_head(char *buf, size_t size, const char *method, const char *path, const char *host,
                 int with_body)
{
    return lg_http_head_with(buf, size, method, path, host, "", with_body, 1);
}

int lg_http_head_with(char *buf, size_t size, const char *method, const char *path,
                      const char *host, const char *extra, int with_body, int json)
{
    /* no Accept, no User-Agent: wrk sends none either, and stockd reads none */
    int n = snprintf(buf, size, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s%s%s", method,
                     path[0] ? path : "/", host, bearer, extra,
                     with_body && json ? "Content-Type: application/json\r\n" : "",
                     with_body ? "Content-Length: " : "\r\n");
    return n < 0 || (size_t)n >= size ? -1 : n;
}

size_t lg_http_head_end(char *p, size_t body_len)
{
    char digits[24];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + body_len % 10);
        body_len /= 10;
    } while (body_len);
    for (size_t i = 0; i < n; i++)
        p[i] = digits[n - 1 - i];
    memcpy(p + n, "\r\n\r\n", 4);
    return n + 4;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    lg_http_resp *r = p->data;
    size_t keep = r->max - r->len < len ? r->max - r->len : len;
    if (keep < len)
        r->truncated = 1;
    if (keep == 0)
        return 0;
    if (r->len + keep + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + keep + 1)
            cap *= 2;
        char *grown = realloc(r->body, cap);
        if (grown == NULL) {
            r->truncated = 1; /* an answer we could not keep is as good as cut */
            return 0;
        }
        r->body = grown;
        r->cap = cap;
    }
    memcpy(r->body + r->len, at, keep);
    r->len += keep;
    r->body[r->len] = '\0';
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    lg_http_resp *r = p->data;
    size_t have = r->in_value ? 0 : strlen(r->field);
    r->in_value = 0;
    snprintf(r->field + have, sizeof(r->field) - have, "%.*s", (int)len, at);
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    lg_http_resp *r = p->data;
    if (!r->in_value) {
        r->in_value = 1;
        r->header = strcasecmp(r->field, "Retry-After") == 0    ? HDR_RETRY_AFTER
                    : strcasecmp(r->field, "Content-Type") == 0 ? HDR_CONTENT_TYPE
                                                                : HDR_NONE;
        if (r->header == HDR_RETRY_AFTER)
            r->retry_after[0] = '\0';
        if (r->header == HDR_CONTENT_TYPE)
            r->content_type[0] = '\0';
        r->field[0] = '\0';
    }
    char *dst = r->header == HDR_RETRY_AFTER    ? r->retry_after
                : r->header == HDR_CONTENT_TYPE ? r->content_type
                                                : NULL;
    size_t size = r->header == HDR_RETRY_AFTER ? sizeof(r->retry_after) : sizeof(r->content_type);
    if (dst) {
        size_t have = strlen(dst);
        snprintf(dst + have, size - have, "%.*s", (int)len, at);
    }
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    lg_http_resp *r = p->data;
    r->in_value = 0;
    r->field[0] = '\0';
    return r->head ? 1 : 0; /* 1: no body follows, whatever Content-Length says */
}

static int on_message_complete(http_parser *p)
{
    lg_http_resp *r = p->data;
    if (p->status_code >= 100 && p->status_code < 200 && p->status_code != 101) {
        r->len = 0; /* an interim answer (100 Continue): the real one follows */
        return 0;
    }
    r->done = 1;
    r->status = (int)p->status_code;
    r->keep_alive = http_should_keep_alive(p);
    http_parser_pause(p, 1); /* whatever follows is not this answer's */
    return 0;
}

static const http_parser_settings body_only = {
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static const http_parser_settings with_headers = {
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void lg_http_resp_init(lg_http_resp *r, size_t max, int keep_headers)
{
    memset(r, 0, sizeof(*r));
    r->max = max;
    r->keep_headers = keep_headers;
    lg_http_resp_reset(r);
}

void lg_http_resp_reset(lg_http_resp *r)
{
    http_parser_init(&r->parser, HTTP_RESPONSE);
    r->parser.data = r;
    r->status = r->done = r->keep_alive = r->truncated = r->in_value = 0;
    r->got = r->len = 0;
    r->field[0] = r->retry_after[0] = r->content_type[0] = r->why[0] = '\0';
}

void lg_http_resp_free(lg_http_resp *r)
{
    free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
}

int lg_http_feed(lg_http_resp *r, const char *data, size_t n, size_t *used)
{
    /* HEAD needs on_headers_complete, so it takes the header-keeping settings */
    const http_parser_settings *s = r->keep_headers || r->head ? &with_headers : &body_only;
    size_t took = http_parser_execute(&r->parser, s, data, n);
    r->got += took;
    *used = took;
    if (r->done)
        return 1;
    enum http_errno e = HTTP_PARSER_ERRNO(&r->parser);
    if (n == 0 && (e == HPE_OK || e == HPE_INVALID_EOF_STATE)) {
        if (r->got)
            snprintf(r->why, sizeof(r->why),
                     "the connection closed after %zu bytes of the answer, before its end", r->got);
        else
            snprintf(r->why, sizeof(r->why), "the connection closed before an answer");
        return -1;
    }
    if (e != HPE_OK || took != n) {
        snprintf(r->why, sizeof(r->why), "not an HTTP answer: %s", http_errno_description(e));
        return -1;
    }
    return 0;
}
