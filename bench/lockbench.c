/* lockbench.c - measures the lock library against a real redis-server:
 *   lockbench uncontended PORT SECONDS [MODE]
 *       acquire+release pairs per second on one thread, no contention;
 *   lockbench hot PORT WORKERS PROCS MODE WORK_MS SECONDS
 *       WORKERS threads spread over PROCS processes, all on one key, lease
 *       10 s, wait up to 10 s; the critical section is a non-atomic GET then
 *       SET of a Redis counter (plus WORK_MS of sleep). MODE is spin100,
 *       spin5, notify (no hand-off) or handoff (notify + hand-off, at most 8
 *       in a row; handoffN for another bound).
 * Prints one line of key=value results. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock/dlock.h"

#define MAX_WORKERS 64
#define MAX_SAMPLES (4 * 1024 * 1024)
#define KEY "bench:lock"

/* Shared by the forked processes. last_worker is written only while holding
 * the lock: a violation of mutual exclusion would show in the counter. */
struct shared {
    _Atomic int go, stop;
    int last_worker;
    uint64_t other_holder; /* acquisitions whose previous holder was another worker */
    _Atomic uint64_t total, hold_us, nsamples;
    uint64_t acquired[MAX_WORKERS]; /* within the window, per worker */
    uint64_t failures[MAX_WORKERS];
    uint32_t wait_us[MAX_SAMPLES];
};

static struct shared *sh;
static int port;

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
    cfg.port = port;
    dlock_client *c;
    if (dlock_client_new(&cfg, &c) != DLOCK_OK) {
        fprintf(stderr, "lockbench: %s\n", dlock_errstr());
        exit(2);
    }
    return c;
}

static long long redis_int(redisContext *r, const char *cmd, const char *field)
{
    redisReply *rep = redisCommand(r, cmd);
    long long v = -1;
    if (rep && rep->type == REDIS_REPLY_STRING && field) {
        const char *p = strstr(rep->str, field);
        v = p ? atoll(p + strlen(field)) : -1;
    } else if (rep && rep->type == REDIS_REPLY_STRING) {
        v = atoll(rep->str);
    } else if (rep && rep->type == REDIS_REPLY_NIL) {
        v = 0;
    }
    freeReplyObject(rep);
    return v;
}

static void mode_opts(const char *mode, dlock_opts *o);

static int uncontended(int seconds, const char *mode)
{
    dlock_client *c = client();
    dlock_opts o;
    mode_opts(mode, &o);
    o.wait_ms = 0;
    long long pairs = 0;
    int64_t end = now_us() + (int64_t)seconds * 1000000, start = now_us();
    while (now_us() < end) {
        dlock_handle *h;
        if (dlock_acquire(c, KEY, &o, &h) != DLOCK_OK || dlock_release(h) != DLOCK_OK) {
            fprintf(stderr, "lockbench: %s\n", dlock_errstr());
            return 1;
        }
        pairs++;
    }
    printf("pairs_per_s=%.0f\n", pairs / ((now_us() - start) / 1e6));
    dlock_client_free(c);
    return 0;
}

struct worker {
    dlock_client *c;
    dlock_opts o;
    int id, work_ms;
};

static void critical_section(redisContext *r, int id, int work_ms, int counted)
{
    long long v = redis_int(r, "GET bench:counter", NULL);
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
    redisContext *r = redisConnect("127.0.0.1", port);
    while (!atomic_load(&sh->go))
        usleep(100);
    while (!atomic_load(&sh->stop)) {
        dlock_handle *h;
        int64_t t0 = now_us();
        if (dlock_acquire(w->c, KEY, &w->o, &h) != DLOCK_OK) {
            sh->failures[w->id]++;
            continue;
        }
        int64_t t1 = now_us();
        int counted = !atomic_load(&sh->stop);
        critical_section(r, w->id, w->work_ms, counted);
        if (counted) {
            sh->acquired[w->id]++;
            uint64_t n = atomic_fetch_add(&sh->nsamples, 1);
            if (n < MAX_SAMPLES)
                sh->wait_us[n] = (uint32_t)(t1 - t0);
            atomic_fetch_add(&sh->hold_us, (uint64_t)(now_us() - t1));
        }
        atomic_fetch_add(&sh->total, 1);
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
        w[i] = (struct worker){c, {0}, first + i, work_ms};
        mode_opts(mode, &w[i].o);
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    dlock_client_free(c);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *mode, int workers, int procs, int work_ms, double seconds,
                   long long counter, long long cmds)
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
    double hold_ms = acquired ? atomic_load(&sh->hold_us) / 1000.0 / acquired : 0;
    uint64_t total = atomic_load(&sh->total);
    /* the lock's own commands: all of them minus the critical section's GET+SET */
    double lock_cmds = total ? (double)(cmds - 2 * (long long)total) / total : 0;
    printf("mode=%s workers=%d procs=%d work_ms=%d acq_per_s=%.0f wait_p50_ms=%.3f "
           "wait_p99_ms=%.3f wait_max_ms=%.3f hold_ms=%.3f fifo_bound_ms=%.3f "
           "per_worker_min=%llu per_worker_max=%llu fairness=%.2f handoff_pct=%.1f "
           "lock_cmds_per_acq=%.2f failures=%llu violations=%lld\n",
           mode, workers, procs, work_ms, acquired / seconds,
           n ? sh->wait_us[n / 2] / 1000.0 : 0, n ? sh->wait_us[n * 99 / 100] / 1000.0 : 0,
           n ? sh->wait_us[n - 1] / 1000.0 : 0, hold_ms, workers * hold_ms,
           (unsigned long long)min, (unsigned long long)max, max ? (double)min / max : 0,
           acquired ? 100.0 * sh->other_holder / acquired : 0, lock_cmds,
           (unsigned long long)failures, (long long)total - counter);
}

static int hot(int workers, int procs, const char *mode, int work_ms, int seconds)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || workers > MAX_WORKERS || procs < 1 || workers < procs)
        return 2;
    sh->last_worker = -1;
    redisContext *r = redisConnect("127.0.0.1", port);
    freeReplyObject(redisCommand(r, "DEL bench:counter " KEY));
    pid_t pids[MAX_WORKERS];
    for (int p = 0; p < procs; p++) {
        int first = p * workers / procs, n = (p + 1) * workers / procs - first;
        if ((pids[p] = fork()) == 0) {
            process(first, n, mode, work_ms);
            _exit(0);
        }
    }
    sleep(1); /* every process connected */
    long long before = redis_int(r, "INFO stats", "total_commands_processed:");
    int64_t t0 = now_us();
    atomic_store(&sh->go, 1);
    usleep((useconds_t)seconds * 1000000);
    atomic_store(&sh->stop, 1);
    double elapsed = (now_us() - t0) / 1e6;
    for (int p = 0; p < procs; p++)
        waitpid(pids[p], NULL, 0);
    long long cmds = redis_int(r, "INFO stats", "total_commands_processed:") - before - 1;
    long long counter = redis_int(r, "GET bench:counter", NULL);
    report(mode, workers, procs, work_ms, elapsed, counter, cmds);
    redisFree(r);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "uncontended") == 0) {
        port = atoi(argv[2]);
        return uncontended(atoi(argv[3]), argc == 5 ? argv[4] : "handoff");
    }
    if (argc == 8 && strcmp(argv[1], "hot") == 0) {
        port = atoi(argv[2]);
        return hot(atoi(argv[3]), atoi(argv[4]), argv[5], atoi(argv[6]), atoi(argv[7]));
    }
    fprintf(stderr, "usage: lockbench uncontended PORT SECONDS [MODE]\n"
                    "       lockbench hot PORT WORKERS PROCS spin100|spin5|notify|handoff "
                    "WORK_MS SECONDS\n");
    return 2;
}
