/* harness.c - starts and stops the real processes tests run against, by PID,
 * also when a test fails or the test binary dies: any program (th_spawn,
 * th_run), redis-server and stockd; temp dirs removed at exit; what /proc says
 * of a process. Sockets and HTTP are in net.c, what a test asks a Redis in
 * redis.c; all of them are declared in harness.h. */
#include "tests/support/harness.h"

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 64
#define MAX_DIRS 32
#define EXIT_GRACE_MS 3000

static pid_t children[MAX_CHILDREN];
static int exit_signals[MAX_CHILDREN]; /* th_exit_signal's, 0 for SIGKILL at once */
static char tempdirs[MAX_DIRS][64];
static int registered;

int64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Children with an exit signal get it and a grace period, together. */
static void stop_gracefully(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0 && exit_signals[i]) {
            kill(children[i], exit_signals[i]);
            kill(children[i], SIGCONT); /* a stopped one would only hold the signal */
        }
    int64_t end = th_now_ms() + EXIT_GRACE_MS;
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] <= 0 || !exit_signals[i])
            continue;
        pid_t got;
        while ((got = waitpid(children[i], NULL, WNOHANG)) == 0 && th_now_ms() < end)
            th_sleep_ms(10);
        if (got != 0)
            children[i] = 0;
    }
}

static void cleanup(void)
{
    stop_gracefully();
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0) {
            kill(children[i], SIGCONT); /* a stopped process would ignore SIGKILL's reaping */
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    for (int i = 0; i < MAX_DIRS; i++)
        if (tempdirs[i][0]) {
            nftw(tempdirs[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            tempdirs[i][0] = '\0';
        }
}

static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void register_cleanup(void)
{
    if (registered)
        return;
    registered = 1;
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

int th_tempdir(const char *prefix, char *buf, size_t size)
{
    register_cleanup();
    snprintf(buf, size, "/tmp/%s-XXXXXX", prefix);
    if (mkdtemp(buf) == NULL)
        return -1;
    for (int i = 0; i < MAX_DIRS; i++)
        if (!tempdirs[i][0]) {
            snprintf(tempdirs[i], sizeof(tempdirs[i]), "%s", buf);
            break;
        }
    return 0;
}

const char *th_build_dir(void)
{
    const char *d = getenv("TEST_BUILD_DIR");
    return d && *d ? d : "build";
}

/* In the child: becomes pw's user, when given, then asks for SIGKILL when the
 * test process dies. In that order: a change of credentials clears
 * PR_SET_PDEATHSIG. */
static void child_setup(pid_t parent, const struct passwd *pw)
{
    if (pw && (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0))
        _exit(126);
    if (pw && chdir("/") != 0) /* the test's cwd may be closed to that user */
        _exit(126);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
}

static pid_t spawn(const char *const argv[], const char *log_path, const struct passwd *pw)
{
    register_cleanup();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY); /* never the test's stdin: a list its caller reads */
        if (in >= 0) {
            dup2(in, STDIN_FILENO);
            close(in);
        }
        if (log_path) { /* opened as the caller: the log may be where pw can't write */
            int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
                close(fd);
            }
        }
        child_setup(parent, pw);
        /* the test's own sockets and files stay with it: a failed test's
         * leftovers would fill the child's descriptor table */
        close_range(3, ~0U, 0);
        execv(argv[0], (char *const *)argv); /* exec never writes to argv */
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid > 0)
        for (int i = 0; i < MAX_CHILDREN; i++)
            if (children[i] == 0) {
                children[i] = pid;
                exit_signals[i] = 0;
                break;
            }
    return pid;
}

pid_t th_spawn(const char *const argv[], const char *log_path)
{
    return spawn(argv, log_path, NULL);
}

pid_t th_spawn_as(const char *const argv[], const char *log_path, const char *user)
{
    struct passwd *pw = NULL;
    if (user && (pw = getpwnam(user)) == NULL) { /* looked up before fork: not async-signal-safe */
        fprintf(stderr, "harness: no user %s\n", user);
        return -1;
    }
    return spawn(argv, log_path, pw);
}

static void forget(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

void th_exit_signal(pid_t pid, int sig)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid && pid > 0)
            exit_signals[i] = sig;
}

static int exit_status(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int th_signal(pid_t pid, int sig, int wait_ms)
{
    if (pid <= 0)
        return -1;
    kill(pid, sig);
    return sig == SIGSTOP || sig == SIGCONT ? -1 : th_wait(pid, wait_ms);
}

int th_redis_start(th_redis *r)
{
    if (r->port == 0)
        r->port = th_free_port();
    if (!r->dir[0] && th_tempdir("dlock-redis", r->dir, sizeof(r->dir)) != 0)
        return -1;
    char port[16], log[128];
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    const char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", r->dir, "--daemonize", "no",
                    "--logfile", log, r->password[0] ? "--requirepass" : NULL, r->password,
                    NULL};
    r->pid = th_spawn(argv, NULL);
    for (int64_t end = th_now_ms() + 5000; r->pid > 0 && th_now_ms() < end; th_sleep_ms(10)) {
        redisContext *c = th_redis_connect(r);
        redisReply *rep = (c && !c->err) ? redisCommand(c, "PING") : NULL;
        int ok = rep && rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
        redisFree(c);
        if (ok)
            return 0;
    }
    fprintf(stderr, "harness: redis-server did not start on port %d (see %s)\n", r->port, log);
    return -1;
}

void th_redis_stop(th_redis *r, int hard)
{
    th_signal(r->pid, hard ? SIGKILL : SIGTERM, 5000);
    r->pid = 0;
}

int th_stockd_start(th_stockd *s, const th_redis *r, const char *db, const char *log_dir,
                    const char *const extra[])
{
    char bin[256], port[16], rport[16];
    s->port = th_free_port();
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(rport, sizeof(rport), "%d", r ? r->port : th_free_port());
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", s->port);
    snprintf(s->log, sizeof(s->log), "%s/stockd-%d.log", log_dir, s->port);

    const char *argv[64] = {bin, "--port", port, "--db", db, "--redis-port", rport};
    int n = 7, tls = 0;
    for (int i = 0; extra && extra[i] && n < 63; i++) {
        tls |= strcmp(extra[i], "--tls-cert") == 0;
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    if (tls) /* a plain request gets no answer from HTTPS: a connection taken will do */
        snprintf(s->url, sizeof(s->url), "https://127.0.0.1:%d", s->port);
    s->pid = th_spawn(argv, s->log);
    for (int64_t end = th_now_ms() + 10000; s->pid > 0 && th_now_ms() < end; th_sleep_ms(10)) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            forget(s->pid);
            break;
        }
        char buf[64];
        int fd = tls ? th_connect(s->port) : -1;
        if (fd >= 0)
            close(fd);
        if (fd >= 0 ||
            (!tls && th_raw(s->port, "GET /health HTTP/1.0\r\n\r\n", 24, 0, buf, sizeof(buf),
                            2000) > 0))
            return 0;
    }
    fprintf(stderr, "harness: stockd did not start on port %d (see %s)\n", s->port, s->log);
    s->pid = 0;
    return -1;
}

int th_stockd_stop(th_stockd *s, int sig)
{
    int status = th_signal(s->pid, sig, 15000);
    s->pid = 0;
    return status;
}

int th_stockd_stop_clean(th_stockd *s)
{
    if (s->pid <= 0)
        return 0;
    int status = th_stockd_stop(s, SIGTERM);
    char *log = th_read_file(s->log);
    const char *report = NULL;
    static const char *const marks[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                        "WARNING: ThreadSanitizer", "runtime error:", NULL};
    for (int i = 0; log && marks[i] && !report; i++)
        report = strstr(log, marks[i]);
    if (report) {
        fprintf(stderr, "harness: stockd on port %d exited %d with a sanitizer report:\n%.4000s\n",
                s->port, status, report);
    } else if (status != 0) { /* an abort's message (libmicrohttpd's, malloc's) is at the end */
        size_t len = log ? strlen(log) : 0;
        fprintf(stderr, "harness: stockd on port %d exited %d; its log ends:\n%s\n", s->port,
                status, log ? log + (len > 2000 ? len - 2000 : 0) : "(unreadable)");
    }
    free(log);
    return status == 0 && report == NULL ? 0 : -1;
}

int th_wait(pid_t pid, int timeout_ms)
{
    int status = 0;
    int64_t end = th_now_ms() + timeout_ms;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (th_now_ms() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        th_sleep_ms(10);
    }
    forget(pid);
    return exit_status(status);
}

int th_run(const char *const argv[], const char *out_path, int timeout_ms)
{
    pid_t pid = th_spawn(argv, out_path);
    return pid < 0 ? -1 : th_wait(pid, timeout_ms);
}

/* /proc/PID/stat read into buf; returns its fields from the state on (field
 * 3, after "pid (comm) ": comm may hold blanks and parentheses), or NULL. */
static const char *proc_stat_fields(pid_t pid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p + 2 : NULL;
}

char th_proc_state(pid_t pid)
{
    char buf[1024];
    const char *fields = proc_stat_fields(pid, buf, sizeof(buf));
    return fields ? fields[0] : 0;
}

int th_proc_has(pid_t pid, const char *file, const char *text)
{
    char path[64], buf[16384];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return memmem(buf, n, text, strlen(text)) != NULL;
}

long th_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}


/* Before main: a suite runs only the tests TEST_FILTER names (make mutants
 * runs one or a few of a suite's tests this way). */
__attribute__((constructor)) static void filter_tests(void)
{
    const char *pattern = getenv("TEST_FILTER");
    if (pattern && *pattern)
        cmocka_set_test_filter(pattern);
}

long th_cpu_ms(pid_t pid)
{
    char buf[1024];
    const char *fields = proc_stat_fields(pid, buf, sizeof(buf));
    unsigned long utime, stime; /* fields 14 and 15 */
    if (fields == NULL || sscanf(fields, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                 &utime, &stime) != 2)
        return -1;
    return (long)((utime + stime) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

int th_have(const char *cmd)
{
    char probe[160];
    snprintf(probe, sizeof(probe), "command -v '%s' >/dev/null 2>&1", cmd);
    return system(probe) == 0;
}

int th_replace_file(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -1;
    int ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

char *th_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

int th_count_in_file(const char *path, const char *needle)
{
    char *text = th_read_file(path);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)) != NULL; p++)
        n++;
    free(text);
    return n;
}
