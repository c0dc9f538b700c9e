/* test_lg_faults.c - loadgen --fault and --fault-end end to end, against
 * three real stockd replicas sharing one SQLite file and a real Redis: a
 * replica paused (kill -STOP) and continued mid-run still PASSes, with the
 * fault's times, exit statuses and note in the JSON report; a fault command
 * that fails, or a fault the run ended before, makes the run FAIL saying
 * so; and a run that ends before a fault's end is due, or that Ctrl-C stops,
 * still runs the end (the paused replica answers again). */
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/lgrun.h"

static th_redis redis;
static th_stockd replicas[3];
static char dir[64], db[128], loadgen[256], targets[256];

#define RUN_TIMEOUT_MS 90000 /* hang detection only */

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    snprintf(loadgen, sizeof(loadgen), "%s/loadgen", th_build_dir());
    if (th_tempdir("lg-faults-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    size_t used = 0;
    for (int i = 0; i < 3; i++) {
        if (th_stockd_start(&replicas[i], &redis, db, dir, NULL) != 0)
            return -1;
        used += (size_t)snprintf(targets + used, sizeof(targets) - used, "%s%s", i ? "," : "",
                                 replicas[i].url);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        kill(replicas[i].pid, SIGCONT); /* a test that failed may have left it paused */
        rc |= th_stockd_stop_clean(&replicas[i]);
    }
    th_redis_stop(&redis, 0);
    curl_global_cleanup();
    return rc;
}

typedef th_lg_outcome outcome;

/* Runs loadgen against the three replicas with args (NULL-terminated) plus
 * --json (tests/support/lgrun.h); the run must have exited expect and written
 * its report. */
static outcome run_loadgen(int expect, const char *const args[])
{
    outcome o = th_lg_run(loadgen, dir, expect, (const char *[]){"--target", targets, NULL},
                          args, RUN_TIMEOUT_MS);
    assert_non_null(o.text);
    assert_non_null(o.json);
    assert_int_equal(o.status, expect);
    return o;
}

static const json_t *fault_cmd(const outcome *o, size_t i, const char *which)
{
    const json_t *f = json_array_get(json_object_get(o->json, "faults"), i);
    assert_non_null(f);
    const json_t *c = json_object_get(f, which);
    assert_true(json_is_object(c));
    return c;
}

static double num(const json_t *j, const char *key)
{
    const json_t *v = json_object_get(j, key);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

/* The note of fault i (1-based) among the report's notes, or NULL. */
static const char *fault_note(const outcome *o, int i)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "fault %d (", i);
    const json_t *notes = json_object_get(o->json, "notes"), *n;
    size_t k;
    json_array_foreach(notes, k, n) {
        const char *text = json_string_value(json_object_get(n, "text"));
        if (strcmp(json_string_value(json_object_get(n, "kind")), "fault") == 0 && text &&
            strncmp(text, prefix, strlen(prefix)) == 0)
            return text;
    }
    return NULL;
}

/* The replica answers /health again (not stopped, not wedged). */
static void answers(const th_stockd *s)
{
    assert_int_not_equal(th_proc_state(s->pid), 'T');
    json_decref(th_call(s, "GET", "/health", NULL, 200));
}

static void test_a_replica_paused_and_continued_mid_run_passes_with_the_fault_reported(void **state)
{
    (void)state;
    char stop[64], cont[64];
    snprintf(stop, sizeof(stop), "0.4s:kill -STOP %d && echo paused", (int)replicas[1].pid);
    snprintf(cont, sizeof(cont), "1.2s:kill -CONT %d", (int)replicas[1].pid);
    outcome o = run_loadgen(0, (const char *[]){"-n", "0", "-d", "2s", "-c", "6", "--stock",
                                                "100000", "--timeout-ms", "20000", "--fault",
                                                stop, "--fault-end", cont, NULL});
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), "PASS");
    const json_t *run = fault_cmd(&o, 0, "run"), *end = fault_cmd(&o, 0, "end");
    assert_string_equal(json_string_value(json_object_get(run, "state")), "exited");
    assert_int_equal((int)num(run, "exitStatus"), 0);
    assert_string_equal(json_string_value(json_object_get(run, "output")), "paused\n");
    assert_int_equal((int)num(end, "exitStatus"), 0);
    /* on time (not before; late only by a busy machine) and in order */
    assert_true(num(run, "startSec") >= 0.4);
    assert_true(num(end, "startSec") >= 1.2);
    assert_true(num(end, "startSec") >= num(run, "endSec"));
    assert_true(json_is_false(json_object_get(end, "early")));
    const json_t *span = json_object_get(json_array_get(json_object_get(o.json, "faults"), 0),
                                         "spanSec");
    assert_int_equal(json_array_size(span), 2);
    const char *note = fault_note(&o, 1);
    assert_non_null(note);
    assert_non_null(strstr(note, "before"));
    assert_non_null(strstr(note, "during"));
    assert_non_null(strstr(note, "errors during:"));
    /* the history check reads by default: none of its reads in the fault broke the band */
    assert_non_null(strstr(note, "history violations in it: 0"));
    assert_non_null(strstr(o.text, "faults (times since the load started):"));
    th_lg_outcome_free(&o);
    answers(&replicas[1]);
}

static void test_a_fault_command_that_fails_fails_the_run_saying_so(void **state)
{
    (void)state;
    outcome o = run_loadgen(1, (const char *[]){"-n", "200", "-c", "6", "--stock", "100000",
                                                "--fault", "0:echo no such replica >&2; exit 3",
                                                NULL});
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), "FAIL");
    assert_int_equal(json_array_size(json_object_get(o.json, "violations")), 0);
    const json_t *unmet = json_object_get(o.json, "expectationsUnmet");
    assert_int_equal(json_array_size(unmet), 1);
    assert_string_equal(json_string_value(json_array_get(unmet, 0)),
                        "fault 1's command 'echo no such replica >&2; exit 3' exited 3: no such "
                        "replica");
    const json_t *run = fault_cmd(&o, 0, "run");
    assert_int_equal((int)num(run, "exitStatus"), 3);
    assert_true(json_is_true(json_object_get(run, "failed")));
    assert_non_null(strstr(o.text, "expectation not met: fault 1's command"));
    th_lg_outcome_free(&o);
}

/* The end is due a minute after a run of a few hundred requests: it runs
 * when the run ends, and a fault due later than that never runs, which FAILs
 * the run: it did not test what it meant to. */
static void test_a_run_that_ends_first_still_runs_the_end(void **state)
{
    (void)state;
    char cont[64];
    char stop_fds[96]; /* the report files are close-on-exec: no command holds them */
    snprintf(stop_fds, sizeof(stop_fds), "0.2s:kill -STOP %d; ls -l /proc/$$/fd",
             (int)replicas[2].pid);
    snprintf(cont, sizeof(cont), "60s:kill -CONT %d", (int)replicas[2].pid);
    int64_t t0 = th_now_ms();
    outcome o = run_loadgen(1, (const char *[]){"-n", "0", "-d", "1s", "-c", "6", "--stock",
                                                "100000", "--timeout-ms", "20000", "--fault",
                                                stop_fds, "--fault-end", cont, "--fault",
                                                "50s:echo too late", NULL});
    if (th_now_ms() - t0 > 45000)
        fail_msg("the run waited for the fault's end time (%lld ms)",
                 (long long)(th_now_ms() - t0));
    const char *fds = json_string_value(json_object_get(fault_cmd(&o, 0, "run"), "output"));
    assert_non_null(fds);
    if (strstr(fds, "/dev/null") == NULL || strstr(fds, ".json") != NULL)
        fail_msg("the fault command's open files: %s", fds);
    const json_t *end = fault_cmd(&o, 0, "end");
    assert_string_equal(json_string_value(json_object_get(end, "state")), "exited");
    assert_int_equal((int)num(end, "exitStatus"), 0);
    assert_true(json_is_true(json_object_get(end, "early")));
    /* when the 1 s of load was over, not after the requests the paused replica
     * held had waited out their 20 s limit */
    assert_true(num(end, "startSec") < 10);
    const json_t *late = fault_cmd(&o, 1, "run");
    assert_string_equal(json_string_value(json_object_get(late, "state")), "not_run");
    assert_true(json_is_null(json_object_get(late, "exitStatus")));
    assert_null(fault_note(&o, 2)); /* nothing happened around it */
    assert_non_null(strstr(o.text, "expectation not met: fault 2 never ran: the load ended at "));
    assert_non_null(strstr(o.text, "before its time 50 s"));
    assert_null(strstr(o.text, "fault 1 never ran"));
    th_lg_outcome_free(&o);
    answers(&replicas[2]);
}

/* Ctrl-C (SIGINT), or sig, while a replica is paused and its end is half a
 * minute away: the end runs at once, so the requests the paused replica holds are
 * answered and the run ends within seconds, its verdict still given. */
static void stop_runs_the_end_at_once(int sig, th_stockd *replica)
{
    char stop[64], cont[64], json_path[160], log[160];
    snprintf(stop, sizeof(stop), "0.2s:kill -STOP %d", (int)replica->pid);
    snprintf(cont, sizeof(cont), "30s:kill -CONT %d", (int)replica->pid);
    snprintf(json_path, sizeof(json_path), "%s/stop-%d.json", dir, sig);
    snprintf(log, sizeof(log), "%s/stop-%d.log", dir, sig);
    const char *argv[] = {loadgen, "--json", json_path, "--target", targets, "-n", "0", "-d",
                          "60s", "-c", "6", "--stock", "100000", "--timeout-ms", "25000",
                          "--fault", stop, "--fault-end", cont, NULL};
    pid_t pid = th_spawn(argv, log);
    assert_true(pid > 0);
    for (int i = 0; i < 200 && th_proc_state(replica->pid) != 'T'; i++)
        th_sleep_ms(50);
    assert_int_equal(th_proc_state(replica->pid), 'T');
    int64_t t0 = th_now_ms();
    kill(pid, sig);
    int status = th_wait(pid, RUN_TIMEOUT_MS);
    int64_t took = th_now_ms() - t0;
    if (took > 20000) /* the requests' 25 s limit, not the end, ended them */
        fail_msg("loadgen took %lld ms to end after signal %d", (long long)took, sig);
    assert_int_equal(status, 0);
    outcome o = {0, NULL, json_load_file(json_path, 0, NULL)};
    assert_non_null(o.json);
    assert_true(json_is_true(json_object_get(o.json, "stopped")));
    const json_t *end = fault_cmd(&o, 0, "end");
    assert_int_equal((int)num(end, "exitStatus"), 0);
    assert_true(json_is_true(json_object_get(end, "early")));
    th_lg_outcome_free(&o);
    answers(replica);
}

static void test_ctrl_c_runs_the_end_at_once(void **state)
{
    (void)state;
    stop_runs_the_end_at_once(SIGINT, &replicas[0]);
}

/* A dropped ssh session (SIGHUP) stops the run as Ctrl-C does: the end runs. */
static void test_a_hangup_runs_the_end_at_once(void **state)
{
    (void)state;
    stop_runs_the_end_at_once(SIGHUP, &replicas[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_replica_paused_and_continued_mid_run_passes_with_the_fault_reported),
        cmocka_unit_test(test_a_fault_command_that_fails_fails_the_run_saying_so),
        cmocka_unit_test(test_a_run_that_ends_first_still_runs_the_end),
        cmocka_unit_test(test_ctrl_c_runs_the_end_at_once),
        cmocka_unit_test(test_a_hangup_runs_the_end_at_once),
    };
    return cmocka_run_group_tests_name("lg_faults", tests, group_setup, group_teardown);
}
