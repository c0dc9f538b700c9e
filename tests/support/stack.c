/* stack.c - three replicas and loadgen runs for the fault tests. */
#include "tests/support/stack.h"

#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const th_pg *stack_pg;

void th_stack_use_pg(const th_pg *pg) { stack_pg = pg; }

void th_stack_start(th_stack *s, const char *dir, const th_redis *redis, const char *name,
                    const char *const all[], const char *const first[], long long stock)
{
    const char *common[] = {"--lease-ms", "1000", "--redis-timeout-ms", "150", "--wait-ms",
                            "8000", "--retry-ms", "20", "--allow-work-ms", "--busy-timeout-ms",
                            "300", NULL};
    s->dir = dir;
    if (stack_pg) {
        char dbname[64];
        snprintf(dbname, sizeof(dbname), "%s", name);
        for (char *p = dbname; *p; p++)
            *p = *p == '-' ? '_' : *p;
        assert_int_equal(th_pg_create_db(stack_pg, dbname, s->db, sizeof(s->db)), 0);
    } else {
        snprintf(s->db, sizeof(s->db), "%s/%s.db", dir, name);
    }
    s->targets[0] = '\0';
    for (int i = 0; i < TH_REPLICAS; i++) {
        const char *flags[40];
        int n = 0;
        for (int k = 0; common[k]; k++)
            flags[n++] = common[k];
        for (int k = 0; all && all[k]; k++)
            flags[n++] = all[k];
        for (int k = 0; i == 0 && first && first[k]; k++)
            flags[n++] = first[k];
        flags[n] = NULL;
        assert_int_equal(th_stockd_start(&s->r[i], redis, s->db, dir, flags), 0);
        if (i > 0)
            snprintf(s->targets + strlen(s->targets), sizeof(s->targets) - strlen(s->targets),
                     "%s%s", s->targets[0] ? "," : "", s->r[i].url);
    }
    char url[128], body[64];
    th_resp r;
    snprintf(url, sizeof(url), "%s/items", s->r[1].url);
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"stock\":%lld}", name, stock);
    th_http("POST", url, body, &r);
    assert_int_equal(r.status, 201);
    json_t *j = json_loads(r.body, 0, NULL);
    s->item = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    th_resp_free(&r);
}

void th_stack_stop(th_stack *s)
{
    for (int i = 0; i < TH_REPLICAS; i++)
        if (s->r[i].pid > 0)
            th_stockd_stop(&s->r[i], SIGTERM);
}

long long th_stack_stock(const th_stack *s)
{
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/items/%lld?limit=0", s->r[1].url, s->item);
    th_http("GET", url, NULL, &r);
    json_t *j = json_loads(r.body, 0, NULL);
    long long v = json_integer_value(json_object_get(j, "stock"));
    json_decref(j);
    th_resp_free(&r);
    return v;
}

pid_t th_loadgen_start(const th_stack *s, const char *name, const char *targets,
                       const char *duration, const char *concurrency, const char *work_ms)
{
    static char bin[256], item[32], json[160], out[160];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    snprintf(item, sizeof(item), "%lld", s->item);
    snprintf(json, sizeof(json), "%s/%s.json", s->dir, name);
    snprintf(out, sizeof(out), "%s/%s.out", s->dir, name);
    const char *argv[] = {bin,   "--target", targets,    "--item",      item,
                          "-d",  duration,   "-n",       "0",           "-c",
                          concurrency, "--work-ms", work_ms, "--json", json,
                          "--timeout-ms", "20000", NULL};
    return th_spawn(argv, out);
}

void th_loadgen_expect(const th_stack *s, pid_t pid, const char *name, int expected)
{
    int status = th_wait(pid, 60000);
    if (status != expected) {
        char path[160];
        snprintf(path, sizeof(path), "%s/%s.out", s->dir, name);
        char *out = th_read_file(path); /* whole: cmocka's messages are cut short */
        printf("loadgen %s output:\n%s\n", name, out ? out : "(none)");
        free(out);
        fail_msg("loadgen %s exited %d, expected %d (its output is above)", name, status,
                 expected);
    }
}

long long th_loadgen_outcome(const th_stack *s, const char *name, const char *key)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/%s.json", s->dir, name);
    json_t *j = json_load_file(path, 0, NULL);
    long long v = json_integer_value(json_object_get(json_object_get(j, "outcomes"), key));
    json_decref(j);
    return v;
}
