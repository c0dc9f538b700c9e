/* test_lg_profile_runs.c - build/loadgen --api against real stockd replicas:
 * stockd's own profile (loadgen/profiles/stockd.json) gives the verdict the
 * built-in client gives on the same replicas (PASS under --lock redis, FAIL
 * with oversold and lost updates under --lock none), a profile without a sold
 * count FAILs the racing replicas from the outside, and a bad profile or a
 * mode --api does not drive is refused before anything is sent. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/harness.h"
#include "tests/support/lgrun.h"

#define STOCKD_PROFILE "loadgen/profiles/stockd.json"
#define RUN_TIMEOUT_MS 60000 /* hang detection only */

static th_redis redis;
static th_stockd locked[2];   /* --lock redis */
static th_stockd unlocked[2]; /* --lock none: the race */
static char dir[64], db[128], loadgen[256];
static char racing[160], outside[160]; /* stockd.json with workMs; and without sold */

/* stockd.json with changes: workMs in the buy's body (the race needs time in
 * the read-modify-write) and, when no_ledger, no sold or orders in the read. */
static int write_profile(const char *path, int no_ledger)
{
    json_t *p = json_load_file(STOCKD_PROFILE, 0, NULL);
    if (p == NULL)
        return -1;
    json_object_set_new(json_object_get(json_object_get(p, "buy"), "body"), "workMs",
                        json_integer(5));
    if (no_ledger) {
        json_object_del(json_object_get(p, "read"), "sold");
        json_object_del(json_object_get(p, "read"), "orders");
    }
    int rc = json_dump_file(p, path, JSON_INDENT(2));
    json_decref(p);
    return rc;
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(loadgen, sizeof(loadgen), "%s/loadgen", th_build_dir());
    if (th_tempdir("lg-profile-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    snprintf(racing, sizeof(racing), "%s/racing.json", dir);
    snprintf(outside, sizeof(outside), "%s/outside.json", dir);
    if (write_profile(racing, 0) != 0 || write_profile(outside, 1) != 0)
        return -1;
    const char *locked_flags[] = {"--allow-work-ms", NULL};
    const char *none_flags[] = {"--lock", "none", "--allow-work-ms", NULL};
    for (int i = 0; i < 2; i++)
        if (th_stockd_start(&locked[i], &redis, db, dir, locked_flags) != 0 ||
            th_stockd_start(&unlocked[i], &redis, db, dir, none_flags) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int i = 0; i < 2; i++)
        rc |= th_stockd_stop_clean(&locked[i]) | th_stockd_stop_clean(&unlocked[i]);
    th_redis_stop(&redis, 0);
    return rc;
}

typedef th_lg_outcome outcome;

/* Runs loadgen on both replicas of s with args (NULL-terminated) plus --json
 * (tests/support/lgrun.h). */
static outcome run_loadgen(int expect, const th_stockd *s, const char *const args[])
{
    char targets[256];
    snprintf(targets, sizeof(targets), "%s,%s", s[0].url, s[1].url);
    outcome o = th_lg_run(loadgen, dir, expect, (const char *[]){"--target", targets, NULL},
                          args, RUN_TIMEOUT_MS);
    assert_non_null(o.text);
    return o;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The report's violation kinds, each once, sorted and comma-joined. */
static void kinds_of(const outcome *o, char *buf, size_t size)
{
    const char *kinds[64];
    size_t n = 0, i, used = 0;
    json_t *v;
    json_array_foreach(json_object_get(o->json, "violations"), i, v) {
        const char *k = json_string_value(json_object_get(v, "kind"));
        size_t j = 0;
        while (j < n && strcmp(kinds[j], k) != 0)
            j++;
        if (j == n && n < 64)
            kinds[n++] = k;
    }
    qsort(kinds, n, sizeof(kinds[0]), by_name);
    buf[0] = '\0';
    for (i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "", kinds[i]);
}

/* The built-in client and the profile found the same kinds of violation. */
static void assert_same_kinds(const outcome *builtin, const outcome *api)
{
    char b[512], a[512];
    kinds_of(builtin, b, sizeof(b));
    kinds_of(api, a, sizeof(a));
    if (strcmp(a, b) != 0)
        fail_msg("the built-in client found {%s}, the profile {%s}", b, a);
}

static void test_stockd_profile_passes_where_the_builtin_client_passes(void **state)
{
    (void)state;
    const char *load[] = {"-n", "400", "--stock", "300", "-c", "16", NULL};
    outcome builtin = run_loadgen(0, locked, load);
    outcome api = run_loadgen(0, locked, (const char *[]){"--api", STOCKD_PROFILE, "-n", "400",
                                                          "--stock", "300", "-c", "16", NULL});
    assert_int_equal(builtin.status, 0);
    assert_int_equal(api.status, 0);
    /* the same sale: every unit sold, the rest refused as sold out */
    json_t *bo = json_object_get(builtin.json, "outcomes"), *ao = json_object_get(api.json,
                                                                                   "outcomes");
    assert_int_equal(json_integer_value(json_object_get(ao, "ok")), 300);
    assert_int_equal(json_integer_value(json_object_get(ao, "ok")),
                     json_integer_value(json_object_get(bo, "ok")));
    assert_int_equal(json_integer_value(json_object_get(ao, "insufficient_stock")), 100);
    assert_non_null(strstr(api.text, "VERDICT: PASS"));
    /* the header names the profile's buy, and no workMs (stockd's field) */
    assert_non_null(strstr(api.text, "stockd.json, POST /reduceStock,"));
    assert_null(strstr(api.text, "workMs"));
    assert_same_kinds(&builtin, &api);
    th_lg_outcome_free(&builtin);
    th_lg_outcome_free(&api);
}

static void test_stockd_profile_fails_where_the_builtin_client_fails(void **state)
{
    (void)state;
    outcome builtin = run_loadgen(1, unlocked, (const char *[]){"-n", "400", "--stock", "300",
                                                                "-c", "16", "--work-ms", "5",
                                                                NULL});
    outcome api = run_loadgen(1, unlocked, (const char *[]){"--api", racing, "-n", "400",
                                                            "--stock", "300", "-c", "16", NULL});
    assert_int_equal(builtin.status, 1);
    assert_int_equal(api.status, 1);
    assert_true(th_lg_has_violation(&builtin, "oversold") &&
                th_lg_has_violation(&builtin, "lost_updates"));
    assert_true(th_lg_has_violation(&api, "oversold") &&
                th_lg_has_violation(&api, "lost_updates"));
    assert_same_kinds(&builtin, &api);
    th_lg_outcome_free(&builtin);
    th_lg_outcome_free(&api);
}

static void test_a_profile_without_sold_fails_the_race_from_the_outside(void **state)
{
    (void)state;
    outcome api = run_loadgen(1, unlocked, (const char *[]){"--api", outside, "-n", "400",
                                                            "--stock", "300", "-c", "16", NULL});
    assert_int_equal(api.status, 1);
    assert_non_null(strstr(api.text, "no sold count (the outside verdict)"));
    assert_true(th_lg_has_violation(&api, "oversold") ||
                th_lg_has_violation(&api, "lost_updates"));
    th_lg_outcome_free(&api);
    /* and passes a service that holds its lock */
    api = run_loadgen(0, locked, (const char *[]){"--api", outside, "-n", "200", "--stock",
                                                  "150", NULL});
    assert_int_equal(api.status, 0);
    th_lg_outcome_free(&api);
}

static void test_an_existing_item_is_restocked_through_set_stock(void **state)
{
    (void)state;
    /* an item made by one run, restocked to 50 and sold out by the next */
    outcome first = run_loadgen(0, locked, (const char *[]){"--api", STOCKD_PROFILE, "-n", "5",
                                                            NULL});
    json_t *item = json_array_get(json_object_get(first.json, "items"), 0);
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(item, "id")));
    outcome o = run_loadgen(0, locked, (const char *[]){"--api", STOCKD_PROFILE, "--item", id,
                                                        "--stock", "50", "-n", "80", NULL});
    assert_non_null(strstr(o.text, "stock 50 -> 0"));
    th_lg_outcome_free(&first);
    th_lg_outcome_free(&o);
}

static void test_bad_profiles_and_modes_it_cannot_drive_exit_2(void **state)
{
    (void)state;
    char bad[160];
    snprintf(bad, sizeof(bad), "%s/bad.json", dir);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fputs("{\"buy\":{\"path\":\"/b\"},\"answers\":[{\"status\":[200],\"class\":\"retri\"}],"
          "\"read\":{\"path\":\"/r\",\"stock\":\"/s\"}}", f);
    fclose(f);
    outcome o = run_loadgen(2, locked, (const char *[]){"--api", bad, NULL});
    assert_non_null(strstr(o.text, "answers[0].class: \"retri\" is not one of"));
    th_lg_outcome_free(&o);
    o = run_loadgen(2, locked, (const char *[]){"--api", STOCKD_PROFILE, "--buyers", "10", NULL});
    assert_non_null(strstr(o.text, "--api"));
    th_lg_outcome_free(&o);
    /* a scenario whose expectations are stockd's */
    o = run_loadgen(2, locked, (const char *[]){"--api", STOCKD_PROFILE, "-s", "interrupt", NULL});
    assert_non_null(strstr(o.text, "--api runs --scenario hot or spread"));
    th_lg_outcome_free(&o);
    /* --retry when the buy names no {request}: a resend would be a second purchase */
    json_t *p = json_load_file(STOCKD_PROFILE, 0, NULL);
    assert_non_null(p);
    json_object_del(json_object_get(json_object_get(p, "buy"), "body"), "requestId");
    snprintf(bad, sizeof(bad), "%s/no-request.json", dir);
    assert_int_equal(json_dump_file(p, bad, 0), 0);
    json_decref(p);
    o = run_loadgen(2, locked, (const char *[]){"--api", bad, "--retry", NULL});
    assert_non_null(strstr(o.text, "names no {request}"));
    th_lg_outcome_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stockd_profile_passes_where_the_builtin_client_passes),
        cmocka_unit_test(test_stockd_profile_fails_where_the_builtin_client_fails),
        cmocka_unit_test(test_a_profile_without_sold_fails_the_race_from_the_outside),
        cmocka_unit_test(test_an_existing_item_is_restocked_through_set_stock),
        cmocka_unit_test(test_bad_profiles_and_modes_it_cannot_drive_exit_2),
    };
    return cmocka_run_group_tests_name("lg_profile_runs", tests, group_setup, group_teardown);
}
