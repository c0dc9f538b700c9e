/* serverstats.c - what the Redis servers under lockbench did, from INFO:
 * each command's calls (the ones Lua scripts issue included) and the
 * server's CPU, turned into figures per operation of the benchmark. */
#include "bench/serverstats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void serverstats_read(redisContext *r, struct serverstats *st)
{
    redisReply *rep = redisCommand(r, "INFO all");
    const char *info = rep && rep->type == REDIS_REPLY_STRING ? rep->str : "", *p = info;
    for (st->n = 0; st->n < SERVERSTATS_CMDS && (p = strstr(p, "cmdstat_")) != NULL; p++)
        if (sscanf(p, "cmdstat_%31[^:]:calls=%lld", st->name[st->n], &st->calls[st->n]) == 2)
            st->n++;
    const char *sys = strstr(info, "used_cpu_sys:"), *user = strstr(info, "used_cpu_user:");
    st->cpu_s = (sys ? atof(sys + 13) : 0) + (user ? atof(user + 14) : 0);
    freeReplyObject(rep);
}

static long long calls_of(const struct serverstats *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->name[i], name) == 0)
            return st->calls[i];
    return 0;
}

/* The lock's commands on the server at port from b to a, per `per`
 * acquisitions: all of them but the INFO that read b and the critical
 * sections' (cs) GET and SET. */
static double lock_cmds(int port, const struct serverstats *b, const struct serverstats *a,
                        long long cs, long long per)
{
    int detail = getenv("LOCKBENCH_CMDS") != NULL;
    long long total = 0;
    if (detail)
        fprintf(stderr, "lockbench: port=%d per_acq:", port);
    for (int k = 0; k < a->n; k++) {
        const char *name = a->name[k];
        long long d = a->calls[k] - calls_of(b, name) - (strcmp(name, "info") == 0) -
                      (strcmp(name, "get") == 0 || strcmp(name, "set") == 0 ? cs : 0);
        total += d;
        if (detail && d && per)
            fprintf(stderr, " %s=%.3f", name, (double)d / per);
    }
    if (detail)
        fprintf(stderr, "\n");
    return per ? (double)total / per : 0;
}

/* "v0,v1,..." of each server's figure into buf. */
static const char *joined(const double *v, int n, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), size - strlen(buf), "%s%.2f", i ? "," : "", v[i]);
    return buf;
}

void serverstats_per_op(redisContext *rs[], const int *ports, int n,
                        const struct serverstats b[], long long cs, long long per,
                        char cmds[SERVERSTATS_LEN], char cpu[SERVERSTATS_LEN])
{
    double c[DLOCK_NODES_MAX], u[DLOCK_NODES_MAX];
    struct serverstats a;
    for (int i = 0; i < n; i++) {
        serverstats_read(rs[i], &a);
        c[i] = lock_cmds(ports[i], &b[i], &a, i == 0 ? cs : 0, per);
        u[i] = per ? (a.cpu_s - b[i].cpu_s) * 1e6 / per : 0;
    }
    joined(c, n, cmds, SERVERSTATS_LEN);
    joined(u, n, cpu, SERVERSTATS_LEN);
}

void serverstats_connect(redisContext *rs[], const int *ports, int n)
{
    for (int i = 0; i < n; i++) {
        rs[i] = redisConnect("127.0.0.1", ports[i]);
        if (rs[i] == NULL || rs[i]->err) {
            fprintf(stderr, "lockbench: port %d: %s\n", ports[i], rs[i] ? rs[i]->errstr : "?");
            exit(2);
        }
    }
}

void serverstats_evalsha(redisContext *r, long long *calls, double *usec, long long *all)
{
    redisReply *rep = redisCommand(r, "INFO commandstats");
    const char *info = rep && rep->type == REDIS_REPLY_STRING ? rep->str : "", *p = info;
    *calls = *all = 0;
    *usec = 0;
    const char *e = strstr(info, "cmdstat_evalsha:");
    if (e)
        sscanf(e, "cmdstat_evalsha:calls=%lld,usec=%lf", calls, usec);
    while ((p = strstr(p, "calls=")) != NULL)
        *all += atoll(p += 6);
    freeReplyObject(rep);
}
