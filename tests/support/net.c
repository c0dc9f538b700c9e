/* net.c - the sockets and HTTP of the tests (see harness.h): a free port,
 * exchanges made with loadgen's own client, one /metrics value, and raw
 * connections for what a client library would never send. */
#include "tests/support/harness.h"

#include "loadgen/api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

int th_http(const char *method, const char *url, const char *req_body, th_resp *out)
{
    lg_answer_full a;
    lg_err err = {0};
    int rc = lg_api_call(method, url, req_body, &a, &err);
    memset(out, 0, sizeof(*out));
    out->status = a.status;
    out->body = a.body ? a.body : calloc(1, 1);
    out->len = a.len;
    snprintf(out->retry_after, sizeof(out->retry_after), "%s", a.retry_after);
    snprintf(out->content_type, sizeof(out->content_type), "%s", a.content_type);
    snprintf(out->error, sizeof(out->error), "%s", err.msg);
    return rc == LG_OK ? 0 : -1;
}

void th_resp_free(th_resp *r)
{
    free(r->body);
    r->body = NULL;
}

long th_reduce(const char *base_url, long long item, int quantity, int work_ms, char *body,
               size_t size)
{
    char url[256], req[160];
    th_resp r;
    snprintf(url, sizeof(url), "%s/reduceStock", base_url);
    snprintf(req, sizeof(req), "{\"itemId\":%lld,\"quantity\":%d,\"workMs\":%d}", item,
             quantity, work_ms);
    th_http("POST", url, req, &r);
    if (body) /* the answer, or why there was none */
        snprintf(body, size, "%s", r.status == 0 ? r.error : r.body ? r.body : "");
    th_resp_free(&r);
    return r.status;
}

long th_reduce_until_served(const char *base_url, long long item, int within_ms)
{
    long status = 0;
    for (int64_t end = th_now_ms() + within_ms; status != 200 && th_now_ms() < end;
         th_sleep_ms(status == 200 ? 0 : 50))
        status = th_reduce(base_url, item, 1, 0, NULL, 0);
    return status;
}

static void *bg_reduce(void *arg)
{
    th_bg_reduce *b = arg;
    if (b->order == NULL) {
        b->status = th_reduce(b->url, b->item, 1, b->work_ms, b->body, sizeof(b->body));
        return NULL;
    }
    char url[256];
    th_resp r;
    snprintf(url, sizeof(url), "%s/orders", b->url);
    th_http("POST", url, b->order, &r);
    snprintf(b->body, sizeof(b->body), "%s", r.body ? r.body : "");
    b->status = r.status;
    th_resp_free(&r);
    return NULL;
}

void th_bg_reduce_start(th_bg_reduce *b)
{
    b->status = -1;
    b->body[0] = '\0';
    pthread_create(&b->thread, NULL, bg_reduce, b);
}

void th_bg_reduce_join(th_bg_reduce *b) { pthread_join(b->thread, NULL); }

int th_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int th_connect_from(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && (inet_pton(AF_INET, src, &from.sin_addr) != 1 ||
                    bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
                    connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int th_connect_nonblocking(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        close(fd);
        fd = -1;
    }
    return fd;
}

void th_send_all(int fd, const char *data, size_t len)
{
    for (size_t sent = 0; sent < len;) {
        ssize_t n = send(fd, data + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
}

/* Reads into out until stop(out) says a whole answer is in, the peer closes,
 * or timeout_ms passes. */
static int read_until(int fd, char *out, size_t size, int timeout_ms,
                      int (*complete)(const char *buf, size_t len))
{
    struct timeval tv = {0, 50 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t got = 0;
    out[0] = '\0';
    for (int64_t end = th_now_ms() + timeout_ms; got + 1 < size && th_now_ms() < end;) {
        ssize_t n = recv(fd, out + got, size - 1 - got, 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                continue;
            return got ? (int)got : -1;
        }
        got += (size_t)n;
        out[got] = '\0';
        if (complete && complete(out, got))
            break;
    }
    return (int)got;
}

static int response_complete(const char *buf, size_t len)
{
    const char *end = strstr(buf, "\r\n\r\n");
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (end == NULL || cl == NULL || cl > end)
        return end != NULL && cl == NULL;
    return len >= (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
}

int th_exchange(int fd, const char *req, char *out, size_t size, int timeout_ms)
{
    th_send_all(fd, req, strlen(req));
    return read_until(fd, out, size, timeout_ms, response_complete);
}

int th_raw(int port, const char *req, size_t len, int shut_write, char *out, size_t size,
           int timeout_ms)
{
    int fd = th_connect(port);
    if (fd < 0)
        return -1;
    th_send_all(fd, req, len);
    if (shut_write)
        shutdown(fd, SHUT_WR);
    int got = read_until(fd, out, size, timeout_ms, NULL);
    close(fd);
    return got < 0 ? 0 : got;
}

double th_metric(const char *base_url, const char *name)
{
    char url[256], pattern[160];
    th_resp r;
    snprintf(url, sizeof(url), "%s/metrics", base_url);
    snprintf(pattern, sizeof(pattern), "\n%s ", name);
    double v = -1;
    if (th_http("GET", url, NULL, &r) == 0 && r.status == 200) {
        const char *p = strstr(r.body, pattern);
        if (p)
            v = strtod(p + strlen(pattern), NULL);
    }
    th_resp_free(&r);
    return v;
}
