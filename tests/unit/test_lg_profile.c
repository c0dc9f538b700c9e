/* test_lg_profile.c - the --api profile: the shipped stockd.json and a profile
 * of another shape parse; each kind of mistake is refused naming its key;
 * placeholders render typed, escaped as their place needs; answers are
 * classified by the first rule that matches, and those no rule matches fall
 * into the documented classes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/profile.h"

/* A shop of another shape: the item in the path, string ids, a form body,
 * sold out said by a field of a 200. */
static const char other_shop[] =
    "{\"name\": \"shop\", \"headers\": {\"X-Api-Key\": \"k-1\"},"
    " \"buy\": {\"method\": \"POST\", \"path\": \"/v2/products/{item}/purchase\","
    "   \"headers\": {\"Content-Type\": \"application/x-www-form-urlencoded\","
    "                 \"Idempotency-Key\": \"{request}\"},"
    "   \"body\": \"qty={quantity}&who={buyer}\"},"
    " \"answers\": ["
    "   {\"status\": [\"2xx\"], \"field\": \"/result\", \"equals\": \"sold_out\","
    "    \"class\": \"sold_out\"},"
    "   {\"status\": [\"2xx\"], \"field\": \"/result\", \"equals\": \"done\", \"class\": \"ok\","
    "    \"remaining\": \"/product/left\"},"
    "   {\"status\": [429], \"class\": \"retry\"},"
    "   {\"status\": [\"5xx\"], \"field\": \"/retryable\", \"equals\": true, \"class\": \"retry\"}"
    " ],"
    " \"create\": {\"path\": \"/v2/products\", \"body\": {\"title\": \"{name}\","
    "   \"inventory\": {\"count\": \"{stock}\"}, \"tags\": [\"load {name}\"]}, \"id\": \"/sku\"},"
    " \"read\": {\"path\": \"/v2/products/{item}\", \"stock\": \"/inventory/count\"}}";

static lg_profile *parse_ok(const char *text)
{
    lg_profile *p = NULL;
    lg_err err;
    lg_err_clear(&err);
    int rc = lg_profile_parse("t.json", text, strlen(text), &p, &err);
    if (rc != LG_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, LG_OK);
    assert_non_null(p);
    return p;
}

/* The message parsing text gives; it must be a usage error naming key. */
static void refused(const char *text, const char *key, const char *why)
{
    lg_profile *p = NULL;
    lg_err err;
    lg_err_clear(&err);
    assert_int_equal(lg_profile_parse("t.json", text, strlen(text), &p, &err), LG_ERR_USAGE);
    assert_null(p);
    char want[160];
    snprintf(want, sizeof(want), "profile t.json: %s: ", key);
    if (strncmp(err.msg, want, strlen(want)) != 0 || strstr(err.msg, why) == NULL)
        fail_msg("expected \"%s...%s\", got \"%s\"", want, why, err.msg);
}

static void test_shipped_stockd_profile_parses_with_a_ledger(void **state)
{
    (void)state;
    lg_profile *p = NULL;
    lg_err err;
    lg_err_clear(&err);
    assert_int_equal(lg_profile_load("loadgen/profiles/stockd.json", &p, &err), LG_OK);
    assert_string_equal(lg_profile_name(p), "stockd");
    assert_true(lg_profile_has_sold(p) && lg_profile_has_orders(p));
    assert_true(lg_profile_has(p, LG_PROFILE_CREATE) && lg_profile_has(p, LG_PROFILE_SET_STOCK));
    assert_false(lg_profile_head_varies(p, LG_PROFILE_BUY));
    int json = 0;
    assert_true(lg_profile_has_body(p, LG_PROFILE_BUY, &json) && json);
    lg_profile_id id = {7, NULL};
    lg_profile_vars v = {.item = &id, .quantity = 3, .request = "r-1", .buyer = "b-1"};
    char body[256];
    assert_true(lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, body,
                                  sizeof(body)) > 0);
    assert_string_equal(body, "{\"itemId\":7,\"quantity\":3,\"requestId\":\"r-1\","
                              "\"buyerId\":\"b-1\"}");
    lg_profile_free(p);
}

static void test_a_missing_file_is_a_usage_error(void **state)
{
    (void)state;
    lg_profile *p = NULL;
    lg_err err;
    assert_int_equal(lg_profile_load("/nonexistent/x.json", &p, &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--api /nonexistent/x.json"));
}

static void test_placeholders_are_typed_escaped_and_url_encoded(void **state)
{
    (void)state;
    lg_profile *p = parse_ok(other_shop);
    lg_profile_id id = {1, (char *)"sku 7/\"x\""};
    lg_profile_vars v = {.item = &id, .quantity = 2, .request = "r\"1", .buyer = "b&1",
                         .name = "a \"b\"", .stock = 40};
    char buf[512];
    assert_true(lg_profile_head_varies(p, LG_PROFILE_BUY));
    lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_PATH, &v, buf, sizeof(buf));
    assert_string_equal(buf, "/v2/products/sku%207%2F%22x%22/purchase");
    lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_HEADERS, &v, buf, sizeof(buf));
    assert_string_equal(buf, "X-Api-Key: k-1\r\n"
                             "Content-Type: application/x-www-form-urlencoded\r\n"
                             "Idempotency-Key: r\"1\r\n");
    int json = 1;
    assert_true(lg_profile_has_body(p, LG_PROFILE_BUY, &json));
    assert_int_equal(json, 0); /* a text body: its type is the profile's */
    lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, buf, sizeof(buf));
    assert_string_equal(buf, "qty=2&who=b&1");
    /* a JSON body: a sole placeholder is the typed value, inside text it is escaped */
    lg_profile_render(p, LG_PROFILE_CREATE, LG_PROFILE_BODY, &v, buf, sizeof(buf));
    assert_string_equal(buf, "{\"title\":\"a \\\"b\\\"\",\"inventory\":{\"count\":40},"
                             "\"tags\":[\"load a \\\"b\\\"\"]}");
    lg_profile_free(p);
}

static void test_a_string_item_id_is_a_json_string_and_an_integer_a_number(void **state)
{
    (void)state;
    lg_profile *p = parse_ok(
        "{\"buy\":{\"path\":\"/buy\",\"body\":{\"id\":\"{item}\",\"note\":\"for {item}\"}},"
        "\"answers\":[{\"status\":[200],\"class\":\"ok\"}],"
        "\"read\":{\"path\":\"/i/{item}\",\"stock\":\"/s\"}}");
    char buf[128];
    lg_profile_id s = {1, (char *)"sku-7"}, n = {42, NULL};
    lg_profile_vars v = {.item = &s, .request = "r", .buyer = "b"};
    lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, buf, sizeof(buf));
    assert_string_equal(buf, "{\"id\":\"sku-7\",\"note\":\"for sku-7\"}");
    v.item = &n;
    lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, buf, sizeof(buf));
    assert_string_equal(buf, "{\"id\":42,\"note\":\"for 42\"}");
    /* too small a buffer, or a placeholder without a value, fails */
    assert_int_equal(lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, buf, 8), -1);
    v.item = NULL;
    assert_int_equal(lg_profile_render(p, LG_PROFILE_BUY, LG_PROFILE_BODY, &v, buf,
                                       sizeof(buf)), -1);
    lg_profile_free(p);
}

static void test_each_kind_of_mistake_names_its_key(void **state)
{
    (void)state;
    const char *buy = "\"buy\":{\"path\":\"/b\"},";
    const char *read = "\"read\":{\"path\":\"/r/{item}\",\"stock\":\"/s\"}";
    const char *ans = "\"answers\":[{\"status\":[200],\"class\":\"ok\"}],";
    char text[1024];
    refused("[1]", "(top)", "expected a JSON object");
    refused("{\"buy\":", "(file)", "not JSON");
    snprintf(text, sizeof(text), "{%s%s%s,\"extra\":1}", buy, ans, read);
    refused(text, "extra", "unknown key");
    snprintf(text, sizeof(text), "{%s%s}", buy, read);
    refused(text, "answers", "missing");
    snprintf(text, sizeof(text), "{%s%s}", ans, read);
    refused(text, "buy", "missing");
    snprintf(text, sizeof(text), "{%s%s\"read\":{\"path\":\"/r\"}}", buy, ans);
    refused(text, "read.stock", "missing");
    snprintf(text, sizeof(text),
             "{%s\"answers\":[{\"status\":[200],\"class\":\"ok\"},{\"status\":[503],"
             "\"class\":\"ok\"},{\"status\":[503],\"class\":\"retri\"}],%s}", buy, read);
    refused(text, "answers[2].class",
            "\"retri\" is not one of ok, sold_out, retry, refused, unknown");
    snprintf(text, sizeof(text), "{%s\"answers\":[{\"status\":[\"6xx\"],\"class\":\"ok\"}],%s}",
             buy, read);
    refused(text, "answers[0].status", "entry 0");
    snprintf(text, sizeof(text), "{%s\"answers\":[{\"status\":[200],\"class\":\"ok\","
             "\"remaining\":\"left\"}],%s}", buy, read);
    refused(text, "answers[0].remaining", "not a JSON pointer");
    snprintf(text, sizeof(text), "{%s\"answers\":[{\"status\":[409],\"class\":\"sold_out\","
             "\"remaining\":\"/left\"}],%s}", buy, read);
    refused(text, "answers[0].remaining", "only an ok rule");
    snprintf(text, sizeof(text), "{%s\"answers\":[{\"status\":[409],\"class\":\"sold_out\","
             "\"field\":\"/e\"}],%s}", buy, read);
    refused(text, "answers[0].equals", "go together");
    snprintf(text, sizeof(text), "{\"buy\":{\"path\":\"/b/{sku}\"},%s%s}", ans, read);
    refused(text, "buy.path", "unknown placeholder {sku}");
    snprintf(text, sizeof(text), "{\"buy\":{\"path\":\"/b\",\"body\":{\"n\":\"{name}\"}},%s%s}",
             ans, read);
    refused(text, "buy.body", "{name} has no value here");
    snprintf(text, sizeof(text), "{\"buy\":{\"path\":\"/b\",\"body\":\"q={quantity}\"},%s%s}",
             ans, read);
    refused(text, "buy.body", "needs a Content-Type");
    snprintf(text, sizeof(text), "{\"buy\":{\"path\":\"/b\",\"method\":\"post\"},%s%s}", ans,
             read);
    refused(text, "buy.method", "capitals");
    snprintf(text, sizeof(text), "{\"headers\":{\"Host\":\"x\"},%s%s%s}", buy, ans, read);
    refused(text, "headers.Host", "sets this header itself");
    snprintf(text, sizeof(text), "{\"headers\":{\"X-A\":7},%s%s%s}", buy, ans, read);
    refused(text, "headers.X-A", "expected a string");
    snprintf(text, sizeof(text), "{%s%s%s,\"create\":{\"path\":\"/c\"}}", buy, ans, read);
    refused(text, "create.id", "missing");
    snprintf(text, sizeof(text), "{%s%s\"read\":{\"path\":\"/r\",\"stock\":\"/s\","
             "\"sold\":\"/a~2\"}}", buy, ans);
    refused(text, "read.sold", "~0 or ~1");
    snprintf(text, sizeof(text), "{%s%s\"read\":{\"path\":\"/r\",\"stock\":\"/s\","
             "\"body\":{}}}", buy, ans);
    refused(text, "read.body", "unknown key");
}

static lg_answer classify(const lg_profile *p, long status, const char *body)
{
    lg_answer a;
    lg_profile_classify(p, status, body, body ? strlen(body) : 0, &a);
    return a;
}

static void test_the_first_matching_rule_decides(void **state)
{
    (void)state;
    lg_profile *p = parse_ok(other_shop);
    lg_answer a = classify(p, 200, "{\"result\":\"done\",\"product\":{\"left\":12}}");
    assert_int_equal(a.outcome, LG_OUT_OK);
    assert_int_equal(a.remaining, 12);
    assert_int_equal(a.quantity, -1);
    a = classify(p, 200, "{\"result\":\"sold_out\"}");
    assert_int_equal(a.outcome, LG_OUT_INSUFFICIENT);
    assert_string_equal(a.code, "sold_out");
    assert_int_equal(a.remaining, -1);
    assert_int_equal(classify(p, 429, "").outcome, LG_OUT_RETRY);
    assert_int_equal(classify(p, 502, "{\"retryable\":true}").outcome, LG_OUT_RETRY);
    /* an ok without an integer where remaining should be is malformed */
    a = classify(p, 200, "{\"result\":\"done\",\"product\":{\"left\":\"12\"}}");
    assert_int_equal(a.outcome, LG_OUT_MALFORMED);
    assert_non_null(strstr(a.why, "/product/left"));
    lg_profile_free(p);
    /* rule order: a catch-all first hides the rules after it */
    p = parse_ok("{\"buy\":{\"path\":\"/b\"},\"answers\":["
                 "{\"status\":[\"4xx\"],\"class\":\"refused\"},"
                 "{\"status\":[409],\"field\":\"/error\",\"equals\":\"out\","
                 "\"class\":\"sold_out\"},"
                 "{\"status\":[\"2xx\"],\"field\":\"/n\",\"equals\":3,\"class\":\"ok\"},"
                 "{\"status\":[\"5xx\"],\"field\":\"/a/1/b~1c\",\"equals\":\"x\","
                 "\"class\":\"unknown\"}],"
                 "\"read\":{\"path\":\"/r\",\"stock\":\"/s\"}}");
    assert_int_equal(classify(p, 409, "{\"error\":\"out\"}").outcome, LG_OUT_REFUSED);
    assert_int_equal(classify(p, 201, "{\"n\":3}").outcome, LG_OUT_OK);
    assert_int_equal(classify(p, 201, "{\"n\":3}").remaining, -1);
    assert_int_equal(classify(p, 500, "{\"a\":[0,{\"b/c\":\"x\"}]}").outcome, LG_OUT_UNKNOWN);
    lg_profile_free(p);
}

static void test_answers_no_rule_matches_fall_into_the_documented_classes(void **state)
{
    (void)state;
    lg_profile *p = parse_ok(other_shop);
    /* a 2xx whose field says neither done nor sold_out, or no JSON at all */
    lg_answer a = classify(p, 200, "{\"result\":\"queued\"}");
    assert_int_equal(a.outcome, LG_OUT_MALFORMED);
    assert_non_null(strstr(a.why, "matched no answers rule"));
    assert_int_equal(classify(p, 200, "<html>").outcome, LG_OUT_MALFORMED);
    assert_int_equal(classify(p, 200, NULL).outcome, LG_OUT_MALFORMED);
    assert_int_equal(classify(p, 404, "{}").outcome, LG_OUT_OTHER_4XX);
    /* a 500 may have applied it: undetermined, never a refusal */
    a = classify(p, 500, "{\"retryable\":false}");
    assert_int_equal(a.outcome, LG_OUT_UNKNOWN);
    assert_true(LG_OUT_UNDETERMINED(a.outcome));
    assert_int_equal(classify(p, 302, "").outcome, LG_OUT_UNKNOWN);
    lg_profile_free(p);
}

static void test_item_ids_on_the_command_line(void **state)
{
    (void)state;
    lg_profile_id id;
    lg_err err;
    assert_int_equal(lg_profile_id_parse("42", 0, &id, &err), LG_OK);
    assert_int_equal(id.num, 42);
    assert_null(id.str);
    assert_int_equal(lg_profile_id_parse("sku-7", 0, &id, &err), LG_OK);
    assert_int_equal(id.num, 1);
    assert_string_equal(id.str, "sku-7");
    lg_profile_id_free(&id);
    assert_int_equal(lg_profile_id_parse("a\nb", 0, &id, &err), LG_ERR_USAGE);
    assert_int_equal(lg_profile_id_parse("", 0, &id, &err), LG_ERR_USAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_stockd_profile_parses_with_a_ledger),
        cmocka_unit_test(test_a_missing_file_is_a_usage_error),
        cmocka_unit_test(test_placeholders_are_typed_escaped_and_url_encoded),
        cmocka_unit_test(test_a_string_item_id_is_a_json_string_and_an_integer_a_number),
        cmocka_unit_test(test_each_kind_of_mistake_names_its_key),
        cmocka_unit_test(test_the_first_matching_rule_decides),
        cmocka_unit_test(test_answers_no_rule_matches_fall_into_the_documented_classes),
        cmocka_unit_test(test_item_ids_on_the_command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
