/* test_log.c - the log's two formats read back: values a client controls
 * (quotes, spaces, '=', backslashes, control bytes) come back whole and
 * never make a field or a line of their own; JSON lines parse with jansson;
 * a line too long keeps whole values and counts what it left out; lines
 * written by many threads at once never interleave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <unistd.h>

#include "server/log.h"
#include "tests/support/logline.h"

/* ---- stderr captured into a pipe, read by a thread of its own ---- */

struct capture {
    int saved, rd;
    pthread_t reader;
    char *text;
    size_t len, cap;
};

static void *drain(void *arg)
{
    struct capture *c = arg;
    for (;;) {
        if (c->len + 65536 > c->cap)
            c->text = realloc(c->text, c->cap = 2 * c->cap + 65536);
        ssize_t n = read(c->rd, c->text + c->len, c->cap - c->len - 1);
        if (n <= 0)
            break;
        c->len += (size_t)n;
    }
    c->text[c->len] = '\0';
    return NULL;
}

static void capture_start(struct capture *c)
{
    int fds[2];
    memset(c, 0, sizeof(*c));
    assert_int_equal(pipe(fds), 0);
    c->rd = fds[0];
    c->saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    pthread_create(&c->reader, NULL, drain, c);
}

/* Everything logged since capture_start (the caller frees it). */
static char *capture_end(struct capture *c)
{
    dup2(c->saved, STDERR_FILENO); /* the pipe's last writer goes: the reader sees its end */
    close(c->saved);
    pthread_join(c->reader, NULL);
    close(c->rd);
    return c->text;
}

static int setup(void **state)
{
    (void)state;
    log_set_level(LOG_INFO);
    log_set_format(LOG_FORMAT_TEXT);
    return 0;
}

/* The one line fn logs (with the format set), without its newline. */
static char *one_line(enum log_format format, const log_field *f, int n)
{
    struct capture c;
    log_set_format(format);
    capture_start(&c);
    log_event(LOG_INFO, "order placed", f, n);
    char *text = capture_end(&c);
    size_t len = strlen(text);
    assert_true(len > 0 && len <= LOG_LINE_MAX);
    assert_int_equal(text[len - 1], '\n');
    assert_ptr_equal(strchr(text, '\n'), text + len - 1); /* one line, whatever the values */
    text[len - 1] = '\0';
    return text;
}

/* Strings a client could send, as requestIds or in a path: each must come
 * back as it went in, as the value of its own key. */
static const char *const hostile[] = {
    "plain-1", "a b", "x\" level=error msg=\"forged", "k=v", "back\\slash", "end\\",
    "\\\"", "", "-", "--", "new\nline level=error", "cr\rtab\t", "\x01\x1f\x7f",
    "caf\xc3\xa9", "\xff\xfe", "{\"json\":true}", "a,b", "=", "\"", "'single'",
};
#define NHOSTILE (int)(sizeof(hostile) / sizeof(hostile[0]))

static void test_text_values_come_back_whole_and_forge_nothing(void **state)
{
    (void)state;
    for (int i = 0; i < NHOSTILE; i++) {
        log_field f[] = {LOG_STR("requestId", hostile[i]), LOG_INT("orderId", 7)};
        char *line = one_line(LOG_FORMAT_TEXT, f, 2);
        th_logfmt l;
        if (th_logfmt_parse(line, &l) != 0)
            fail_msg("not logfmt: %s", line);
        assert_int_equal(l.n, 5); /* ts level msg requestId orderId: no more */
        assert_string_equal(l.key[1], "level");
        assert_string_equal(l.val[1], "info");
        assert_string_equal(th_logfmt_get(&l, "msg", NULL), "order placed");
        assert_string_equal(th_logfmt_get(&l, "requestId", NULL), hostile[i]);
        assert_string_equal(th_logfmt_get(&l, "orderId", NULL), "7");
        free(line);
    }
}

static void test_plain_values_stay_bare_and_the_line_starts_with_ts(void **state)
{
    (void)state;
    log_field f[] = {LOG_STR("requestId", "order-1"), LOG_INT("units", -3),
                     LOG_MS("ms", 1.5), LOG_STR("key", "stock:lock:{1}"),
                     LOG_MS("slow", 12345.6789), LOG_MS("tiny", 0.0004), LOG_MS("neg", -0.25),
                     LOG_INT("min", INT64_MIN), LOG_INT("zero", 0)};
    char *line = one_line(LOG_FORMAT_TEXT, f, 9);
    const char *rest = strstr(line, "Z level=info");
    assert_non_null(rest);
    assert_memory_equal(line, "ts=20", 5);
    assert_string_equal(rest, "Z level=info msg=\"order placed\" requestId=order-1 units=-3 "
                              "ms=1.500 key=stock:lock:{1} slow=12345.679 tiny=0.000 "
                              "neg=-0.250 min=-9223372036854775808 zero=0");
    th_logfmt l;
    assert_int_equal(th_logfmt_parse(line, &l), 0);
    const char *ts = th_logfmt_get(&l, "ts", NULL); /* 2026-11-23T08:16:48.893Z */
    assert_int_equal(strlen(ts), 24);
    assert_true(ts[4] == '-' && ts[10] == 'T' && ts[13] == ':' && ts[19] == '.' && ts[23] == 'Z');
    free(line);
}

static void test_no_value_is_a_bare_dash_and_a_dash_is_quoted(void **state)
{
    (void)state;
    log_field f[] = {LOG_STR("requestId", NULL), LOG_STR("other", "-")};
    char *line = one_line(LOG_FORMAT_TEXT, f, 2);
    assert_non_null(strstr(line, " requestId=- other=\"-\""));
    th_logfmt l;
    assert_int_equal(th_logfmt_parse(line, &l), 0);
    int found;
    assert_null(th_logfmt_get(&l, "requestId", &found));
    assert_true(found);
    assert_string_equal(th_logfmt_get(&l, "other", NULL), "-");
    free(line);
    json_t *j = json_loads(line = one_line(LOG_FORMAT_JSON, f, 2), 0, NULL);
    assert_true(json_is_null(json_object_get(j, "requestId")));
    assert_string_equal(json_string_value(json_object_get(j, "other")), "-");
    json_decref(j);
    free(line);
}

static void test_text_lists_are_one_value(void **state)
{
    (void)state;
    long long items[] = {1, 22, 333};
    const char *keys[] = {"stock:lock:{1}", "stock:lock:{22}", "stock:lock:{333}"};
    const char *odd[] = {"a b", "c\"d"};
    log_field f[] = {LOG_INTS("items", items, 3), LOG_STRS("keys", keys, 3),
                     LOG_STRS("odd", odd, 2), LOG_INTS("none", items, 0)};
    char *line = one_line(LOG_FORMAT_TEXT, f, 4);
    assert_non_null(strstr(line, " items=1,22,333 keys=stock:lock:{1},stock:lock:{22},"
                                 "stock:lock:{333} odd=\"a b,c\\\"d\" none=\"\""));
    th_logfmt l;
    assert_int_equal(th_logfmt_parse(line, &l), 0);
    assert_string_equal(th_logfmt_get(&l, "odd", NULL), "a b,c\"d");
    free(line);
}

/* Every hostile string in every place a string goes, in one JSON line. */
static void test_json_lines_parse_with_their_types(void **state)
{
    (void)state;
    long long fences[] = {1795406620315248LL, 2};
    for (int i = 0; i < NHOSTILE; i++) {
        log_field f[] = {LOG_STR("requestId", hostile[i]), LOG_INT("orderId", 7),
                         LOG_MS("ms", 0.25), LOG_INTS("fences", fences, 2),
                         LOG_STRS("keys", &hostile[i], 1)};
        char *line = one_line(LOG_FORMAT_JSON, f, 5);
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (j == NULL)
            fail_msg("not JSON (%s): %s", e.text, line);
        assert_int_equal(json_object_size(j), 8);
        assert_string_equal(json_string_value(json_object_get(j, "level")), "info");
        assert_string_equal(json_string_value(json_object_get(j, "msg")), "order placed");
        assert_true(json_is_string(json_object_get(j, "ts")));
        assert_int_equal(json_integer_value(json_object_get(j, "orderId")), 7);
        assert_true(json_is_real(json_object_get(j, "ms")));
        json_t *fs = json_object_get(j, "fences");
        assert_int_equal(json_integer_value(json_array_get(fs, 0)), 1795406620315248LL);
        /* bytes outside ASCII come back as the code points of their values */
        const char *got = json_string_value(json_object_get(j, "requestId"));
        const unsigned char *want = (const unsigned char *)hostile[i];
        size_t k = 0;
        const unsigned char *g = (const unsigned char *)got;
        for (; *want; want++) {
            unsigned cp = g[k];
            if (cp >= 0x80)
                cp = ((cp & 0x1fu) << 6) | (g[k + 1] & 0x3fu), k++;
            k++;
            assert_int_equal(cp, *want);
        }
        assert_int_equal(got[k], '\0');
        json_decref(j);
        free(line);
    }
}

/* A cart's lists past LOG_LINE_MAX: whole elements only, then how many were
 * left out; a scalar field that no longer fits is counted at the end. */
static void check_long_line(enum log_format format)
{
    static char strs[64][201], after[3001];
    const char *keys[64];
    long long ints[64];
    for (int i = 0; i < 64; i++) {
        memset(strs[i], i % 2 ? '"' : 'k', 200); /* escapes that double in size */
        strs[i][200] = '\0';
        keys[i] = strs[i];
        ints[i] = 1000000000000000LL + i;
    }
    memset(after, 'a', 3000); /* can't fit once the keys are in */
    log_field f[] = {LOG_STR("requestId", "big"), LOG_INTS("fences", ints, 64),
                     LOG_STRS("keys", keys, 64), LOG_STR("after", after),
                     LOG_INTS("more", ints, 64)};
    char *line = one_line(format, f, 5);
    assert_true(strlen(line) + 1 <= LOG_LINE_MAX);
    long long kept = 0, left, fields_left, fences, more, more_left;
    int has_after;
    if (format == LOG_FORMAT_JSON) {
        json_t *j = json_loads(line, 0, NULL);
        if (j == NULL)
            fail_msg("cut JSON: %s", line);
        json_t *k = json_object_get(j, "keys");
        for (; kept < (long long)json_array_size(k); kept++)
            assert_string_equal(json_string_value(json_array_get(k, (size_t)kept)), strs[kept]);
        fences = (long long)json_array_size(json_object_get(j, "fences"));
        more = (long long)json_array_size(json_object_get(j, "more"));
        left = json_integer_value(json_object_get(j, "keysOmitted"));
        more_left = json_integer_value(json_object_get(j, "moreOmitted"));
        fields_left = json_integer_value(json_object_get(j, "fieldsOmitted"));
        has_after = json_object_get(j, "after") != NULL;
        json_decref(j);
    } else {
        th_logfmt l;
        if (th_logfmt_parse(line, &l) != 0)
            fail_msg("cut logfmt: %s", line);
        const char *k = th_logfmt_get(&l, "keys", NULL), *m = th_logfmt_get(&l, "more", NULL);
        for (const char *p = k; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
            assert_memory_equal(p, strs[kept], 200); /* each one whole */
            kept++;
        }
        assert_int_equal(strlen(k), kept * 201 - 1);
        fences = 1, more = m ? 1 : 0;
        for (const char *p = th_logfmt_get(&l, "fences", NULL); *p; p++)
            fences += *p == ',';
        for (const char *p = m; p && *p; p++)
            more += *p == ',';
        const char *ml = th_logfmt_get(&l, "moreOmitted", NULL);
        left = atoll(th_logfmt_get(&l, "keysOmitted", NULL));
        more_left = ml ? atoll(ml) : 0;
        fields_left = atoll(th_logfmt_get(&l, "fieldsOmitted", NULL));
        has_after = th_logfmt_count(&l, "after");
    }
    assert_int_equal(fences, 64); /* before the cut: all there */
    assert_true(kept > 0);
    assert_int_equal(kept + left, 64);
    assert_false(has_after);
    /* "more" is partly there (with its count) or counted as a field left out */
    assert_int_equal(fields_left, 1 + (more == 0));
    if (more > 0)
        assert_int_equal(more + more_left, 64);
    free(line);
}

/* An empty list that meets the end of the line is left out whole: at every
 * length of what comes before it, the line still parses. */
static void test_an_empty_list_at_the_limit_leaves_a_whole_line(void **state)
{
    (void)state;
    static char fill[LOG_LINE_MAX];
    for (int format = LOG_FORMAT_TEXT; format <= LOG_FORMAT_JSON; format++)
        for (size_t len = LOG_LINE_MAX - 400; len < LOG_LINE_MAX; len++) {
            memset(fill, 'a', len);
            fill[len] = '\0';
            log_field f[] = {LOG_STR("fill", fill), LOG_STRS("keys", NULL, 0),
                             LOG_INTS("fences", NULL, 0)};
            char *line = one_line((enum log_format)format, f, 3);
            th_logfmt l;
            json_t *j = format == LOG_FORMAT_JSON ? json_loads(line, 0, NULL) : NULL;
            if (format == LOG_FORMAT_JSON ? j == NULL : th_logfmt_parse(line, &l) != 0)
                fail_msg("broken line at %zu: %s", len, line);
            json_decref(j);
            free(line);
        }
}

static void test_a_line_too_long_keeps_whole_values_and_counts_the_rest(void **state)
{
    (void)state;
    check_long_line(LOG_FORMAT_TEXT);
    check_long_line(LOG_FORMAT_JSON);
}

static void test_levels_below_the_minimum_are_not_written(void **state)
{
    (void)state;
    log_set_level(LOG_WARN);
    assert_false(log_enabled(LOG_INFO));
    assert_true(log_enabled(LOG_ERROR));
    struct capture c;
    capture_start(&c);
    log_event(LOG_INFO, "order placed", NULL, 0);
    log_kv(LOG_WARN, "order not placed", LOG_STR("outcome", "lock_timeout"));
    char *text = capture_end(&c);
    assert_null(strstr(text, "order placed"));
    assert_non_null(strstr(text, " level=warn msg=\"order not placed\" outcome=lock_timeout\n"));
    free(text);
}

/* Random strings made mostly of the characters that matter, both formats. */
static void test_random_values_round_trip(void **state)
{
    (void)state;
    static const char alphabet[] = "\"\\= -,a\n\t{}";
    unsigned seed = 17;
    for (int round = 0; round < 500; round++) {
        char v[40];
        int len = (int)(rand_r(&seed) % 39);
        for (int i = 0; i < len; i++)
            v[i] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
        v[len] = '\0';
        log_field f[] = {LOG_STR("v", v), LOG_STRS("list", (const char *const[]){v}, 1)};
        char *line = one_line(LOG_FORMAT_TEXT, f, 2);
        th_logfmt l;
        assert_int_equal(th_logfmt_parse(line, &l), 0);
        assert_int_equal(l.n, 5);
        assert_string_equal(th_logfmt_get(&l, "v", NULL), v);
        free(line);
        json_t *j = json_loads(line = one_line(LOG_FORMAT_JSON, f, 2), 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "v")), v);
        json_decref(j);
        free(line);
    }
}

/* ---- lines from many threads ---- */

#define THREADS 4
#define LINES 300

static void *write_lines(void *arg)
{
    char big[3000];
    memset(big, 'a' + (int)(intptr_t)arg, sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (int i = 0; i < LINES; i++)
        log_kv(LOG_INFO, "order placed", LOG_INT("thread", (intptr_t)arg), LOG_INT("i", i),
               LOG_STR("pad", big));
    return NULL;
}

static void test_lines_from_many_threads_never_interleave(void **state)
{
    (void)state;
    for (int format = LOG_FORMAT_TEXT; format <= LOG_FORMAT_JSON; format++) {
        struct capture c;
        pthread_t t[THREADS];
        log_set_format((enum log_format)format);
        capture_start(&c);
        for (intptr_t i = 0; i < THREADS; i++)
            pthread_create(&t[i], NULL, write_lines, (void *)i);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
        char *text = capture_end(&c), line[LOG_LINE_MAX];
        int lines = 0;
        for (const char *next = text; th_next_line(&next, line, sizeof(line)); lines++) {
            th_logfmt l;
            json_t *j = format == LOG_FORMAT_JSON ? json_loads(line, 0, NULL) : NULL;
            if (format == LOG_FORMAT_JSON ? j == NULL : th_logfmt_parse(line, &l) != 0)
                fail_msg("line %d broken: %.120s", lines, line);
            json_decref(j);
        }
        assert_int_equal(lines, THREADS * LINES);
        free(text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_text_values_come_back_whole_and_forge_nothing, setup),
        cmocka_unit_test_setup(test_plain_values_stay_bare_and_the_line_starts_with_ts, setup),
        cmocka_unit_test_setup(test_no_value_is_a_bare_dash_and_a_dash_is_quoted, setup),
        cmocka_unit_test_setup(test_text_lists_are_one_value, setup),
        cmocka_unit_test_setup(test_json_lines_parse_with_their_types, setup),
        cmocka_unit_test_setup(test_a_line_too_long_keeps_whole_values_and_counts_the_rest,
                               setup),
        cmocka_unit_test_setup(test_an_empty_list_at_the_limit_leaves_a_whole_line, setup),
        cmocka_unit_test_setup(test_levels_below_the_minimum_are_not_written, setup),
        cmocka_unit_test_setup(test_random_values_round_trip, setup),
        cmocka_unit_test_setup(test_lines_from_many_threads_never_interleave, setup),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
