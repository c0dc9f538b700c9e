/* test_framing.c - a request's head: its limits (RULE_HEAD_*: what browsers
 * send is taken, one past is 431 with a JSON error), and stockd's framing
 * check against libmicrohttpd itself: for
 * generated shapes of the framing header fields (blanks, case, commas, empty
 * list elements, repeats, folds, bare CRs and LFs, HTTP/1.0), a real stockd
 * is sent the request and a pipelined GET /health on one connection, and
 * what it did must be what the check (called here on the fields as
 * libmicrohttpd hands them, tests/support/fields.h) decided: both requests
 * answered, the body read as libmicrohttpd frames it, or one refusal and the
 * connection closed. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/request.h"
#include "server/rules.h"
#include "tests/support/fields.h"
#include "tests/support/harness.h"

static th_stockd srv;
static char dir[64], db[128];

static int group_setup(void **state)
{
    (void)state;
    const char *flags[] = {"--lock", "atomic", NULL};
    if (th_tempdir("stockd-framing", dir, sizeof(dir)) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    return th_stockd_start(&srv, NULL, db, dir, flags);
}

static int group_teardown(void **state)
{
    (void)state;
    return th_stockd_stop_clean(&srv);
}

#define GET_HEALTH "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

/* The answers on one connection. */
typedef struct answers {
    char raw[8192];
    size_t len;
    int count;      /* complete answers */
    int status[2];  /* of the first two */
    const char *body[2];
    int closed;
} answers;

/* Counts the complete answers in a->raw (each with its Content-Length). */
static void parse_answers(answers *a)
{
    a->count = 0;
    for (const char *p = a->raw; a->count < 2 && (p = strstr(p, "HTTP/1.")) != NULL;) {
        const char *end = strstr(p, "\r\n\r\n"), *cl = strcasestr(p, "\r\nContent-Length:");
        if (end == NULL || cl == NULL || cl > end)
            return;
        size_t n = strtoul(cl + 17, NULL, 10);
        if ((size_t)(end + 4 + n - a->raw) > a->len)
            return;
        a->status[a->count] = atoi(p + 9);
        a->body[a->count++] = end + 4;
        p = end + 4 + n;
    }
}

/* Sends req, then reads until two answers are in, the server closes, or a
 * generous deadline (a request read to the connection's end shows as no
 * answer until the server's request timeout). */
static void exchange(const char *req, size_t len, answers *a)
{
    int fd = th_connect(srv.port);
    assert_true(fd >= 0);
    th_send_all(fd, req, len);
    memset(a, 0, sizeof(*a));
    for (int64_t end = th_now_ms() + 15000 * TH_SLOWER; th_now_ms() < end;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, a->raw + a->len, sizeof(a->raw) - 1 - a->len, 0);
        if (n <= 0) {
            a->closed = n == 0 || errno == ECONNRESET;
            break;
        }
        a->len += (size_t)n;
        a->raw[a->len] = '\0';
        parse_answers(a);
        if (a->count == 2)
            break;
    }
    close(fd);
}

static int failures;

/* One shape: the framing lines (each ending in its own line break), sent in
 * a POST /items with Host first (and keep-alive for HTTP/1.0), a body that
 * any framing leaves something of, then GET /health. */
static void try_shape(const char *lines, int http10)
{
    char block[1024], req[2048], err[256];
    th_field f[TH_FIELDS_MAX];
    if (failures)
        return; /* the first disagreement is enough: each costs a request timeout */
    snprintf(block, sizeof(block), "Host: x\r\n%s%s", http10 ? "Connection: keep-alive\r\n" : "",
             lines);
    int n = th_fields_split(block, strlen(block), f);
    assert_true(n > 0);
    int code = th_fields_check(f, n, http10, err, sizeof(err));
    th_framing mhd = th_fields_mhd(f, n), proxy = th_fields_proxy(block, strlen(block));
    int chunked_body = strcasestr(lines, "encodin") != NULL;
    const char *body = mhd.body == TH_BODY_CHUNKED || (code != REQ_OK && chunked_body)
                           ? "2\r\n{}\r\n0\r\n\r\n"
                       : mhd.body == TH_BODY_LENGTH ? "{}" : "";
    if (code == REQ_OK && mhd.body == TH_BODY_LENGTH && mhd.length != 2)
        fail_msg("shape %s: a length other than 2", lines);
    int len = snprintf(req, sizeof(req), "POST /items HTTP/1.%d\r\n%s\r\n%s" GET_HEALTH,
                       http10 ? 0 : 1, block, body);
    answers a;
    exchange(req, (size_t)len, &a);

    int ok;
    const char *want;
    if (code == REQ_OK) { /* both answered, the body read as libmicrohttpd frames it */
        want = mhd.body == TH_BODY_NONE ? "request body is empty" : "missing field";
        ok = a.count == 2 && a.status[0] == 400 && strstr(a.body[0], want) != NULL &&
             a.status[1] == 200 && strncmp(a.body[1], "{\"status\"", 9) == 0 &&
             (proxy.body == TH_BODY_REFUSED || (proxy.body == mhd.body &&
                                                proxy.length == mhd.length));
    } else { /* one refusal, then closed: ours, or libmicrohttpd's own for a length */
        want = code == REQ_ERR_CODING ? "\"unsupported_transfer_coding\""
               : mhd.body == TH_BODY_REFUSED ? "" : "\"bad_framing\"";
        int status = code == REQ_ERR_CODING ? 501 : 400;
        ok = a.count == 1 && a.closed && strstr(a.body[0], want) != NULL &&
             (a.status[0] == status || (mhd.body == TH_BODY_REFUSED && a.status[0] == 413));
    }
    if (!ok) {
        print_error("shape (HTTP/1.%d): %s\n  check: %d %s\n  libmicrohttpd's framing %d, "
                    "a proxy's %d\n  answers %d, closed %d:\n%s\n", http10 ? 0 : 1, lines, code,
                    code ? err : "", mhd.body, proxy.body, a.count, a.closed, a.raw);
        failures++;
    }
}

static const char *te_names[] = {"Transfer-Encoding", "transfer-encoding", "TRANSFER-ENCODING",
                                 "Transfer-Encoding ", "Transfer-Encoding\t", NULL};
static const char *te_values[] = {
    "chunked", "Chunked", "CHUNKED", "chunked ", "chunked\t", " chunked", "\tchunked",
    "chunked,", ",chunked", ", chunked", "chunked, chunked", "chunked,,", "chunked ,",
    "gzip, chunked", "chunked, gzip", "gzip", "identity", "", "xchunked", "chunked\x0b",
    "chunked;q=1", NULL};
static const char *cl_names[] = {"Content-Length", "content-length", "CONTENT-LENGTH",
                                 "Content-Length ", NULL};
static const char *cl_values[] = {"2", "02", " 2", "\t2", "2 ", "2\t", "+2", "-2", "2,2",
                                  "2, 2", "", "0x2", "2\x0b", NULL};
/* repeats, both fields, folds, line ends */
static const char *more_shapes[] = {
    "Content-Length: 2\r\nContent-Length: 2\r\n",
    "Content-Length: 2\r\nContent-Length: 3\r\n",
    "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: \r\n",
    "Transfer-Encoding:\r\n chunked\r\n",
    "Transfer-Encoding: chunked\r\n x\r\n",
    "Transfer-Encoding: x\r\n\tchunked\r\n",
    "Transfer-Encodin: chunked\r\n g\r\n",
    "Content-Length:\r\n 2\r\n",
    "Content-Length: 2\r\n 0\r\n",
    "Content-Lengt: 2\r\n h\r\n",
    "X-A: x\r\n y\r\nContent-Length: 2\r\n",
    "X-A: x\r\n Transfer-Encoding: chunked\r\n",
    "X-A: a\rContent-Length: 2\r\n",
    "X-A: a\rTransfer-Encoding: chunked\r\n",
    "Content-Length: 2\n",
    "Transfer-Encoding: chunked\n",
    "X-A: a\nContent-Length: 2\r\n",
    "Content-Length2: 2\r\n",
    "Transfer-Encoding-X: chunked\r\n",
    "X-Transfer-Encoding: chunked\r\n",
    "Content-Length: 2\r\nX-Pad: \t \r\n",
    NULL};

static void shapes_in_both_versions(const char *lines)
{
    try_shape(lines, 0);
    try_shape(lines, 1);
}

static void test_the_check_and_libmicrohttpd_read_every_shape_alike(void **state)
{
    (void)state;
    char lines[256];
    int shapes = 0;
    for (int i = 0; te_names[i]; i++)
        for (int j = 0; te_values[j]; j++, shapes++) {
            snprintf(lines, sizeof(lines), "%s: %s\r\n", te_names[i], te_values[j]);
            shapes_in_both_versions(lines);
            if (i == 0) { /* and with no blank after the colon */
                snprintf(lines, sizeof(lines), "%s:%s\r\n", te_names[i], te_values[j]);
                shapes_in_both_versions(lines);
            }
        }
    for (int i = 0; cl_names[i]; i++)
        for (int j = 0; cl_values[j]; j++, shapes++) {
            snprintf(lines, sizeof(lines), "%s: %s\r\n", cl_names[i], cl_values[j]);
            shapes_in_both_versions(lines);
        }
    for (int i = 0; more_shapes[i]; i++, shapes++)
        shapes_in_both_versions(more_shapes[i]);
    shapes_in_both_versions(""); /* no framing at all */
    printf("%d shapes, each in HTTP/1.1 and HTTP/1.0\n", shapes + 1);
    assert_int_equal(failures, 0);
}

/* The case that was found: a trailing blank after chunked. Before, the check
 * trimmed it and libmicrohttpd read to the connection's end: the pipelined
 * GET was swallowed and nothing answered for the request timeout. */
static void test_chunked_with_a_trailing_blank_is_refused_at_once(void **state)
{
    (void)state;
    const char *req = "POST /items HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked \r\n\r\n"
                      "2\r\n{}\r\n0\r\n\r\n" GET_HEALTH;
    answers a;
    int64_t t0 = th_now_ms();
    exchange(req, strlen(req), &a);
    assert_int_equal(a.count, 1);
    assert_int_equal(a.status[0], 400);
    assert_non_null(strstr(a.body[0], "\"bad_framing\""));
    assert_true(a.closed);
    assert_true(th_now_ms() - t0 < 5000 * TH_SLOWER); /* not the request timeout: a hang */
}

/* A GET /health whose head is the request line, Host and extra (with its
 * line ends), then a pipelined GET /health, into req (freed by the caller). */
static size_t head_request(const char *extra, char **req)
{
    size_t n = strlen(extra) + 256;
    *req = malloc(n);
    assert_non_null(*req);
    return (size_t)snprintf(*req, n, "GET /health HTTP/1.1\r\nHost: x\r\n%s\r\n" GET_HEALTH,
                            extra);
}

/* fields header fields (with Host) filling a head of about size bytes. */
static char *fields_of(int fields, size_t size)
{
    char *s = calloc(1, size + 1024);
    size_t each = (size - 40) / (size_t)(fields - 1), used = 0;
    assert_non_null(s);
    for (int i = 0; i < fields - 1; i++)
        used += (size_t)sprintf(s + used, "X-F%03d: %0*d\r\n", i, (int)(each - 10), i);
    return s;
}

static void expect_answered(const char *extra, const char *what)
{
    char *req;
    size_t len = head_request(extra, &req);
    answers a;
    exchange(req, len, &a);
    free(req);
    if (a.count != 2 || a.status[0] != 200 || a.status[1] != 200)
        fail_msg("%s: %d answers, %d then %d, closed %d:\n%.300s", what, a.count, a.status[0],
                 a.status[1], a.closed, a.raw);
}

static void expect_431(const char *extra, const char *what, const char *why)
{
    char *req;
    size_t len = head_request(extra, &req);
    answers a;
    exchange(req, len, &a);
    free(req);
    if (a.count != 1 || a.status[0] != 431 || !a.closed ||
        strstr(a.body[0], "{\"error\":\"headers_too_large\"") != a.body[0] ||
        strstr(a.body[0], why) == NULL)
        fail_msg("%s: %d answers, the first %d, closed %d:\n%.300s", what, a.count, a.status[0],
                 a.closed, a.raw);
}

/* A browser's 4 KiB cookie (100 pairs) with a 1.5 KiB bearer token, 100
 * small fields, a 16 KiB head of 100 fields, an 8 KiB line: each answered,
 * and the connection kept for the next request. */
static void test_heads_as_browsers_send_them_are_answered(void **state)
{
    (void)state;
    char *extra = malloc(8192);
    size_t n = (size_t)sprintf(extra, "Cookie: ");
    for (int i = 0; i < 100; i++)
        n += (size_t)sprintf(extra + n, "%scookie%02d=%030d", i ? "; " : "", i, i);
    n += (size_t)sprintf(extra + n, "\r\nAuthorization: Bearer ");
    memset(extra + n, 't', 1536);
    strcpy(extra + n + 1536, "\r\n");
    assert_true(strlen(extra) > 4096 + 1536);
    expect_answered(extra, "a 4 KiB cookie and a 1.5 KiB bearer token");
    free(extra);

    char *many = fields_of(RULE_HEAD_FIELDS_MAX, 3000);
    expect_answered(many, "100 small fields");
    free(many);
    many = fields_of(RULE_HEAD_FIELDS_MAX, RULE_HEAD_MAX - 200);
    expect_answered(many, "a 16 KiB head of 100 fields");
    free(many);

    char *line = calloc(1, RULE_HEAD_LINE_MAX + 16);
    sprintf(line, "X-Line: %0*d\r\n", RULE_HEAD_LINE_MAX - 8, 7);
    expect_answered(line, "an 8 KiB line");
    free(line);
}

/* One field, one byte of a line, 1 KiB of head past the limits: 431 with a
 * JSON error that says which, and the connection closed. */
static void test_heads_past_their_limits_get_431_with_json(void **state)
{
    (void)state;
    char *many = fields_of(RULE_HEAD_FIELDS_MAX + 1, 3000);
    expect_431(many, "101 fields", "101 header fields");
    free(many);

    char *line = calloc(1, 10 * 1024);
    sprintf(line, "X-Line: %0*d\r\n", 9 * 1024 - 8, 7);
    expect_431(line, "a 9 KiB line", "'X-Line' is a line of 9216 bytes");
    free(line);

    char *big = calloc(1, 18 * 1024);
    for (int i = 0; i < 3; i++)
        sprintf(big + strlen(big), "X-Big%d: %0*d\r\n", i, 17 * 1024 / 3, i);
    expect_431(big, "a 17 KiB head", "request headers of");
    free(big);
}

/* extra: three padding fields making the head (request line, Host, them,
 * the blank line) exactly size bytes. */
static char *head_of(size_t size)
{
    const size_t fixed = strlen("GET /health HTTP/1.1\r\nHost: x\r\n\r\n") + 3 * 10;
    char *s = calloc(1, size + 64);
    assert_non_null(s);
    size_t v = (size - fixed) / 3;
    sprintf(s, "X-Pad1: %0*d\r\nX-Pad2: %0*d\r\nX-Pad3: %0*d\r\n", (int)v, 1, (int)v, 2,
            (int)(size - fixed - 2 * v), 3);
    return s;
}

/* The limits are "at most": a head of exactly RULE_HEAD_MAX bytes and a line
 * of exactly RULE_HEAD_LINE_MAX are answered, one byte more gets 431. */
static void test_the_head_limits_hold_to_the_byte(void **state)
{
    (void)state;
    char *head = head_of(RULE_HEAD_MAX);
    expect_answered(head, "a head of exactly RULE_HEAD_MAX bytes");
    free(head);
    head = head_of(RULE_HEAD_MAX + 1);
    expect_431(head, "a head one byte over", "request headers of");
    free(head);
    char *line = calloc(1, RULE_HEAD_LINE_MAX + 16);
    sprintf(line, "X-Line: %0*d\r\n", RULE_HEAD_LINE_MAX - 8 + 1, 7);
    expect_431(line, "a line one byte over", "'X-Line' is a line of");
    free(line);
}

/* Past 1024 open connections (http.c's KEEPALIVE_OPEN_MAX) an answer
 * closes its connection: kept alive, libmicrohttpd would zero its 32 KiB for
 * the next request, and a flash sale's 10,000 answered buyers would hold
 * 320 MiB. Below it, connections are kept. */
static void test_past_1024_connections_an_answer_closes_its_connection(void **state)
{
    (void)state;
    enum { IDLE = 1040 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max < IDLE + 64)
        th_skip("the open-files limit (%lu) is below %d", (unsigned long)rl.rlim_max, IDLE + 64);
    if (rl.rlim_cur < IDLE + 64) {
        rl.rlim_cur = IDLE + 64;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    th_stockd many;
    const char *flags[] = {"--lock", "atomic", "--max-connections-per-ip", "0", NULL};
    assert_int_equal(th_stockd_start(&many, NULL, db, dir, flags), 0);
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char out[2048];
    int fd = th_connect(many.port);
    assert_true(th_exchange(fd, get, out, sizeof(out), 10000 * TH_SLOWER) > 0);
    assert_null(strstr(out, "Connection: close")); /* few open: kept */
    close(fd);

    static int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        assert_true((idle[i] = th_connect(many.port)) >= 0);
    int closed = 0;
    for (int64_t end = th_now_ms() + 20000 * TH_SLOWER; !closed && th_now_ms() < end;) {
        fd = th_connect(many.port); /* until the replica has taken them all */
        assert_true(th_exchange(fd, get, out, sizeof(out), 10000 * TH_SLOWER) > 0);
        assert_non_null(strstr(out, "HTTP/1.1 200 "));
        closed = strstr(out, "Connection: close") != NULL;
        if (closed) /* and it closes: the next read finds the end */
            assert_int_equal(th_exchange(fd, get, out, sizeof(out), 10000 * TH_SLOWER), 0);
        close(fd);
    }
    assert_true(closed);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    assert_int_equal(th_stockd_stop_clean(&many), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_check_and_libmicrohttpd_read_every_shape_alike),
        cmocka_unit_test(test_chunked_with_a_trailing_blank_is_refused_at_once),
        cmocka_unit_test(test_heads_as_browsers_send_them_are_answered),
        cmocka_unit_test(test_heads_past_their_limits_get_431_with_json),
        cmocka_unit_test(test_the_head_limits_hold_to_the_byte),
        cmocka_unit_test(test_past_1024_connections_an_answer_closes_its_connection),
    };
    return cmocka_run_group_tests_name("framing", tests, group_setup, group_teardown);
}
