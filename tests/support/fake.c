/* fake.c - the fake stockd of fake.h: one thread accepts, one thread per
 * connection reads a request and answers it in the fake's mode, so every way
 * an answer can arrive (whole, in pieces, chunked, cut, late) is a mode. */
#include "tests/support/fake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Sends n bytes whole, or a few at a time in the dribbling modes, so that
 * the client reads heads and bodies in pieces. */
static int send_all(const th_fake *f, int fd, const char *p, size_t n)
{
    size_t step = f->mode == TH_FAKE_DRIBBLE ? 5 : f->mode == TH_FAKE_SLOW_DRIBBLE ? 1 : n;
    for (size_t at = 0; at < n; at += step) {
        size_t k = n - at < step ? n - at : step;
        if (send(fd, p + at, k, MSG_NOSIGNAL) != (ssize_t)k)
            return -1;
        if (at + k < n)
            sleep_ms(f->mode == TH_FAKE_SLOW_DRIBBLE ? f->delay_ms : 1);
    }
    return 0;
}

/* A chunked answer of body in three chunks (the first with an extension),
 * ended by a trailer; without its last chunk and end when cut. */
static int chunked(char *buf, size_t size, int status, const char *body, int cut)
{
    size_t len = strlen(body), third = len / 3 + 1, used;
    used = (size_t)snprintf(buf, size, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n", status);
    for (size_t at = 0; at < len && used < size; at += third) {
        size_t k = len - at < third ? len - at : third;
        if (cut && at + k >= len)
            break;
        used += (size_t)snprintf(buf + used, size - used, "%zx%s\r\n%.*s\r\n", k,
                                 at ? "" : ";note=first", (int)k, body + at);
    }
    if (!cut && used < size)
        used += (size_t)snprintf(buf + used, size - used, "0\r\nX-Trailer: end\r\n\r\n");
    assert_true(used < size);
    return (int)used;
}

/* Sends an answer in the fake's mode; -1 when the connection is to close. */
static int reply(th_fake *f, int fd, int status, const char *body)
{
    char buf[8192];
    int n;
    if (f->mode == TH_FAKE_CHUNKED)
        n = chunked(buf, sizeof(buf), status, body, 0);
    else if (f->mode == TH_FAKE_CLOSE_DELIMITED)
        n = snprintf(buf, sizeof(buf), "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\n\r\n%s", status, body);
    else
        n = snprintf(buf, sizeof(buf), "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", status, strlen(body), body);
    int rc = send_all(f, fd, buf, (size_t)n);
    return f->mode == TH_FAKE_CLOSE_EACH || f->mode == TH_FAKE_CLOSE_DELIMITED ? -1 : rc;
}

/* In the cutting modes, a committed request's answer breaks off: part of it
 * is sent (so a client can't take the close for an idle connection's, and
 * resend as it may when nothing came back), then the connection closes.
 * TH_FAKE_SILENT_REUSED closes a connection's second request without a byte,
 * TH_FAKE_CUT_REUSED after a part of it.
 * Returns 1 when the answer was cut. */
static int cut(th_fake *f, int fd, int nth_on_conn)
{
    char buf[512];
    const char *part = NULL;
    if (f->mode == TH_FAKE_DROP_FIRST || (f->mode == TH_FAKE_CUT_REUSED && nth_on_conn == 1))
        part = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{";
    else if (f->mode == TH_FAKE_CUT_HEADERS)
        part = "HTTP/1.1 200 OK\r\nContent-Len";
    else if (f->mode == TH_FAKE_CUT_CHUNKED)
        part = chunked(buf, sizeof(buf), 200, "{\"quantity\":1}", 1) ? buf : NULL;
    else if (f->mode == TH_FAKE_SILENT_REUSED && nth_on_conn == 1)
        part = "";
    if (part)
        send(fd, part, strlen(part), MSG_NOSIGNAL);
    return part != NULL;
}

/* Reads one request (headers and Content-Length body) into buf. */
static int read_request(int fd, char *buf, size_t size)
{
    size_t got = 0;
    for (;;) {
        char *end = got ? strstr(buf, "\r\n\r\n") : NULL;
        if (end) {
            const char *cl = strcasestr(buf, "Content-Length:");
            size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
            if (got >= want)
                return 0;
        }
        ssize_t n = recv(fd, buf + got, size - 1 - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        buf[got] = '\0';
    }
}

/* The fake's slot for requestId id: 1 when it is new (and now taken). */
static int take_id(th_fake *f, const char *id, int *slot)
{
    int i;
    for (i = 0; i < f->nids && strcmp(f->ids[i], id) != 0; i++) {
    }
    if (i < f->nids) {
        *slot = i;
        return 0;
    }
    assert_true(i < TH_FAKE_MAX_IDS);
    snprintf(f->ids[f->nids++], sizeof(f->ids[0]), "%s", id);
    *slot = i;
    return 1;
}

/* Commits requestId once (a replay answers the first result); -1 = close. */
static int answer_reduce(th_fake *f, int fd, const char *req, int nth_on_conn)
{
    const char *rid = strstr(req, "\"requestId\":\"");
    const char *q = strstr(req, "\"quantity\":");
    char id[48] = "", body[160];
    if (rid)
        snprintf(id, sizeof(id), "%.*s", (int)strcspn(rid + 13, "\""), rid + 13);
    long long qty = q ? atoll(q + 11) : 1;
    int i;
    pthread_mutex_lock(&f->mu);
    int fresh = take_id(f, id, &i);
    if (fresh)
        f->remaining_at[i] = f->stock -= qty;
    f->commits[i] += fresh;
    long long remaining = f->remaining_at[i];
    pthread_mutex_unlock(&f->mu);
    if (fresh && cut(f, fd, nth_on_conn))
        return -1;
    snprintf(body, sizeof(body), "{\"quantity\":%lld,\"remaining\":%lld,\"replayed\":%s}", qty,
             remaining, fresh ? "false" : "true");
    return reply(f, fd, 200, body);
}

/* The lines of a fresh cart, committed against the one shared stock; the
 * answer repeats them (TH_FAKE_WRONG_LINES drops the last one). Holds f->mu. */
static json_t *commit_cart(th_fake *f, json_t *lines)
{
    json_t *out = json_array();
    size_t n = json_array_size(lines);
    for (size_t k = 0; k < n; k++) {
        json_t *line = json_array_get(lines, k);
        json_int_t item = json_integer_value(json_object_get(line, "itemId"));
        for (size_t j = 0; j < k; j++)
            f->dup_items += item == json_integer_value(
                                        json_object_get(json_array_get(lines, j), "itemId"));
        f->stock -= json_integer_value(json_object_get(line, "quantity"));
        if (f->mode != TH_FAKE_WRONG_LINES || k + 1 < n)
            json_array_append_new(out, json_pack("{s:I, s:O, s:I}", "itemId", item, "quantity",
                                                 json_object_get(line, "quantity"), "remaining",
                                                 (json_int_t)f->stock));
    }
    f->orders++;
    f->order_lines += (int)n;
    return out;
}

/* Commits a cart once per requestId; a replay answers the first body again. */
static int answer_order(th_fake *f, int fd, const char *req, int nth_on_conn)
{
    json_t *root = json_loads(strstr(req, "\r\n\r\n") + 4, 0, NULL);
    pthread_mutex_lock(&f->mu);
    int slot, fresh = take_id(f, json_string_value(json_object_get(root, "requestId")), &slot);
    if (fresh) {
        json_t *out = commit_cart(f, json_object_get(root, "lines"));
        f->commits[slot]++;
        json_t *body = json_pack("{s:I, s:o}", "orderId", (json_int_t)slot + 1, "lines", out);
        f->order_answer[slot] = json_dumps(body, JSON_COMPACT);
        json_decref(body);
    }
    char answer[3072];
    snprintf(answer, sizeof(answer), "%.*s,\"replayed\":%s}",
             (int)strlen(f->order_answer[slot]) - 1, f->order_answer[slot],
             fresh ? "false" : "true");
    pthread_mutex_unlock(&f->mu);
    json_decref(root);
    if (fresh && cut(f, fd, nth_on_conn))
        return -1;
    return reply(f, fd, fresh ? 201 : 200, answer);
}

static int answer(th_fake *f, int fd, const char *req, int nth_on_conn)
{
    pthread_mutex_lock(&f->mu);
    int nth = f->served++;
    pthread_mutex_unlock(&f->mu);
    if (f->delay_ms && f->mode != TH_FAKE_SLOW_DRIBBLE)
        sleep_ms(f->delay_ms);
    if (strncmp(req, "GET ", 4) == 0)
        return reply(f, fd, nth % 2 ? 200 : 503, "{\"status\":\"ok\"}");
    if (strncmp(req, "POST /orders ", 13) == 0 && f->mode != TH_FAKE_GARBAGE)
        return answer_order(f, fd, req, nth_on_conn);
    if (f->mode == TH_FAKE_GARBAGE) {
        const char *bodies[] = {"not json", "{\"quantity\":\"1\"}", "<html>oops</html>"};
        return reply(f, fd, nth % 3 == 2 ? 503 : 200, bodies[nth % 3]);
    }
    return answer_reduce(f, fd, req, nth_on_conn);
}

static void *serve_conn(void *arg)
{
    th_fake *f = ((void **)arg)[0];
    int fd = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    char buf[8192];
    for (int k = 0; read_request(fd, buf, sizeof(buf)) == 0 && answer(f, fd, buf, k) == 0; k++) {
    }
    shutdown(fd, SHUT_RDWR);
    return NULL;
}

static void *accept_loop(void *arg)
{
    th_fake *f = arg;
    for (;;) {
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            return NULL; /* the listening socket was shut down */
        int one = 1;     /* pieces go out as pieces */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        void **a = malloc(2 * sizeof(void *));
        a[0] = f;
        a[1] = (void *)(intptr_t)fd;
        pthread_mutex_lock(&f->mu);
        int k = f->nconns < TH_FAKE_MAX_CONNS ? f->nconns++ : -1;
        if (k >= 0) {
            f->fds[k] = fd;
            pthread_create(&f->threads[k], NULL, serve_conn, a);
        }
        pthread_mutex_unlock(&f->mu);
        if (k < 0) {
            close(fd);
            free(a);
        }
    }
}

th_fake *th_fake_start(int mode, int delay_ms)
{
    th_fake *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->mode = mode;
    f->delay_ms = delay_ms;
    f->stock = 1000000;
    pthread_mutex_init(&f->mu, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 64), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &len);
    f->port = ntohs(a.sin_port);
    pthread_create(&f->acceptor, NULL, accept_loop, f);
    return f;
}

void th_fake_stop(th_fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    pthread_join(f->acceptor, NULL);
    close(f->lfd);
    pthread_mutex_lock(&f->mu);
    int n = f->nconns;
    for (int i = 0; i < n; i++)
        shutdown(f->fds[i], SHUT_RDWR);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n; i++) {
        pthread_join(f->threads[i], NULL);
        close(f->fds[i]);
    }
    pthread_mutex_destroy(&f->mu);
    for (int i = 0; i < f->nids; i++)
        free(f->order_answer[i]);
    free(f);
}
