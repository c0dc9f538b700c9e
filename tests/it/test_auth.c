/* test_auth.c - stockd's API tokens (--api-tokens-file): each role's routes,
 * 401 with WWW-Authenticate and 403 as JSON errors, tokens given as
 * themselves or as sha256:HEX, comments, a buyer role left open while the
 * operator's is closed, a file that does not parse, SIGHUP rotating tokens
 * while keep-alive requests run, no token in any log line, and loadgen's
 * --token-file on its set-up, load and read-back. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <gnutls/crypto.h>

#include "tests/support/harness.h"

/* Tokens of the tests' files; each must never reach a log line. */
#define OPERATOR "op-9f1c2b7e4d5a6c3b"
#define BUYER "buyer-1e2d3c4b5a69788f" /* in the file as sha256:HEX only */
#define SCRAPE "scrape-7a6b5c4d3e2f1a0b"
#define ROTATED "buyer-rotated-0c1d2e3f4a5b"
#define UNKNOWN "nobody-0000000000000000"
#define FLAGS "--lock", "atomic", "--log-level", "debug"

static char dir[64], db[128];

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("stockd-tokens", dir, sizeof(dir)) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    return 0;
}

/* "sha256:" and the hex digest of token, into buf (72 bytes). */
static const char *sha256_line(const char *token, char *buf)
{
    unsigned char d[32];
    assert_int_equal(gnutls_hash_fast(GNUTLS_DIG_SHA256, token, strlen(token), d), 0);
    int n = sprintf(buf, "sha256:");
    for (int i = 0; i < 32; i++)
        n += sprintf(buf + n, "%02x", d[i]);
    return buf;
}

/* Writes text as dir/name whole (a temp file renamed over it, as an operator's
 * tools would), and returns the path. */
static const char *write_file(const char *name, const char *text)
{
    static char path[160];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(th_replace_file(path, text), 0);
    return path;
}

/* The usual file: one token of each role, the buyer's hashed, with comments
 * and blank lines between. */
static const char *write_tokens(const char *name, const char *buyer)
{
    char text[1024], hex[80];
    snprintf(text, sizeof(text), "# who may do what\n\noperator ops %s\n"
             "buyer shop %s   # hashed: the file holds no secret\n"
             "   \t\nscrape prometheus %s\n", OPERATOR, sha256_line(buyer, hex), SCRAPE);
    return write_file(name, text);
}

static void start(th_stockd *s, const char *tokens_file)
{
    const char *flags[] = {FLAGS, tokens_file ? "--api-tokens-file" : NULL, tokens_file, NULL};
    assert_int_equal(th_stockd_start(s, NULL, db, dir, flags), 0);
}

/* The request's head (and body) with token as a bearer token (NULL: no
 * Authorization header), into buf. */
static const char *request(char *buf, size_t size, const char *method, const char *path,
                           const char *token, const char *body, int keep_alive)
{
    char auth[160] = "";
    if (token)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
    snprintf(buf, size, "%s %s HTTP/1.1\r\nHost: t\r\n%s%sContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", method, path, auth,
             keep_alive ? "" : "Connection: close\r\n", body ? strlen(body) : 0,
             body ? body : "");
    return buf;
}

static int status_of(const char *answer)
{
    int status = 0;
    return sscanf(answer, "HTTP/1.1 %d", &status) == 1 ? status : 0;
}

/* One request on a connection of its own; its status, the answer in out. */
static int call(const th_stockd *s, const char *method, const char *path, const char *token,
                const char *body, char *out, size_t size)
{
    char req[1024];
    request(req, sizeof(req), method, path, token, body, 0);
    assert_true(th_raw(s->port, req, strlen(req), 0, out, size, 10000) > 0);
    return status_of(out);
}

/* call, failing the test unless the status is expect. */
static void expect(const th_stockd *s, const char *method, const char *path, const char *token,
                   const char *body, int status)
{
    char out[4096];
    if (call(s, method, path, token, body, out, sizeof(out)) != status)
        fail_msg("%s %s with %s: want %d, got:\n%s", method, path, token ? token : "no token",
                 status, out);
}

/* The JSON body of an answer. */
static json_t *body_of(const char *answer)
{
    const char *p = strstr(answer, "\r\n\r\n");
    assert_non_null(p);
    json_t *j = json_loads(p + 4, 0, NULL);
    assert_non_null(j);
    return j;
}

static void assert_error(const char *answer, int status, const char *code)
{
    assert_int_equal(status_of(answer), status);
    json_t *j = body_of(answer);
    assert_string_equal(json_string_value(json_object_get(j, "error")), code);
    assert_non_null(json_string_value(json_object_get(j, "message")));
    json_decref(j);
}

static void assert_no_token_logged(const th_stockd *s)
{
    const char *tokens[] = {OPERATOR, BUYER, SCRAPE, ROTATED, UNKNOWN};
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
        if (th_count_in_file(s->log, tokens[i]) != 0)
            fail_msg("token %s is in the log %s", tokens[i], s->log);
}

/* Waits (10 s at most) until the log has n lines with text. */
static void wait_logged(const th_stockd *s, const char *text, int n)
{
    int64_t end = th_now_ms() + 10000 * TH_SLOWER;
    while (th_count_in_file(s->log, text) < n) {
        if (th_now_ms() > end)
            fail_msg("no %d lines \"%s\" in %s", n, text, s->log);
        th_sleep_ms(20);
    }
}

static void test_without_a_file_every_route_is_open_and_the_start_says_so(void **state)
{
    (void)state;
    th_stockd s;
    start(&s, NULL);
    expect(&s, "POST", "/items", NULL, "{\"name\":\"open\",\"stock\":3}", 201);
    expect(&s, "PUT", "/items/1", NULL, "{\"stock\":4}", 200);
    expect(&s, "GET", "/metrics", NULL, NULL, 200);
    assert_int_equal(th_count_in_file(s.log, "anyone who reaches this port can change stock"), 1);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

static void test_each_role_reaches_its_routes_and_no_others(void **state)
{
    (void)state;
    th_stockd s;
    char out[4096];
    start(&s, write_tokens("roles", BUYER));
    expect(&s, "POST", "/items", OPERATOR, "{\"name\":\"a\",\"stock\":5}", 201);
    expect(&s, "PUT", "/items/1", OPERATOR, "{\"stock\":6}", 200);
    expect(&s, "POST", "/reduceStock", BUYER, "{\"itemId\":1,\"quantity\":1}", 200);
    expect(&s, "POST", "/reduceStock", OPERATOR, "{\"itemId\":1,\"quantity\":1}", 200);
    expect(&s, "POST", "/orders", BUYER, "{\"lines\":[{\"itemId\":1,\"quantity\":1}]}", 201);
    expect(&s, "GET", "/items/1", BUYER, NULL, 200);
    expect(&s, "GET", "/orders/1", BUYER, NULL, 200);
    expect(&s, "GET", "/metrics", SCRAPE, NULL, 200);
    expect(&s, "GET", "/health", NULL, NULL, 200);
    /* a known token without the role: 403, as JSON */
    call(&s, "POST", "/items", BUYER, "{\"name\":\"b\",\"stock\":1}", out, sizeof(out));
    assert_error(out, 403, "forbidden");
    call(&s, "PUT", "/items/1", SCRAPE, "{\"stock\":0}", out, sizeof(out));
    assert_error(out, 403, "forbidden");
    expect(&s, "POST", "/reduceStock", SCRAPE, "{\"itemId\":1,\"quantity\":1}", 403);
    expect(&s, "GET", "/metrics", BUYER, NULL, 403);
    expect(&s, "GET", "/metrics", OPERATOR, NULL, 403);
    /* the scheme is case-insensitive (RFC 7235) */
    char req[1024];
    snprintf(req, sizeof(req), "GET /items HTTP/1.1\r\nHost: t\r\nAuthorization: bEaReR   %s\r\n"
             "Connection: close\r\n\r\n", BUYER);
    assert_true(th_raw(s.port, req, strlen(req), 0, out, sizeof(out), 10000) > 0);
    assert_int_equal(status_of(out), 200);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

static void test_missing_or_unknown_tokens_get_401_with_a_bearer_challenge(void **state)
{
    (void)state;
    th_stockd s;
    char out[4096];
    start(&s, write_tokens("401", BUYER));
    call(&s, "POST", "/items", NULL, "{\"name\":\"a\",\"stock\":5}", out, sizeof(out));
    assert_error(out, 401, "unauthorized");
    assert_non_null(strstr(out, "\r\nWWW-Authenticate: Bearer realm=\"stockd\"\r\n"));
    call(&s, "PUT", "/items/1", UNKNOWN, "{\"stock\":0}", out, sizeof(out));
    assert_error(out, 401, "unauthorized");
    assert_non_null(strstr(out, "WWW-Authenticate: Bearer realm=\"stockd\", "
                                "error=\"invalid_token\"\r\n"));
    assert_null(strstr(out, UNKNOWN)); /* not echoed */
    call(&s, "POST", "/reduceStock", NULL, "{\"itemId\":1,\"quantity\":1}", out, sizeof(out));
    assert_error(out, 401, "unauthorized");
    expect(&s, "GET", "/items", NULL, NULL, 401);
    expect(&s, "GET", "/metrics", NULL, NULL, 401);
    expect(&s, "GET", "/items", "", NULL, 401); /* "Bearer " with nothing after it */
    expect(&s, "GET", "/items", "sha256:" BUYER, NULL, 401); /* a file's form is no token */
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* Behind a shop front: the catalog is closed, buying and reading are open. */
static void test_operator_lines_alone_close_the_catalog_and_leave_buying_open(void **state)
{
    (void)state;
    th_stockd s;
    char text[256];
    snprintf(text, sizeof(text), "operator ops %s\n", OPERATOR);
    start(&s, write_file("shopfront", text));
    expect(&s, "POST", "/items", NULL, "{\"name\":\"a\",\"stock\":5}", 401);
    expect(&s, "PUT", "/items/1", BUYER, "{\"stock\":0}", 401);
    expect(&s, "POST", "/items", OPERATOR, "{\"name\":\"a\",\"stock\":5}", 201);
    expect(&s, "POST", "/reduceStock", NULL, "{\"itemId\":1,\"quantity\":1}", 200);
    expect(&s, "POST", "/reduceStock", UNKNOWN, "{\"itemId\":1,\"quantity\":1}", 200);
    expect(&s, "GET", "/items/1", NULL, NULL, 200);
    expect(&s, "GET", "/metrics", NULL, NULL, 200);
    assert_int_equal(th_count_in_file(s.log, "openRoles=buyer,scrape"), 1);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* ---- every route, both ways ---- */

/* A route and the role it needs: written here apart from server/route.c, so
 * that a role changed there is caught here. */
struct route_case {
    const char *method, *path, *body;
    int need; /* an index of ROLE_* below, or ROLE_OPEN */
};

enum { ROLE_BUYER, ROLE_OPERATOR, ROLE_SCRAPE, ROLE_COUNT, ROLE_OPEN = ROLE_COUNT };

static const struct route_case routes[] = {
    {"POST", "/reduceStock", "{\"itemId\":1,\"quantity\":1}", ROLE_BUYER},
    {"GET", "/items", NULL, ROLE_BUYER},
    {"HEAD", "/items", NULL, ROLE_BUYER},
    {"POST", "/items", "{\"name\":\"m\",\"stock\":50}", ROLE_OPERATOR},
    {"GET", "/items/1", NULL, ROLE_BUYER},
    {"HEAD", "/items/1", NULL, ROLE_BUYER},
    {"PUT", "/items/1", "{\"stock\":50}", ROLE_OPERATOR},
    {"POST", "/orders", "{\"lines\":[{\"itemId\":1,\"quantity\":1}]}", ROLE_BUYER},
    {"GET", "/orders/1", NULL, ROLE_BUYER},
    {"HEAD", "/orders/1", NULL, ROLE_BUYER},
    {"GET", "/health", NULL, ROLE_OPEN},
    {"HEAD", "/health", NULL, ROLE_OPEN},
    {"GET", "/metrics", NULL, ROLE_SCRAPE},
    {"HEAD", "/metrics", NULL, ROLE_SCRAPE},
};

static const char *const role_token[ROLE_COUNT] = {BUYER, OPERATOR, SCRAPE};
static const char *const role_line[ROLE_COUNT] = {"buyer shop", "operator ops", "scrape prometheus"};

/* What auth.h promises: with a file, operator's routes are always closed,
 * buyer's and scrape's once the file has a line of theirs; an operator's
 * token reaches the buyer's routes too. tok is a ROLE_* or -1 (no token);
 * a token whose role has no line is no token of the file's. 0: served. */
static int expected_status(const int *in_file, int need, int tok)
{
    int closed = need == ROLE_OPEN ? 0 : need == ROLE_OPERATOR ? 1 : in_file[need];
    if (!closed)
        return 0;
    if (tok < 0 || !in_file[tok])
        return 401;
    return tok == need || (tok == ROLE_OPERATOR && need == ROLE_BUYER) ? 0 : 403;
}

/* Every route with no token and with each role's token, against a file
 * with a line for the roles in_file has. */
static void check_every_route(const int *in_file)
{
    char text[1024] = "# roles under test\n", hex[80], out[4096];
    for (int r = 0; r < ROLE_COUNT; r++)
        if (in_file[r]) {
            size_t n = strlen(text);
            snprintf(text + n, sizeof(text) - n, "%s %s\n", role_line[r],
                     r == ROLE_BUYER ? sha256_line(BUYER, hex) : role_token[r]);
        }
    /* a database of its own: its orders must not lengthen the item other tests read */
    char own_db[160], path[160];
    snprintf(own_db, sizeof(own_db), "%s/every-route-%d%d%d.db", dir, in_file[ROLE_BUYER],
             in_file[ROLE_OPERATOR], in_file[ROLE_SCRAPE]);
    snprintf(path, sizeof(path), "%s", write_file("every-route", text));
    const char *flags[] = {FLAGS, "--api-tokens-file", path, NULL};
    th_stockd s;
    assert_int_equal(th_stockd_start(&s, NULL, own_db, dir, flags), 0);
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        for (int tok = -1; tok < ROLE_COUNT; tok++) {
            const struct route_case *c = &routes[i];
            int want = expected_status(in_file, c->need, tok);
            int got = call(&s, c->method, c->path, tok < 0 ? NULL : role_token[tok], c->body,
                           out, sizeof(out));
            /* served: whatever the route answers (an item may be missing or sold
             * out), but never refused for its role */
            int served = got == 200 || got == 201 || got == 404 || got == 409;
            if (want ? got != want : !served)
                fail_msg("file with buyer %d operator %d scrape %d: %s %s with %s: want %s, "
                         "got:\n%.600s", in_file[ROLE_BUYER], in_file[ROLE_OPERATOR],
                         in_file[ROLE_SCRAPE], c->method, c->path,
                         tok < 0 ? "no token" : role_token[tok],
                         want == 401 ? "401" : want == 403 ? "403" : "served", out);
        }
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* Every route, both ways, for the file that closes every role and for each
 * partial one: a file with no operator line still closes the catalog. */
static void test_every_route_refuses_the_wrong_role_and_serves_the_right_one(void **state)
{
    (void)state;
    for (int mask = 1; mask < 1 << ROLE_COUNT; mask++) {
        int in_file[ROLE_COUNT];
        for (int r = 0; r < ROLE_COUNT; r++)
            in_file[r] = mask >> r & 1;
        check_every_route(in_file);
    }
}

/* The check compares the whole digest: a token whose SHA-256 differs from a
 * stored one only in its last byte is no token of the file's. */
static void test_a_token_whose_digest_differs_only_in_its_last_byte_is_refused(void **state)
{
    (void)state;
    char hex[80], text[256];
    sha256_line(UNKNOWN, hex);
    size_t last = strlen(hex) - 1; /* the low nibble of the last byte */
    hex[last] = hex[last] == '0' ? '1' : '0';
    snprintf(text, sizeof(text), "operator ops %s\nbuyer near %s\n", OPERATOR, hex);
    th_stockd s;
    start(&s, write_file("near", text));
    expect(&s, "GET", "/items", UNKNOWN, NULL, 401);
    expect(&s, "POST", "/reduceStock", UNKNOWN, "{\"itemId\":1,\"quantity\":1}", 401);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* A file that does not parse: stockd does not start, and says which line. */
static void test_a_bad_file_stops_the_start_naming_its_line_never_the_token(void **state)
{
    (void)state;
    const char *bad[] = {"operator ops short\n", "admin ops " OPERATOR "\n",
                         "operator ops\n", "buyer a sha256:abcd\n",
                         "operator ops " OPERATOR "\nbuyer shop " OPERATOR "\n",
                         "operator o$s " OPERATOR "\n"};
    char bin[256], port[16], out[200];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(port, sizeof(port), "%d", th_free_port());
    snprintf(out, sizeof(out), "%s/bad.out", dir);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "# line 1\n%s", bad[i]);
        const char *path = write_file("bad", text);
        const char *argv[] = {bin, "--port", port, "--db", db, "--lock", "atomic",
                              "--api-tokens-file", path, NULL};
        assert_int_equal(th_run(argv, out, 20000 * TH_SLOWER), 2);
        char *log = th_read_file(out);
        assert_non_null(log);
        if (strstr(log, "/bad:2:") == NULL && strstr(log, "/bad:3:") == NULL)
            fail_msg("no line named for %s: %s", bad[i], log);
        assert_null(strstr(log, OPERATOR));
        free(log);
    }
}

/* ---- SIGHUP ---- */

/* A client on one keep-alive connection asking GET /items/1 with its token
 * until told to stop; every answer must be 200 on the same connection. */
struct client {
    int port;
    const char *token;
    _Atomic int *stop;
    int answers, failures;
    char last[512];
    pthread_t thread;
};

static void *client_run(void *arg)
{
    struct client *c = arg;
    char req[512], out[4096];
    request(req, sizeof(req), "GET", "/items/1", c->token, NULL, 1);
    int fd = th_connect(c->port);
    while (fd >= 0 && !atomic_load(c->stop)) {
        int n = th_exchange(fd, req, out, sizeof(out), 10000);
        if (n <= 0 || status_of(out) != 200) {
            c->failures++;
            snprintf(c->last, sizeof(c->last), "%.500s", n > 0 ? out : "connection closed");
            break;
        }
        c->answers++;
    }
    if (fd < 0)
        c->failures++;
    else
        close(fd);
    return NULL;
}

static void test_sighup_rotates_tokens_while_requests_run(void **state)
{
    (void)state;
    th_stockd s;
    const char *path = write_tokens("rotate", BUYER);
    start(&s, path);
    expect(&s, "POST", "/items", OPERATOR, "{\"name\":\"a\",\"stock\":5}", 201);
    _Atomic int stop = 0;
    struct client clients[3];
    for (int i = 0; i < 3; i++) { /* the operator's token stays through every reload */
        clients[i] = (struct client){.port = s.port, .token = OPERATOR, .stop = &stop};
        pthread_create(&clients[i].thread, NULL, client_run, &clients[i]);
    }
    for (int i = 1; i <= 10; i++) { /* reloads while they run, then a rotation */
        if (i == 10)
            write_tokens("rotate", ROTATED);
        kill(s.pid, SIGHUP);
        wait_logged(&s, "msg=\"api tokens reloaded\"", i);
    }
    expect(&s, "GET", "/items/1", ROTATED, NULL, 200); /* the new works at once */
    expect(&s, "GET", "/items/1", BUYER, NULL, 401);   /* the old is refused at once */
    /* a file that does not parse leaves the tokens as they were */
    write_file("rotate", "operator ops short\n");
    kill(s.pid, SIGHUP);
    wait_logged(&s, "msg=\"api tokens not reloaded; the old ones stay\"", 1);
    expect(&s, "GET", "/items/1", ROTATED, NULL, 200);
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) {
        pthread_join(clients[i].thread, NULL);
        if (clients[i].failures || clients[i].answers == 0)
            fail_msg("client %d: %d answers, then: %s", i, clients[i].answers, clients[i].last);
    }
    assert_no_token_logged(&s);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* The log at debug, after every kind of answer: names, never tokens. */
static void test_no_log_line_carries_a_token_and_orders_carry_its_name(void **state)
{
    (void)state;
    th_stockd s;
    start(&s, write_tokens("logs", BUYER));
    expect(&s, "POST", "/items", OPERATOR, "{\"name\":\"a\",\"stock\":5}", 201);
    expect(&s, "PUT", "/items/1", OPERATOR, "{\"stock\":9}", 200);
    expect(&s, "POST", "/reduceStock", BUYER, "{\"itemId\":1,\"quantity\":1}", 200);
    expect(&s, "POST", "/reduceStock", BUYER, "{\"itemId\":1,\"quantity\":99}", 409);
    expect(&s, "POST", "/items", UNKNOWN, "{\"name\":\"b\",\"stock\":1}", 401);
    expect(&s, "POST", "/items", SCRAPE, "{\"name\":\"b\",\"stock\":1}", 403);
    kill(s.pid, SIGHUP);
    wait_logged(&s, "msg=\"api tokens reloaded\"", 1);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    assert_no_token_logged(&s);
    assert_int_equal(th_count_in_file(s.log, "msg=\"item created\""), 1);
    assert_int_equal(th_count_in_file(s.log, "tokenName=ops"), 2);  /* created, stock set */
    assert_int_equal(th_count_in_file(s.log, "tokenName=shop"), 2); /* placed, not placed */
}

/* loadgen against a closed catalog: its token on the set-up (an item
 * created), the load and the read-back; without one, a clear set-up error. */
static void test_loadgen_sends_its_token_on_set_up_load_and_read_back(void **state)
{
    (void)state;
    th_stockd s;
    start(&s, write_tokens("loadgen", BUYER));
    char bin[256], out[200], tokfile[160];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    snprintf(out, sizeof(out), "%s/loadgen.out", dir);
    snprintf(tokfile, sizeof(tokfile), "%s", write_file("operator.token", OPERATOR "\n"));
    const char *with[] = {bin, "--target", s.url, "-n", "50", "-c", "2", "--token-file",
                          tokfile, NULL};
    assert_int_equal(th_run(with, out, 60000 * TH_SLOWER), 0);
    const char *without[] = {bin, "--target", s.url, "-n", "50", "-c", "2", NULL};
    assert_int_not_equal(th_run(without, out, 60000 * TH_SLOWER), 0);
    char *text = th_read_file(out);
    assert_non_null(strstr(text, "401"));
    free(text);
    assert_int_equal(th_count_in_file(s.log, "tokenName=ops"), 51); /* the item, 50 orders */
    assert_no_token_logged(&s);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_a_file_every_route_is_open_and_the_start_says_so),
        cmocka_unit_test(test_each_role_reaches_its_routes_and_no_others),
        cmocka_unit_test(test_missing_or_unknown_tokens_get_401_with_a_bearer_challenge),
        cmocka_unit_test(test_operator_lines_alone_close_the_catalog_and_leave_buying_open),
        cmocka_unit_test(test_every_route_refuses_the_wrong_role_and_serves_the_right_one),
        cmocka_unit_test(test_a_token_whose_digest_differs_only_in_its_last_byte_is_refused),
        cmocka_unit_test(test_a_bad_file_stops_the_start_naming_its_line_never_the_token),
        cmocka_unit_test(test_sighup_rotates_tokens_while_requests_run),
        cmocka_unit_test(test_no_log_line_carries_a_token_and_orders_carry_its_name),
        cmocka_unit_test(test_loadgen_sends_its_token_on_set_up_load_and_read_back),
    };
    return cmocka_run_group_tests_name("auth", tests, group_setup, NULL);
}
