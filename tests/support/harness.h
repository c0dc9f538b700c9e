/* harness.h - the real processes tests run against: a private redis-server and
 * stockd replicas on free loopback ports, each stopped by its PID when the test
 * stops it, when the test binary exits (atexit) or dies (the child gets
 * PR_SET_PDEATHSIG). Test helpers only; they abort the test on set-up failure.
 * One header for four files, each a section below: harness.c (processes),
 * redis.c (asking a Redis), net.c (ports, HTTP, raw sockets), proxy.c. */
#ifndef TEST_HARNESS_H
#define TEST_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "loadgen/err.h"

/* How many times longer a timing bound is in a sanitizer build: ThreadSanitizer
 * makes each new thread and each lock several times dearer. */
#if defined(__SANITIZE_THREAD__)
#define TH_SANITIZER_SLOWER 5
#elif defined(__SANITIZE_ADDRESS__)
#define TH_SANITIZER_SLOWER 2
#else
#define TH_SANITIZER_SLOWER 1
#endif

/* ---- slower.c: how busy the machine is ---- */

/* How many times longer a timing bound is here and now: the sanitizer's
 * factor times the machine's load, measured at the first call (a few
 * stretches of CPU work timed on the wall clock against this thread's CPU
 * clock, the busiest kept, and the last minute's load average per core),
 * rounded up and clamped to 1..10; the environment's TH_SLOWER=n replaces
 * the measured load. Logged once on stderr. For bounds that say "not
 * starved" or "not hung", never for those that prove an order of events.
 * Thread-safe. */
int th_slower(void);
#define TH_SLOWER th_slower()

/* ---- harness.c: processes, each stopped by its PID ---- */

/* Monotonic milliseconds, for the generous hang-detecting bounds tests use. */
int64_t th_now_ms(void);
void th_sleep_ms(int ms);

/* Makes a private temp dir ("/tmp/<prefix>-XXXXXX") into buf; removes it at exit. */
int th_tempdir(const char *prefix, char *buf, size_t size);

/* The build directory the binaries under test live in ($TEST_BUILD_DIR, "build"). */
const char *th_build_dir(void);

/* Starts a process by argv (argv[0] is a path) with stderr to log_path (NULL:
 * inherit), registered for clean-up. Returns the PID or -1. */
pid_t th_spawn(const char *const argv[], const char *log_path);

/* The same, run as user (setgroups/setgid/setuid in the child before exec,
 * and from "/" as its cwd) when user is not NULL: for servers that refuse to
 * run as root. The log is opened as the caller. Returns -1 when user is
 * unknown. */
pid_t th_spawn_as(const char *const argv[], const char *log_path, const char *user);

/* Makes the clean-up at exit send sig to pid (a child from th_spawn) and give
 * it up to 3 s before SIGKILL: for servers that free what they hold outside
 * their process on a signal but not on SIGKILL (PostgreSQL its shared memory
 * on SIGQUIT). */
void th_exit_signal(pid_t pid, int sig);

/* Sends sig to pid and, unless sig is SIGSTOP/SIGCONT, reaps it (waiting at
 * most wait_ms, then SIGKILL). Forgets the PID once it is gone. Returns the
 * exit status (128+signal when killed), or -1 when not reaped. */
int th_signal(pid_t pid, int sig, int wait_ms);

/* Runs argv to completion (stdout+stderr to out_path when given), killing it
 * after timeout_ms. Returns its exit status, 128+signal, or -1. */
int th_run(const char *const argv[], const char *out_path, int timeout_ms);

/* Waits for a process started with th_spawn, killing it after timeout_ms.
 * Returns its exit status as th_run does. */
int th_wait(pid_t pid, int timeout_ms);

/* The process's state letter from /proc (R, S, T for stopped...), or 0. */
char th_proc_state(pid_t pid);

/* Whether /proc/<pid>/<file> (cmdline, environ: NUL-separated) contains
 * text, as ps or a look at the environment would find it. */
int th_proc_has(pid_t pid, const char *file, const char *text);

/* The process's resident memory in KiB, or -1. */
long th_rss_kb(pid_t pid);

/* CPU time the process has used (user + system), in ms, or -1. */
long th_cpu_ms(pid_t pid);

/* Whether cmd is on PATH (command -v): for a test that needs a tool `make
 * deps` may not have installed, so that it can skip saying which. */
int th_have(const char *cmd);

/* Reads a whole file (NUL-terminated, caller frees) or NULL. */
char *th_read_file(const char *path);

/* Writes text as path, whole: a temp file beside it renamed over it, as an
 * operator's tools would, so a reader never sees half of it. 0, or -1. */
int th_replace_file(const char *path, const char *text);

/* How many times needle occurs in the file at path (0 when it can't be read). */
int th_count_in_file(const char *path, const char *needle);

typedef struct th_redis {
    pid_t pid;
    int port;
    char dir[64];      /* private temp dir, removed by th_redis_stop */
    char password[64]; /* set before th_redis_start: --requirepass, and the harness's own
                        * connections authenticate with it */
} th_redis;

/* Starts redis-server without persistence on a free port (or on r->port when it
 * is non-zero, for restarts) and waits until it answers PING. 0 or -1. */
int th_redis_start(th_redis *r);

/* SIGKILL (hard) or SIGTERM (soft), then waits for the PID. Keeps r->port. */
void th_redis_stop(th_redis *r, int hard);

/* A stockd replica under test. */
typedef struct th_stockd {
    pid_t pid;
    int port;
    char url[64]; /* "http://127.0.0.1:<port>" ("https://" with --tls-cert among the flags) */
    char log[128];
} th_stockd;

/* Starts <build>/stockd on a free port against redis r (NULL: a port where
 * nothing listens) and the SQLite file db, with extra flags (NULL-terminated
 * list, may be NULL). Logs go to log_dir/stockd-<port>.log. Waits until it
 * answers HTTP (with --tls-cert, until it takes connections). Returns 0, or
 * -1 (the log says why). */
int th_stockd_start(th_stockd *s, const th_redis *r, const char *db, const char *log_dir,
                    const char *const extra[]);

/* Sends sig (SIGTERM for a graceful stop, SIGKILL for a crash) and reaps it.
 * Returns its exit status as th_signal does. */
int th_stockd_stop(th_stockd *s, int sig);

/* Stops s with SIGTERM and checks that it exited 0 and that its log holds no
 * sanitizer report; prints the offending log lines otherwise. 0 or -1. */
int th_stockd_stop_clean(th_stockd *s);

/* Every suite runs only the tests whose names match the environment's
 * TEST_FILTER when it is set: cmocka's pattern, with * and ? as wildcards
 * (TEST_FILTER='test_a_*' build/tests/it/test_server). The group set-up
 * still runs. */

/* Skips the running cmocka test with a reason, printed as its last line so
 * that tests/run.sh lists it ("skip: <reason>"). Use where the test needs a
 * tool that `make deps` does not install. */
#define th_skip(...)                                                                   \
    do {                                                                               \
        printf("skip: " __VA_ARGS__);                                                  \
        printf("\n");                                                                  \
        fflush(stdout);                                                                \
        skip();                                                                        \
    } while (0)

/* ---- redis.c: what a test asks a Redis ---- */

/* A fresh connection to r, authenticated when r->password is set; the test
 * owns it (redisFree). */
redisContext *th_redis_connect(const th_redis *r);

/* Runs one Redis command (printf-style, hiredis format) and returns the reply
 * as an integer: the integer or number string itself, 0 for a status (OK),
 * -1 for nil, -2 on error. For checks like EXISTS / PTTL / GET counter. */
long long th_redis_int(const th_redis *r, const char *fmt, ...);

/* The string value of key (into buf), or "" when missing. */
const char *th_redis_get(const th_redis *r, const char *key, char *buf, size_t size);

/* r's clock (TIME) in microseconds, as the lock's fences read it; -1 when r
 * does not answer. */
long long th_redis_now_us(const th_redis *r);

/* The Redis key of an item's lock in a stockd with the default lock prefix,
 * as service_lock_key makes it, into buf (DLOCK_KEY_MAX + 1 bytes). */
const char *th_item_lock_key(long long item, char *buf);

/* Waits until a stockd on Redis r holds item's lock (its key exists), at most
 * timeout_ms: 0, or -1 when it never did. A lock of an order already answered
 * may still be there (group commit releases it after the answers): before a
 * request meant to be the one found holding, wait for th_wait_item_unlocked. */
int th_wait_item_locked(const th_redis *r, long long item, int timeout_ms);

/* Waits until nobody holds item's lock (its key is gone), at most timeout_ms:
 * 0, or -1 when it stayed. */
int th_wait_item_unlocked(const th_redis *r, long long item, int timeout_ms);

/* Takes item's lock as another owner would (its key set to a token of
 * nobody's, for 30 s), so that a stockd's orders for the item wait for it;
 * th_release_item_lock deletes the key. 0, or -1 when the key was there
 * already (or, releasing, was gone). */
int th_hold_item_lock(const th_redis *r, long long item);
int th_release_item_lock(const th_redis *r, long long item);

/* ---- net.c: ports, HTTP and raw connections ---- */

/* A port nobody listens on right now (bound then released). */
int th_free_port(void);

/* An HTTP exchange, made with loadgen's own client (lg_api_call). body is
 * NUL-terminated and owned by the response (th_resp_free). status is 0 on a
 * transport error (see error). */
typedef struct th_resp {
    long status;
    char *body;
    size_t len;
    char retry_after[16]; /* Retry-After header, "" when absent */
    char content_type[64];
    char error[LG_ERR_MSG_MAX];
} th_resp;

/* method "GET"/"POST"/...; req_body may be NULL. Returns 0, or -1 on a
 * transport error (out->status 0). Times out after 60 s. */
int th_http(const char *method, const char *url, const char *req_body, th_resp *out);
void th_resp_free(th_resp *r);

/* POST /reduceStock {"itemId","quantity","workMs"} to base_url; the answer's
 * body (on a transport error, what went wrong) is copied to body when given.
 * Returns the status (0: transport error). */
long th_reduce(const char *base_url, long long item, int quantity, int work_ms, char *body,
               size_t size);

/* Deducts one of item every 50 ms until it is answered 200, for at most
 * within_ms (a replica coming back from an outage): the status last
 * answered. */
long th_reduce_until_served(const char *base_url, long long item, int within_ms);

/* The same on a thread of its own, for tests that act while it holds a lock;
 * or, when order is set, that POST /orders body instead. */
typedef struct th_bg_reduce {
    const char *url; /* in: base URL */
    long long item;
    int work_ms;
    const char *order;
    long status;    /* out, after th_bg_reduce_join */
    char body[512];
    pthread_t thread;
} th_bg_reduce;

void th_bg_reduce_start(th_bg_reduce *b);
void th_bg_reduce_join(th_bg_reduce *b);

/* Sends raw bytes to 127.0.0.1:port, half-closes when shut_write, and reads
 * until the peer closes or timeout_ms passes. Returns bytes read into out
 * (NUL-terminated), or -1 when it could not connect. */
int th_raw(int port, const char *req, size_t len, int shut_write, char *out, size_t size,
           int timeout_ms);

/* A raw keep-alive connection: th_connect returns a socket (or -1);
 * th_exchange sends req and reads one response (headers, then Content-Length
 * bytes of body) into out, NUL-terminated. Returns bytes read, 0 when the peer
 * closed, -1 on error. */
int th_connect(int port);

/* Sends all len bytes (or until the peer fails), resuming after signals. */
void th_send_all(int fd, const char *data, size_t len);

/* Starts a non-blocking connect to 127.0.0.1:port; the socket, or -1. */
int th_connect_nonblocking(int port);

/* A connection to 127.0.0.1:port from the loopback address src (for example
 * "127.0.0.2": another client, as far as the server can tell); -1 on failure. */
int th_connect_from(const char *src, int port);
int th_exchange(int fd, const char *req, char *out, size_t size, int timeout_ms);

/* The value of an unlabelled metric in base_url/metrics, or -1. */
double th_metric(const char *base_url, const char *name);

/* ---- proxy.c: a delaying TCP proxy ---- */

/* A TCP proxy on a free loopback port in front of 127.0.0.1:upstream, on
 * threads of the test process: bytes pass both ways, except that the next
 * client chunk containing an armed needle (th_proxy_delay_next) is held for
 * a while, and everything the client sends after it on that connection
 * waits behind it, as a slow network would. A client that gives up and
 * closes still has its held bytes delivered: that is the fault it makes.
 * For faults a real Redis can't produce on demand. */
typedef struct th_proxy th_proxy;

/* Starts the proxy; NULL on failure. th_proxy_port says where it listens. */
th_proxy *th_proxy_start(int upstream_port);
int th_proxy_port(const th_proxy *p);

/* New connections go to 127.0.0.1:upstream_port from now on (clients
 * pointed at a new server, as after a failover); open ones stay where they
 * are, until their server goes. */
void th_proxy_redirect(th_proxy *p, int upstream_port);

/* Holds the next client chunk that contains needle for delay_ms. */
void th_proxy_delay_next(th_proxy *p, const char *needle, int delay_ms);

/* Chunks held so far (each armed delay that fired counts one). */
int th_proxy_delayed(th_proxy *p);

/* The next server chunk that contains needle (say "COMMIT", the tag of the
 * server's reply to one) is passed on to its client, and then that
 * connection is closed both ways at once: a session lost right after an
 * answer, as when a host or the network fails at that instant. */
void th_proxy_cut_after(th_proxy *p, const char *needle);

/* Connections cut so far (each armed cut that fired counts one). */
int th_proxy_cuts(th_proxy *p);

/* on: from now on no byte passes either way, on open connections and on new
 * ones (accepted, and connected upstream, but silent), as when packets are
 * dropped; what the client sends meanwhile is held, in order. off: it all
 * flows again, the held bytes first, even from a client that gave up. */
void th_proxy_stall(th_proxy *p, int on);

/* Client connections accepted so far. */
int th_proxy_accepted(th_proxy *p);

/* Closes every connection and joins the threads. NULL is a no-op. */
void th_proxy_stop(th_proxy *p);

#endif
