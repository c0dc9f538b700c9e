/* lgrun.c - loadgen run as a process for a test (lgrun.h). */
#include "tests/support/lgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/harness.h"

#define ARGS_MAX 48

th_lg_outcome th_lg_run(const char *loadgen, const char *dir, int expect,
                        const char *const pre[], const char *const args[], int timeout_ms)
{
    static int seq; /* one file pair per run of the process */
    char out[256], json_path[256];
    snprintf(out, sizeof(out), "%s/loadgen-%d.out", dir, seq);
    snprintf(json_path, sizeof(json_path), "%s/loadgen-%d.json", dir, seq++);
    const char *argv[ARGS_MAX] = {loadgen, "--json", json_path};
    int n = 3;
    for (int i = 0; pre && pre[i] && n < ARGS_MAX - 1; i++)
        argv[n++] = pre[i];
    for (int i = 0; args[i] && n < ARGS_MAX - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    th_lg_outcome o = {th_run(argv, out, timeout_ms), th_read_file(out), NULL};
    o.json = json_load_file(json_path, 0, NULL);
    if (o.status != expect)
        fprintf(stderr, "loadgen exited %d, expected %d; its output:\n%s\n", o.status, expect,
                o.text ? o.text : "(none)");
    return o;
}

void th_lg_outcome_free(th_lg_outcome *o)
{
    free(o->text);
    json_decref(o->json);
    o->text = NULL;
    o->json = NULL;
}

int th_lg_has_violation(const th_lg_outcome *o, const char *kind)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(o->json, "violations"), i, v)
        if (strcmp(json_string_value(json_object_get(v, "kind")), kind) == 0)
            return 1;
    return 0;
}
