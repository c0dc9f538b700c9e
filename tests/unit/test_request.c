/* test_request.c - request body parsing and validation, and routing: every
 * accepted shape and a table of malformed ones with the error each gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/request.h"
#include "server/route.h"

static int parse_reduce(const char *body, req_order *r)
{
    char err[256];
    return req_parse_reduce(body, strlen(body), r, err, sizeof(err));
}

static void test_reduce_body_with_every_field_is_accepted(void **state)
{
    (void)state;
    req_order r;
    assert_int_equal(parse_reduce("{\"itemId\": 7, \"quantity\": 3, \"requestId\": \"abc-1\", "
                                  "\"workMs\": 250, \"note\": \"ignored\"}", &r), REQ_OK);
    assert_int_equal(r.nlines, 1);
    assert_int_equal(r.lines[0].item_id, 7);
    assert_int_equal(r.lines[0].quantity, 3);
    assert_true(r.has_request_id);
    assert_string_equal(r.request_id, "abc-1");
    assert_int_equal(r.work_ms, 250);
}

static void test_reduce_body_optional_fields_default(void **state)
{
    (void)state;
    req_order r;
    assert_int_equal(parse_reduce("{\"itemId\":1,\"quantity\":1}", &r), REQ_OK);
    assert_false(r.has_request_id);
    assert_int_equal(r.work_ms, 0);
    assert_int_equal(parse_reduce("{\"itemId\":1,\"quantity\":1,\"requestId\":null}", &r), REQ_OK);
    assert_false(r.has_request_id);
}

static void test_request_id_limits(void **state)
{
    (void)state;
    req_order r;
    char body[512], id[200];
    memset(id, 'x', 128);
    id[128] = '\0';
    snprintf(body, sizeof(body), "{\"itemId\":1,\"quantity\":1,\"requestId\":\"%s\"}", id);
    assert_int_equal(parse_reduce(body, &r), REQ_OK);
    assert_int_equal(strlen(r.request_id), 128);
    id[128] = 'x', id[129] = '\0';
    snprintf(body, sizeof(body), "{\"itemId\":1,\"quantity\":1,\"requestId\":\"%s\"}", id);
    assert_int_equal(parse_reduce(body, &r), REQ_ERR_INVALID);
}

struct bad_case {
    const char *body;
    int code;
    const char *message_part;
};

static const struct bad_case bad_reduce[] = {
    {"", REQ_ERR_JSON, "empty"},
    {"not json", REQ_ERR_JSON, "malformed"},
    {"{\"itemId\":1,", REQ_ERR_JSON, "malformed"},
    {"[1,2]", REQ_ERR_JSON, "object"},
    {"42", REQ_ERR_JSON, "malformed"},
    {"{\"quantity\":1}", REQ_ERR_INVALID, "itemId"},
    {"{\"itemId\":1}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":\"1\",\"quantity\":1}", REQ_ERR_INVALID, "itemId"},
    {"{\"itemId\":1,\"quantity\":\"2\"}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":1.5,\"quantity\":1}", REQ_ERR_INVALID, "itemId"},
    {"{\"itemId\":1,\"quantity\":1.0}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":1,\"quantity\":true}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":1,\"quantity\":null}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":0,\"quantity\":1}", REQ_ERR_INVALID, "itemId"},
    {"{\"itemId\":-4,\"quantity\":1}", REQ_ERR_INVALID, "itemId"},
    {"{\"itemId\":1,\"quantity\":0}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":1,\"quantity\":-1}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":1,\"quantity\":1000001}", REQ_ERR_INVALID, "quantity"},
    {"{\"itemId\":1,\"quantity\":99999999999999999999999}", REQ_ERR_INVALID, "out of range"},
    {"{\"itemId\":1,\"quantity\":1,\"workMs\":-1}", REQ_ERR_INVALID, "workMs"},
    {"{\"itemId\":1,\"quantity\":1,\"requestId\":\"\"}", REQ_ERR_INVALID, "requestId"},
    {"{\"itemId\":1,\"quantity\":1,\"requestId\":42}", REQ_ERR_INVALID, "requestId"},
    {"{\"itemId\":1,\"quantity\":1,\"requestId\":\"tab\\there\"}", REQ_ERR_INVALID, "requestId"},
    {"{\"itemId\":1,\"quantity\":1,\"requestId\":\"caf\xc3\xa9\"}", REQ_ERR_INVALID, "requestId"},
    {"{\"itemId\":1,\"quantity\":1,\"quantity\":100}", REQ_ERR_JSON, "duplicate"},
    {"{\"itemId\":1,\"quantity\":\"\xff\xfe\"}", REQ_ERR_JSON, "malformed"},
};

/* Each case, parsed by parse, fails with its code and a message containing
 * its message_part. */
static void expect_refusals(int (*parse)(const char *, size_t, req_order *, char *, size_t),
                            const struct bad_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        req_order r;
        char err[256] = "";
        int rc = parse(cases[i].body, strlen(cases[i].body), &r, err, sizeof(err));
        if (rc != cases[i].code || strstr(err, cases[i].message_part) == NULL)
            fail_msg("body %s: got code %d message \"%s\"", cases[i].body, rc, err);
    }
}

static void test_malformed_reduce_bodies_get_clear_errors(void **state)
{
    (void)state;
    expect_refusals(req_parse_reduce, bad_reduce, sizeof(bad_reduce) / sizeof(bad_reduce[0]));
}

static void test_body_with_embedded_nul_is_refused(void **state)
{
    (void)state;
    static const char body[] = "{\"itemId\":1,\"quantity\":1}\0garbage";
    req_order r;
    char err[256];
    assert_int_equal(req_parse_reduce(body, sizeof(body) - 1, &r, err, sizeof(err)),
                     REQ_ERR_JSON);
}

static int parse_order(const char *body, req_order *o, char *err)
{
    return req_parse_order(body, strlen(body), o, err, 256);
}

static void test_order_body_keeps_lines_in_client_order(void **state)
{
    (void)state;
    req_order o;
    char err[256];
    assert_int_equal(parse_order("{\"lines\":[{\"itemId\":9,\"quantity\":2},"
                                 "{\"itemId\":3,\"quantity\":1,\"note\":\"x\"}],"
                                 "\"requestId\":\"cart-1\",\"workMs\":5}", &o, err), REQ_OK);
    assert_int_equal(o.nlines, 2);
    assert_int_equal(o.lines[0].item_id, 9);
    assert_int_equal(o.lines[0].quantity, 2);
    assert_int_equal(o.lines[1].item_id, 3);
    assert_int_equal(o.lines[1].quantity, 1);
    assert_string_equal(o.request_id, "cart-1");
    assert_int_equal(o.work_ms, 5);
}

/* An order body of n lines for items 1..n. */
static void order_of(int n, char *body)
{
    body += sprintf(body, "{\"lines\":[");
    for (int i = 1; i <= n; i++)
        body += sprintf(body, "%s{\"itemId\":%d,\"quantity\":1}", i > 1 ? "," : "", i);
    strcpy(body, "]}");
}

static void test_order_with_the_most_lines_is_accepted(void **state)
{
    (void)state;
    char body[4096], err[256];
    req_order o;
    order_of(RULE_ORDER_LINES_MAX, body);
    assert_int_equal(parse_order(body, &o, err), REQ_OK);
    assert_int_equal(o.nlines, RULE_ORDER_LINES_MAX);
    order_of(RULE_ORDER_LINES_MAX + 1, body);
    assert_int_equal(parse_order(body, &o, err), REQ_ERR_INVALID);
    assert_non_null(strstr(err, "1-32 lines"));
}

static const struct bad_case bad_order[] = {
    {"{}", REQ_ERR_INVALID, "field \"lines\" must be an array of 1-32 lines"},
    {"{\"lines\":[]}", REQ_ERR_INVALID, "1-32 lines"},
    {"{\"lines\":{\"itemId\":1,\"quantity\":1}}", REQ_ERR_INVALID, "must be an array"},
    {"{\"lines\":[1]}", REQ_ERR_INVALID, "lines[0] must be an object"},
    {"{\"lines\":[{\"itemId\":1,\"quantity\":1},null]}", REQ_ERR_INVALID,
     "lines[1] must be an object"},
    {"{\"lines\":[{\"itemId\":1,\"quantity\":0}]}", REQ_ERR_INVALID,
     "lines[0]: field \"quantity\" must be between 1 and"},
    {"{\"lines\":[{\"quantity\":1}]}", REQ_ERR_INVALID, "lines[0]: missing field \"itemId\""},
    {"{\"lines\":[{\"itemId\":1,\"quantity\":1},{\"itemId\":\"2\",\"quantity\":1}]}",
     REQ_ERR_INVALID, "lines[1]: field \"itemId\" must be an integer"},
    {"{\"lines\":[{\"itemId\":4,\"quantity\":1},{\"itemId\":5,\"quantity\":1},"
     "{\"itemId\":4,\"quantity\":2}]}",
     REQ_ERR_INVALID, "lines[2]: itemId 4 already in lines[0]"},
    {"{\"lines\":[{\"itemId\":1,\"quantity\":1}],\"requestId\":\"\"}", REQ_ERR_INVALID,
     "requestId"},
    {"{\"lines\":[{\"itemId\":1,\"quantity\":1}],\"workMs\":-1}", REQ_ERR_INVALID, "workMs"},
    {"{\"lines\":[{\"itemId\":1,\"quantity\":1,\"quantity\":2}]}", REQ_ERR_JSON, "duplicate"},
    {"[{\"itemId\":1,\"quantity\":1}]", REQ_ERR_JSON, "object"},
};

static void test_malformed_orders_name_the_line(void **state)
{
    (void)state;
    expect_refusals(req_parse_order, bad_order, sizeof(bad_order) / sizeof(bad_order[0]));
}

static void test_item_bodies(void **state)
{
    (void)state;
    req_item it;
    char err[256];
    const char *ok = "{\"name\":\"Widget \xc3\xa9\",\"stock\":10}";
    assert_int_equal(req_parse_item(ok, strlen(ok), 1, &it, err, sizeof(err)), REQ_OK);
    assert_string_equal(it.name, "Widget \xc3\xa9");
    assert_int_equal(it.stock, 10);
    const char *no_name = "{\"stock\":10}";
    assert_int_equal(req_parse_item(no_name, strlen(no_name), 1, &it, err, sizeof(err)),
                     REQ_ERR_INVALID);
    assert_int_equal(req_parse_item(no_name, strlen(no_name), 0, &it, err, sizeof(err)), REQ_OK);
    const char *negative = "{\"name\":\"w\",\"stock\":-1}";
    assert_int_equal(req_parse_item(negative, strlen(negative), 1, &it, err, sizeof(err)),
                     REQ_ERR_INVALID);
    const char *ctrl = "{\"name\":\"a\\nb\",\"stock\":1}";
    assert_int_equal(req_parse_item(ctrl, strlen(ctrl), 1, &it, err, sizeof(err)),
                     REQ_ERR_INVALID);
    char big[1024];
    snprintf(big, sizeof(big), "{\"name\":\"%0201d\",\"stock\":1}", 0);
    assert_int_equal(req_parse_item(big, strlen(big), 1, &it, err, sizeof(err)), REQ_ERR_INVALID);
    const char *keyed = "{\"name\":\"w\",\"stock\":1,\"requestId\":\"item-1\"}";
    assert_int_equal(req_parse_item(keyed, strlen(keyed), 1, &it, err, sizeof(err)), REQ_OK);
    assert_true(it.has_request_id);
    assert_string_equal(it.request_id, "item-1");
    assert_int_equal(req_parse_item(ok, strlen(ok), 1, &it, err, sizeof(err)), REQ_OK);
    assert_false(it.has_request_id);
    const char *empty_key = "{\"name\":\"w\",\"stock\":1,\"requestId\":\"\"}";
    assert_int_equal(req_parse_item(empty_key, strlen(empty_key), 1, &it, err, sizeof(err)),
                     REQ_ERR_INVALID);
    assert_non_null(strstr(err, "requestId"));
    /* PUT ignores it, as it ignores the name */
    assert_int_equal(req_parse_item(empty_key, strlen(empty_key), 0, &it, err, sizeof(err)),
                     REQ_OK);
}

/* perBuyerLimit: optional on POST; on PUT a number sets it, null clears it,
 * absent leaves it, and it may come without the stock. */
static void test_item_bodies_carry_a_per_buyer_limit(void **state)
{
    (void)state;
    req_item it;
    char err[256];
    const char *post = "{\"name\":\"w\",\"stock\":5,\"perBuyerLimit\":2}";
    assert_int_equal(req_parse_item(post, strlen(post), 1, &it, err, sizeof(err)), REQ_OK);
    assert_int_equal(it.per_buyer_limit, 2);
    const char *plain = "{\"name\":\"w\",\"stock\":5}";
    assert_int_equal(req_parse_item(plain, strlen(plain), 1, &it, err, sizeof(err)), REQ_OK);
    assert_int_equal(it.per_buyer_limit, 0);
    assert_int_equal(req_parse_item(plain, strlen(plain), 0, &it, err, sizeof(err)), REQ_OK);
    assert_int_equal(it.per_buyer_limit, -1); /* PUT: left as it is */
    assert_true(it.has_stock);
    const char *clear = "{\"perBuyerLimit\":null}";
    assert_int_equal(req_parse_item(clear, strlen(clear), 0, &it, err, sizeof(err)), REQ_OK);
    assert_int_equal(it.per_buyer_limit, 0);
    assert_false(it.has_stock);
    const char *set = "{\"perBuyerLimit\":1000000000000}";
    assert_int_equal(req_parse_item(set, strlen(set), 0, &it, err, sizeof(err)), REQ_OK);
    assert_int_equal(it.per_buyer_limit, 1000000000000LL);
    assert_false(it.has_stock);
    /* POST needs the stock whatever else comes */
    const char *no_stock = "{\"name\":\"w\",\"perBuyerLimit\":3}";
    assert_int_equal(req_parse_item(no_stock, strlen(no_stock), 1, &it, err, sizeof(err)),
                     REQ_ERR_INVALID);
    assert_non_null(strstr(err, "stock"));
    const char *bad[] = {"{\"name\":\"w\",\"stock\":5,\"perBuyerLimit\":0}",
                         "{\"name\":\"w\",\"stock\":5,\"perBuyerLimit\":1000000000001}",
                         "{\"name\":\"w\",\"stock\":5,\"perBuyerLimit\":\"2\"}",
                         "{\"name\":\"w\",\"stock\":5,\"perBuyerLimit\":-1}", NULL};
    for (int i = 0; bad[i]; i++) {
        for (int need_name = 0; need_name <= 1; need_name++) {
            if (req_parse_item(bad[i], strlen(bad[i]), need_name, &it, err, sizeof(err)) !=
                REQ_ERR_INVALID)
                fail_msg("%s accepted", bad[i]);
            assert_non_null(strstr(err, "perBuyerLimit"));
        }
    }
    /* PUT with neither: the stock is what is missing */
    assert_int_equal(req_parse_item("{}", 2, 0, &it, err, sizeof(err)), REQ_ERR_INVALID);
    assert_non_null(strstr(err, "stock"));
}

static void test_orders_carry_a_buyer_id(void **state)
{
    (void)state;
    req_order r;
    char err[256], body[512], id[200];
    const char *o = "{\"lines\":[{\"itemId\":1,\"quantity\":1}],\"buyerId\":\"b-7\"}";
    assert_int_equal(req_parse_order(o, strlen(o), &r, err, sizeof(err)), REQ_OK);
    assert_true(r.has_buyer_id);
    assert_string_equal(r.buyer_id, "b-7");
    assert_int_equal(parse_reduce("{\"itemId\":1,\"quantity\":1,\"buyerId\":\"x\"}", &r), REQ_OK);
    assert_string_equal(r.buyer_id, "x");
    assert_int_equal(parse_reduce("{\"itemId\":1,\"quantity\":1}", &r), REQ_OK);
    assert_false(r.has_buyer_id);
    memset(id, 'b', RULE_BUYER_ID_MAX);
    id[RULE_BUYER_ID_MAX] = '\0';
    snprintf(body, sizeof(body), "{\"itemId\":1,\"quantity\":1,\"buyerId\":\"%s\"}", id);
    assert_int_equal(parse_reduce(body, &r), REQ_OK);
    id[RULE_BUYER_ID_MAX] = 'b', id[RULE_BUYER_ID_MAX + 1] = '\0';
    snprintf(body, sizeof(body), "{\"itemId\":1,\"quantity\":1,\"buyerId\":\"%s\"}", id);
    assert_int_equal(req_parse_reduce(body, strlen(body), &r, err, sizeof(err)),
                     REQ_ERR_INVALID);
    assert_non_null(strstr(err, "buyerId"));
    const char *bad[] = {"{\"itemId\":1,\"quantity\":1,\"buyerId\":\"\"}",
                         "{\"itemId\":1,\"quantity\":1,\"buyerId\":\"a\\tb\"}",
                         "{\"itemId\":1,\"quantity\":1,\"buyerId\":7}", NULL};
    for (int i = 0; bad[i]; i++) {
        if (req_parse_reduce(bad[i], strlen(bad[i]), &r, err, sizeof(err)) != REQ_ERR_INVALID)
            fail_msg("%s accepted", bad[i]);
        assert_non_null(strstr(err, "buyerId"));
    }
}

static void test_reservation_bodies(void **state)
{
    (void)state;
    req_reservation r;
    char err[256];
    const char *full = "{\"lines\":[{\"itemId\":4,\"quantity\":2},{\"itemId\":9,\"quantity\":1}],"
                       "\"holdMs\":60000,\"requestId\":\"r-1\",\"buyerId\":\"b-1\"}";
    assert_int_equal(req_parse_reservation(full, strlen(full), 3600000, &r, err, sizeof(err)),
                     REQ_OK);
    assert_int_equal(r.order.nlines, 2);
    assert_int_equal(r.order.lines[1].item_id, 9);
    assert_int_equal(r.hold_ms, 60000);
    assert_string_equal(r.order.request_id, "r-1");
    assert_string_equal(r.order.buyer_id, "b-1");
    const char *bare = "{\"lines\":[{\"itemId\":4,\"quantity\":2}]}";
    assert_int_equal(req_parse_reservation(bare, strlen(bare), 3600000, &r, err, sizeof(err)),
                     REQ_OK);
    assert_int_equal(r.hold_ms, 0); /* the server's default */
    assert_false(r.order.has_request_id);
    const char *bad[] = {
        "{\"lines\":[{\"itemId\":4,\"quantity\":2}],\"holdMs\":999}",
        "{\"lines\":[{\"itemId\":4,\"quantity\":2}],\"holdMs\":3600001}",
        "{\"lines\":[{\"itemId\":4,\"quantity\":2}],\"holdMs\":\"5000\"}",
        "{\"lines\":[{\"itemId\":4,\"quantity\":2}],\"holdMs\":1.5}", NULL};
    for (int i = 0; bad[i]; i++) {
        if (req_parse_reservation(bad[i], strlen(bad[i]), 3600000, &r, err, sizeof(err)) !=
            REQ_ERR_INVALID)
            fail_msg("%s accepted", bad[i]);
        assert_non_null(strstr(err, "holdMs"));
    }
    const char *edge = "{\"lines\":[{\"itemId\":4,\"quantity\":2}],\"holdMs\":1000}";
    assert_int_equal(req_parse_reservation(edge, strlen(edge), 1000, &r, err, sizeof(err)),
                     REQ_OK);
    const char *twice = "{\"lines\":[{\"itemId\":4,\"quantity\":2},{\"itemId\":4,\"quantity\":1}]}";
    assert_int_equal(req_parse_reservation(twice, strlen(twice), 3600000, &r, err, sizeof(err)),
                     REQ_ERR_INVALID);
    assert_non_null(strstr(err, "lines[1]"));
    assert_int_equal(req_parse_reservation("[]", 2, 3600000, &r, err, sizeof(err)), REQ_ERR_JSON);
}

static void test_extend_and_cancel_bodies(void **state)
{
    (void)state;
    int64_t hold;
    char err[256];
    const char *ok = "{\"holdMs\":120000}";
    assert_int_equal(req_parse_extend(ok, strlen(ok), 3600000, &hold, err, sizeof(err)), REQ_OK);
    assert_int_equal(hold, 120000);
    assert_int_equal(req_parse_extend(ok, strlen(ok), 60000, &hold, err, sizeof(err)),
                     REQ_ERR_INVALID);
    assert_non_null(strstr(err, "holdMs"));
    assert_int_equal(req_parse_extend("{}", 2, 60000, &hold, err, sizeof(err)), REQ_ERR_INVALID);
    assert_non_null(strstr(err, "holdMs"));
    assert_int_equal(req_parse_extend("", 0, 60000, &hold, err, sizeof(err)), REQ_ERR_JSON);
    req_cancel c;
    assert_int_equal(req_parse_cancel("", 0, &c, err, sizeof(err)), REQ_OK);
    assert_false(c.has_request_id);
    const char *keyed = "{\"requestId\":\"c-1\"}";
    assert_int_equal(req_parse_cancel(keyed, strlen(keyed), &c, err, sizeof(err)), REQ_OK);
    assert_string_equal(c.request_id, "c-1");
    const char *bad = "{\"requestId\":\"\"}";
    assert_int_equal(req_parse_cancel(bad, strlen(bad), &c, err, sizeof(err)), REQ_ERR_INVALID);
    assert_int_equal(req_parse_cancel("{", 1, &c, err, sizeof(err)), REQ_ERR_JSON);
}

static void test_reservation_routes(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
        enum route_id id;
        int method_ok;
        int64_t path_id;
    } want[] = {
        {"POST", "/reservations", ROUTE_RESERVATIONS, 1, 0},
        {"GET", "/reservations", ROUTE_RESERVATIONS, 0, 0},
        {"GET", "/reservations/5", ROUTE_RESERVATION, 1, 5},
        {"HEAD", "/reservations/5", ROUTE_RESERVATION, 1, 5},
        {"POST", "/reservations/5", ROUTE_RESERVATION, 0, 5},
        {"POST", "/reservations/6/confirm", ROUTE_RESERVATION_CONFIRM, 1, 6},
        {"POST", "/reservations/7/cancel", ROUTE_RESERVATION_CANCEL, 1, 7},
        {"POST", "/reservations/8/extend", ROUTE_RESERVATION_EXTEND, 1, 8},
        {"GET", "/reservations/8/extend", ROUTE_RESERVATION_EXTEND, 0, 8},
        {"POST", "/orders/9/cancel", ROUTE_ORDER_CANCEL, 1, 9},
        {"GET", "/orders/9/cancel", ROUTE_ORDER_CANCEL, 0, 9},
        {"POST", "/reservations/8/other", ROUTE_NOT_FOUND, 0, 0},
        {"POST", "/reservations/8/confirm/", ROUTE_NOT_FOUND, 0, 0},
        {"POST", "/reservations//confirm", ROUTE_NOT_FOUND, 0, 0},
        {"POST", "/orders/9/cancelled", ROUTE_NOT_FOUND, 0, 0},
        {"POST", "/items/9/cancel", ROUTE_NOT_FOUND, 0, 0},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        route_result r;
        route_match(want[i].method, want[i].path, &r);
        if (r.id != want[i].id || r.method_ok != want[i].method_ok ||
            (want[i].path_id && r.path_id != want[i].path_id))
            fail_msg("%s %s: route %s ok %d id %lld", want[i].method, want[i].path,
                     route_name(r.id), r.method_ok, (long long)r.path_id);
        if (r.id != ROUTE_NOT_FOUND && r.role != ROUTE_ROLE_BUYER)
            fail_msg("%s %s: not a buyer's", want[i].method, want[i].path);
    }
    route_result r;
    route_match("POST", "/reservations/0/confirm", &r);
    assert_int_equal(r.id, ROUTE_RESERVATION_CONFIRM);
    assert_true(r.bad_id);
    route_match("POST", "/reservations/99999999999999999999999999999999999/cancel", &r);
    assert_int_equal(r.id, ROUTE_RESERVATION_CANCEL);
    assert_true(r.bad_id);
    assert_string_equal(route_name(ROUTE_ORDER_CANCEL), "orderCancel");
}

static void test_path_ids_and_query_ints(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(req_parse_id("42", &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(req_parse_id("9223372036854775807", &v), 0);
    const char *bad[] = {"", "0", "-1", "+1", "01", "1a", " 1", "9223372036854775808",
                         "99999999999999999999", "..", "1/2", NULL};
    for (int i = 0; bad[i]; i++)
        if (req_parse_id(bad[i], &v) == 0)
            fail_msg("id \"%s\" accepted", bad[i]);
    assert_int_equal(req_parse_int_arg(NULL, 100, 0, 1000, &v), 0);
    assert_int_equal(v, 100);
    assert_int_equal(req_parse_int_arg("5", 100, 0, 1000, &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(req_parse_int_arg("5000", 100, 0, 1000, &v), -1);
    assert_int_equal(req_parse_int_arg("x", 100, 0, 1000, &v), -1);
}

/* Which role each method of each path needs (the catalog's writes are an
 * operator's, reads and orders a buyer's). */
static void test_routes_name_the_role_each_method_needs(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
        enum route_role role;
    } want[] = {
        {"POST", "/reduceStock", ROUTE_ROLE_BUYER}, {"POST", "/orders", ROUTE_ROLE_BUYER},
        {"GET", "/orders/3", ROUTE_ROLE_BUYER},     {"HEAD", "/orders/3", ROUTE_ROLE_BUYER},
        {"GET", "/items", ROUTE_ROLE_BUYER},        {"GET", "/items/3", ROUTE_ROLE_BUYER},
        {"POST", "/items", ROUTE_ROLE_OPERATOR},    {"PUT", "/items/3", ROUTE_ROLE_OPERATOR},
        {"GET", "/metrics", ROUTE_ROLE_SCRAPE},     {"GET", "/health", ROUTE_ROLE_OPEN},
        {"HEAD", "/health", ROUTE_ROLE_OPEN},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        route_result r;
        route_match(want[i].method, want[i].path, &r);
        assert_true(r.method_ok);
        if (r.role != want[i].role)
            fail_msg("%s %s: role %s, want %s", want[i].method, want[i].path,
                     route_role_name(r.role), route_role_name(want[i].role));
    }
    assert_string_equal(route_role_name(ROUTE_ROLE_OPERATOR), "operator");
    assert_null(route_role_name(ROUTE_ROLE_COUNT));
}

static void test_routes_match_methods_and_ids(void **state)
{
    (void)state;
    route_result r;
    route_match("POST", "/reduceStock", &r);
    assert_int_equal(r.id, ROUTE_REDUCE);
    assert_true(r.method_ok);
    route_match("GET", "/reduceStock", &r);
    assert_int_equal(r.id, ROUTE_REDUCE);
    assert_false(r.method_ok);
    assert_string_equal(r.allow, "POST");
    route_match("PUT", "/items/12", &r);
    assert_int_equal(r.id, ROUTE_ITEM);
    assert_true(r.method_ok);
    assert_int_equal(r.path_id, 12);
    route_match("DELETE", "/items/12", &r);
    assert_false(r.method_ok);
    route_match("GET", "/items/abc", &r);
    assert_int_equal(r.id, ROUTE_ITEM);
    assert_true(r.bad_id);
    route_match("HEAD", "/health", &r);
    assert_true(r.method_ok);
    route_match("GET", "/items/1/2", &r);
    assert_int_equal(r.id, ROUTE_NOT_FOUND);
    route_match("GET", "/items/../etc/passwd", &r);
    assert_int_equal(r.id, ROUTE_NOT_FOUND);
    route_match("GET", "/items/", &r);
    assert_int_equal(r.id, ROUTE_NOT_FOUND);
    route_match("GET", "/reduceStockX", &r);
    assert_int_equal(r.id, ROUTE_NOT_FOUND);
    route_match("GETX", "/health", &r);
    assert_false(r.method_ok);
    route_match("ET", "/health", &r);
    assert_false(r.method_ok);
    route_match("", "/health", &r); /* found by fuzzing: used to loop forever */
    assert_false(r.method_ok);
    route_match("POST", "/orders", &r);
    assert_int_equal(r.id, ROUTE_ORDERS);
    assert_true(r.method_ok);
    route_match("GET", "/orders", &r);
    assert_false(r.method_ok);
    assert_string_equal(r.allow, "POST");
    route_match("GET", "/orders/77", &r);
    assert_int_equal(r.id, ROUTE_ORDER);
    assert_true(r.method_ok);
    assert_int_equal(r.path_id, 77);
    route_match("GET", "/orders/0", &r);
    assert_true(r.bad_id);
    route_match("POST", "/orders/77", &r);
    assert_false(r.method_ok);
    assert_string_equal(r.allow, "GET, HEAD");
}

/* RFC 9112 6.1 and 6.3: one framing or none. A field name starting with
 * '~' stands for a folded field (the name without it). */
static int framing(int http10, const char *const *fields, char *err)
{
    req_framing f = {.http10 = http10};
    for (int i = 0; fields[i]; i += 2)
        req_framing_add(&f, fields[i] + (fields[i][0] == '~'), fields[i + 1],
                        fields[i][0] == '~');
    return req_check_framing(&f, err, 200);
}

static void test_a_body_framed_two_ways_is_refused(void **state)
{
    (void)state;
    char err[200];
    const char *none[] = {"Host", "x", NULL};
    const char *length[] = {"content-length", "5", NULL};
    const char *chunked[] = {"Transfer-Encoding", "Chunked", NULL};
    assert_int_equal(framing(0, none, err), REQ_OK);
    assert_int_equal(framing(0, length, err), REQ_OK);
    assert_int_equal(framing(0, chunked, err), REQ_OK);
    assert_int_equal(framing(1, length, err), REQ_OK);

    const char *both[] = {"Content-Length", "5", "Transfer-Encoding", "chunked", NULL};
    assert_int_equal(framing(0, both, err), REQ_ERR_FRAMING);
    assert_non_null(strstr(err, "both Content-Length and Transfer-Encoding"));
    const char *two[] = {"Content-Length", "5", "Content-Length", "60", NULL};
    assert_int_equal(framing(0, two, err), REQ_ERR_FRAMING);
    const char *same[] = {"Content-Length", "5", "Content-Length", "5", NULL};
    assert_int_equal(framing(0, same, err), REQ_ERR_FRAMING);
    assert_int_equal(framing(1, chunked, err), REQ_ERR_FRAMING);
    assert_non_null(strstr(err, "HTTP/1.0"));

    const char *unknown[] = {"Transfer-Encoding", "xchunked", NULL};
    assert_int_equal(framing(0, unknown, err), REQ_ERR_CODING);
    assert_non_null(strstr(err, "'xchunked'"));
    const char *gzip[] = {"Transfer-Encoding", "gzip, chunked", NULL};
    assert_int_equal(framing(0, gzip, err), REQ_ERR_CODING);
    const char *twice[] = {"Transfer-Encoding", "chunked", "Transfer-Encoding", "chunked", NULL};
    assert_int_equal(framing(0, twice, err), REQ_ERR_FRAMING);
    assert_non_null(strstr(err, "(and more fields)"));

    /* what libmicrohttpd hands on for "Transfer-Encoding : chunked" and for
     * a folded "Transfer-Encoding: x\r\n chunked" */
    const char *blank[] = {"Content-Length", "4", "Transfer-Encoding ", "chunked", NULL};
    assert_int_equal(framing(0, blank, err), REQ_ERR_FRAMING);
    assert_non_null(strstr(err, "'Transfer-Encoding '"));
    const char *folded[] = {"~Transfer-Encodingchunked", "x", NULL};
    assert_int_equal(framing(0, folded, err), REQ_ERR_FRAMING);
    assert_non_null(strstr(err, "obs-fold"));
    const char *odd[] = {"X-Trace(1)", "a", NULL};
    assert_int_equal(framing(0, odd, err), REQ_ERR_FRAMING);
    const char *fine[] = {"X-Request_ID.v2", "a", "content-length", "0", NULL};
    assert_int_equal(framing(0, fine, err), REQ_OK);
}

/* libmicrohttpd 0.9.75 reads chunked only for the value "chunked" itself
 * (any case) and any other value to the connection's end; a proxy trims
 * blanks and drops empty list elements. Every shape between is refused. */
static void test_a_framing_field_libmicrohttpd_reads_otherwise_is_refused(void **state)
{
    (void)state;
    char err[200];
    const char *framed[] = {"chunked ", "chunked\t", "chunked,", ", chunked", "chunked, chunked",
                            "chunked,,", "", " ", "chunked\x0b", "chunked;x=1", NULL};
    for (int i = 0; framed[i]; i++) {
        const char *f[] = {"Transfer-Encoding", framed[i], NULL};
        assert_int_equal(framing(0, f, err), REQ_ERR_FRAMING);
    }
    const char *other[] = {"gzip", "chunked, gzip", "identity", "gzip ,chunked ", NULL};
    for (int i = 0; other[i]; i++) {
        const char *f[] = {"Transfer-Encoding", other[i], NULL};
        assert_int_equal(framing(0, f, err), REQ_ERR_CODING);
    }
    const char *cased[] = {"transfer-encoding", "CHUNKED", NULL};
    assert_int_equal(framing(0, cased, err), REQ_OK);
    const char *lengths[] = {"5 ", "+5", "5,5", "", "0x5", "5\t", NULL};
    for (int i = 0; lengths[i]; i++) {
        const char *f[] = {"Content-Length", lengths[i], NULL};
        assert_int_equal(framing(0, f, err), REQ_ERR_FRAMING);
    }
    const char *zeros[] = {"Content-Length", "005", NULL};
    assert_int_equal(framing(0, zeros, err), REQ_OK);
    /* a bare CR: libmicrohttpd keeps it in X-A's value, a proxy may end the line there */
    const char *cr[] = {"X-A", "a\rContent-Length: 5", NULL};
    assert_int_equal(framing(0, cr, err), REQ_ERR_FRAMING);
    assert_non_null(strstr(err, "carriage return"));
    /* any folded field, even one of no framing meaning: its name is not what was sent */
    const char *fold[] = {"~X-Ay", "x", NULL};
    assert_int_equal(framing(0, fold, err), REQ_ERR_FRAMING);
    const char *fold_into[] = {"~Transfer-Encoding", "chunked", NULL}; /* "Transfer-Encodin" + "g" */
    assert_int_equal(framing(0, fold_into, err), REQ_ERR_FRAMING);
    const char *empty[] = {"", "x", NULL};
    assert_int_equal(framing(0, empty, err), REQ_ERR_FRAMING);
}

/* Heads as nginx and Apache take them: 16 KiB with the request line, 100
 * fields, 8 KiB a line ("Name: value"); one past any of them is refused. */
static void test_a_head_past_its_limits_is_refused(void **state)
{
    (void)state;
    char err[200];
    req_head h = {0};
    for (int i = 0; i < RULE_HEAD_FIELDS_MAX; i++)
        req_head_add(&h, "X-F", 3, 20);
    assert_int_equal(req_check_head(&h, RULE_HEAD_MAX, err, sizeof(err)), REQ_OK);
    assert_int_equal(req_check_head(&h, RULE_HEAD_MAX + 1, err, sizeof(err)), REQ_ERR_HEAD);
    assert_non_null(strstr(err, "16384"));
    req_head_add(&h, "X-F", 3, 20);
    assert_int_equal(req_check_head(&h, 4000, err, sizeof(err)), REQ_ERR_HEAD);
    assert_non_null(strstr(err, "101 header fields"));

    req_head line = {0};
    req_head_add(&line, "Cookie", 6, RULE_HEAD_LINE_MAX - 8);
    assert_int_equal(req_check_head(&line, 9000, err, sizeof(err)), REQ_OK);
    req_head_add(&line, "X-Long", 6, RULE_HEAD_LINE_MAX - 7);
    assert_int_equal(req_check_head(&line, 9000, err, sizeof(err)), REQ_ERR_HEAD);
    assert_non_null(strstr(err, "'X-Long'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_body_with_every_field_is_accepted),
        cmocka_unit_test(test_reduce_body_optional_fields_default),
        cmocka_unit_test(test_request_id_limits),
        cmocka_unit_test(test_malformed_reduce_bodies_get_clear_errors),
        cmocka_unit_test(test_body_with_embedded_nul_is_refused),
        cmocka_unit_test(test_order_body_keeps_lines_in_client_order),
        cmocka_unit_test(test_order_with_the_most_lines_is_accepted),
        cmocka_unit_test(test_malformed_orders_name_the_line),
        cmocka_unit_test(test_item_bodies),
        cmocka_unit_test(test_item_bodies_carry_a_per_buyer_limit),
        cmocka_unit_test(test_orders_carry_a_buyer_id),
        cmocka_unit_test(test_reservation_bodies),
        cmocka_unit_test(test_extend_and_cancel_bodies),
        cmocka_unit_test(test_reservation_routes),
        cmocka_unit_test(test_path_ids_and_query_ints),
        cmocka_unit_test(test_routes_match_methods_and_ids),
        cmocka_unit_test(test_routes_name_the_role_each_method_needs),
        cmocka_unit_test(test_a_body_framed_two_ways_is_refused),
        cmocka_unit_test(test_a_framing_field_libmicrohttpd_reads_otherwise_is_refused),
        cmocka_unit_test(test_a_head_past_its_limits_is_refused),
    };
    return cmocka_run_group_tests_name("request", tests, NULL, NULL);
}
