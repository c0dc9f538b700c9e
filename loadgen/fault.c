/* fault.c - the pure parts of --fault: the flags' values, the schedule of
 * commands and ends, and the note that says what the answers did around a
 * fault. The commands themselves run in fault_exec.c. */
#include "loadgen/fault.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lg_fault_parse_at(const char *text, double *at_s)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    double unit = strcmp(end, "") == 0 || strcmp(end, "s") == 0 ? 1
                  : strcmp(end, "ms") == 0                      ? 0.001
                                                                : -1;
    /* strtod takes "inf", "nan" and hex: only digits and a dot are a time here */
    if (errno || end == text || unit < 0 || strspn(text, "0123456789.") != (size_t)(end - text) ||
        !isfinite(v) || v < 0 || v * unit > LG_FAULT_AT_MAX_S)
        return -1;
    *at_s = v * unit;
    return 0;
}

int lg_fault_add(lg_fault_spec *specs, int *n, int *nend, int end, const char *arg, lg_err *err)
{
    const char *flag = end ? "--fault-end" : "--fault";
    const char *colon = strchr(arg, ':');
    char at[32];
    double at_s;
    if (colon == NULL || (size_t)(colon - arg) >= sizeof(at))
        return lg_errf(err, LG_ERR_USAGE, "%s: expected AT:COMMAND, e.g. %s 2s:'kill -STOP "
                       "1234', got '%.200s'", flag, flag, arg);
    snprintf(at, sizeof(at), "%.*s", (int)(colon - arg), arg);
    if (lg_fault_parse_at(at, &at_s) != 0)
        return lg_errf(err, LG_ERR_USAGE, "%s: AT '%s' is not a time like 2s, 1500ms or 2.5 "
                       "(seconds after the load's start, at most 7 days)", flag, at);
    const char *cmd = colon + 1;
    if (cmd[strspn(cmd, " \t")] == '\0' || strlen(cmd) >= LG_FAULT_CMD_MAX)
        return lg_errf(err, LG_ERR_USAGE, "%s: the command after '%s:' must be 1..%d "
                       "characters", flag, at, LG_FAULT_CMD_MAX - 1);
    int *count = end ? nend : n;
    if (*count >= LG_FAULT_MAX)
        return lg_errf(err, LG_ERR_USAGE, "%s: at most %d of them", flag, LG_FAULT_MAX);
    int idx = (*count)++;
    lg_fault_spec *s = &specs[idx];
    if (end) {
        s->end_s = at_s;
        snprintf(s->end_cmd, sizeof(s->end_cmd), "%s", cmd);
    } else {
        s->at_s = at_s;
        if (idx >= *nend) /* its end, if any, is still to come */
            s->end_s = -1;
        snprintf(s->cmd, sizeof(s->cmd), "%s", cmd);
    }
    return LG_OK;
}

int lg_fault_check(const lg_fault_spec *specs, int n, int nend, lg_err *err)
{
    if (nend > n)
        return lg_errf(err, LG_ERR_USAGE, "--fault-end #%d has no --fault to end (the i-th "
                       "--fault-end undoes the i-th --fault)", n + 1);
    for (int i = 0; i < nend; i++)
        if (specs[i].end_s < specs[i].at_s)
            return lg_errf(err, LG_ERR_USAGE, "--fault-end #%d at %g s comes before its --fault "
                           "at %g s", i + 1, specs[i].end_s, specs[i].at_s);
    return LG_OK;
}

/* When command k of the schedule is due, or -1 when it cannot be (now). */
static double due_at(const lg_fault_spec *specs, const int *step, int k, int stopping)
{
    const lg_fault_spec *s = &specs[k / 2];
    if (step[k] != LG_FAULT_WAITING)
        return -1;
    if (k % 2 == 0)
        return stopping ? -1 : s->at_s;
    if (s->end_cmd[0] == '\0' || step[k - 1] != LG_FAULT_OVER)
        return -1;
    return stopping ? 0 : s->end_s;
}

int lg_fault_due(const lg_fault_spec *specs, int n, const int *step, double now_s, int stopping,
                 double *wait_s)
{
    int best = -1;
    double best_at = 0, next = -1;
    for (int k = 0; k < 2 * n; k++) {
        double at = due_at(specs, step, k, stopping);
        if (at < 0)
            continue;
        if (at <= now_s && (best < 0 || at < best_at))
            best = k, best_at = at;
        else if (at > now_s && (next < 0 || at - now_s < next))
            next = at - now_s;
    }
    if (wait_s)
        *wait_s = best >= 0 ? 0 : next;
    return best;
}

int lg_fault_failed(const lg_fault_cmd *c)
{
    return c->state == LG_FAULT_NO_START || c->state == LG_FAULT_KILLED ||
           (c->state == LG_FAULT_EXITED && c->status != 0);
}

const char *lg_fault_first_line(const lg_fault_cmd *c, char *buf, size_t size)
{
    const char *p = c->out + strspn(c->out, " \t\r\n");
    snprintf(buf, size, "%.*s", (int)strcspn(p, "\r\n"), p);
    return buf;
}

int lg_fault_failure(const lg_fault_result *f, int i, int end, char *buf, size_t size)
{
    const lg_fault_cmd *c = end ? &f->end : &f->run;
    const char *cmd = end ? f->spec.end_cmd : f->spec.cmd;
    char how[200], line[120];
    if (!lg_fault_failed(c))
        return 0;
    if (c->state == LG_FAULT_NO_START)
        snprintf(how, sizeof(how), "could not start: %s", c->why);
    else if (c->state == LG_FAULT_KILLED)
        snprintf(how, sizeof(how), "was killed after running %.0f s (the limit)",
                 (double)(c->end_ns - c->start_ns) / 1e9);
    else
        snprintf(how, sizeof(how), "exited %d%s%s", c->status,
                 lg_fault_first_line(c, line, sizeof(line))[0] ? ": " : "", line);
    int len = snprintf(buf, size, "fault %d's %scommand '%.60s' %s", i + 1, end ? "end " : "",
                       cmd, how);
    if (len >= (int)size && size > 4) /* cut: the report's faults show it all */
        memcpy(buf + size - 4, "...", 4);
    return 1;
}

int lg_fault_span(const lg_fault_result *f, int64_t start_ns, double *t0_s, double *t1_s)
{
    if (f->run.state == LG_FAULT_NOT_RUN)
        return -1;
    const lg_fault_cmd *last = f->end.state != LG_FAULT_NOT_RUN ? &f->end : &f->run;
    *t0_s = (double)(f->run.start_ns - start_ns) / 1e9;
    *t1_s = (double)(last->end_ns - start_ns) / 1e9;
    if (*t1_s < *t0_s)
        *t1_s = *t0_s;
    return 0;
}

/* Answers of the series in [t0, t1) seconds, a bucket counted where its
 * middle falls: ok ones, errors (neither ok nor sold out), and per outcome. */
typedef struct tally {
    double ok, err, secs;
    uint64_t by[LG_OUT_COUNT];
} tally;

static int is_error(int o)
{
    return o != LG_OUT_OK && o != LG_OUT_INSUFFICIENT;
}

static void count_span(const lg_series *s, double t0, double t1, tally *t)
{
    memset(t, 0, sizeof(*t));
    t->secs = t1 > t0 ? t1 - t0 : 0;
    double w = (double)s->width_ns / 1e9;
    for (size_t i = 0; i < s->n; i++) {
        double mid = ((double)i + 0.5) * w;
        if (mid < t0 || mid >= t1)
            continue;
        for (int o = 0; o < LG_OUT_COUNT; o++) {
            uint64_t c = lg_series_count(s, i, 1, o);
            t->by[o] += c;
            if (o == LG_OUT_OK)
                t->ok += (double)c;
            else if (is_error(o))
                t->err += (double)c;
        }
    }
}

static void rates(const tally *t, char *buf, size_t size)
{
    if (t->secs <= 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.0f ok/%.0f err", t->ok / t->secs, t->err / t->secs);
}

/* "12 transport, 3 lock_timeout" or "none". */
static void error_list(const tally *t, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int o = 0; o < LG_OUT_COUNT && used < size; o++)
        if (is_error(o) && t->by[o])
            used += (size_t)snprintf(buf + used, size - used, "%s%llu %s", used ? ", " : "",
                                     (unsigned long long)t->by[o], lg_outcome_name(o));
    if (buf[0] == '\0')
        snprintf(buf, size, "none");
}

/* Seconds from t1 to the first ok answer at or after it (to a bucket's
 * width), or -1 when none came. */
static double first_ok_after(const lg_series *s, double t1)
{
    double w = (double)s->width_ns / 1e9;
    for (size_t i = 0; i < s->n; i++)
        if ((double)(i + 1) * w > t1 && lg_series_count(s, i, 1, LG_OUT_OK))
            return fmax(0, (double)i * w - t1);
    return -1;
}

int lg_fault_note(const lg_fault_result *f, int i, const lg_series *s, int64_t start_ns,
                  double elapsed_s, long long history_violations, lg_finding *out)
{
    double t0, t1;
    if (lg_fault_span(f, start_ns, &t0, &t1) != 0)
        return -1;
    tally before, during, after;
    count_span(s, 0, t0, &before);
    count_span(s, t0, t1, &during);
    count_span(s, t1, fmax(elapsed_s, t1), &after);
    char rb[48], rd[48], ra[48], errs[128], first[64], hist[64] = "";
    rates(&before, rb, sizeof(rb));
    rates(&during, rd, sizeof(rd));
    rates(&after, ra, sizeof(ra));
    error_list(&during, errs, sizeof(errs));
    double back = first_ok_after(s, t1);
    if (back < 0)
        snprintf(first, sizeof(first), "no ok answer after it");
    else
        snprintf(first, sizeof(first), "first ok %.2f s after it (to %.0f ms)", back,
                 (double)s->width_ns / 1e6);
    if (history_violations >= 0)
        snprintf(hist, sizeof(hist), "; history violations in it: %lld", history_violations);
    memset(out, 0, sizeof(*out));
    out->kind = LG_N_FAULT;
    out->amount = (long long)during.err;
    int len = snprintf(out->text, sizeof(out->text),
             "fault %d (%.40s%s) %.2f-%.2f s: per s %s before, %s during, %s after; errors "
             "during: %s; %s%s", i + 1, f->spec.cmd, strlen(f->spec.cmd) > 40 ? "..." : "", t0,
             t1, rb, rd, ra, errs, first, hist);
    if (len >= (int)sizeof(out->text)) /* a long list of errors: the text ends with "..." */
        memcpy(out->text + sizeof(out->text) - 4, "...", 4);
    return 0;
}

long long lg_fault_history_in(const lg_history *h, double t0_s, double t1_s)
{
    if (!h->checked || h->reads_at == NULL || h->lo == NULL || h->hi == NULL)
        return -1;
    int64_t t0 = (int64_t)(t0_s * 1e9), t1 = (int64_t)(t1_s * 1e9);
    long long n = 0;
    for (size_t i = 0; i < h->reads; i++) {
        const lg_read *x = &h->reads_at[i];
        if (x->t1_ns >= t0 && x->t0_ns <= t1 && (x->stock > h->hi[i] || x->stock < h->lo[i]))
            n++;
    }
    return n;
}
