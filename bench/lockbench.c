/* lockbench.c - measures the lock library against real redis-servers:
 *   lockbench uncontended PORTS SECONDS [MODE]
 *       acquire+release pairs per second on one thread, no contention;
 *   lockbench hot PORTS WORKERS PROCS MODE WORK_MS SECONDS
 *       WORKERS threads spread over PROCS processes, all on one key, lease
 *       10 s, wait up to 10 s; the critical section is a non-atomic GET then
 *       SET of a Redis counter on the first server (plus WORK_MS of sleep).
 *       MODE is spin100, spin5, notify (no hand-off) or handoff (notify +
 *       hand-off, at most 8 in a row and fewer when other processes take
 *       turns; handoffN for another maximum), or a read-write lock in notify
 *       mode: read (readers only: a GET, then WORK_MS) or rwN (N% writes).
 *   lockbench fanout PORTS SECONDS
 *       the machine's floor for a quorum call: rounds per second of one SET
 *       sent to every server, the replies awaited together; no lock.
 *   lockbench waiters PORT N SECONDS async|blocking
 *       N waiters on one key in one process (handoff mode), each releasing
 *       at once and asking again: N threads in dlock_acquire, or N
 *       dlock_acquire_async whose callback releases and asks again; the
 *       rate and the process's threads midway;
 *   lockbench scripts PORT N
 *       what each script costs Redis (INFO commandstats): N uncontended keys
 *       acquired, then released, each phase read on its own, so that the
 *       acquire and the release script, which share EVALSHA's line, are
 *       told apart.
 * Besides rates, each server's lock commands and CPU per operation (from
 * INFO: serverstats.c), and the client's CPU: on a small machine the
 * fan-out costs CPU.
 * PORTS is one port, or several comma-separated (all on 127.0.0.1) for a
 * quorum client (dlock_config_nodes). Prints one line of key=value results;
 * LOCKBENCH_CMDS=1 also prints each server's commands by name on stderr. */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/serverstats.h"
#include "lock/dlock_async.h"
#include "lock/dlock_rw.h"

#define MAX_WORKERS 64
#define MAX_SAMPLES (4 * 1024 * 1024)
#define MAX_GAPS (1024 * 1024)
#define KEY "bench:lock"

/* Shared by the forked processes. last_worker is written only while holding
 * the lock: a violation of mutual exclusion would show in the counter. */
struct shared {
    _Atomic int stop;
    int last_worker;
    uint64_t other_holder; /* acquisitions whose previous holder was another worker */
    _Atomic uint64_t total, reads, hold_us, nsamples;
    _Atomic uint64_t client_cpu_us; /* the worker processes', from the start signal on */
    _Atomic uint64_t lib_acquired, lib_handoffs; /* the clients' dlock_stats, summed */
    uint64_t acquired[MAX_WORKERS]; /* within the window, per worker */
    uint64_t failures[MAX_WORKERS];
    uint32_t wait_us[MAX_SAMPLES];
    /* The hand-over gap: from a holder's dlock_release to the next holder's
     * dlock_acquire returning, apart for leases from Redis (gap[0]) and
     * hand-offs (gap[1]). released_us is written under the lock. */
    int64_t released_us;
    _Atomic uint64_t ngaps[2];
    uint32_t gap_us[2][MAX_GAPS];
};

static struct shared *sh;
/* The start signal: workers block reading go_pipe[0] until the parent closes
 * the write end, so waiting for it costs no CPU that would be counted. */
static int go_pipe[2];
static int ports[DLOCK_NODES_MAX], nports;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static dlock_client *client(void)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = ports[0];
    if (nports > 1) { /* the quorum client; one port stays the plain one, as before */
        char list[DLOCK_NODES_MAX * 24] = "";
        for (int i = 0; i < nports; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s127.0.0.1:%d",
                     i ? "," : "", ports[i]);
        if (dlock_config_nodes(&cfg, list) != DLOCK_OK) {
            fprintf(stderr, "lockbench: %s\n", dlock_errstr());
            exit(2);
        }
    }
    dlock_client *c;
    if (dlock_client_new(&cfg, &c) != DLOCK_OK) {
        fprintf(stderr, "lockbench: %s\n", dlock_errstr());
        exit(2);
    }
    return c;
}

/* The integer value of a GET (0 when missing, -1 on an error). */
static long long redis_get(redisContext *r, const char *key)
{
    redisReply *rep = redisCommand(r, "GET %s", key);
    long long v = -1;
    if (rep && rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    else if (rep && rep->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(rep);
    return v;
}

/* CPU seconds of this process so far, all its threads. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void mode_opts(const char *mode, dlock_opts *o);

static int uncontended(int seconds, const char *mode)
{
    dlock_client *c = client();
    dlock_opts o;
    mode_opts(mode, &o);
    o.wait_ms = 0;
    redisContext *rs[DLOCK_NODES_MAX];
    struct serverstats before[DLOCK_NODES_MAX];
    serverstats_connect(rs, ports, nports);
    for (int i = 0; i < nports; i++)
        serverstats_read(rs[i], &before[i]);
    long long pairs = 0;
    double cpu0 = cpu_s();
    int64_t end = now_us() + (int64_t)seconds * 1000000, start = now_us();
    while (now_us() < end) {
        dlock_handle *h;
        if (dlock_acquire(c, KEY, &o, &h) != DLOCK_OK || dlock_release(h) != DLOCK_OK) {
            fprintf(stderr, "lockbench: %s\n", dlock_errstr());
            return 1;
        }
        pairs++;
    }
    double rate = pairs / ((now_us() - start) / 1e6);
    double cpu = pairs ? (cpu_s() - cpu0) * 1e6 / pairs : 0;
    char cmds[SERVERSTATS_LEN], redis_cpu[SERVERSTATS_LEN];
    serverstats_per_op(rs, ports, nports, before, 0, pairs, cmds, redis_cpu);
    printf("pairs_per_s=%.0f lock_cmds_per_pair=%s client_cpu_us_per_pair=%.1f "
           "redis_cpu_us_per_pair=%s\n", rate, cmds, cpu, redis_cpu);
    for (int i = 0; i < nports; i++)
        redisFree(rs[i]);
    dlock_client_free(c);
    return 0;
}

/* The machine's floor for one call on every server: a SET sent to each,
 * then the replies awaited together with poll(), as the lock's fan-out does
 * (with one server it reads blocking, as the lock does there). */
static int fanout(int seconds)
{
    redisContext *rs[DLOCK_NODES_MAX];
    serverstats_connect(rs, ports, nports);
    long long rounds = 0;
    int64_t end = now_us() + (int64_t)seconds * 1000000, start = now_us();
    while (now_us() < end) {
        struct pollfd fds[DLOCK_NODES_MAX];
        int left = nports, done;
        for (int i = 0; i < nports; i++) {
            redisAppendCommand(rs[i], "SET bench:fanout 1");
            do {
                if (redisBufferWrite(rs[i], &done) != REDIS_OK)
                    return 1;
            } while (!done);
            fds[i] = (struct pollfd){.fd = rs[i]->fd, .events = POLLIN};
        }
        void *one;
        if (nports == 1 && redisGetReply(rs[0], &one) == REDIS_OK && one) {
            freeReplyObject(one);
            left = 0;
        }
        while (left > 0 && poll(fds, (nfds_t)nports, 1000) > 0) {
            for (int i = 0; i < nports; i++) {
                void *rep = NULL;
                if (!fds[i].revents)
                    continue;
                if (redisBufferRead(rs[i]) != REDIS_OK ||
                    redisGetReplyFromReader(rs[i], &rep) != REDIS_OK)
                    return 1;
                if (rep) {
                    freeReplyObject(rep);
                    fds[i].fd = -1; /* answered: poll skips it */
                    left--;
                }
            }
        }
        if (left > 0)
            return 1;
        rounds++;
    }
    printf("rounds_per_s=%.0f\n", rounds / ((now_us() - start) / 1e6));
    for (int i = 0; i < nports; i++)
        redisFree(rs[i]);
    return 0;
}

/* One phase of scripts(): what EVALSHA cost per call since the last read,
 * and the commands per call (the script's own ones included, INFO not). */
static void script_phase(redisContext *r, const char *name, long long *calls, double *usec,
                         long long *all)
{
    long long c, a;
    double u;
    serverstats_evalsha(r, &c, &u, &a);
    long long n = c - *calls;
    printf("%s_calls=%lld %s_usec_per_call=%.2f %s_cmds_per_call=%.2f ", name, n, name,
           n ? (u - *usec) / n : 0, name, n ? (double)(a - *all - 1) / n : 0);
    *calls = c, *usec = u, *all = a;
}

static int scripts(int n)
{
    dlock_client *c = client();
    dlock_opts o;
    mode_opts("handoff", &o);
    o.wait_ms = 0, o.watchdog = 0, o.lease_ms = 60000;
    dlock_handle **h = calloc((size_t)n, sizeof(*h));
    redisContext *rs[DLOCK_NODES_MAX];
    serverstats_connect(rs, ports, nports);
    char key[64];
    for (int pass = 0; pass < 2; pass++) { /* the first leaves each key's fence counter */
        long long calls = 0, all = 0;
        double usec = 0;
        serverstats_evalsha(rs[0], &calls, &usec, &all);
        for (int i = 0; i < n; i++) {
            snprintf(key, sizeof(key), "bench:script:%d", i);
            if (dlock_acquire(c, key, &o, &h[i]) != DLOCK_OK) {
                fprintf(stderr, "lockbench: %s\n", dlock_errstr());
                return 1;
            }
        }
        if (pass)
            script_phase(rs[0], "acquire", &calls, &usec, &all);
        for (int i = 0; i < n; i++)
            if (dlock_release(h[i]) != DLOCK_OK) {
                fprintf(stderr, "lockbench: %s\n", dlock_errstr());
                return 1;
            }
        if (pass)
            script_phase(rs[0], "release", &calls, &usec, &all);
    }
    printf("\n");
    free(h);
    redisFree(rs[0]);
    dlock_client_free(c);
    return 0;
}

static void wait_go(void)
{
    char c;
    while (read(go_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
}

struct worker {
    dlock_client *c;
    dlock_opts o;
    int id, work_ms;
    int write_pct, n; /* 100: the plain lock; else a read-write lock's writes */
};

/* The next acquisition of w: 1 (a write, or the plain lock) or 0 (a read),
 * the writes spread evenly. *rc gets its result. */
static int acquire_next(struct worker *w, dlock_handle **h, int *rc)
{
    int wr = (w->n + 1) * w->write_pct / 100 > w->n * w->write_pct / 100;
    w->n++;
    *rc = w->write_pct == 100 ? dlock_acquire(w->c, KEY, &w->o, h)
          : wr                ? dlock_acquire_write(w->c, KEY, &w->o, h)
                              : dlock_acquire_read(w->c, KEY, &w->o, h);
    return wr;
}

static void critical_section(redisContext *r, int id, int work_ms, int counted)
{
    long long v = redis_get(r, "bench:counter");
    freeReplyObject(redisCommand(r, "SET bench:counter %lld", v + 1));
    if (work_ms)
        usleep((useconds_t)work_ms * 1000);
    if (sh->last_worker != id && counted)
        sh->other_holder++;
    sh->last_worker = id;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    redisContext *r = redisConnect("127.0.0.1", ports[0]);
    wait_go();
    while (!atomic_load(&sh->stop)) {
        dlock_handle *h;
        int64_t t0 = now_us();
        int rc;
        int wr = acquire_next(w, &h, &rc);
        if (rc != DLOCK_OK) {
            sh->failures[w->id]++;
            continue;
        }
        int64_t t1 = now_us();
        int counted = !atomic_load(&sh->stop);
        if (counted && sh->released_us) {
            int local = dlock_handoff_seq(h) > 0;
            uint64_t g = atomic_fetch_add(&sh->ngaps[local], 1);
            if (g < MAX_GAPS)
                sh->gap_us[local][g] = (uint32_t)(t1 - sh->released_us);
        }
        if (wr) {
            critical_section(r, w->id, w->work_ms, counted);
        } else { /* the counter only read: a write would show in violations */
            freeReplyObject(redisCommand(r, "GET bench:counter"));
            usleep((useconds_t)w->work_ms * 1000);
            atomic_fetch_add(&sh->reads, 1);
        }
        if (counted) {
            sh->acquired[w->id]++;
            uint64_t n = atomic_fetch_add(&sh->nsamples, 1);
            if (n < MAX_SAMPLES)
                sh->wait_us[n] = (uint32_t)(t1 - t0);
            atomic_fetch_add(&sh->hold_us, (uint64_t)(now_us() - t1));
        }
        atomic_fetch_add(&sh->total, 1);
        sh->released_us = now_us();
        dlock_release(h);
    }
    redisFree(r);
    return NULL;
}

static void mode_opts(const char *mode, dlock_opts *o)
{
    dlock_opts_defaults(o);
    o->lease_ms = 10000;
    o->wait_ms = 10000;
    o->wait_mode = strncmp(mode, "spin", 4) == 0 ? DLOCK_WAIT_SPIN : DLOCK_WAIT_NOTIFY;
    o->retry_ms = strcmp(mode, "spin5") == 0 ? 5 : 100;
    o->handoff_max = strncmp(mode, "handoff", 7) == 0 ? (mode[7] ? atoi(mode + 7) : 8) : 0;
}

/* One process: its own client, its share of the workers. */
static void process(int first, int n, const char *mode, int work_ms)
{
    dlock_client *c = client();
    pthread_t t[MAX_WORKERS];
    struct worker w[MAX_WORKERS];
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){c, {0}, first + i, work_ms, 100, 0};
        if (strcmp(mode, "read") == 0 || strncmp(mode, "rw", 2) == 0)
            w[i].write_pct = mode[0] == 'r' && mode[1] == 'w' ? atoi(mode + 2) : 0;
        mode_opts(mode, &w[i].o);
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    wait_go();
    double cpu0 = cpu_s();
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    atomic_fetch_add(&sh->client_cpu_us, (uint64_t)((cpu_s() - cpu0) * 1e6));
    dlock_stats st;
    dlock_stats_read(c, &st);
    atomic_fetch_add(&sh->lib_acquired, st.acquired);
    atomic_fetch_add(&sh->lib_handoffs, st.handoffs);
    dlock_client_free(c);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *mode, int workers, int procs, int work_ms, double seconds,
                   long long counter, const char *cmds, const char *redis_cpu)
{
    uint64_t acquired = 0, min = UINT64_MAX, max = 0, failures = 0;
    for (int i = 0; i < workers; i++) {
        acquired += sh->acquired[i];
        failures += sh->failures[i];
        min = sh->acquired[i] < min ? sh->acquired[i] : min;
        max = sh->acquired[i] > max ? sh->acquired[i] : max;
    }
    size_t n = atomic_load(&sh->nsamples);
    n = n < MAX_SAMPLES ? n : MAX_SAMPLES;
    qsort(sh->wait_us, n, sizeof(uint32_t), cmp_u32);
    double gap50[2], gap99[2];
    for (int k = 0; k < 2; k++) {
        size_t g = atomic_load(&sh->ngaps[k]);
        g = g < MAX_GAPS ? g : MAX_GAPS;
        qsort(sh->gap_us[k], g, sizeof(uint32_t), cmp_u32);
        gap50[k] = g ? sh->gap_us[k][g / 2] / 1000.0 : 0;
        gap99[k] = g ? sh->gap_us[k][g * 99 / 100] / 1000.0 : 0;
    }
    double hold_ms = acquired ? atomic_load(&sh->hold_us) / 1000.0 / acquired : 0;
    uint64_t total = atomic_load(&sh->total), lib = atomic_load(&sh->lib_acquired);
    /* through Redis rather than handed over: where a quorum costs anything */
    double via_redis = lib ? 100.0 * (lib - atomic_load(&sh->lib_handoffs)) / lib : 0;
    printf("mode=%s workers=%d procs=%d work_ms=%d acq_per_s=%.0f wait_p50_ms=%.3f "
           "wait_p99_ms=%.3f wait_max_ms=%.3f hold_ms=%.3f fifo_bound_ms=%.3f "
           "per_worker_min=%llu per_worker_max=%llu fairness=%.2f handoff_pct=%.1f "
           "via_redis_pct=%.1f lock_cmds_per_acq=%s failures=%llu violations=%lld "
           "client_cpu_us_per_acq=%.1f redis_cpu_us_per_acq=%s gap_redis_p50_ms=%.3f "
           "gap_redis_p99_ms=%.3f gap_handoff_p50_ms=%.3f gap_handoff_p99_ms=%.3f\n",
           mode, workers, procs, work_ms, acquired / seconds,
           n ? sh->wait_us[n / 2] / 1000.0 : 0, n ? sh->wait_us[n * 99 / 100] / 1000.0 : 0,
           n ? sh->wait_us[n - 1] / 1000.0 : 0, hold_ms, workers * hold_ms,
           (unsigned long long)min, (unsigned long long)max, max ? (double)min / max : 0,
           acquired ? 100.0 * sh->other_holder / acquired : 0, via_redis, cmds,
           (unsigned long long)failures,
           (long long)(total - atomic_load(&sh->reads)) - counter,
           total ? (double)atomic_load(&sh->client_cpu_us) / total : 0, redis_cpu, gap50[0],
           gap99[0], gap50[1], gap99[1]);
}

/* The lock's keys from an earlier run would queue or block this one. */
static void clean(redisContext *r)
{
    dlock_names nm;
    dlock_names_of(KEY, &nm);
    freeReplyObject(redisCommand(r, "DEL bench:counter %s %s %s %s %s:writer %s:writers", KEY,
                                 nm.queue, nm.alive, nm.gone, KEY, KEY));
}

static int hot(int workers, int procs, const char *mode, int work_ms, int seconds)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || workers > MAX_WORKERS || procs < 1 || workers < procs)
        return 2;
    sh->last_worker = -1;
    redisContext *rs[DLOCK_NODES_MAX];
    struct serverstats before[DLOCK_NODES_MAX];
    serverstats_connect(rs, ports, nports);
    for (int i = 0; i < nports; i++)
        clean(rs[i]);
    pid_t pids[MAX_WORKERS];
    if (pipe(go_pipe) != 0)
        return 2;
    for (int p = 0; p < procs; p++) {
        int first = p * workers / procs, n = (p + 1) * workers / procs - first;
        if ((pids[p] = fork()) == 0) {
            close(go_pipe[1]);
            process(first, n, mode, work_ms);
            _exit(0);
        }
    }
    sleep(1); /* every process connected */
    for (int i = 0; i < nports; i++)
        serverstats_read(rs[i], &before[i]);
    int64_t t0 = now_us();
    close(go_pipe[1]);
    close(go_pipe[0]);
    usleep((useconds_t)seconds * 1000000);
    atomic_store(&sh->stop, 1);
    double elapsed = (now_us() - t0) / 1e6;
    for (int p = 0; p < procs; p++)
        waitpid(pids[p], NULL, 0);
    /* per server; the critical sections ran on the first one only */
    long long total = (long long)atomic_load(&sh->total);
    char cmds[SERVERSTATS_LEN], redis_cpu[SERVERSTATS_LEN];
    serverstats_per_op(rs, ports, nports, before, total, total, cmds, redis_cpu);
    long long counter = redis_get(rs[0], "bench:counter");
    report(mode, workers, procs, work_ms, elapsed, counter, cmds, redis_cpu);
    for (int i = 0; i < nports; i++)
        redisFree(rs[i]);
    return 0;
}

/* The waiters mode's state: one client, every waiter's options. */
static struct {
    dlock_client *c;
    dlock_opts o;
    _Atomic int stop, pending;
    _Atomic uint64_t acquired, failures;
} wt;

static void count_acquire(int rc, dlock_handle *h)
{
    if (rc == DLOCK_OK) {
        atomic_fetch_add(&wt.acquired, 1);
        dlock_release(h);
    } else {
        atomic_fetch_add(&wt.failures, 1);
    }
}

static void ask_again(dlock_req *req)
{
    count_acquire(req->rc, req->h);
    if (atomic_load(&wt.stop) || dlock_acquire_async(wt.c, KEY, &wt.o, req) != DLOCK_OK)
        atomic_fetch_sub(&wt.pending, 1);
}

static void *acquire_again(void *arg)
{
    (void)arg;
    while (!atomic_load(&wt.stop)) {
        dlock_handle *h = NULL;
        int rc = dlock_acquire(wt.c, KEY, &wt.o, &h); /* before h is read */
        count_acquire(rc, h);
    }
    return NULL;
}

static int count_threads(void)
{
    char line[256];
    int n = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static int waiters(int n, int seconds, const char *api)
{
    int async = strcmp(api, "async") == 0;
    pthread_t *t = calloc((size_t)n, sizeof(*t));
    dlock_req *req = calloc((size_t)n, sizeof(*req)); /* each async waiter's, asked again */
    redisContext *r = redisConnect("127.0.0.1", ports[0]);
    if (t == NULL || req == NULL || r == NULL || r->err || n < 1)
        return 2;
    clean(r);
    wt.c = client();
    mode_opts("handoff", &wt.o);
    int64_t t0 = now_us();
    for (int i = 0; i < n; i++) {
        int rc;
        if (async) {
            atomic_fetch_add(&wt.pending, 1);
            req[i].done = ask_again;
            rc = dlock_acquire_async(wt.c, KEY, &wt.o, &req[i]);
        } else {
            rc = pthread_create(&t[i], NULL, acquire_again, NULL);
        }
        if (rc != 0)
            return 2;
    }
    usleep((useconds_t)seconds * 500000);
    int threads = count_threads();
    usleep((useconds_t)seconds * 500000);
    atomic_store(&wt.stop, 1);
    uint64_t acquired = atomic_load(&wt.acquired);
    double elapsed = (now_us() - t0) / 1e6;
    for (int i = 0; i < n; i++)
        if (!async)
            pthread_join(t[i], NULL);
    while (atomic_load(&wt.pending) > 0)
        usleep(1000);
    printf("api=%s waiters=%d acq_per_s=%.0f threads=%d failures=%llu\n", api, n,
           acquired / elapsed, threads, (unsigned long long)atomic_load(&wt.failures));
    dlock_client_free(wt.c);
    redisFree(r);
    free(t);
    free(req);
    return 0;
}

/* "p1[,p2...]" into ports; 0 when it is not 1..DLOCK_NODES_MAX ports. */
static int parse_ports(const char *list)
{
    char *end;
    for (nports = 0; nports < DLOCK_NODES_MAX; list = end + 1) {
        long p = strtol(list, &end, 10);
        if (end == list || p < 1 || p > 65535 || (*end != ',' && *end != '\0'))
            return 0;
        ports[nports++] = (int)p;
        if (*end == '\0')
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "uncontended") == 0 && parse_ports(argv[2]))
        return uncontended(atoi(argv[3]), argc == 5 ? argv[4] : "handoff");
    if (argc == 8 && strcmp(argv[1], "hot") == 0 && parse_ports(argv[2]))
        return hot(atoi(argv[3]), atoi(argv[4]), argv[5], atoi(argv[6]), atoi(argv[7]));
    if (argc == 4 && strcmp(argv[1], "fanout") == 0 && parse_ports(argv[2]))
        return fanout(atoi(argv[3]));
    if (argc == 6 && strcmp(argv[1], "waiters") == 0 && parse_ports(argv[2]) && nports == 1)
        return waiters(atoi(argv[3]), atoi(argv[4]), argv[5]);
    if (argc == 4 && strcmp(argv[1], "scripts") == 0 && parse_ports(argv[2]) && nports == 1 &&
        atoi(argv[3]) > 0)
        return scripts(atoi(argv[3]));
    fprintf(stderr, "usage: lockbench uncontended PORT[,PORT...] SECONDS [MODE]\n"
                    "       lockbench hot PORT[,PORT...] WORKERS PROCS "
                    "spin100|spin5|notify|handoff|read|rwN WORK_MS SECONDS\n"
                    "       lockbench fanout PORT[,PORT...] SECONDS\n"
                    "       lockbench waiters PORT N SECONDS async|blocking\n"
                    "       lockbench scripts PORT N\n");
    return 2;
}
