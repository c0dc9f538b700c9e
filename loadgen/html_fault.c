/* html_fault.c - the --fault commands on the report's page: a shaded span
 * per fault over the time-series charts (from its command's start to its end
 * command's end) and a list of what each command did. Drawn from the JSON
 * report's "faults" array. Part of the html module (html.h). */
#include "loadgen/html_chart.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loadgen/svg.h"

#define FAULT_COLOR "#d43d51"
#define FAULT_MIN_PX 2.0 /* a fault without an end (kill -9) still shows */

void lg_html_fault_spans(const lg_chart *c, const json_t *run, double unit_ms)
{
    const json_t *faults = json_object_get(run, "faults"), *x;
    size_t i;
    json_array_foreach(faults, i, x) {
        const json_t *span = json_object_get(x, "spanSec");
        if (json_array_size(span) != 2)
            continue;
        double t0 = json_number_value(json_array_get(span, 0)) * 1e3 / unit_ms;
        double t1 = json_number_value(json_array_get(span, 1)) * 1e3 / unit_ms;
        double px0 = lg_chart_x(c, fmin(t0, c->x1)), px1 = lg_chart_x(c, fmin(t1, c->x1));
        double top = lg_chart_y(c, c->y1), bottom = lg_chart_y(c, c->y0);
        if (!isfinite(px0) || !isfinite(px1) || !isfinite(top) || !isfinite(bottom))
            continue;
        fprintf(c->f, "<rect class=\"fault\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"%s\" fill-opacity=\"0.14\" stroke=\"%s\" stroke-opacity=\"0.5\"/>\n",
                px0, top, fmax(px1 - px0, FAULT_MIN_PX), bottom - top, FAULT_COLOR, FAULT_COLOR);
        char label[32];
        snprintf(label, sizeof(label), "fault %zu", i + 1);
        fprintf(c->f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
                px0 + 3, top + 12, FAULT_COLOR, label);
    }
}

/* One command of a fault: "kill -STOP 42: 2.00 s -> 2.01 s, exit 0: first line". */
static void cmd_item(FILE *f, const char *what, const json_t *cmd)
{
    fprintf(f, "<li>%s <code>", what);
    lg_html_text(f, lg_json_str(cmd, "command"));
    fputs("</code>: ", f);
    const char *state = lg_json_str(cmd, "state");
    char buf[160];
    if (json_is_null(lg_json_at(cmd, "startSec"))) {
        fputs("not run (the run ended first)</li>\n", f);
        return;
    }
    snprintf(buf, sizeof(buf), "%.2f s to %.2f s%s, ", lg_json_num(cmd, "startSec"),
             lg_json_num(cmd, "endSec"),
             json_is_true(json_object_get(cmd, "early")) ? " (when the run ended, early)" : "");
    lg_html_text(f, buf);
    if (json_is_true(json_object_get(cmd, "failed")))
        fputs("<b>", f);
    snprintf(buf, sizeof(buf), "%s %.0f", state, lg_json_num(cmd, "exitStatus"));
    lg_html_text(f, json_is_null(lg_json_at(cmd, "exitStatus")) ? state : buf);
    if (json_is_true(json_object_get(cmd, "failed")))
        fputs("</b>", f);
    const char *out = lg_json_str(cmd, "output");
    snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(out, "\r\n"), out);
    if (buf[0]) {
        fputs(": ", f);
        lg_html_text(f, buf);
    }
    fputs("</li>\n", f);
}

void lg_html_faults(FILE *f, const json_t *run)
{
    const json_t *faults = json_object_get(run, "faults"), *x;
    size_t i;
    if (json_array_size(faults) == 0)
        return;
    fputs("<section><h2>Faults</h2><p class=\"sub\">times since the load started; shaded on "
          "the charts over time</p><ol>\n", f);
    json_array_foreach(faults, i, x) {
        fputs("<li><ul class=\"plain\">\n", f);
        cmd_item(f, "run", json_object_get(x, "run"));
        if (!json_is_null(json_object_get(x, "end")))
            cmd_item(f, "end", json_object_get(x, "end"));
        fputs("</ul></li>\n", f);
    }
    fputs("</ol></section>\n", f);
}
