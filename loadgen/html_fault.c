/* html_fault.c - the --fault commands on the report's page: a section saying
 * what each command did, drawn from the JSON report's "faults" array (the
 * charts shade each fault's span themselves: html_chart.c). Part of the html
 * module (html.h). */
#include "loadgen/html_chart.h"

#include <stdio.h>
#include <string.h>


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
