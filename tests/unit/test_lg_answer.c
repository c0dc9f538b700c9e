/* test_lg_answer.c - classifying stockd's answers: every documented status and
 * error code, malformed bodies that must neither crash nor count as a
 * deduction, and POST /orders answers read line by line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/answer.h"

static lg_answer parse(long status, const char *body)
{
    lg_answer a;
    lg_answer_parse(status, body, body ? strlen(body) : 0, &a);
    return a;
}

static void test_200_with_quantity_and_remaining_is_ok(void **state)
{
    (void)state;
    lg_answer a = parse(200, "{\"itemId\":1,\"quantity\":2,\"remaining\":41,\"orderId\":17,"
                             "\"requestId\":\"x\",\"replayed\":false}");
    assert_int_equal(a.outcome, LG_OUT_OK);
    assert_int_equal(a.quantity, 2);
    assert_int_equal(a.remaining, 41);
    assert_int_equal(a.replayed, 0);
    a = parse(200, "{\"quantity\":2,\"remaining\":41,\"replayed\":true}");
    assert_int_equal(a.outcome, LG_OUT_OK);
    assert_int_equal(a.replayed, 1);
}

static void test_error_codes_map_to_their_classes(void **state)
{
    (void)state;
    const struct {
        long status;
        const char *code;
        int outcome;
    } cases[] = {
        {409, "insufficient_stock", LG_OUT_INSUFFICIENT},
        {503, "lock_timeout", LG_OUT_LOCK_TIMEOUT},
        {503, "lock_interrupted", LG_OUT_LOCK_INTERRUPTED},
        {503, "lock_lost", LG_OUT_LOCK_LOST},
        {503, "redis_unavailable", LG_OUT_REDIS_UNAVAILABLE},
        {503, "storage_busy", LG_OUT_OTHER_5XX},
        {503, "storage_unavailable", LG_OUT_OTHER_5XX},
        {503, "commit_unknown", LG_OUT_COMMIT_UNKNOWN},
        {503, "shutting_down", LG_OUT_OTHER_5XX},
        {500, "storage_error", LG_OUT_OTHER_5XX},
        {500, "lock_timeout", LG_OUT_OTHER_5XX}, /* the code counts only with its status */
        {409, "request_id_conflict", LG_OUT_OTHER_4XX},
        {400, "invalid_json", LG_OUT_OTHER_4XX},
        {404, "item_not_found", LG_OUT_OTHER_4XX},
        {413, "body_too_large", LG_OUT_OTHER_4XX},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"error\":\"%s\",\"message\":\"m\"}", cases[i].code);
        lg_answer a = parse(cases[i].status, body);
        assert_int_equal(a.outcome, cases[i].outcome);
        assert_string_equal(a.code, cases[i].code);
    }
}

static void test_insufficient_stock_carries_remaining_and_requested(void **state)
{
    (void)state;
    lg_answer a = parse(409, "{\"error\":\"insufficient_stock\",\"message\":\"no\","
                             "\"itemId\":1,\"remaining\":0,\"requested\":3}");
    assert_int_equal(a.outcome, LG_OUT_INSUFFICIENT);
    assert_int_equal(a.remaining, 0);
    assert_int_equal(a.quantity, 3);
    a = parse(409, "{\"error\":\"insufficient_stock\"}");
    assert_int_equal(a.outcome, LG_OUT_INSUFFICIENT);
    assert_int_equal(a.remaining, -1); /* unknown, not zero */
}

static void test_malformed_200s_are_never_deductions(void **state)
{
    (void)state;
    const char *bodies[] = {
        NULL, "", "not json", "[]", "{}", "{\"quantity\":1}", "{\"remaining\":1}",
        "{\"quantity\":\"1\",\"remaining\":1}", "{\"quantity\":1.5,\"remaining\":1}",
        "{\"quantity\":1,\"remaining\":null}", "{\"quantity\":1,\"remaining\":1", "\xff\xfe",
        "{\"quantity\":1,\"quantity\":2,\"remaining\":1}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        lg_answer a = parse(200, bodies[i]);
        assert_int_equal(a.outcome, LG_OUT_MALFORMED);
        assert_true(a.why[0] != '\0');
    }
}

static void test_odd_statuses_and_bodies_fall_into_other_classes(void **state)
{
    (void)state;
    assert_int_equal(parse(503, "<html>busy</html>").outcome, LG_OUT_OTHER_5XX);
    assert_int_equal(parse(409, NULL).outcome, LG_OUT_OTHER_4XX);
    assert_int_equal(parse(503, "{\"message\":\"no code\"}").outcome, LG_OUT_OTHER_5XX);
    assert_int_equal(parse(503, "{\"error\":7}").outcome, LG_OUT_OTHER_5XX);
    assert_int_equal(parse(201, "{\"quantity\":1,\"remaining\":1}").outcome, LG_OUT_MALFORMED);
    assert_int_equal(parse(302, "").outcome, LG_OUT_MALFORMED);
    assert_int_equal(parse(0, "").outcome, LG_OUT_MALFORMED);
    assert_int_equal(parse(700, "").outcome, LG_OUT_MALFORMED);
    lg_answer a = parse(500, "{\"error\":\"storage_error\",\"message\":\"disk on fire\"}");
    assert_non_null(strstr(a.why, "disk on fire"));
}

static void test_body_is_read_only_up_to_len(void **state)
{
    (void)state;
    const char body[] = "{\"quantity\":1,\"remaining\":5}GARBAGE";
    lg_answer a;
    lg_answer_parse(200, body, strlen(body) - 7, &a);
    assert_int_equal(a.outcome, LG_OUT_OK);
}

static void test_raw_mode_goes_by_status_alone(void **state)
{
    (void)state;
    lg_answer a;
    lg_answer_status(200, &a);
    assert_int_equal(a.outcome, LG_OUT_OK);
    lg_answer_status(204, &a);
    assert_int_equal(a.outcome, LG_OUT_OK);
    lg_answer_status(404, &a);
    assert_int_equal(a.outcome, LG_OUT_OTHER_4XX);
    lg_answer_status(503, &a);
    assert_int_equal(a.outcome, LG_OUT_OTHER_5XX);
    lg_answer_status(301, &a);
    assert_int_equal(a.outcome, LG_OUT_MALFORMED);
}

/* The cart the order tests ask for: item 1 x 2, item 7 x 1. */
static lg_answer parse_order(long status, const char *body, lg_answer_line lines[2])
{
    lines[0] = (lg_answer_line){1, 2, 99};
    lines[1] = (lg_answer_line){7, 1, 99};
    lg_answer a;
    lg_answer_parse_order(status, body, body ? strlen(body) : 0, lines, 2, &a);
    return a;
}

#define ORDER_LINES "\"lines\":[{\"itemId\":1,\"quantity\":2,\"remaining\":40}," \
                    "{\"itemId\":7,\"quantity\":1,\"remaining\":3}]"

static void test_created_or_replayed_order_gives_each_line_its_remaining(void **state)
{
    (void)state;
    lg_answer_line l[2];
    lg_answer a = parse_order(201, "{\"orderId\":12,\"requestId\":\"cart-17\","
                                   ORDER_LINES ",\"replayed\":false}", l);
    assert_int_equal(a.outcome, LG_OUT_OK);
    assert_int_equal(l[0].remaining, 40);
    assert_int_equal(l[1].remaining, 3);
    assert_int_equal(a.replayed, 0);
    assert_int_equal(a.remaining, -1); /* an order's remaining is per line */
    a = parse_order(200, "{\"orderId\":12," ORDER_LINES ",\"replayed\":true}", l);
    assert_int_equal(a.outcome, LG_OUT_OK);
    assert_int_equal(a.replayed, 1);
    assert_int_equal(l[1].remaining, 3);
}

static void test_order_answer_that_does_not_repeat_the_lines_is_malformed(void **state)
{
    (void)state;
    const char *bodies[] = {
        "{}", "{\"lines\":{}}", "{\"lines\":[]}",
        "{\"lines\":[{\"itemId\":1,\"quantity\":2,\"remaining\":40}]}",
        /* the lines swapped: the answer must keep the request's order */
        "{\"lines\":[{\"itemId\":7,\"quantity\":1,\"remaining\":3},"
        "{\"itemId\":1,\"quantity\":2,\"remaining\":40}]}",
        "{\"lines\":[{\"itemId\":1,\"quantity\":3,\"remaining\":40},"
        "{\"itemId\":7,\"quantity\":1,\"remaining\":3}]}",
        "{\"lines\":[{\"itemId\":1,\"quantity\":2,\"remaining\":40},"
        "{\"itemId\":7,\"quantity\":1,\"remaining\":\"3\"}]}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        lg_answer_line l[2];
        lg_answer a = parse_order(201, bodies[i], l);
        assert_int_equal(a.outcome, LG_OUT_MALFORMED);
        assert_true(a.why[0] != '\0');
        assert_int_equal(l[0].remaining, -1); /* nothing half-read is kept */
        assert_int_equal(l[1].remaining, -1);
    }
    lg_answer_line l[2];
    lg_answer a = parse_order(201, bodies[5], l);
    assert_non_null(strstr(a.why, "line 0 is item 1 x 3, asked item 1 x 2"));
}

static void test_refused_order_names_its_short_lines(void **state)
{
    (void)state;
    lg_answer_line l[2];
    lg_answer a = parse_order(409, "{\"error\":\"insufficient_stock\",\"message\":\"m\","
                                   "\"lines\":[{\"itemId\":7,\"remaining\":0,\"requested\":1},"
                                   "{\"itemId\":99,\"remaining\":0,\"requested\":1}]}",
                      l);
    assert_int_equal(a.outcome, LG_OUT_INSUFFICIENT);
    assert_int_equal(l[0].remaining, -1); /* not named short: no claim */
    assert_int_equal(l[1].remaining, 0);
    a = parse_order(409, "{\"error\":\"insufficient_stock\"}", l);
    assert_int_equal(a.outcome, LG_OUT_INSUFFICIENT);
    assert_int_equal(l[0].remaining + l[1].remaining, -2);
    a = parse_order(409, "{\"error\":\"request_id_conflict\",\"message\":\"other lines\"}", l);
    assert_int_equal(a.outcome, LG_OUT_OTHER_4XX);
    assert_int_equal(parse_order(503, "{\"error\":\"lock_lost\"}", l).outcome, LG_OUT_LOCK_LOST);
    assert_int_equal(parse_order(302, "", l).outcome, LG_OUT_MALFORMED);
}

static void test_outcome_names_are_stable(void **state)
{
    (void)state;
    assert_string_equal(lg_outcome_name(LG_OUT_OK), "ok");
    assert_string_equal(lg_outcome_name(LG_OUT_INSUFFICIENT), "insufficient_stock");
    assert_string_equal(lg_outcome_name(LG_OUT_TRANSPORT), "transport_error");
    assert_string_equal(lg_outcome_name(-1), "unknown");
    assert_string_equal(lg_outcome_name(LG_OUT_COUNT), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_200_with_quantity_and_remaining_is_ok),
        cmocka_unit_test(test_error_codes_map_to_their_classes),
        cmocka_unit_test(test_insufficient_stock_carries_remaining_and_requested),
        cmocka_unit_test(test_malformed_200s_are_never_deductions),
        cmocka_unit_test(test_odd_statuses_and_bodies_fall_into_other_classes),
        cmocka_unit_test(test_body_is_read_only_up_to_len),
        cmocka_unit_test(test_raw_mode_goes_by_status_alone),
        cmocka_unit_test(test_created_or_replayed_order_gives_each_line_its_remaining),
        cmocka_unit_test(test_order_answer_that_does_not_repeat_the_lines_is_malformed),
        cmocka_unit_test(test_refused_order_names_its_short_lines),
        cmocka_unit_test(test_outcome_names_are_stable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
