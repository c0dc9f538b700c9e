/* test_front_door.c - haproxy as the front door: docker/haproxy/haproxy.cfg,
 * run by scripts/front-door.sh, over three real stockd replicas set up as
 * demo.sh sets them (haproxy connects from 127.0.0.2, the replicas trust that
 * address alone). Buyers sell over TLS trusting the CA it made and reach
 * every replica; a replica stopped with a drain notice leaves the pool before
 * it refuses anyone; the stick table refuses per source, closing what it
 * refuses; the replicas name the buyer's real address, whatever
 * X-Forwarded-For it forged; a burst past a replica's connections waits in
 * haproxy's queue (per-server maxconn). */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/harness.h"
#include "tests/support/lgrun.h"

/* The replicas' --drain-notice-ms: three times what haproxy's checks take to
 * drop one (inter 500 ms x fall 2). Fixed, not scaled: the drain test's sale
 * is sized from it so that the stop proper lands mid-sale. */
#define NOTICE_MS 3000
#define CONN_MAX 4       /* the limits' instance: connections per source... */
#define RATE_MAX 20      /* ...and requests per source in 10 s */
/* haproxy's source address towards the replicas (FRONT_SOURCE), the one
 * address they trust, as in demo.sh: the buyers here are 127.0.0.1 */
#define FRONT_SOURCE "127.0.0.2"

/* One haproxy, by its PID (the -W master; SIGTERM stops its worker too). */
typedef struct front {
    pid_t pid;
    int port;
    char url[64], log[160];
} front;

static th_redis redis;
static th_stockd r[3];
static front shop, limits;
static char dir[64], db[128], ca[128], loadgen[256];

/* Starts scripts/front-door.sh on a free port over the servers s[0..2]
 * (host:port) with the given limits, and waits (bounded) until GET /health
 * answers expect through it. 0 or -1; f->pid is set as soon as it runs. */
static int front_start_expecting(front *f, const char *name, char s[3][32],
                                 const char *conn_max, const char *rate_max, long expect)
{
    char bind[32], fdir[96];
    f->port = th_free_port();
    snprintf(bind, sizeof(bind), "127.0.0.1:%d", f->port);
    snprintf(f->url, sizeof(f->url), "https://localhost:%d", f->port);
    snprintf(f->log, sizeof(f->log), "%s/haproxy-%s.log", dir, name);
    snprintf(fdir, sizeof(fdir), "%s/front", dir); /* one CA for all: made by the first */
    setenv("FRONT_BIND", bind, 1);
    setenv("FRONT_S1", s[0], 1);
    setenv("FRONT_S2", s[1], 1);
    setenv("FRONT_S3", s[2], 1);
    setenv("FRONT_CONN_MAX", conn_max, 1);
    setenv("FRONT_RATE_MAX", rate_max, 1);
    setenv("FRONT_SOURCE", FRONT_SOURCE, 1);
    unsetenv("FRONT_CONN_HARD"); /* front-door.sh's default, 2 x FRONT_CONN_MAX */
    const char *argv[] = {"/bin/sh", "scripts/front-door.sh", fdir, NULL};
    f->pid = th_spawn(argv, f->log);
    if (f->pid <= 0)
        return -1;
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f->url);
    for (int64_t end = th_now_ms() + 10000 * TH_SLOWER; th_now_ms() < end; th_sleep_ms(50)) {
        CURL *h = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CAINFO, ca);
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
        long status = 0;
        if (curl_easy_perform(h) == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        if (status == expect)
            return 0;
    }
    fprintf(stderr, "haproxy did not answer on %d; its log:\n%s\n", f->port,
            th_read_file(f->log));
    return -1;
}

static int front_start(front *f, const char *name, char s[3][32], const char *conn_max,
                       const char *rate_max)
{
    return front_start_expecting(f, name, s, conn_max, rate_max, 200);
}

static void front_stop(front *f)
{
    if (f->pid > 0)
        th_signal(f->pid, SIGTERM, 10000);
    f->pid = 0;
}

static void replica_addr(const th_stockd *s, char out[32])
{
    snprintf(out, 32, "127.0.0.1:%d", s->port);
}

static int start_replica(th_stockd *s, const char *name, const char *notice)
{
    const char *flags[] = {"--instance-id",     name,         "--drain-notice-ms", notice,
                           "--trusted-proxies", FRONT_SOURCE, NULL};
    return th_stockd_start(s, &redis, db, dir, flags);
}

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (access("/usr/sbin/haproxy", X_OK) != 0 || !th_have("openssl")) { /* off a user's PATH */
        fprintf(stderr, "test_front_door: haproxy or openssl is not installed (make deps)\n");
        return -1;
    }
    if (th_tempdir("front-door", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    snprintf(ca, sizeof(ca), "%s/front/ca.pem", dir);
    snprintf(loadgen, sizeof(loadgen), "%s/loadgen", th_build_dir());
    char s[3][32], name[16], notice[16];
    snprintf(notice, sizeof(notice), "%d", NOTICE_MS);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "replica-%d", i + 1);
        if (start_replica(&r[i], name, notice) != 0)
            return -1;
        replica_addr(&r[i], s[i]);
    }
    char conn_max[16], rate_max[16];
    snprintf(conn_max, sizeof(conn_max), "%d", CONN_MAX);
    snprintf(rate_max, sizeof(rate_max), "%d", RATE_MAX);
    return front_start(&shop, "shop", s, "256", "1000000") == 0 &&
                   front_start(&limits, "limits", s, conn_max, rate_max) == 0
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    front_stop(&shop);
    front_stop(&limits);
    /* the notices run side by side; stop_clean's SIGTERM, a second one, cuts
     * each short, then checks the exit and the log for sanitizer reports */
    for (int i = 0; i < 3; i++)
        if (r[i].pid > 0)
            kill(r[i].pid, SIGTERM);
    int rc = 0;
    for (int i = 0; i < 3; i++)
        if (r[i].pid > 0 && th_stockd_stop_clean(&r[i]) != 0)
            rc = -1;
    th_redis_stop(&redis, 0);
    curl_global_cleanup();
    return rc;
}

/* ---- one request with libcurl, trusting the front door's CA ---- */

typedef struct answer {
    long status;        /* -1: curl failed (body says why) */
    char body[4096];
    char retry_after[16];
    char content_type[64];
    char connection[32]; /* its Connection header, "" when none */
} answer;

static size_t keep_body(char *data, size_t size, size_t n, void *arg)
{
    answer *a = arg;
    size_t len = strlen(a->body), add = size * n;
    if (len + add < sizeof(a->body))
        memcpy(a->body + len, data, add), a->body[len + add] = '\0';
    return add;
}

static size_t keep_header(char *data, size_t size, size_t n, void *arg)
{
    answer *a = arg;
    size_t len = size * n;
    if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0)
        sscanf(data + 12, " %15[^\r\n]", a->retry_after);
    if (len > 13 && strncasecmp(data, "Content-Type:", 13) == 0)
        sscanf(data + 13, " %63[^\r\n]", a->content_type);
    if (len > 11 && strncasecmp(data, "Connection:", 11) == 0)
        sscanf(data + 11, " %31[^\r\n]", a->connection);
    return len;
}

/* GET url, or POST body to it when body is not NULL (with one extra header
 * line when header is not NULL) on h (a handle kept across calls keeps its
 * connection alive). */
static void ask(CURL *h, const char *url, const char *header, const char *body, answer *a)
{
    memset(a, 0, sizeof(*a));
    struct curl_slist *hdrs = header ? curl_slist_append(NULL, header) : NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    else
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, keep_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
    a->status = -1;
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a->status);
    else
        snprintf(a->body, sizeof(a->body), "%s", curl_easy_strerror(rc));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdrs);
}

static void get(CURL *h, const char *url, const char *header, answer *a)
{
    ask(h, url, header, NULL, a);
}

/* ---- loadgen through the front door ---- */

/* Every outcome of o's report but ok and insufficient_stock, summed. */
static long long failures(const th_lg_outcome *o)
{
    long long n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(o->json, "outcomes"), k, v)
        if (strcmp(k, "ok") != 0 && strcmp(k, "insufficient_stock") != 0)
            n += json_integer_value(v);
    return n;
}

static double reduce_count(const th_stockd *s)
{
    return th_metric(s->url, "stockd_http_requests_total{route=\"reduceStock\",status=\"200\"}");
}

/* (a) loadgen over TLS, trusting the CA front-door.sh made, sells with
 * verdict PASS, and round robin spreads its orders over all three. */
static void test_loadgen_through_the_front_door_passes_over_every_replica(void **state)
{
    (void)state;
    double before[3];
    for (int i = 0; i < 3; i++)
        before[i] = reduce_count(&r[i]) > 0 ? reduce_count(&r[i]) : 0;
    th_lg_outcome o = th_lg_run(loadgen, dir, 0, NULL,
                                (const char *[]){"--target", shop.url, "--cacert", ca, "-n",
                                                 "600", "-c", "12", "--stock", "400", NULL},
                                120000 * TH_SLOWER);
    assert_int_equal(o.status, 0);
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), "PASS");
    assert_non_null(strstr(o.text, "tls: certificates verified against --cacert"));
    assert_int_equal(failures(&o), 0);
    th_lg_outcome_free(&o);
    for (int i = 0; i < 3; i++) {
        double sold = reduce_count(&r[i]) - before[i];
        print_message("replica-%d sold %.0f through the front door\n", i + 1, sold);
        assert_true(sold > 0);
    }
}

/* loadgen through f for duration with SIGTERM to victim's PID at 2 s. */
static th_lg_outcome sale_with_a_stop(const front *f, pid_t victim, const char *duration)
{
    char fault[64];
    snprintf(fault, sizeof(fault), "2s:kill -TERM %d", (int)victim);
    return th_lg_run(loadgen, dir, 0, NULL,
                     (const char *[]){"--target", f->url, "--cacert", ca, "-n", "0", "-d",
                                      duration, "-c", "12", "--stock", "100000000",
                                      "--history-ms", "50", "--fault", fault, NULL},
                     120000 * TH_SLOWER);
}

/* The wall-clock time in ms of the log line of path holding needle (its
 * ts=YYYY-MM-DDTHH:MM:SS.mmmZ), or -1. */
static int64_t logged_at_ms(const char *path, const char *needle)
{
    char *text = th_read_file(path);
    int64_t at = -1;
    for (char *line = text; line && *line && at < 0;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        struct tm tm = {0};
        int ms = 0;
        const char *rest;
        if (strstr(line, needle) && strncmp(line, "ts=", 3) == 0 &&
            (rest = strptime(line + 3, "%Y-%m-%dT%H:%M:%S", &tm)) && sscanf(rest, ".%3dZ", &ms) == 1)
            at = (int64_t)timegm(&tm) * 1000 + ms;
        line = end ? end + 1 : NULL;
    }
    free(text);
    return at;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* (b) A replica stopped mid-sale with a drain notice: /health's 503 takes it
 * out of haproxy's pool while it still serves, so no buyer sees an error;
 * then it stops, exit 0. The sale lasts 2 s to the SIGTERM, the notice, and
 * 3 s more, and the replica's log shows that its drain (the stop proper, the
 * notice after its "stopping" line) began before the sale ended: had haproxy
 * kept sending it orders, buyers would have met its 503 shutting_down. The
 * same with no notice is printed, not asserted (the refusals then depend on
 * timing). */
static void test_a_replica_drained_mid_sale_costs_no_buyer_an_error(void **state)
{
    (void)state;
    char duration[16];
    int sale_ms = 2000 + NOTICE_MS + 3000;
    snprintf(duration, sizeof(duration), "%dms", sale_ms);
    int64_t started = wall_ms();
    th_lg_outcome o = sale_with_a_stop(&shop, r[0].pid, duration);
    assert_int_equal(o.status, 0);
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), "PASS");
    if (failures(&o) != 0)
        fail_msg("buyers met errors while a replica drained:\n%s", o.text);
    th_lg_outcome_free(&o);
    assert_int_equal(th_wait(r[0].pid, 30000 * TH_SLOWER), 0);
    r[0].pid = 0;
    assert_true(th_count_in_file(shop.log, "stockd-1 is DOWN") >= 1);
    /* loadgen started after `started`, so its sale ended after started + sale_ms */
    int64_t stopping = logged_at_ms(r[0].log, "msg=\"stopping\"");
    if (stopping <= 0)
        fail_msg("no \"stopping\" line in %s", r[0].log);
    int64_t drain = stopping + NOTICE_MS;
    print_message("the drain began %lld ms into the sale of %d ms\n", (long long)(drain - started),
                  sale_ms);
    if (drain >= started + sale_ms)
        fail_msg("the drain began %lld ms after the sale started, past its %d ms: nothing "
                 "shows that haproxy dropped the replica first", (long long)(drain - started),
                 sale_ms);

    /* the contrast: a replica with no notice in another front door's pool */
    th_stockd bare;
    assert_int_equal(start_replica(&bare, "no-notice", "0"), 0);
    char s[3][32];
    replica_addr(&bare, s[0]);
    replica_addr(&r[1], s[1]);
    replica_addr(&r[2], s[2]);
    front contrast;
    if (front_start(&contrast, "contrast", s, "256", "1000000") != 0) {
        front_stop(&contrast);
        th_stockd_stop(&bare, SIGKILL);
        fail_msg("the contrast's haproxy did not start");
    }
    o = sale_with_a_stop(&contrast, bare.pid, "4s");
    print_message("with --drain-notice-ms 0 instead: %lld answers other than ok or sold out "
                  "(verdict %s)\n", failures(&o),
                  json_string_value(json_object_get(o.json, "verdict")));
    th_lg_outcome_free(&o);
    front_stop(&contrast);
    th_wait(bare.pid, 30000 * TH_SLOWER);
}

/* Whether haproxy closes fd (a plain TCP connection that sent nothing)
 * within a second. */
static int closed_unanswered(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    char c;
    return poll(&p, 1, 1000) > 0 && read(fd, &c, 1) <= 0;
}

/* (c) More connections from one source than FRONT_CONN_MAX: the next
 * request is answered 503 too_many_connections, in stockd's JSON format and
 * with stockd's status for that code, and its connection is closed; past
 * twice as many (FRONT_CONN_HARD) a connection is closed at accept,
 * unanswered, so that connections that send nothing can't pile up. */
static void test_too_many_connections_from_one_source_are_refused_and_closed(void **state)
{
    (void)state;
    int fds[2 * CONN_MAX];
    for (int i = 0; i < CONN_MAX; i++) /* plain TCP: haproxy counts them at accept */
        assert_true((fds[i] = th_connect(limits.port)) >= 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", limits.url);
    answer a = {0};
    CURL *h = curl_easy_init();
    /* the accepts are haproxy's to make: asked again for a while */
    for (int64_t end = th_now_ms() + 5000 * TH_SLOWER; th_now_ms() < end; th_sleep_ms(50)) {
        get(h, url, NULL, &a);
        if (a.status == 503)
            break;
        curl_easy_reset(h);
    }
    curl_easy_cleanup(h);
    if (a.status != 503 || strstr(a.body, "\"error\":\"too_many_connections\"") == NULL) {
        for (int i = 0; i < CONN_MAX; i++)
            close(fds[i]);
        fail_msg("past %d connections: %ld %s", CONN_MAX, a.status, a.body);
    }
    assert_string_equal(a.content_type, "application/json");
    assert_string_equal(a.retry_after, "1");
    assert_string_equal(a.connection, "close");

    /* up to the hard cap, then one more: closed at accept. A probe that
     * haproxy takes as one of the first 2 x CONN_MAX (it had not accepted
     * them all yet) is closed by the test and tried again. */
    for (int i = CONN_MAX; i < 2 * CONN_MAX; i++)
        assert_true((fds[i] = th_connect(limits.port)) >= 0);
    int rejected = 0;
    for (int64_t end = th_now_ms() + 10000 * TH_SLOWER; !rejected && th_now_ms() < end;) {
        int probe = th_connect(limits.port);
        assert_true(probe >= 0);
        rejected = closed_unanswered(probe);
        close(probe);
    }
    for (int i = 0; i < 2 * CONN_MAX; i++)
        close(fds[i]);
    if (!rejected)
        fail_msg("past %d connections from one source, haproxy still holds a new one open",
                 2 * CONN_MAX);
    /* haproxy sees the closes in its own time; the next test wants them gone */
    h = curl_easy_init();
    for (int64_t end = th_now_ms() + 10000 * TH_SLOWER; th_now_ms() < end; th_sleep_ms(50)) {
        get(h, url, NULL, &a);
        if (a.status == 200)
            break;
        curl_easy_reset(h);
    }
    curl_easy_cleanup(h);
    assert_int_equal(a.status, 200);
}

/* (c) More requests from one source than FRONT_RATE_MAX in 10 s: 429
 * too_many_requests with Retry-After, and nothing past that reaches a
 * replica (their count of requests for a path of no route stays put). */
static double unrouted_count(void)
{
    double n = 0;
    for (int i = 0; i < 3; i++) {
        double v = th_metric(r[i].url, "stockd_http_requests_total{route=\"other\",status=\"404\"}");
        n += v > 0 ? v : 0;
    }
    return n;
}

static void test_too_many_requests_from_one_source_get_429(void **state)
{
    (void)state;
    char url[96];
    snprintf(url, sizeof(url), "%s/rate-probe", limits.url); /* a 404 of stockd's */
    CURL *h = curl_easy_init();
    answer a = {0};
    int passed = 0, refused = 0;
    for (int i = 0; i < 3 * RATE_MAX && refused == 0; i++) {
        get(h, url, NULL, &a);
        if (a.status == 404)
            passed++;
        else if (a.status == 429 && strstr(a.body, "\"error\":\"too_many_requests\""))
            refused++;
        else if (a.status != 503) /* the connection test's count may linger a moment */
            fail_msg("request %d: %ld %s", i, a.status, a.body);
    }
    print_message("%d reached a replica before the first too_many_requests\n", passed);
    assert_int_equal(refused, 1);
    assert_true(passed <= RATE_MAX);
    assert_string_equal(a.content_type, "application/json");
    assert_string_equal(a.retry_after, "10");
    double reached = unrouted_count();
    for (int i = 0; i < 5; i++) {
        get(h, url, NULL, &a);
        if (a.status != 429 || strstr(a.body, "\"error\":\"too_many_requests\"") == NULL)
            fail_msg("request %d after the first refusal: %ld %s", i + 1, a.status, a.body);
    }
    curl_easy_cleanup(h);
    assert_true(unrouted_count() == reached);
}

/* ---- (d) what haproxy forwards: a listener of the test's own as every server ---- */

typedef struct upstream {
    int fd;
    _Atomic int stop;
    char head[4096]; /* the head of the first request for /xff-probe */
    pthread_t thread;
} upstream;

/* Answers every request 200 and closes (haproxy's checks among them),
 * keeping the head of the probe's request. */
static void *serve_upstream(void *arg)
{
    upstream *u = arg;
    while (!u->stop) {
        struct pollfd p = {u->fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(u->fd, NULL, NULL);
        if (c < 0)
            continue;
        char head[4096];
        size_t len = 0;
        struct pollfd q = {c, POLLIN, 0};
        while (len < sizeof(head) - 1 && poll(&q, 1, 2000) > 0) {
            ssize_t n = read(c, head + len, sizeof(head) - 1 - len);
            if (n <= 0)
                break;
            head[len += (size_t)n] = '\0';
            if (strstr(head, "\r\n\r\n"))
                break;
        }
        head[len] = '\0';
        if (strstr(head, "/xff-probe") && u->head[0] == '\0')
            memcpy(u->head, head, len + 1);
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                 "Connection: close\r\n\r\nok";
        th_send_all(c, ok, sizeof(ok) - 1);
        close(c);
    }
    return NULL;
}

/* The value of the last header line named name in head, into out. */
static int last_header(const char *head, const char *name, char *out, size_t size)
{
    int found = 0;
    size_t nlen = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n"))
        if (strncasecmp(line + 2, name, nlen) == 0 && line[2 + nlen] == ':') {
            const char *v = line + 3 + nlen, *e = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            snprintf(out, size, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            found = 1;
        }
    return found;
}

/* How many header lines of head are named name. */
static int header_lines(const char *head, const char *name)
{
    int n = 0;
    size_t nlen = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n"))
        if (strncasecmp(line + 2, name, nlen) == 0 && line[2 + nlen] == ':')
            n++;
    return n;
}

/* (d) haproxy drops whatever X-Forwarded-For the buyer sent and sets its
 * own, the buyer's address alone: a forged hop never reaches a replica,
 * however wide the replica's --trusted-proxies. */
static void test_a_request_carries_the_buyers_address_alone_in_x_forwarded_for(void **state)
{
    (void)state;
    upstream u = {.fd = socket(AF_INET, SOCK_STREAM, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(u.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(u.fd, 64), 0);
    assert_int_equal(getsockname(u.fd, (struct sockaddr *)&a, &alen), 0);
    pthread_create(&u.thread, NULL, serve_upstream, &u);
    char s[3][32];
    for (int i = 0; i < 3; i++)
        snprintf(s[i], 32, "127.0.0.1:%d", ntohs(a.sin_port));
    front f;
    int started = front_start(&f, "xff", s, "256", "1000000");
    answer ans = {0};
    if (started == 0) {
        char url[96];
        snprintf(url, sizeof(url), "%s/xff-probe", f.url);
        CURL *h = curl_easy_init();
        get(h, url, "X-Forwarded-For: 203.0.113.9", &ans);
        curl_easy_cleanup(h);
    }
    front_stop(&f);
    u.stop = 1;
    pthread_join(u.thread, NULL);
    close(u.fd);
    assert_int_equal(started, 0);
    assert_int_equal(ans.status, 200);
    char xff[128] = "";
    if (!last_header(u.head, "X-Forwarded-For", xff, sizeof(xff)) ||
        strcmp(xff, "127.0.0.1") != 0)
        fail_msg("the last X-Forwarded-For is \"%s\", not the buyer's address; the head:\n%s",
                 xff, u.head);
    if (strstr(u.head, "203.0.113.9") != NULL || header_lines(u.head, "X-Forwarded-For") != 1)
        fail_msg("the buyer's forged hop reached the replica; the head:\n%s", u.head);
}

static double forwarded_count(void)
{
    double n = 0;
    for (int i = 0; i < 3; i++) {
        double v = th_metric(r[i].url, "stockd_http_client_address_total{source=\"forwarded\"}");
        n += v > 0 ? v : 0;
    }
    return n;
}

/* (d) The same end to end, as the demo runs it: an order with a forged
 * X-Forwarded-For, through haproxy, to replicas that trust haproxy's source
 * address. The replica names the buyer's real address (127.0.0.1) in its
 * order line, never the forged one, and counts it as forwarded. */
static void test_a_forged_x_forwarded_for_changes_nothing_at_the_replica(void **state)
{
    (void)state;
    double before = forwarded_count();
    char url[96];
    snprintf(url, sizeof(url), "%s/reduceStock", shop.url);
    CURL *h = curl_easy_init();
    answer a;
    ask(h, url, "X-Forwarded-For: 203.0.113.9",
        "{\"itemId\":987654,\"quantity\":1,\"requestId\":\"forged-xff-probe\"}", &a);
    curl_easy_cleanup(h);
    if (a.status != 404)
        fail_msg("an order for an item that does not exist: %ld %s", a.status, a.body);
    assert_true(forwarded_count() >= before + 1);
    int named = 0;
    for (int i = 0; i < 3; i++) {
        char *log = th_read_file(r[i].log);
        assert_non_null(log);
        for (char *line = strstr(log, "requestId=forged-xff-probe"); line;
             line = strstr(line + 1, "requestId=forged-xff-probe")) {
            char *bol = line, *eol = strchr(line, '\n');
            while (bol > log && bol[-1] != '\n')
                bol--;
            if (eol)
                *eol = '\0';
            print_message("replica-%d: %s\n", i + 1, bol);
            if (strstr(bol, "client=127.0.0.1"))
                named++;
            if (eol)
                *eol = '\n';
        }
        int forged = strstr(log, "203.0.113.9") != NULL;
        free(log);
        if (forged)
            fail_msg("replica-%d's log names the forged address 203.0.113.9", i + 1);
    }
    assert_int_equal(named, 1);
}

/* (e) A burst larger than a replica's --max-connections: haproxy's
 * per-server maxconn (FRONT_SERVER_MAXCONN, 2 on each of three server lines
 * naming the one replica, so 6 at once, within its 20 with room for the
 * checks' and idle connections) keeps the excess in its queue, and no buyer
 * meets the replica's 503 too_many_connections. Without the maxconn, 40
 * orders at once open 40 connections, and most are refused. */
static void test_a_burst_waits_in_haproxys_queue_not_past_max_connections(void **state)
{
    (void)state;
    char mdb[160];
    snprintf(mdb, sizeof(mdb), "%s/maxconn.db", dir);
    th_stockd one;
    const char *flags[] = {"--instance-id", "small", "--max-connections", "20",
                           "--allow-work-ms", NULL};
    assert_int_equal(th_stockd_start(&one, &redis, mdb, dir, flags), 0);
    char s[3][32];
    for (int i = 0; i < 3; i++)
        replica_addr(&one, s[i]);
    setenv("FRONT_SERVER_MAXCONN", "2", 1);
    front f;
    int started = front_start(&f, "maxconn", s, "256", "1000000");
    unsetenv("FRONT_SERVER_MAXCONN");
    th_lg_outcome o = {0};
    if (started == 0)
        o = th_lg_run(loadgen, dir, 0, NULL,
                      (const char *[]){"--target", f.url, "--cacert", ca, "-n", "200", "-c", "40",
                                       "--items", "40", "--work-ms", "100", NULL},
                      120000 * TH_SLOWER);
    front_stop(&f);
    int stopped = th_stockd_stop_clean(&one);
    assert_int_equal(started, 0);
    assert_int_equal(o.status, 0);
    long long failed = failures(&o);
    if (failed != 0 || o.json == NULL)
        fail_msg("%lld orders failed in a burst past the replica's connections:\n%s", failed,
                 o.text ? o.text : "");
    th_lg_outcome_free(&o);
    assert_int_equal(stopped, 0);
}

/* With no replica up, haproxy's own refusal is in stockd's format too: 503
 * no_replica in JSON with Retry-After, not its HTML page. */
static void test_no_replica_up_gets_a_json_503(void **state)
{
    (void)state;
    char s[3][32];
    for (int i = 0; i < 3; i++)
        snprintf(s[i], 32, "127.0.0.1:%d", th_free_port()); /* nothing listens there */
    front f;
    int started = front_start_expecting(&f, "down", s, "256", "1000000", 503);
    answer a = {0};
    if (started == 0) {
        char url[96];
        snprintf(url, sizeof(url), "%s/reduceStock", f.url);
        CURL *h = curl_easy_init();
        get(h, url, NULL, &a);
        curl_easy_cleanup(h);
    }
    front_stop(&f);
    assert_int_equal(started, 0);
    if (a.status != 503 || strstr(a.body, "\"error\":\"no_replica\"") == NULL)
        fail_msg("no replica up: %ld %s", a.status, a.body);
    assert_string_equal(a.content_type, "application/json");
    assert_string_equal(a.retry_after, "1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loadgen_through_the_front_door_passes_over_every_replica),
        cmocka_unit_test(test_too_many_connections_from_one_source_are_refused_and_closed),
        cmocka_unit_test(test_too_many_requests_from_one_source_get_429),
        cmocka_unit_test(test_a_request_carries_the_buyers_address_alone_in_x_forwarded_for),
        cmocka_unit_test(test_a_forged_x_forwarded_for_changes_nothing_at_the_replica),
        cmocka_unit_test(test_a_burst_waits_in_haproxys_queue_not_past_max_connections),
        cmocka_unit_test(test_no_replica_up_gets_a_json_503),
        cmocka_unit_test(test_a_replica_drained_mid_sale_costs_no_buyer_an_error),
    };
    return cmocka_run_group_tests_name("front_door", tests, group_setup, group_teardown);
}
