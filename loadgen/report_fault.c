/* report_fault.c - the report's part for --fault: each fault's command and
 * end command, when each ran on the load's clock, how long it took, its exit
 * status and the first line of its output, as text and as the JSON report's
 * "faults" array (which the HTML page draws its shaded spans from). Part of
 * the report module (report.h). */
#include "loadgen/report.h"

#include <string.h>

static const char *state_name(int state)
{
    switch (state) {
    case LG_FAULT_EXITED: return "exited";
    case LG_FAULT_KILLED: return "killed";
    case LG_FAULT_NO_START: return "could_not_start";
    }
    return "not_run";
}

static double secs(int64_t ns, int64_t start_ns)
{
    return (double)(ns - start_ns) / 1e9;
}

/* One command's line: "2.00 s -> 2.01 s (took 5 ms), exit 0: first line". */
static void cmd_text(FILE *f, const char *what, const char *cmd, const lg_fault_cmd *c,
                     int64_t start_ns)
{
    char line[160];
    fprintf(f, "    %-4s %s\n", what, cmd);
    if (c->state == LG_FAULT_NOT_RUN) {
        fprintf(f, "         not run: the run ended before its time\n");
        return;
    }
    fprintf(f, "         %.2f s -> %.2f s (took %.0f ms)%s, ", secs(c->start_ns, start_ns),
            secs(c->end_ns, start_ns), (double)(c->end_ns - c->start_ns) / 1e6,
            c->early ? ", run when the run ended, before its time" : "");
    if (c->state == LG_FAULT_NO_START)
        fprintf(f, "could not start: %s\n", c->why);
    else if (c->state == LG_FAULT_KILLED)
        fprintf(f, "killed at the %d s limit", LG_FAULT_TIMEOUT_MS / 1000);
    else
        fprintf(f, "exit %d", c->status);
    if (c->state != LG_FAULT_NO_START)
        fprintf(f, "%s%s\n", lg_fault_first_line(c, line, sizeof(line))[0] ? ": " : "", line);
}

void lg_report_faults_text(FILE *f, const lg_run *r)
{
    if (r->nfaults == 0)
        return;
    fprintf(f, "\nfaults (times since the load started):\n");
    for (int i = 0; i < r->nfaults; i++) {
        const lg_fault_result *x = &r->faults[i];
        fprintf(f, "  #%d at %g s", i + 1, x->spec.at_s);
        if (x->spec.end_cmd[0])
            fprintf(f, ", ended at %g s", x->spec.end_s);
        fputc('\n', f);
        cmd_text(f, "run", x->spec.cmd, &x->run, r->load.start_ns);
        if (x->spec.end_cmd[0])
            cmd_text(f, "end", x->spec.end_cmd, &x->end, r->load.start_ns);
    }
}

static json_t *cmd_json(const char *cmd, const lg_fault_cmd *c, int64_t start_ns)
{
    int ran = c->state != LG_FAULT_NOT_RUN;
    json_t *j = json_pack("{s:s, s:s}", "command", cmd, "state", state_name(c->state));
    json_object_set_new(j, "startSec", ran ? json_real(secs(c->start_ns, start_ns)) : json_null());
    json_object_set_new(j, "endSec", ran ? json_real(secs(c->end_ns, start_ns)) : json_null());
    json_object_set_new(j, "tookSec", ran ? json_real((double)(c->end_ns - c->start_ns) / 1e9)
                                          : json_null());
    json_object_set_new(j, "exitStatus", c->state == LG_FAULT_EXITED || c->state == LG_FAULT_KILLED
                                             ? json_integer(c->status) : json_null());
    json_object_set_new(j, "early", json_boolean(c->early));
    json_object_set_new(j, "failed", json_boolean(lg_fault_failed(c)));
    json_object_set_new(j, "output", json_string(c->out)); /* NULL (skipped) when not UTF-8 */
    json_object_set_new(j, "outputCut", json_boolean(c->out_cut));
    if (c->state == LG_FAULT_NO_START)
        json_object_set_new(j, "why", json_string(c->why));
    return j;
}

json_t *lg_report_faults_json(const lg_run *r)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < r->nfaults; i++) {
        const lg_fault_result *x = &r->faults[i];
        double t0, t1;
        int span = lg_fault_span(x, r->load.start_ns, &t0, &t1) == 0;
        json_t *j = json_pack("{s:f, s:o}", "atSec", x->spec.at_s, "run",
                              cmd_json(x->spec.cmd, &x->run, r->load.start_ns));
        json_object_set_new(j, "endAtSec", x->spec.end_cmd[0] ? json_real(x->spec.end_s)
                                                              : json_null());
        json_object_set_new(j, "end", x->spec.end_cmd[0]
                                          ? cmd_json(x->spec.end_cmd, &x->end, r->load.start_ns)
                                          : json_null());
        json_object_set_new(j, "spanSec", span ? json_pack("[f, f]", t0, t1) : json_null());
        json_array_append_new(arr, j);
    }
    return arr;
}
