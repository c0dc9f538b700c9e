/* harness.c - starts and stops the real processes tests run against, by PID,
 * also when a test fails or the test binary dies. */
#include "tests/support/harness.h"

#include "loadgen/api.h"
#include "server/service.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/time.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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

int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
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

redisContext *th_redis_connect(const th_redis *r)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (c && !c->err)
        redisSetTimeout(c, tv);
    if (c && !c->err && r->password[0])
        freeReplyObject(redisCommand(c, "AUTH %s", r->password));
    return c;
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

long long th_redis_int(const th_redis *r, const char *fmt, ...)
{
    redisContext *c = th_redis_connect(r);
    if (c == NULL || c->err) {
        redisFree(c);
        return -2;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = -2;
    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_NIL)
        v = -1;
    else if (rep && rep->type == REDIS_REPLY_STATUS)
        v = 0;
    else if (rep && rep->type == REDIS_REPLY_STRING)
        v = strtoll(rep->str, NULL, 10);
    freeReplyObject(rep);
    redisFree(c);
    return v;
}

const char *th_redis_get(const th_redis *r, const char *key, char *buf, size_t size)
{
    buf[0] = '\0';
    redisContext *c = th_redis_connect(r);
    redisReply *rep = (c && !c->err) ? redisCommand(c, "GET %s", key) : NULL;
    if (rep && rep->type == REDIS_REPLY_STRING)
        snprintf(buf, size, "%s", rep->str);
    freeReplyObject(rep);
    redisFree(c);
    return buf;
}

long long th_redis_now_us(const th_redis *r)
{
    redisContext *c = th_redis_connect(r);
    redisReply *t = (c && !c->err) ? redisCommand(c, "TIME") : NULL;
    long long us = -1;
    if (t && t->type == REDIS_REPLY_ARRAY && t->elements == 2)
        us = atoll(t->element[0]->str) * 1000000 + atoll(t->element[1]->str);
    freeReplyObject(t);
    redisFree(c);
    return us;
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
    int n = 7;
    for (int i = 0; extra && extra[i] && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    s->pid = th_spawn(argv, s->log);
    for (int64_t end = th_now_ms() + 10000; s->pid > 0 && th_now_ms() < end; th_sleep_ms(10)) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            forget(s->pid);
            break;
        }
        char buf[64];
        if (th_raw(s->port, "GET /health HTTP/1.0\r\n\r\n", 24, 0, buf, sizeof(buf), 2000) > 0)
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
    if (status != 0 || report)
        fprintf(stderr, "harness: stockd on port %d exited %d%s\n%.4000s\n", s->port, status,
                report ? " with a sanitizer report:" : "", report ? report : "");
    free(log);
    return status == 0 && report == NULL ? 0 : -1;
}

int th_http(const char *method, const char *url, const char *req_body, th_resp *out)
{
    lg_answer_full a;
    lg_err err = {0};
    int rc = lg_api_call(method, url, req_body, &a, &err);
    memset(out, 0, sizeof(*out));
    out->status = a.status;
    out->body = a.body ? a.body : calloc(1, 1);
    out->len = a.len;
    snprintf(out->retry_after, sizeof(out->retry_after), "%s", a.retry_after);
    snprintf(out->content_type, sizeof(out->content_type), "%s", a.content_type);
    snprintf(out->error, sizeof(out->error), "%s", err.msg);
    return rc == LG_OK ? 0 : -1;
}

void th_resp_free(th_resp *r)
{
    free(r->body);
    r->body = NULL;
}

long th_reduce(const char *base_url, long long item, int quantity, int work_ms, char *body,
               size_t size)
{
    char url[256], req[160];
    th_resp r;
    snprintf(url, sizeof(url), "%s/reduceStock", base_url);
    snprintf(req, sizeof(req), "{\"itemId\":%lld,\"quantity\":%d,\"workMs\":%d}", item,
             quantity, work_ms);
    th_http("POST", url, req, &r);
    if (body)
        snprintf(body, size, "%s", r.body ? r.body : "");
    th_resp_free(&r);
    return r.status;
}

static void *bg_reduce(void *arg)
{
    th_bg_reduce *b = arg;
    if (b->order == NULL) {
        b->status = th_reduce(b->url, b->item, 1, b->work_ms, b->body, sizeof(b->body));
        return NULL;
    }
    char url[256];
    th_resp r;
    snprintf(url, sizeof(url), "%s/orders", b->url);
    th_http("POST", url, b->order, &r);
    snprintf(b->body, sizeof(b->body), "%s", r.body ? r.body : "");
    b->status = r.status;
    th_resp_free(&r);
    return NULL;
}

void th_bg_reduce_start(th_bg_reduce *b)
{
    b->status = -1;
    b->body[0] = '\0';
    pthread_create(&b->thread, NULL, bg_reduce, b);
}

void th_bg_reduce_join(th_bg_reduce *b) { pthread_join(b->thread, NULL); }

int th_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int th_connect_from(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && (inet_pton(AF_INET, src, &from.sin_addr) != 1 ||
                    bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
                    connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int th_connect_nonblocking(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        close(fd);
        fd = -1;
    }
    return fd;
}

void th_send_all(int fd, const char *data, size_t len)
{
    for (size_t sent = 0; sent < len;) {
        ssize_t n = send(fd, data + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
}

/* Reads into out until stop(out) says a whole answer is in, the peer closes,
 * or timeout_ms passes. */
static int read_until(int fd, char *out, size_t size, int timeout_ms,
                      int (*complete)(const char *buf, size_t len))
{
    struct timeval tv = {0, 50 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t got = 0;
    out[0] = '\0';
    for (int64_t end = th_now_ms() + timeout_ms; got + 1 < size && th_now_ms() < end;) {
        ssize_t n = recv(fd, out + got, size - 1 - got, 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                continue;
            return got ? (int)got : -1;
        }
        got += (size_t)n;
        out[got] = '\0';
        if (complete && complete(out, got))
            break;
    }
    return (int)got;
}

static int response_complete(const char *buf, size_t len)
{
    const char *end = strstr(buf, "\r\n\r\n");
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (end == NULL || cl == NULL || cl > end)
        return end != NULL && cl == NULL;
    return len >= (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
}

int th_exchange(int fd, const char *req, char *out, size_t size, int timeout_ms)
{
    th_send_all(fd, req, strlen(req));
    return read_until(fd, out, size, timeout_ms, response_complete);
}

int th_raw(int port, const char *req, size_t len, int shut_write, char *out, size_t size,
           int timeout_ms)
{
    int fd = th_connect(port);
    if (fd < 0)
        return -1;
    th_send_all(fd, req, len);
    if (shut_write)
        shutdown(fd, SHUT_WR);
    int got = read_until(fd, out, size, timeout_ms, NULL);
    close(fd);
    return got < 0 ? 0 : got;
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

char th_proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after "pid (comm)" */
    return p && p[1] == ' ' ? p[2] : 0;
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

const char *th_item_lock_key(long long item, char *buf)
{
    service_config defaults;
    service_config_defaults(&defaults);
    service_lock_key(defaults.lock_prefix, item, buf);
    return buf;
}

int th_wait_item_locked(const th_redis *r, long long item, int timeout_ms)
{
    char key[DLOCK_KEY_MAX + 1];
    th_item_lock_key(item, key);
    for (int64_t end = th_now_ms() + timeout_ms; th_redis_int(r, "EXISTS %s", key) != 1;) {
        if (th_now_ms() >= end)
            return -1;
        th_sleep_ms(2);
    }
    return 0;
}

/* Before main: a suite runs only the tests TEST_FILTER names (make mutants
 * runs one or a few of a suite's tests this way). */
__attribute__((constructor)) static void filter_tests(void)
{
    const char *pattern = getenv("TEST_FILTER");
    if (pattern && *pattern)
        cmocka_set_test_filter(pattern);
}

int th_hold_item_lock(const th_redis *r, long long item)
{
    char key[DLOCK_KEY_MAX + 1];
    return th_redis_int(r, "SET %s nobody NX PX 30000", th_item_lock_key(item, key)) == 0 ? 0
                                                                                         : -1;
}

int th_release_item_lock(const th_redis *r, long long item)
{
    char key[DLOCK_KEY_MAX + 1];
    return th_redis_int(r, "DEL %s", th_item_lock_key(item, key)) == 1 ? 0 : -1;
}

long th_cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* fields after "pid (comm)": state is field 3 */
    unsigned long utime, stime;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                            &utime, &stime) != 2)
        return -1;
    return (long)((utime + stime) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

double th_metric(const char *base_url, const char *name)
{
    char url[256], pattern[160];
    th_resp r;
    snprintf(url, sizeof(url), "%s/metrics", base_url);
    snprintf(pattern, sizeof(pattern), "\n%s ", name);
    double v = -1;
    if (th_http("GET", url, NULL, &r) == 0 && r.status == 200) {
        const char *p = strstr(r.body, pattern);
        if (p)
            v = strtod(p + strlen(pattern), NULL);
    }
    th_resp_free(&r);
    return v;
}

int th_have(const char *cmd)
{
    char probe[160];
    snprintf(probe, sizeof(probe), "command -v '%s' >/dev/null 2>&1", cmd);
    return system(probe) == 0;
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
