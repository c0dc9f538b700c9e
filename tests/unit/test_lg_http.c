/* test_lg_http.c - loadgen's HTTP client below the load engine: answers fed
 * to the parser in every cut (a byte at a time, chunked, close-delimited,
 * with bytes after them, cut short), URLs, request heads, and the blocking
 * calls of api.c against the fake stockd (tests/support/fake.h). */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/api.h"
#include "loadgen/http.h"
#include "tests/support/fake.h"

/* Feeds text to r in pieces of step bytes, then the close when eof; returns
 * the last lg_http_feed result and the bytes the answer took. */
static int feed(lg_http_resp *r, const char *text, size_t step, int eof, size_t *took)
{
    size_t n = strlen(text), used = 0;
    int rc = 0;
    *took = 0;
    for (size_t at = 0; at < n && rc == 0; at += used) {
        size_t k = n - at < step ? n - at : step;
        rc = lg_http_feed(r, text + at, k, &used);
        *took += used;
    }
    if (rc == 0 && eof)
        rc = lg_http_feed(r, "", 0, &used);
    return rc;
}

static const char plain[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
                            "\r\nRetry-After: 1\r\nContent-Length: 27\r\n\r\n"
                            "{\"error\":\"storage_busy\"}   ";

static void test_an_answer_read_a_byte_at_a_time_is_the_same_answer(void **state)
{
    (void)state;
    for (size_t step = 1; step <= sizeof(plain); step += 7) {
        lg_http_resp r;
        size_t took;
        lg_http_resp_init(&r, 1024, 1);
        assert_int_equal(feed(&r, plain, step, 0, &took), 1);
        assert_int_equal(took, strlen(plain));
        assert_int_equal(r.status, 503);
        assert_int_equal(r.keep_alive, 1);
        assert_string_equal(r.body, "{\"error\":\"storage_busy\"}   ");
        assert_string_equal(r.retry_after, "1");
        assert_string_equal(r.content_type, "application/json");
        lg_http_resp_free(&r);
    }
}

static void test_a_chunked_answer_is_joined_and_its_trailer_skipped(void **state)
{
    (void)state;
    const char text[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5;ext=1\r\n{\"a\":\r\n3\r\n12}\r\n0\r\nX-T: y\r\n\r\n";
    for (size_t step = 1; step <= sizeof(text); step += 3) {
        lg_http_resp r;
        size_t took;
        lg_http_resp_init(&r, 1024, 0);
        assert_int_equal(feed(&r, text, step, 0, &took), 1);
        assert_string_equal(r.body, "{\"a\":12}");
        assert_int_equal(r.len, 8);
        lg_http_resp_free(&r);
    }
}

static void test_an_answer_cut_before_its_end_is_an_error_not_an_answer(void **state)
{
    (void)state;
    const char *cuts[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"quan",        /* mid-body */
        "HTTP/1.1 200 OK\r\nContent-Len",                              /* mid-head */
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n", /* no last chunk */
    };
    for (int i = 0; i < 3; i++) {
        lg_http_resp r;
        size_t took;
        lg_http_resp_init(&r, 1024, 0);
        assert_int_equal(feed(&r, cuts[i], 4, 1, &took), -1);
        assert_int_equal(r.done, 0);
        assert_non_null(strstr(r.why, "closed after"));
        lg_http_resp_free(&r);
    }
    lg_http_resp r;
    size_t took;
    lg_http_resp_init(&r, 1024, 0);
    assert_int_equal(feed(&r, "", 1, 1, &took), -1);
    assert_string_equal(r.why, "the connection closed before an answer");
    lg_http_resp_free(&r);
}

static void test_a_close_delimited_body_ends_with_the_connection(void **state)
{
    (void)state;
    lg_http_resp r;
    size_t took;
    lg_http_resp_init(&r, 1024, 0);
    const char text[] = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"x\":1}";
    assert_int_equal(feed(&r, text, 5, 0, &took), 0); /* no end yet: it may go on */
    assert_int_equal(feed(&r, "", 1, 1, &took), 1);
    assert_string_equal(r.body, "{\"x\":1}");
    assert_int_equal(r.keep_alive, 0);
    lg_http_resp_free(&r);
}

static void test_bytes_after_an_answer_are_not_part_of_it(void **state)
{
    (void)state;
    lg_http_resp r;
    size_t took;
    lg_http_resp_init(&r, 1024, 0);
    const char text[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2"
                        "\r\n\r\n{}HTTP/1.1 200 OK\r\n";
    assert_int_equal(feed(&r, text, sizeof(text), 0, &took), 1);
    assert_int_equal(r.status, 201); /* the interim 100 is skipped */
    assert_string_equal(r.body, "{}");
    assert_int_equal(took, strlen(text) - strlen("HTTP/1.1 200 OK\r\n"));
    lg_http_resp_free(&r);
}

static void test_garbage_and_oversized_bodies(void **state)
{
    (void)state;
    lg_http_resp r;
    size_t took;
    lg_http_resp_init(&r, 1024, 0);
    assert_int_equal(feed(&r, "<html>oops</html>\r\n\r\n", 64, 0, &took), -1);
    assert_non_null(strstr(r.why, "not an HTTP answer"));
    lg_http_resp_free(&r);
    lg_http_resp_init(&r, 4, 0); /* the body is cut to its limit and says so */
    assert_int_equal(feed(&r, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n123456", 3, 0, &took),
                     1);
    assert_string_equal(r.body, "1234");
    assert_int_equal(r.truncated, 1);
    lg_http_resp_free(&r);
}

static void test_urls_resolve_to_an_address_a_host_header_and_a_path(void **state)
{
    (void)state;
    lg_http_addr a;
    const char *path;
    lg_err err;
    assert_int_equal(lg_http_resolve("http://127.0.0.1:8080/items/1?limit=5", &a, &path, &err),
                     LG_OK);
    assert_string_equal(a.host, "127.0.0.1:8080");
    assert_string_equal(path, "/items/1?limit=5");
    assert_int_equal(a.n, 1);
    assert_int_equal(lg_http_resolve("http://[::1]:81", &a, &path, &err), LG_OK);
    assert_string_equal(a.host, "[::1]:81");
    assert_string_equal(path, "");
    assert_int_equal(lg_http_resolve("http://127.0.0.1", &a, NULL, &err), LG_OK); /* port 80 */
    assert_int_equal(a.tls, 0);
    /* https: TLS, port 443 by default, the bare host for the certificate's check */
    assert_int_equal(lg_http_resolve("https://127.0.0.1", &a, NULL, &err), LG_OK);
    assert_int_equal(a.tls, 1);
    assert_int_equal(ntohs(((struct sockaddr_in *)&a.sa[0])->sin_port), 443);
    assert_int_equal(lg_http_resolve("https://[::1]:8443/x", &a, &path, &err), LG_OK);
    assert_string_equal(a.name, "::1");
    assert_string_equal(a.host, "[::1]:8443");
    assert_int_equal(lg_http_resolve("ftp://127.0.0.1", &a, NULL, &err), LG_ERR_USAGE);
    assert_int_equal(lg_http_resolve("http://:80", &a, NULL, &err), LG_ERR_USAGE);
    assert_int_equal(lg_http_resolve("http://127.0.0.1:8o", &a, NULL, &err), LG_ERR_USAGE);
    assert_int_equal(lg_http_resolve("http://no-such-host.invalid:80", &a, NULL, &err),
                     LG_ERR_TRANSPORT);
    assert_non_null(strstr(err.msg, "no-such-host.invalid"));
}

static void test_request_heads_say_method_path_host_and_length(void **state)
{
    (void)state;
    char buf[LG_HTTP_HEAD_MAX];
    int n = lg_http_head(buf, sizeof(buf) - 24, "POST", "/orders", "h:1", 1);
    assert_true(n > 0);
    n += (int)lg_http_head_end(buf + n, 1234);
    buf[n] = '\0';
    assert_string_equal(buf, "POST /orders HTTP/1.1\r\nHost: h:1\r\nContent-Type: "
                             "application/json\r\nContent-Length: 1234\r\n\r\n");
    n = lg_http_head(buf, sizeof(buf), "GET", "", "h:1", 0);
    assert_string_equal(buf, "GET / HTTP/1.1\r\nHost: h:1\r\n\r\n");
    assert_int_equal(lg_http_head(buf, 10, "GET", "/health", "h:1", 0), -1);
}

/* lg_api_call against the fake in mode: the answer, or the error. */
static int api_get(int mode, lg_answer_full *a, lg_err *err)
{
    th_fake *f = th_fake_start(mode, 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/reduceStock", f->port);
    int rc = lg_api_call("POST", url, "{\"requestId\":\"x\",\"quantity\":2}", a, err);
    th_fake_stop(f);
    return rc;
}

static void test_blocking_calls_read_every_kind_of_answer_and_report_cut_ones(void **state)
{
    (void)state;
    const int whole[] = {TH_FAKE_OK, TH_FAKE_CHUNKED, TH_FAKE_DRIBBLE, TH_FAKE_CLOSE_DELIMITED};
    for (int i = 0; i < 4; i++) {
        lg_answer_full a;
        lg_err err = {0};
        assert_int_equal(api_get(whole[i], &a, &err), LG_OK);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.body, "{\"quantity\":2,\"remaining\":999998,\"replayed\":false}");
        assert_string_equal(a.content_type, "application/json");
        lg_answer_full_free(&a);
    }
    const int cut[] = {TH_FAKE_DROP_FIRST, TH_FAKE_CUT_HEADERS, TH_FAKE_CUT_CHUNKED};
    for (int i = 0; i < 3; i++) {
        lg_answer_full a;
        lg_err err = {0};
        assert_int_equal(api_get(cut[i], &a, &err), LG_ERR_TRANSPORT);
        assert_int_equal(a.status, 0);
        assert_non_null(strstr(err.msg, "/reduceStock: the connection closed after"));
        lg_answer_full_free(&a);
    }
}

static void test_a_blocking_call_to_a_closed_port_is_refused(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/health", f->port);
    th_fake_stop(f);
    long status = -1;
    lg_err err = {0};
    assert_int_equal(lg_api_probe(url, "", &status, &err), LG_ERR_TRANSPORT);
    assert_int_equal(status, 0);
    assert_non_null(strstr(err.msg, "connect: Connection refused"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_answer_read_a_byte_at_a_time_is_the_same_answer),
        cmocka_unit_test(test_a_chunked_answer_is_joined_and_its_trailer_skipped),
        cmocka_unit_test(test_an_answer_cut_before_its_end_is_an_error_not_an_answer),
        cmocka_unit_test(test_a_close_delimited_body_ends_with_the_connection),
        cmocka_unit_test(test_bytes_after_an_answer_are_not_part_of_it),
        cmocka_unit_test(test_garbage_and_oversized_bodies),
        cmocka_unit_test(test_urls_resolve_to_an_address_a_host_header_and_a_path),
        cmocka_unit_test(test_request_heads_say_method_path_host_and_length),
        cmocka_unit_test(test_blocking_calls_read_every_kind_of_answer_and_report_cut_ones),
        cmocka_unit_test(test_a_blocking_call_to_a_closed_port_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
