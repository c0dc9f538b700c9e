/* flash.c - a flash sale over one or more processes. The buyers' records live
 * in memory shared with the children (one lg_buyer each, written where the
 * parent reads them after waitpid), and the fire is a pipe closing: every
 * child, once connected, says so on one pipe and blocks reading another,
 * which the parent closes when all have said it, so all of them wake at once. */
#include "loadgen/flash.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loadgen/buyers.h"
#include "loadgen/watch.h"

int lg_flash_capacity(long long nofile)
{
    long long cap = nofile - LG_FLASH_FD_RESERVE;
    return cap < 0 ? 0 : cap > INT_MAX ? INT_MAX : (int)cap;
}

static long long limit_value(rlim_t v)
{
    return v == RLIM_INFINITY || v > (rlim_t)LLONG_MAX ? LLONG_MAX : (long long)v;
}

int lg_flash_limits(int buyers, int procs, lg_sale *s, lg_err *err)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return lg_errf(err, LG_ERR_SYS, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    s->nofile_was = limit_value(rl.rlim_cur);
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl); /* may fail (an unlimited hard limit): keep what is */
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    s->nofile = limit_value(rl.rlim_cur);
    int cap = lg_flash_capacity(s->nofile);
    int share = (buyers + procs - 1) / procs;
    if (share <= cap)
        return LG_OK;
    if (cap == 0)
        return lg_errf(err, LG_ERR_USAGE, "RLIMIT_NOFILE is %lld: no room for a buyer's "
                       "connection", s->nofile);
    return lg_errf(err, LG_ERR_USAGE,
                   "--buyers %d over --procs %d is %d buyers a process, each on a connection "
                   "of its own, but one process may open %lld descriptors (RLIMIT_NOFILE's hard "
                   "limit), room for %d buyers: use --procs %d or more",
                   buyers, procs, share, s->nofile, cap, (buyers + cap - 1) / cap);
}

typedef struct shared {
    lg_sale_part *parts; /* [procs] */
    lg_buyer *buyers;    /* [buyers], part p's from parts[p].first */
    size_t bytes;
} shared;

typedef struct barrier {
    int ready_fd, go_fd;
} barrier;

/* A child's side of the barrier: says it is ready, then waits for the fire
 * (the parent closing the pipe). */
static int barrier_wait(void *arg, int connected)
{
    (void)connected;
    barrier *b = arg;
    ssize_t w;
    do
        w = write(b->ready_fd, "r", 1);
    while (w < 0 && errno == EINTR);
    close(b->ready_fd);
    char c;
    ssize_t r;
    while ((r = read(b->go_fd, &c, 1)) > 0 || (r < 0 && errno == EINTR))
        ;
    return 0;
}

/* A child: its part of the buyers, then gone without running the parent's
 * exit handlers or flushing its copies of the parent's buffers. */
static void child(lg_buyers_cfg cfg, const shared *sh, int p, int ready[2], int go[2])
{
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a sale whose parent died has nobody to report to */
    close(ready[0]);
    close(go[1]);
    barrier b = {ready[1], go[0]};
    cfg.batch = p;
    cfg.ready = barrier_wait;
    cfg.arg = &b;
    lg_sale_part *part = &sh->parts[p];
    lg_err e;
    lg_err_clear(&e);
    if (lg_buyers_run(&cfg, part, sh->buyers + part->first, &e) != LG_OK)
        snprintf(part->error, sizeof(part->error), "process %d: %.170s", p, e.msg);
    _exit(0);
}

/* Reads the ready pipe to its end: every child has then either reached the
 * barrier or died. */
static void await_ready(int fd)
{
    char buf[64];
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0 || (r < 0 && errno == EINTR))
        ;
}

static int run_forked(const lg_flash_cfg *c, lg_buyers_cfg *cfg, const shared *sh, lg_sale *s,
                      lg_err *err)
{
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        return lg_errf(err, LG_ERR_SYS, "pipe: %s", strerror(errno));
    if (pipe2(go, O_CLOEXEC) != 0) {
        close(ready[0]);
        close(ready[1]);
        return lg_errf(err, LG_ERR_SYS, "pipe: %s", strerror(errno));
    }
    fflush(NULL);
    int started = 0, rc = LG_OK;
    for (; started < c->procs; started++) {
        pid_t pid = fork();
        if (pid == 0)
            child(*cfg, sh, started, ready, go);
        if (pid < 0) {
            rc = lg_errf(err, LG_ERR_SYS, "fork: %s", strerror(errno));
            break;
        }
    }
    close(ready[1]);
    close(go[0]);
    lg_watch *w = NULL;
    if (rc == LG_OK)
        rc = lg_watch_start(c->targets, c->ntargets, &w, err);
    await_ready(ready[0]);
    close(go[1]); /* the fire; children started after a failure find it closed at once */
    close(ready[0]);
    for (int i = 0; i < started; i++)
        while (wait(NULL) < 0 && errno == EINTR)
            ;
    lg_watch_stop(w, s);
    return rc;
}

static int run_here(const lg_flash_cfg *c, lg_buyers_cfg *cfg, const shared *sh, lg_sale *s,
                    lg_err *err)
{
    lg_watch *w;
    int rc = lg_watch_start(c->targets, c->ntargets, &w, err);
    if (rc == LG_OK)
        rc = lg_buyers_run(cfg, &sh->parts[0], sh->buyers, err);
    lg_watch_stop(w, s);
    return rc;
}

/* Memory the children write their buyers into, and each part's share. */
static int share_out(const lg_flash_cfg *c, shared *sh, lg_err *err)
{
    sh->bytes = (size_t)c->procs * sizeof(lg_sale_part) + (size_t)c->buyers * sizeof(lg_buyer);
    void *m = mmap(NULL, sh->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return lg_errf(err, LG_ERR_NOMEM, "mmap of %zu bytes for the buyers: %s", sh->bytes,
                       strerror(errno));
    sh->parts = m; /* zeroed: a part that never fired reads as such */
    sh->buyers = (lg_buyer *)(sh->parts + c->procs);
    for (int p = 0; p < c->procs; p++) {
        int first = (int)((long long)p * c->buyers / c->procs);
        int end = (int)((long long)(p + 1) * c->buyers / c->procs);
        sh->parts[p].first = first;
        sh->parts[p].n = end - first;
    }
    return LG_OK;
}

static int merge(const lg_flash_cfg *c, const shared *sh, lg_sale *s, lg_result *res,
                 lg_err *err)
{
    int rc = lg_sale_result_init(res, c->run_id, c->ntargets, c->procs);
    for (int p = 0; rc == LG_OK && p < c->procs; p++)
        rc = lg_sale_merge(s, res, p, &sh->parts[p], sh->buyers + sh->parts[p].first,
                           c->shape->qmin);
    if (rc != LG_OK) {
        lg_result_free(res);
        return lg_errf(err, rc, "out of memory merging the buyers");
    }
    return LG_OK;
}

int lg_flash_run(const lg_flash_cfg *c, lg_sale *s, lg_result *res, lg_err *err)
{
    memset(res, 0, sizeof(*res));
    s->buyers = c->buyers;
    s->procs = c->procs;
    if (c->procs < 1 || c->buyers < c->procs || c->ntargets < 1 || strlen(c->run_id) > 32)
        return lg_errf(err, LG_ERR_USAGE, "flash: inconsistent configuration");
    lg_http_addr *addrs = calloc((size_t)c->ntargets, sizeof(*addrs));
    if (addrs == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    int rc = LG_OK;
    for (int t = 0; rc == LG_OK && t < c->ntargets; t++)
        rc = lg_http_resolve(c->targets[t].url, &addrs[t], NULL, err);
    shared sh = {NULL, NULL, 0};
    if (rc == LG_OK)
        rc = share_out(c, &sh, err);
    lg_buyers_cfg cfg = {.addrs = addrs, .ntargets = c->ntargets, .batch = 0,
                         .run_id = c->run_id, .shape = c->shape, .timeout_ms = c->timeout_ms};
    if (rc == LG_OK)
        rc = c->procs == 1 ? run_here(c, &cfg, &sh, s, err) : run_forked(c, &cfg, &sh, s, err);
    if (rc == LG_OK)
        rc = merge(c, &sh, s, res, err);
    if (sh.parts)
        munmap(sh.parts, sh.bytes);
    free(addrs);
    return rc;
}
