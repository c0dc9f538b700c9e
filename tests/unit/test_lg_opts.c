/* test_lg_opts.c - loadgen's command line and scenarios: defaults, scenario
 * values overridden by flags, the duration/requests rule, compare labels, the
 * cart shape, and a clear usage error for each bad value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "loadgen/opts.h"
#include "loadgen/scenario.h"

#define T1 "--target", "http://127.0.0.1:8080"

/* Parses a NULL-terminated argument list (argv[0] added). */
static int parse_list(lg_opts *o, lg_err *err, const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"loadgen"; /* getopt permutes argv, never writes the strings */
    while (*args && argc < 63)
        argv[argc++] = (char *)*args++;
    argv[argc] = NULL;
    lg_err_clear(err);
    return lg_opts_parse(o, argc, argv, err);
}

#define PARSE(o, err, ...) parse_list((o), (err), (const char *const[]){__VA_ARGS__, NULL})

/* A usage error is all the user sees: it must name what was wrong. */
static void assert_says(const lg_err *err, const char *flag, const char *value, const char *says)
{
    if (strstr(err->msg, says) == NULL)
        fail_msg("'%s %s' gave \"%s\", expected it to mention %s", flag, value ? value : "",
                 err->msg, says);
}

/* Whether --help mentions what. */
static int usage_mentions(const char *what)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    lg_usage(f);
    fclose(f);
    int found = strstr(text, what) != NULL;
    free(text);
    return found;
}

/* --token and --token-file: a bearer token, checked, never echoed. */
static void test_token_from_a_flag_or_a_file_is_checked_and_never_shown(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1), LG_OK);
    assert_string_equal(o.token, "");
    assert_int_equal(PARSE(&o, &err, T1, "--token", "abc-DEF_1.2~3+4/5=="), LG_OK);
    assert_string_equal(o.token, "abc-DEF_1.2~3+4/5==");
    const char *bad[] = {"", "two words", "line\r\nX-Injected: 1", "=first", "a=b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(PARSE(&o, &err, T1, "--token", bad[i]), LG_ERR_USAGE);
        assert_says(&err, "--token", bad[i], "--token");
        if (bad[i][0])
            assert_null(strstr(err.msg, bad[i]));
    }
    char path[] = "/tmp/lg-token-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "file-token-123\n", 15), 15);
    close(fd);
    assert_int_equal(PARSE(&o, &err, T1, "--token-file", path), LG_OK);
    assert_string_equal(o.token, "file-token-123");
    unlink(path);
    assert_int_equal(PARSE(&o, &err, T1, "--token-file", path), LG_ERR_USAGE);
    assert_says(&err, "--token-file", path, path);
    assert_true(usage_mentions("--token-file FILE"));
}

static void test_defaults_need_only_a_target(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1), LG_OK);
    assert_int_equal(o.ntargets, 1);
    assert_string_equal(o.targets[0].url, "http://127.0.0.1:8080");
    assert_int_equal(o.requests, 1000);
    assert_int_equal(o.concurrency, 32);
    assert_int_equal(o.threads, 2);
    assert_int_equal(o.qmin, 1);
    assert_int_equal(o.qmax, 1);
    assert_string_equal(o.scenario, "");
}

static void test_targets_repeat_split_on_commas_and_lose_trailing_slashes(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "--target", "http://a:1/,http://b:2", "--target",
                           "http://c:3"),
                     LG_OK);
    assert_int_equal(o.ntargets, 3);
    assert_string_equal(o.targets[0].url, "http://a:1");
    assert_string_equal(o.targets[2].url, "http://c:3");
}

static void test_scenario_values_are_defaults_that_flags_override(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    /* the flag comes before --scenario and still wins */
    assert_int_equal(PARSE(&o, &err, "-c", "5", "--scenario", "hot", T1), LG_OK);
    assert_string_equal(o.scenario, "hot");
    assert_int_equal(o.concurrency, 5);
    assert_int_equal(o.stock, 100);
    assert_int_equal(o.requests, 1000);
    assert_int_equal(PARSE(&o, &err, "-s", "spread", T1), LG_OK);
    assert_int_equal(o.items, 50);
    assert_int_equal(o.qmax, 3);
    assert_int_equal(PARSE(&o, &err, "-s", "renew", T1, "--work-ms", "900"), LG_OK);
    assert_int_equal(o.work_ms, 900);
}

static void test_duration_alone_lifts_the_request_limit(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1, "-d", "500ms"), LG_OK);
    assert_int_equal(o.requests, 0);
    assert_true(o.duration_s > 0.49 && o.duration_s < 0.51);
    assert_int_equal(PARSE(&o, &err, T1, "-d", "2m", "-n", "10"), LG_OK);
    assert_int_equal(o.requests, 10);
    assert_true(o.duration_s == 120);
}

static void test_quantity_range_retry_and_rate(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1, "--quantity", "2-5", "--retry", "--rate", "250.5"),
                     LG_OK);
    assert_int_equal(o.qmin, 2);
    assert_int_equal(o.qmax, 5);
    assert_int_equal(o.retries, 3);
    assert_true(o.rate == 250.5);
    assert_int_equal(PARSE(&o, &err, T1, "--retry=7", "--quantity", "4"), LG_OK);
    assert_int_equal(o.retries, 7);
    assert_int_equal(o.qmax, 4);
    assert_int_equal(o.settle_s, 30);
    assert_int_equal(PARSE(&o, &err, T1, "--settle-s", "0"), LG_OK);
    assert_int_equal(o.settle_s, 0);
    assert_int_equal(o.history_ms, 5);
    assert_int_equal(PARSE(&o, &err, T1, "--history-ms", "0"), LG_OK);
    assert_int_equal(o.history_ms, 0);
}

static void test_cart_scenario_sends_carts_that_flags_reshape(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "-s", "cart", T1), LG_OK);
    assert_int_equal(o.lmin, 1);
    assert_int_equal(o.lmax, 5);
    assert_int_equal(o.items, 8);
    assert_int_equal(o.qmin, 1);
    assert_int_equal(o.qmax, 3);
    assert_int_equal(o.concurrency, 64);
    assert_int_equal(PARSE(&o, &err, "-s", "cart", T1, "--cart-lines", "3", "--items", "20",
                           "--quantity", "2"),
                     LG_OK);
    assert_int_equal(o.lmin, 3);
    assert_int_equal(o.lmax, 3);
    assert_int_equal(o.items, 20);
    assert_int_equal(o.qmax, 2);
    /* --cart-lines alone turns any run into carts; without it, /reduceStock */
    assert_int_equal(PARSE(&o, &err, T1, "--items", "40", "--cart-lines", "2-32"), LG_OK);
    assert_int_equal(o.lmin, 2);
    assert_int_equal(o.lmax, 32);
    assert_int_equal(PARSE(&o, &err, "-s", "hot", T1), LG_OK);
    assert_int_equal(o.lmax, 0);
}

static void test_cart_lines_must_fit_the_api_and_the_items(void **state)
{
    (void)state;
    const struct {
        const char *value, *items, *says;
    } cases[] = {
        {"0", "8", "--cart-lines: expected an integer from 1 to 32"},
        {"33", "40", "from 1 to 32"},
        {"4-2", "8", "runs backwards"},
        {"1-x", "8", "--cart-lines"},
        {"9", "8", "a cart of 9 lines needs 9 distinct items, the run has 8"},
        {"2-5", "1", "raise --items"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        lg_opts o;
        lg_err err;
        assert_int_equal(PARSE(&o, &err, T1, "--items", cases[i].items, "--cart-lines",
                               cases[i].value),
                         LG_ERR_USAGE);
        assert_says(&err, "--cart-lines", cases[i].value, cases[i].says);
    }
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1, "--item", "5", "--cart-lines", "2"), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, T1, "--get", "/health", "--cart-lines", "1"), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "drop --cart-lines"));
    assert_true(usage_mentions("--cart-lines"));
}

static void test_threads_are_capped_by_connections(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1, "-c", "3", "-t", "8"), LG_OK);
    assert_int_equal(o.threads, 3);
}

static void test_bad_values_are_usage_errors_naming_the_flag(void **state)
{
    (void)state;
    const struct {
        const char *flag, *value, *says;
    } cases[] = {
        {"-c", "0", "--concurrency"}, {"-c", "x", "--concurrency"}, {"-n", "-1", "--requests"},
        {"-d", "soon", "--duration"}, {"-d", "0", "--duration"}, {"-R", "0", "--rate"},
        {"--quantity", "5-2", "backwards"}, {"--quantity", "0", "--quantity"},
        {"--stock", "1e3", "--stock"}, {"--get", "health", "'/'"},
        {"--target", "localhost:8080", "http://host:port"},
        {"--target", "http://a:1/items", "no path"}, {"-s", "cold", "unknown scenario"},
        {"--timeout-ms", "0", "--timeout-ms"}, {"--retry=x", NULL, "--retry"},
        {"--settle-s", "-1", "--settle-s"}, {"--history-ms", "-5", "--history-ms"},
        {"--nope", NULL, "unknown option"}, {"-c", NULL, "needs a value"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        lg_opts o;
        lg_err err;
        int rc = cases[i].value ? PARSE(&o, &err, T1, cases[i].flag, cases[i].value)
                                : PARSE(&o, &err, T1, cases[i].flag);
        assert_int_equal(rc, LG_ERR_USAGE);
        assert_says(&err, cases[i].flag, cases[i].value, cases[i].says);
    }
}

/* --api drives one-line buys: string item ids are its own, and the modes that
 * speak stockd's other routes are refused with a usage error. */
static void test_api_takes_string_items_and_refuses_what_it_cannot_send(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1, "--api", "p.json", "--item", "sku-7", "--stock", "5"),
                     LG_OK);
    assert_string_equal(o.api_path, "p.json");
    assert_string_equal(o.item_arg, "sku-7");
    assert_true(o.item_id != 0 && o.stock_set);
    assert_int_equal(PARSE(&o, &err, T1, "--api", "p.json", "--item", "42"), LG_OK);
    assert_int_equal(o.item_id, 42);
    assert_false(o.stock_set);
    /* without --api an id is an integer, as before */
    assert_int_equal(PARSE(&o, &err, T1, "--item", "sku-7"), LG_ERR_USAGE);
    assert_says(&err, "--item", "sku-7", "--item: expected an integer");
    const char *const refused[][4] = {
        {"--buyers", "10", NULL, NULL}, {"-s", "flash", NULL, NULL},
        {"--cart-lines", "2", "--items", "3"}, {"-s", "cart", NULL, NULL},
        {"-s", "reserve", NULL, NULL}, {"--get", "/health", NULL, NULL},
        {"--work-ms", "5", NULL, NULL}, {"-s", "hot", "--work-ms", "5"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        const char *args[12] = {T1, "--api", "p.json"};
        int n = 4;
        for (int k = 0; k < 4 && refused[i][k]; k++)
            args[n++] = refused[i][k];
        args[n] = NULL;
        assert_int_equal(parse_list(&o, &err, args), LG_ERR_USAGE);
        assert_says(&err, refused[i][0], refused[i][1], "--api");
    }
    /* a scenario's workMs is stockd's: with --api it is not sent */
    assert_int_equal(PARSE(&o, &err, T1, "--api", "p.json", "-s", "renew"), LG_OK);
    assert_int_equal(o.work_ms, 0);
    assert_true(usage_mentions("--api FILE"));
}

static void test_inconsistent_combinations_are_refused(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "-n", "5"), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "no --target"));
    assert_int_equal(PARSE(&o, &err, T1, "-n", "0"), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, T1, "--item", "3", "--items", "2"), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "--target", "http://a:1,http://b:2,http://c:3", "-c", "2"),
                     LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "at least one connection"));
    assert_int_equal(PARSE(&o, &err, T1, "-s", "hot", "--get", "/health"), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, T1, "stray"), LG_ERR_USAGE);
}

static void test_compare_needs_labels_and_only_compare_takes_them(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "-s", "compare", "--target", "redis=http://a:1",
                           "--target", "none=http://b:2,atomic=http://c:3"),
                     LG_OK);
    assert_int_equal(o.ntargets, 3);
    assert_string_equal(o.targets[1].label, "none");
    assert_string_equal(o.targets[1].url, "http://b:2");
    assert_int_equal(PARSE(&o, &err, "-s", "compare", T1), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "--target", "redis=http://a:1"), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "-s", "compare", "--target", "redis=http://a:1", "--item",
                           "4"),
                     LG_ERR_USAGE);
}

static void test_help_and_list_need_no_target_but_check_every_flag(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "--help"), LG_OK);
    assert_true(o.help);
    assert_int_equal(PARSE(&o, &err, "--list"), LG_OK);
    assert_true(o.list);
    assert_int_equal(PARSE(&o, &err, "-s", "hot", "-c", "8", "--help"), LG_OK);
    assert_int_equal(PARSE(&o, &err, "--list", "--bogus"), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "-c", "many", "--help"), LG_ERR_USAGE);
    assert_true(usage_mentions("--scenario"));
}

static void test_every_scenario_is_listed_and_found(void **state)
{
    (void)state;
    const char *names[] = {"hot", "spread", "renew", "interrupt", "compare", "cart", "flash",
                           "reserve"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const lg_scenario *s = lg_scenario_find(names[i]);
        assert_non_null(s);
        assert_ptr_equal(lg_scenario_at((int)i), s);
        assert_true(strlen(s->summary) > 10);
    }
    assert_null(lg_scenario_at(8));
    assert_null(lg_scenario_find("warm"));
}

static void test_scenario_expectations(void **state)
{
    (void)state;
    char out[LG_EXPECT_MAX][LG_EXPECT_TEXT];
    lg_expect_in in;
    memset(&in, 0, sizeof(in));
    in.work_ms = 1500;
    in.counts[LG_OUT_OK] = 100;
    assert_int_equal(lg_scenario_expect("hot", &in, out), 1); /* never ran out */
    in.counts[LG_OUT_INSUFFICIENT] = 900;
    assert_int_equal(lg_scenario_expect("hot", &in, out), 0);
    in.ok_min_us = 1500000;
    assert_int_equal(lg_scenario_expect("renew", &in, out), 0);
    in.ok_min_us = 2000; /* answered long before workMs: the server ignored it */
    assert_int_equal(lg_scenario_expect("renew", &in, out), 1);
    assert_non_null(strstr(out[0], "--allow-work-ms"));
    in.counts[LG_OUT_LOCK_LOST] = 1;
    assert_int_equal(lg_scenario_expect("renew", &in, out), 2);
    assert_int_equal(lg_scenario_expect("interrupt", &in, out), 1);
    in.counts[LG_OUT_LOCK_INTERRUPTED] = 3;
    assert_int_equal(lg_scenario_expect("interrupt", &in, out), 0);
    assert_int_equal(lg_scenario_expect("spread", &in, out), 0);
    assert_int_equal(lg_scenario_expect("", &in, out), 0);
    assert_int_equal(lg_scenario_expect("cart", &in, out), 0);
    in.counts[LG_OUT_OK] = 0; /* every cart refused: no order was checked */
    assert_int_equal(lg_scenario_expect("cart", &in, out), 1);
    assert_non_null(strstr(out[0], "cart: no cart succeeded"));
    in.counts[LG_OUT_INSUFFICIENT] = 0;
    assert_int_equal(lg_scenario_expect("cart", &in, out), 2);
    assert_non_null(strstr(out[0], "cart: the stock never ran out"));
    memset(&in, 0, sizeof(in));
    in.counts[LG_OUT_OK] = 5;
    in.counts[LG_OUT_INSUFFICIENT] = 5;
    assert_int_equal(lg_scenario_expect("flash", &in, out), 0);
    in.counts[LG_OUT_TRANSPORT] = 1; /* one buyer left without an answer fails the sale */
    assert_int_equal(lg_scenario_expect("flash", &in, out), 1);
    assert_non_null(strstr(out[0], "every buyer must be answered"));
    in.counts[LG_OUT_INSUFFICIENT] = 0;
    in.counts[LG_OUT_TRANSPORT] = 0;
    assert_int_equal(lg_scenario_expect("flash", &in, out), 1);
    assert_non_null(strstr(out[0], "--buyers"));
}

static void test_flash_scenario_has_buyers_that_flags_override(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, T1), LG_OK);
    assert_int_equal(o.buyers, 0); /* no sale unless asked */
    assert_int_equal(o.procs, 1);
    assert_int_equal(PARSE(&o, &err, "-s", "flash", T1), LG_OK);
    assert_int_equal(o.buyers, 1000);
    assert_int_equal(o.stock, 500);
    assert_int_equal(o.items, 1);
    assert_int_equal(o.requests, 1000); /* one request a buyer */
    assert_int_equal(PARSE(&o, &err, "-s", "flash", "--buyers", "18000", "--procs", "3",
                           "--stock", "900", T1), LG_OK);
    assert_int_equal(o.buyers, 18000);
    assert_int_equal(o.procs, 3);
    assert_int_equal(o.requests, 18000);
    assert_int_equal(o.stock, 900);
    assert_int_equal(PARSE(&o, &err, "--buyers", "50", "-d", "5s", T1), LG_OK);
    assert_int_equal(o.requests, 50); /* a sale ends when every buyer did */
    assert_true(o.duration_s == 0);
    assert_true(usage_mentions("--buyers N"));
    assert_true(usage_mentions("--procs P"));
}

static void test_flash_flags_are_checked(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "--buyers", "0", T1), LG_ERR_USAGE);
    assert_says(&err, "--buyers", "0", "--buyers");
    assert_int_equal(PARSE(&o, &err, "--buyers", "10", "--procs", "0", T1), LG_ERR_USAGE);
    assert_says(&err, "--procs", "0", "--procs");
    assert_int_equal(PARSE(&o, &err, "--procs", "2", T1), LG_ERR_USAGE);
    assert_says(&err, "--procs", "2", "--buyers");
    assert_int_equal(PARSE(&o, &err, "--buyers", "2", "--procs", "3", T1), LG_ERR_USAGE);
    assert_says(&err, "--procs", "3", "more than --buyers");
    assert_int_equal(PARSE(&o, &err, "--buyers", "10", "--get", "/health", T1), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "--buyers", "10", "--cart-lines", "1", T1), LG_ERR_USAGE);
}

static void test_reserve_scenario_takes_its_flags_and_refuses_what_it_cannot_send(void **state)
{
    (void)state;
    lg_opts o;
    lg_err err;
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", T1), LG_OK);
    assert_int_equal(o.reserve, 1);
    assert_int_equal(o.hold_ms, 2000);
    assert_int_equal(o.share[0] + o.share[1] + o.share[2], 100);
    assert_int_equal(o.retries, 3); /* a killed replica's buyers go to the other one */
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--hold-ms", "1500", "--shares", "80/0/20",
                           "--buyer-ids", "50", "--per-buyer-limit", "2", T1), LG_OK);
    assert_int_equal(o.hold_ms, 1500);
    assert_int_equal(o.share[0], 80);
    assert_int_equal(o.share[2], 20);
    assert_int_equal(o.buyer_ids, 50);
    assert_int_equal(o.buyer_limit, 2);
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--shares", "80/10/20", T1), LG_ERR_USAGE);
    assert_says(&err, "--shares", "80/10/20", "adding up to 100");
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--shares", "80/20", T1), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--hold-ms", "0", T1), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--items", "2", T1), LG_ERR_USAGE);
    assert_says(&err, "--items", "reserve", "one item");
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--cart-lines", "1", T1), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "-d", "5s", T1), LG_ERR_USAGE);
    assert_says(&err, "--duration", "reserve", "--requests");
    assert_int_equal(PARSE(&o, &err, "--hold-ms", "1500", T1), LG_ERR_USAGE);
    assert_says(&err, "--hold-ms", "1500", "--scenario reserve");
    assert_int_equal(PARSE(&o, &err, "-s", "hot", "--shares", "80/0/20", T1), LG_ERR_USAGE);
    assert_int_equal(PARSE(&o, &err, "-s", "reserve", "--item", "7", "--per-buyer-limit", "2",
                           T1), LG_ERR_USAGE);
    assert_says(&err, "--item", "--per-buyer-limit", "drop --item");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_need_only_a_target),
        cmocka_unit_test(test_targets_repeat_split_on_commas_and_lose_trailing_slashes),
        cmocka_unit_test(test_scenario_values_are_defaults_that_flags_override),
        cmocka_unit_test(test_duration_alone_lifts_the_request_limit),
        cmocka_unit_test(test_quantity_range_retry_and_rate),
        cmocka_unit_test(test_cart_scenario_sends_carts_that_flags_reshape),
        cmocka_unit_test(test_cart_lines_must_fit_the_api_and_the_items),
        cmocka_unit_test(test_threads_are_capped_by_connections),
        cmocka_unit_test(test_bad_values_are_usage_errors_naming_the_flag),
        cmocka_unit_test(test_inconsistent_combinations_are_refused),
        cmocka_unit_test(test_compare_needs_labels_and_only_compare_takes_them),
        cmocka_unit_test(test_help_and_list_need_no_target_but_check_every_flag),
        cmocka_unit_test(test_every_scenario_is_listed_and_found),
        cmocka_unit_test(test_scenario_expectations),
        cmocka_unit_test(test_flash_scenario_has_buyers_that_flags_override),
        cmocka_unit_test(test_flash_flags_are_checked),
        cmocka_unit_test(test_reserve_scenario_takes_its_flags_and_refuses_what_it_cannot_send),
        cmocka_unit_test(test_api_takes_string_items_and_refuses_what_it_cannot_send),
        cmocka_unit_test(test_token_from_a_flag_or_a_file_is_checked_and_never_shown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
