/* fault_exec.c - the thread that runs the --fault commands: each under
 * /bin/sh -c in a process group of its own (so a time limit kills all it
 * started, and the terminal's Ctrl-C reaches loadgen alone, which then still
 * runs the ends), its output read from one pipe, its end reaped with waitpid.
 * One thread polls them all, so a slow command never delays another's time. */
#include "loadgen/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loadgen/evloop.h"

#define POLL_MS 10 /* how soon a stop, an exit or a due time is noticed */

extern char **environ;

/* A command running: its process (and group) and the read end of its pipe. */
typedef struct running {
    pid_t pid;
    int fd;          /* -1 once closed */
    int64_t kill_ns; /* when it is killed */
    size_t used;     /* bytes of out filled */
} running;

struct lg_faults {
    pthread_t thread;
    atomic_int stopping; /* set by lg_faults_stop, read by the thread */
    int n;
    int64_t start_ns, timeout_ns;
    lg_fault_spec specs[LG_FAULT_MAX];
    lg_fault_result res[LG_FAULT_MAX];
    int step[2 * LG_FAULT_MAX];    /* enum lg_fault_step, by schedule index */
    running run[2 * LG_FAULT_MAX];
};

static lg_fault_cmd *cmd_of(lg_faults *f, int k)
{
    return k % 2 ? &f->res[k / 2].end : &f->res[k / 2].run;
}

/* posix_spawn rather than fork: it is safe in a threaded process. The child
 * gets every signal's default (loadgen ignores SIGPIPE, which exec would
 * keep), an empty mask, /dev/null as stdin and the pipe as stdout+stderr. */
static int spawn(const char *cmd, int out_fd, pid_t *pid, char *why, size_t size)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_fd, STDERR_FILENO);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setsigmask(&at, &none);
    char sh[] = "sh", dash_c[] = "-c";
    char *argv[] = {sh, dash_c, (char *)cmd, NULL};
    int rc = posix_spawn(pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0)
        snprintf(why, size, "/bin/sh could not be started: %s", strerror(rc));
    return rc == 0 ? 0 : -1;
}

/* Starts command k: RUNNING, or OVER with LG_FAULT_NO_START. */
static void start_cmd(lg_faults *f, int k, int stopping)
{
    const lg_fault_spec *s = &f->specs[k / 2];
    lg_fault_cmd *c = cmd_of(f, k);
    running *r = &f->run[k];
    int p[2];
    c->start_ns = lg_now_ns();
    c->early = k % 2 && stopping && (double)(c->start_ns - f->start_ns) / 1e9 < s->end_s;
    c->status = -1;
    f->step[k] = LG_FAULT_OVER;
    if (pipe2(p, O_CLOEXEC) != 0) {
        c->state = LG_FAULT_NO_START, c->end_ns = lg_now_ns();
        snprintf(c->why, sizeof(c->why), "no pipe for its output: %s", strerror(errno));
        return;
    }
    int rc = spawn(k % 2 ? s->end_cmd : s->cmd, p[1], &r->pid, c->why, sizeof(c->why));
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        c->state = LG_FAULT_NO_START, c->end_ns = lg_now_ns();
        return;
    }
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    r->fd = p[0];
    r->used = 0;
    r->kill_ns = c->start_ns + f->timeout_ns;
    f->step[k] = LG_FAULT_RUNNING;
}

/* Reads what the command wrote so far: the first bytes are kept, the rest
 * read and dropped so that it never blocks on a full pipe. */
static void drain(running *r, lg_fault_cmd *c)
{
    char buf[4096];
    ssize_t got;
    while (r->fd >= 0 && (got = read(r->fd, buf, sizeof(buf))) > 0) {
        size_t keep = sizeof(c->out) - 1 - r->used;
        if ((size_t)got > keep)
            c->out_cut = 1;
        else
            keep = (size_t)got;
        memcpy(c->out + r->used, buf, keep);
        r->used += keep;
        c->out[r->used] = '\0';
    }
    if (r->fd >= 0 && got == 0) { /* every writer is gone */
        close(r->fd);
        r->fd = -1;
    }
}

/* Reaps command k if it ended (or kills it past its limit). Its pipe is
 * closed when sh exits even if a process it left in the background still
 * holds the pipe: the docs ask such commands to redirect their output. */
static void reap(lg_faults *f, int k, int64_t now)
{
    running *r = &f->run[k];
    lg_fault_cmd *c = cmd_of(f, k);
    int status = 0;
    drain(r, c);
    pid_t w = waitpid(r->pid, &status, WNOHANG);
    if (w < 0 && errno == EINTR)
        return; /* the next round asks again */
    /* ECHILD: something else reaped it (SIGCHLD set to SIG_IGN, a library's
     * wait): it has ended, with a status nobody can know now */
    int gone = w < 0;
    if (w == 0 && now < r->kill_ns)
        return;
    if (w == 0) {
        kill(-r->pid, SIGKILL);
        while ((w = waitpid(r->pid, &status, 0)) < 0 && errno == EINTR)
            ;
        gone = w < 0;
        c->state = LG_FAULT_KILLED;
    } else {
        c->state = LG_FAULT_EXITED;
    }
    drain(r, c);
    lg_fault_clean_output(c->out);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    c->end_ns = lg_now_ns();
    c->status = gone ? -1
                : WIFEXITED(status) ? WEXITSTATUS(status)
                : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    if (gone)
        snprintf(c->why, sizeof(c->why), "%s",
                 "its exit status is unknown: it was reaped elsewhere");
    f->step[k] = LG_FAULT_OVER;
}

/* One round: skips what a stop leaves behind, starts what is due, reaps what
 * ended. Returns 1 while anything is running or may still come due. */
static int round_of(lg_faults *f, double *wait_s)
{
    int stopping = atomic_load(&f->stopping), busy = 0;
    for (int k = 0; stopping && k < 2 * f->n; k += 2)
        if (f->step[k] == LG_FAULT_WAITING)
            f->step[k] = f->step[k + 1] = LG_FAULT_SKIPPED;
    int k;
    double now_s = (double)(lg_now_ns() - f->start_ns) / 1e9;
    while ((k = lg_fault_due(f->specs, f->n, f->step, now_s, stopping, wait_s)) >= 0)
        start_cmd(f, k, stopping);
    int64_t now = lg_now_ns();
    for (k = 0; k < 2 * f->n; k++) {
        if (f->step[k] == LG_FAULT_RUNNING)
            reap(f, k, now);
        busy |= f->step[k] == LG_FAULT_RUNNING;
        /* an end waits for its fault's command, or for its time */
        busy |= f->step[k] == LG_FAULT_WAITING && (k % 2 == 0 || f->specs[k / 2].end_cmd[0]);
    }
    return busy;
}

static void *fault_thread(void *arg)
{
    lg_faults *f = arg;
    double wait_s;
    while (round_of(f, &wait_s)) {
        int ms = wait_s >= 0 && wait_s * 1e3 < POLL_MS ? (int)(wait_s * 1e3) : POLL_MS;
        struct pollfd fds[2 * LG_FAULT_MAX];
        int nfds = 0;
        for (int k = 0; k < 2 * f->n; k++)
            if (f->step[k] == LG_FAULT_RUNNING && f->run[k].fd >= 0)
                fds[nfds++] = (struct pollfd){.fd = f->run[k].fd, .events = POLLIN};
        poll(fds, (nfds_t)nfds, ms); /* woken by output; ends and times by the short limit */
    }
    return NULL;
}

int lg_faults_start(const lg_fault_spec *specs, int n, int64_t start_ns, int timeout_ms,
                    lg_faults **out, lg_err *err)
{
    *out = NULL;
    if (n <= 0)
        return LG_OK;
    lg_faults *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for the faults");
    f->n = n > LG_FAULT_MAX ? LG_FAULT_MAX : n;
    f->start_ns = start_ns;
    f->timeout_ns = (int64_t)(timeout_ms > 0 ? timeout_ms : LG_FAULT_TIMEOUT_MS) * 1000000;
    memcpy(f->specs, specs, (size_t)f->n * sizeof(*specs));
    for (int i = 0; i < f->n; i++) {
        f->res[i].spec = specs[i];
        f->res[i].run.status = f->res[i].end.status = -1;
    }
    for (int k = 0; k < 2 * f->n; k++)
        f->run[k].fd = -1;
    atomic_init(&f->stopping, 0);
    int rc = pthread_create(&f->thread, NULL, fault_thread, f);
    if (rc != 0) {
        free(f);
        return lg_errf(err, LG_ERR_SYS, "could not start the faults' thread: %s", strerror(rc));
    }
    *out = f;
    return LG_OK;
}

void lg_faults_stop(lg_faults *f)
{
    if (f)
        atomic_store(&f->stopping, 1);
}

void lg_faults_join(lg_faults *f, lg_fault_result **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (f == NULL)
        return;
    lg_faults_stop(f);
    pthread_join(f->thread, NULL);
    *out = malloc((size_t)f->n * sizeof(**out));
    if (*out) {
        memcpy(*out, f->res, (size_t)f->n * sizeof(**out));
        *n = f->n;
    }
    free(f);
}
