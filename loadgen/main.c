/* main.c - loadgen's entry point: parses flags, runs one run (or one per lock
 * mode for compare), draws the progress line on a terminal, prints the report
 * (and writes it as JSON and HTML when asked) and turns the verdict into the
 * exit status (0 PASS, 1 FAIL, 2 usage/set-up). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "loadgen/html.h"
#include "loadgen/http.h"
#include "loadgen/opts.h"
#include "loadgen/profile.h"
#include "loadgen/report.h"
#include "loadgen/run.h"
#include "loadgen/scenario.h"
#include "loadgen/tls.h"

#define EXIT_PASS 0
#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* Ctrl-C count: 1 = stop starting requests and finish the run (the verdict
 * still holds for what ran), 2 = abandon requests in flight. The handler only
 * counts; the run loop reads it through the tick callback. */
static volatile sig_atomic_t stop_requests;

static void on_signal(int sig)
{
    (void)sig;
    if (stop_requests < 2)
        stop_requests++;
}

typedef struct progress {
    int tty;          /* draw only on a terminal */
    long long total;  /* 0: duration-bound */
    const char *label;
} progress;

static int tick(const lg_progress *p, void *arg)
{
    const progress *pr = arg;
    if (pr->tty) {
        char total[32] = "";
        if (pr->total)
            snprintf(total, sizeof(total), "/%lld", pr->total);
        fprintf(stderr, "\r\033[K%s%s%llu%s requests  %.0f req/s  %llu errors  %.1f s%s",
                pr->label, pr->label[0] ? ": " : "", (unsigned long long)p->done, total,
                p->elapsed_s > 0 ? (double)p->done / p->elapsed_s : 0.0,
                (unsigned long long)p->errors, p->elapsed_s,
                stop_requests ? "  (stopping: Ctrl-C again abandons requests in flight)" : "");
        fflush(stderr);
    }
    return stop_requests;
}

static void clear_progress(const progress *pr)
{
    if (pr->tty)
        fprintf(stderr, "\r\033[K");
}

static void list_scenarios(void)
{
    printf("Scenarios (loadgen --scenario NAME --target URL ...; flags override the values):\n");
    for (int i = 0; lg_scenario_at(i); i++) {
        const lg_scenario *s = lg_scenario_at(i);
        printf("\n  %-10s %s\n", s->name, s->summary);
        printf("  %-10s stockd flags: %s\n", "", s->server_flags[0] ? s->server_flags : "none");
        printf("  %-10s checks: the invariants%s%s\n", "", s->expects[0] ? "; " : "",
               s->expects);
    }
}

/* The report files asked for, opened (and emptied) before the run so a bad
 * path fails at once. */
typedef struct outputs {
    const lg_opts *o;
    FILE *json, *html;
} outputs;

/* Writes doc to each file asked for, the HTML drawn from that same document,
 * and frees doc. 0, or -1 after saying which file could not be written. */
/* Closes a report file (f NULL: none asked); a failure to write its end is
 * a failed run (exit status 2), like any other failure to write it. */
static int close_report(FILE *f, const char *path, int status)
{
    if (f && fclose(f) != 0 && status != EXIT_USAGE) {
        perror(path);
        return EXIT_USAGE;
    }
    return status;
}

static int write_reports(const outputs *out, json_t *doc)
{
    int rc = 0;
    if (out->json && (doc == NULL || json_dumpf(doc, out->json, JSON_INDENT(2)) != 0 ||
                      fputc('\n', out->json) == EOF || fflush(out->json) != 0)) {
        fprintf(stderr, "loadgen: could not write the JSON report to %s\n", out->o->json_path);
        rc = -1;
    }
    if (out->html && (doc == NULL || lg_html_write(out->html, doc) != 0)) {
        fprintf(stderr, "loadgen: could not write the HTML report to %s\n", out->o->html_path);
        rc = -1;
    }
    json_decref(doc);
    return rc;
}

static int wants_report(const outputs *out)
{
    return out->json || out->html;
}

static int run_single(const outputs *out, const progress *pr_in)
{
    const lg_opts *o = out->o;
    progress pr = *pr_in;
    lg_run r;
    lg_err err;
    lg_err_clear(&err);
    int rc = lg_run_exec(o, o->targets, o->ntargets, "", tick, &pr, &r, &err);
    clear_progress(&pr);
    if (rc != LG_OK) {
        fprintf(stderr, "loadgen: %s\n", err.msg);
        if (wants_report(out)) /* the files were emptied up front: say why they hold no report */
            write_reports(out, json_pack("{s:s}", "error", err.msg));
        return EXIT_USAGE;
    }
    lg_report_text(stdout, o, &r);
    fflush(stdout);
    int status = r.verdict == LG_PASS ? EXIT_PASS : EXIT_FAIL;
    if (r.verdict == LG_NO_VERDICT)
        status = r.load.total.counts[LG_OUT_TRANSPORT] ? EXIT_FAIL : EXIT_PASS;
    if (wants_report(out) && write_reports(out, lg_report_json(o, &r)) != 0)
        status = EXIT_USAGE;
    lg_run_free(&r);
    return status;
}

/* Splits the targets into groups by label, in order of first appearance. */
static int group_targets(const lg_opts *o, lg_target groups[][LG_MAX_TARGETS], int *sizes)
{
    int n = 0;
    for (int i = 0; i < o->ntargets; i++) {
        int g = 0;
        while (g < n && strcmp(groups[g][0].label, o->targets[i].label) != 0)
            g++;
        if (g == n)
            sizes[n++] = 0;
        groups[g][sizes[g]++] = o->targets[i];
    }
    return n;
}

static int run_compare(const outputs *out, const progress *pr_in)
{
    const lg_opts *o = out->o;
    static lg_target groups[LG_MAX_TARGETS][LG_MAX_TARGETS]; /* too big for the stack */
    int sizes[LG_MAX_TARGETS];
    int n = group_targets(o, groups, sizes);
    lg_run *runs = calloc((size_t)n, sizeof(*runs));
    int done = 0, status = EXIT_USAGE;
    if (runs == NULL) {
        fprintf(stderr, "loadgen: out of memory\n");
        return EXIT_USAGE;
    }
    for (; done < n && stop_requests < 2; done++) {
        progress pr = *pr_in;
        pr.label = groups[done][0].label;
        lg_err err;
        lg_err_clear(&err);
        int rc = lg_run_exec(o, groups[done], sizes[done], pr.label, tick, &pr, &runs[done],
                             &err);
        clear_progress(&pr);
        if (rc != LG_OK) {
            fprintf(stderr, "loadgen: compare, %s: %s\n", pr.label, err.msg);
            if (wants_report(out))
                write_reports(out, json_pack("{s:s, s:s}", "error", err.msg, "label", pr.label));
            goto out;
        }
    }
    int verdict = lg_report_compare(stdout, o, runs, done);
    fflush(stdout);
    status = verdict == LG_PASS ? EXIT_PASS : EXIT_FAIL;
    if (wants_report(out) && write_reports(out, lg_report_compare_json(o, runs, done, verdict)))
        status = EXIT_USAGE;
out:
    for (int i = 0; i < done; i++)
        lg_run_free(&runs[i]);
    free(runs);
    return status;
}

int main(int argc, char **argv)
{
    lg_opts o;
    lg_err err;
    lg_err_clear(&err);
    if (lg_opts_parse(&o, argc, argv, &err) != LG_OK) {
        fprintf(stderr, "loadgen: %s\n", err.msg);
        return EXIT_USAGE;
    }
    /* TLS's trust, once, before any thread or fork */
    if (lg_opts_tls(&o) && !o.help && !o.list &&
        lg_tls_setup(o.cacert[0] ? o.cacert : NULL, o.insecure, &err) != LG_OK) {
        fprintf(stderr, "loadgen: %s\n", err.msg);
        return EXIT_USAGE;
    }
    if (o.help || o.list) {
        if (o.help)
            lg_usage(stdout);
        else
            list_scenarios();
        return EXIT_PASS;
    }
    lg_profile *api = NULL;
    if (o.api_path[0] && lg_profile_load(o.api_path, &api, &err) != LG_OK) {
        fprintf(stderr, "loadgen: %s\n", err.msg);
        return EXIT_USAGE;
    }
    o.api = api;
    lg_http_set_token(o.token); /* before any thread: every request carries it */
    outputs out = {&o, NULL, NULL};
    if (o.json_path[0] && (out.json = fopen(o.json_path, "w")) == NULL) {
        perror(o.json_path);
        lg_profile_free(api);
        return EXIT_USAGE;
    }
    if (o.html_path[0] && (out.html = fopen(o.html_path, "w")) == NULL) {
        perror(o.html_path);
        if (out.json)
            fclose(out.json);
        lg_profile_free(api);
        return EXIT_USAGE;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    progress pr = {isatty(STDERR_FILENO), o.requests, ""};
    int status = strcmp(o.scenario, "compare") == 0 ? run_compare(&out, &pr)
                                                     : run_single(&out, &pr);
    status = close_report(out.json, o.json_path, status);
    lg_profile_free(api);
    return close_report(out.html, o.html_path, status);
}
