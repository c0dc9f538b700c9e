/* test_lg_fault.c - --fault and --fault-end: the flags' values, the schedule
 * (a fault's end never before its command, every end at once when the run
 * stops, a fault not reached skipped), the note of what the answers did
 * around a fault, and the thread that runs the commands (output kept, a
 * command past its limit killed with its group, an end run at the stop). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "loadgen/evloop.h"
#include "loadgen/fault.h"
#include "loadgen/opts.h"
#include "loadgen/scenario.h"

static void test_at_takes_seconds_milliseconds_and_plain_seconds(void **state)
{
    (void)state;
    double at = -1;
    assert_int_equal(lg_fault_parse_at("2s", &at), 0);
    assert_true(at == 2.0);
    assert_int_equal(lg_fault_parse_at("1500ms", &at), 0);
    assert_true(at == 1.5);
    assert_int_equal(lg_fault_parse_at("2.5", &at), 0);
    assert_true(at == 2.5);
    assert_int_equal(lg_fault_parse_at("0", &at), 0);
    assert_true(at == 0);
    const char *bad[] = {"", "s", "-1", "2m", "2 s", "inf", "nan", "0x10", "1e3", "2sms",
                         "700000000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (lg_fault_parse_at(bad[i], &at) == 0)
            fail_msg("'%s' was taken as %g s", bad[i], at);
}

static void test_each_end_belongs_to_the_fault_of_its_rank(void **state)
{
    (void)state;
    lg_fault_spec s[LG_FAULT_MAX];
    memset(s, 0, sizeof(s));
    int n = 0, nend = 0;
    lg_err err;
    assert_int_equal(lg_fault_add(s, &n, &nend, 1, "4s:kill -CONT 1", &err), LG_OK);
    assert_int_equal(lg_fault_add(s, &n, &nend, 0, "1s:kill -STOP 1", &err), LG_OK);
    assert_int_equal(lg_fault_add(s, &n, &nend, 0, "2500ms:echo a:b", &err), LG_OK);
    assert_int_equal(n, 2);
    assert_int_equal(nend, 1);
    assert_string_equal(s[0].cmd, "kill -STOP 1");
    assert_string_equal(s[0].end_cmd, "kill -CONT 1");
    assert_true(s[0].at_s == 1 && s[0].end_s == 4);
    assert_string_equal(s[1].cmd, "echo a:b"); /* only the first colon splits */
    assert_true(s[1].at_s == 2.5 && s[1].end_s < 0 && s[1].end_cmd[0] == '\0');
    assert_int_equal(lg_fault_check(s, n, nend, &err), LG_OK);
}

static void test_bad_values_are_usage_errors_naming_the_flag(void **state)
{
    (void)state;
    lg_fault_spec s[LG_FAULT_MAX];
    memset(s, 0, sizeof(s));
    int n = 0, nend = 0;
    lg_err err;
    assert_int_equal(lg_fault_add(s, &n, &nend, 0, "2s", &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--fault: expected AT:COMMAND"));
    assert_int_equal(lg_fault_add(s, &n, &nend, 1, "soon:x", &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--fault-end: AT 'soon'"));
    assert_int_equal(lg_fault_add(s, &n, &nend, 0, "1s:  ", &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "command"));
    for (int i = 0; i < LG_FAULT_MAX; i++)
        assert_int_equal(lg_fault_add(s, &n, &nend, 0, "1s:true", &err), LG_OK);
    assert_int_equal(lg_fault_add(s, &n, &nend, 0, "1s:true", &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "at most 8"));
    assert_int_equal(n, LG_FAULT_MAX);
}

static void test_an_end_without_its_fault_or_before_it_is_refused(void **state)
{
    (void)state;
    lg_fault_spec s[LG_FAULT_MAX];
    memset(s, 0, sizeof(s));
    int n = 0, nend = 0;
    lg_err err;
    assert_int_equal(lg_fault_add(s, &n, &nend, 0, "2s:a", &err), LG_OK);
    assert_int_equal(lg_fault_add(s, &n, &nend, 1, "1s:b", &err), LG_OK);
    assert_int_equal(lg_fault_check(s, n, nend, &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "comes before its --fault"));
    assert_int_equal(lg_fault_add(s, &n, &nend, 1, "3s:c", &err), LG_OK);
    s[0].end_s = 2; /* an end at its fault's very time is allowed: it runs after it */
    assert_int_equal(lg_fault_check(s, n, nend, &err), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--fault-end #2 has no --fault"));
}

/* Through the whole command line: the flags, their order and the modes they refuse. */
static int parse(lg_err *err, const char *const *args)
{
    char *argv[32] = {(char *)"loadgen", (char *)"--target", (char *)"http://127.0.0.1:1"};
    int argc = 3;
    while (*args)
        argv[argc++] = (char *)*args++;
    static lg_opts o;
    return lg_opts_parse(&o, argc, argv, err);
}

static void test_the_flags_parse_and_refuse_a_flash_sale(void **state)
{
    (void)state;
    lg_err err;
    assert_int_equal(parse(&err, (const char *[]){"--fault", "1s:true", "--fault-end",
                                                  "2s:true", NULL}), LG_OK);
    assert_int_equal(parse(&err, (const char *[]){"--fault-end", "2s:true", NULL}),
                     LG_ERR_USAGE);
    assert_int_equal(parse(&err, (const char *[]){"--fault", "1s:true", "--buyers", "10",
                                                  NULL}), LG_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--buyers"));
}

static lg_fault_spec spec(double at, double end, const char *cmd, const char *end_cmd)
{
    lg_fault_spec s;
    memset(&s, 0, sizeof(s));
    s.at_s = at, s.end_s = end;
    snprintf(s.cmd, sizeof(s.cmd), "%s", cmd);
    snprintf(s.end_cmd, sizeof(s.end_cmd), "%s", end_cmd);
    return s;
}

static void test_the_schedule_runs_commands_in_time_order_ends_after_their_fault(void **state)
{
    (void)state;
    lg_fault_spec s[2] = {spec(2, 3, "a", "a-end"), spec(1, -1, "b", "")};
    int step[4] = {0};
    double wait;
    assert_int_equal(lg_fault_due(s, 2, step, 0.5, 0, &wait), -1);
    assert_true(wait > 0.49 && wait < 0.51);
    assert_int_equal(lg_fault_due(s, 2, step, 1.0, 0, &wait), 2); /* b first: earlier */
    step[2] = LG_FAULT_OVER;
    assert_int_equal(lg_fault_due(s, 2, step, 1.5, 0, &wait), -1);
    assert_int_equal(lg_fault_due(s, 2, step, 3.5, 0, &wait), 0); /* late: a is due */
    step[0] = LG_FAULT_RUNNING;
    /* a-end's time has come, but a still runs: it waits for a */
    assert_int_equal(lg_fault_due(s, 2, step, 3.5, 0, &wait), -1);
    assert_true(wait < 0);
    step[0] = LG_FAULT_OVER;
    assert_int_equal(lg_fault_due(s, 2, step, 3.5, 0, &wait), 1);
    step[1] = LG_FAULT_OVER;
    assert_int_equal(lg_fault_due(s, 2, step, 9, 0, &wait), -1);
    assert_true(wait < 0);
}

static void test_a_stop_makes_ends_due_at_once_and_never_starts_a_fault(void **state)
{
    (void)state;
    lg_fault_spec s[3] = {spec(1, 60, "a", "a-end"), spec(30, 40, "b", "b-end"),
                          spec(2, 50, "c", "c-end")};
    int step[6] = {LG_FAULT_OVER, LG_FAULT_WAITING, LG_FAULT_WAITING, LG_FAULT_WAITING,
                   LG_FAULT_RUNNING, LG_FAULT_WAITING};
    double wait;
    assert_int_equal(lg_fault_due(s, 3, step, 5, 1, &wait), 1); /* a-end, 55 s early */
    step[1] = LG_FAULT_OVER;
    /* b never ran (the caller marks it skipped); c-end waits for c to finish */
    step[2] = step[3] = LG_FAULT_SKIPPED;
    assert_int_equal(lg_fault_due(s, 3, step, 5, 1, &wait), -1);
    step[4] = LG_FAULT_OVER;
    assert_int_equal(lg_fault_due(s, 3, step, 5, 1, &wait), 5);
}

static lg_fault_result ran(double t0, double t1, double e0, double e1, int status, int end_status)
{
    lg_fault_result f;
    memset(&f, 0, sizeof(f));
    f.spec = spec(t0, e0, "kill -STOP 42", e0 >= 0 ? "kill -CONT 42" : "");
    f.run = (lg_fault_cmd){.state = LG_FAULT_EXITED, .start_ns = (int64_t)(t0 * 1e9),
                           .end_ns = (int64_t)(t1 * 1e9), .status = status};
    if (e0 >= 0)
        f.end = (lg_fault_cmd){.state = LG_FAULT_EXITED, .start_ns = (int64_t)(e0 * 1e9),
                               .end_ns = (int64_t)(e1 * 1e9), .status = end_status};
    return f;
}

static void test_a_failed_command_is_said_with_its_status_and_output(void **state)
{
    (void)state;
    lg_fault_result f = ran(1, 1.01, 2, 2.01, 1, 0);
    snprintf(f.run.out, sizeof(f.run.out), "\n  sh: kill: No such process\nmore\n");
    char buf[LG_EXPECT_TEXT];
    assert_int_equal(lg_fault_failure(&f, 0, 1, buf, sizeof(buf)), 0);
    assert_int_equal(lg_fault_failure(&f, 0, 0, buf, sizeof(buf)), 1);
    assert_string_equal(buf, "fault 1's command 'kill -STOP 42' exited 1: sh: kill: No such "
                             "process");
    f.end.state = LG_FAULT_KILLED, f.end.status = 137, f.end.end_ns = (int64_t)(32 * 1e9);
    assert_int_equal(lg_fault_failure(&f, 1, 1, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "fault 2's end command 'kill -CONT 42' was killed"));
    f.run.state = LG_FAULT_NO_START;
    snprintf(f.run.why, sizeof(f.run.why), "no pipe");
    assert_int_equal(lg_fault_failure(&f, 0, 0, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "could not start: no pipe"));
    f.run.state = LG_FAULT_NOT_RUN; /* skipped: not a failure */
    assert_int_equal(lg_fault_failure(&f, 0, 0, buf, sizeof(buf)), 0);
}

/* A run of 6 s: 100 ok a second, none and 30 transport errors while the
 * fault lasts (2 s to 4 s), the first ok back 0.5 s after its end. */
static void fill(lg_series *s)
{
    assert_int_equal(lg_series_init(s), LG_OK);
    for (int ms = 0; ms < 6000; ms += 10) {
        int64_t t = (int64_t)ms * 1000000;
        if (ms >= 2000 && ms < 4000) {
            if (ms % 200 == 0)
                lg_series_add(s, t, LG_OUT_TRANSPORT), lg_series_add(s, t, LG_OUT_TRANSPORT),
                    lg_series_add(s, t, LG_OUT_LOCK_TIMEOUT);
        } else if (ms < 4000 || ms >= 4500) {
            lg_series_add(s, t, LG_OUT_OK);
            lg_series_add(s, t, LG_OUT_INSUFFICIENT); /* sold out is no error */
        }
    }
}

static void test_the_note_says_what_the_answers_did_around_the_fault(void **state)
{
    (void)state;
    lg_series s;
    fill(&s);
    int64_t start = 1000000000; /* the load's clock starts 1 s into lg_now_ns's */
    lg_fault_result f = ran(3, 3.001, 4.999, 5, 0, 0); /* 2 s to 4 s on the load's clock */
    lg_finding n;
    assert_int_equal(lg_fault_note(&f, 0, &s, start, 6, -1, &n), 0);
    assert_int_equal(n.kind, LG_N_FAULT);
    assert_int_equal(n.violation, 0);
    assert_int_equal(n.amount, 30);
    assert_non_null(strstr(n.text, "fault 1 (kill -STOP 42) 2.00-4.00 s"));
    assert_non_null(strstr(n.text, "100 ok/0 err before, 0 ok/15 err during"));
    assert_non_null(strstr(n.text, "errors during: 10 lock_timeout, 20 transport_error"));
    assert_non_null(strstr(n.text, "first ok 0.50 s after it"));
    assert_null(strstr(n.text, "history"));
    assert_int_equal(lg_fault_note(&f, 0, &s, start, 6, 3, &n), 0);
    assert_non_null(strstr(n.text, "history violations in it: 3"));
    f.run.state = LG_FAULT_NOT_RUN;
    assert_int_equal(lg_fault_note(&f, 0, &s, start, 6, -1, &n), -1);
    lg_series_free(&s);
}

/* Reads at 1, 2, 3 and 4 s (10 ms each) against bands of [90, 100]: the
 * second is stale, the fourth impossible; a fault from 1.5 s to 3.5 s holds
 * the stale one only, and a history not checked counts nothing. */
static void test_history_violations_are_counted_in_the_fault_span(void **state)
{
    (void)state;
    lg_read reads[4];
    long long lo[4] = {90, 90, 90, 90}, hi[4] = {100, 100, 100, 100};
    long long stock[4] = {95, 120, 92, 10};
    for (int i = 0; i < 4; i++)
        reads[i] = (lg_read){(int64_t)(i + 1) * 1000000000, (int64_t)(i + 1) * 1000000000 +
                             10000000, stock[i]};
    lg_history h;
    memset(&h, 0, sizeof(h));
    h.checked = 1, h.reads = 4, h.reads_at = reads, h.lo = lo, h.hi = hi;
    assert_int_equal(lg_fault_history_in(&h, 1.5, 3.5), 1);
    assert_int_equal(lg_fault_history_in(&h, 0, 10), 2);
    assert_int_equal(lg_fault_history_in(&h, 4.005, 5), 1); /* the GET overlaps the start */
    assert_int_equal(lg_fault_history_in(&h, 4.5, 5), 0);
    h.checked = 0;
    assert_int_equal(lg_fault_history_in(&h, 0, 10), -1);
}

static void test_a_span_runs_from_the_command_to_its_end_or_the_command_alone(void **state)
{
    (void)state;
    double t0, t1;
    lg_fault_result f = ran(1, 1.5, 3, 3.25, 0, 0);
    assert_int_equal(lg_fault_span(&f, 0, &t0, &t1), 0);
    assert_true(t0 == 1 && t1 == 3.25);
    f = ran(1, 1.5, -1, -1, 0, 0);
    assert_int_equal(lg_fault_span(&f, 0, &t0, &t1), 0);
    assert_true(t0 == 1 && t1 == 1.5);
}

/* The thread, with real /bin/sh commands: outputs kept, a command past its
 * limit killed with what it started, an end due in a minute run at the stop,
 * a fault not reached skipped. Hang detection only on times. */
static void test_commands_run_and_every_end_runs_by_the_join(void **state)
{
    (void)state;
    lg_fault_spec s[3] = {spec(0, 60, "echo started; echo to-stderr >&2", "echo ended"),
                          spec(0, -1, "sleep 30 & sleep 30; echo never", ""),
                          spec(60, 61, "echo not-reached", "echo not-reached-either")};
    lg_faults *f;
    lg_err err;
    int64_t t0 = lg_now_ns();
    assert_int_equal(lg_faults_start(s, 3, t0, 300, &f, &err), LG_OK);
    struct timespec ts = {0, 600 * 1000000L};
    nanosleep(&ts, NULL);
    lg_fault_result *r;
    int n;
    lg_faults_join(f, &r, &n);
    double took = (double)(lg_now_ns() - t0) / 1e9;
    if (took > 20)
        fail_msg("the join took %.1f s", took);
    assert_int_equal(n, 3);
    assert_int_equal(r[0].run.state, LG_FAULT_EXITED);
    assert_int_equal(r[0].run.status, 0);
    assert_string_equal(r[0].run.out, "started\nto-stderr\n");
    assert_int_equal(r[0].end.state, LG_FAULT_EXITED);
    assert_int_equal(r[0].end.early, 1);
    assert_string_equal(r[0].end.out, "ended\n");
    assert_int_equal(r[1].run.state, LG_FAULT_KILLED);
    assert_int_equal(lg_fault_failed(&r[1].run), 1);
    assert_null(strstr(r[1].run.out, "never"));
    assert_int_equal(r[2].run.state, LG_FAULT_NOT_RUN);
    assert_int_equal(r[2].end.state, LG_FAULT_NOT_RUN);
    assert_int_equal(lg_fault_failed(&r[2].run), 0);
    free(r);
}

static void test_no_fault_starts_no_thread(void **state)
{
    (void)state;
    lg_faults *f = (lg_faults *)&f;
    lg_err err;
    assert_int_equal(lg_faults_start(NULL, 0, 0, 0, &f, &err), LG_OK);
    assert_null(f);
    lg_fault_result *r = (lg_fault_result *)&r;
    int n = 1;
    lg_faults_join(NULL, &r, &n);
    assert_null(r);
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_at_takes_seconds_milliseconds_and_plain_seconds),
        cmocka_unit_test(test_each_end_belongs_to_the_fault_of_its_rank),
        cmocka_unit_test(test_bad_values_are_usage_errors_naming_the_flag),
        cmocka_unit_test(test_an_end_without_its_fault_or_before_it_is_refused),
        cmocka_unit_test(test_the_flags_parse_and_refuse_a_flash_sale),
        cmocka_unit_test(test_the_schedule_runs_commands_in_time_order_ends_after_their_fault),
        cmocka_unit_test(test_a_stop_makes_ends_due_at_once_and_never_starts_a_fault),
        cmocka_unit_test(test_a_failed_command_is_said_with_its_status_and_output),
        cmocka_unit_test(test_the_note_says_what_the_answers_did_around_the_fault),
        cmocka_unit_test(test_history_violations_are_counted_in_the_fault_span),
        cmocka_unit_test(test_a_span_runs_from_the_command_to_its_end_or_the_command_alone),
        cmocka_unit_test(test_commands_run_and_every_end_runs_by_the_join),
        cmocka_unit_test(test_no_fault_starts_no_thread),
    };
    return cmocka_run_group_tests_name("lg_fault", tests, NULL, NULL);
}
