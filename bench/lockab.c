/* lockab.c - the uncontended acquire+release pair of two builds of the lock
 * library in one process: this tree's (dlock_*) and another revision's
 * (its API renamed base_dlock_* by bench/lock_ab.sh, its internals with
 * it), next to a plain SET on one connection, in short windows taken in
 * turn, so that the three see the same machine. On a shared machine whose
 * speed moves by tens of per cent from second to second, that is what makes
 * the ratios comparable.
 *   lockab PORT ROUNDS WINDOW_MS
 * Prints one line per round and the medians of the per-round ratios. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lock/dlock.h"

/* The other build: the same API under another prefix (its structs are the
 * first fields of this tree's; lock_ab.sh refuses revisions where they are
 * not). */
int base_dlock_client_new(const dlock_config *cfg, dlock_client **out);
void base_dlock_client_free(dlock_client *c);
int base_dlock_acquire(dlock_client *c, const char *key, const dlock_opts *o, dlock_handle **out);
int base_dlock_release(dlock_handle *h);
const char *base_dlock_errstr(void);

#define ROUNDS_MAX 1000
#define KEY "bench:ab"

typedef int (*acquire_fn)(dlock_client *, const char *, const dlock_opts *, dlock_handle **);
typedef int (*release_fn)(dlock_handle *);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Pairs per second of one build for window_ms. */
static double pairs(dlock_client *c, acquire_fn acquire, release_fn release, int window_ms)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.wait_ms = 0;
    long n = 0;
    double start = now_s(), end = start + window_ms / 1000.0;
    while (now_s() < end) {
        dlock_handle *h;
        if (acquire(c, KEY, &o, &h) != DLOCK_OK || release(h) != DLOCK_OK) {
            fprintf(stderr, "lockab: a pair failed\n");
            exit(1);
        }
        n++;
    }
    return n / (now_s() - start);
}

/* SETs per second on one connection, one at a time, for window_ms. */
static double sets(redisContext *r, int window_ms)
{
    long n = 0;
    double start = now_s(), end = start + window_ms / 1000.0;
    while (now_s() < end) {
        redisReply *rep = redisCommand(r, "SET bench:ab:set 1");
        if (rep == NULL) {
            fprintf(stderr, "lockab: SET failed\n");
            exit(1);
        }
        freeReplyObject(rep);
        n++;
    }
    return n / (now_s() - start);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int rounds = argc == 4 ? atoi(argv[2]) : 0, window = argc == 4 ? atoi(argv[3]) : 0;
    if (rounds < 1 || rounds > ROUNDS_MAX || window < 10) {
        fprintf(stderr, "usage: lockab PORT ROUNDS(1..%d) WINDOW_MS(>=10)\n", ROUNDS_MAX);
        return 2;
    }
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = atoi(argv[1]);
    dlock_client *base, *new;
    redisContext *r = redisConnect("127.0.0.1", cfg.port);
    if (base_dlock_client_new(&cfg, &base) != DLOCK_OK || dlock_client_new(&cfg, &new) != DLOCK_OK ||
        r == NULL || r->err) {
        fprintf(stderr, "lockab: cannot start: %s\n", dlock_errstr());
        return 2;
    }
    static double vs_base[ROUNDS_MAX], new_set[ROUNDS_MAX], base_set[ROUNDS_MAX];
    pairs(base, base_dlock_acquire, base_dlock_release, window); /* warm both up */
    pairs(new, dlock_acquire, dlock_release, window);
    for (int i = 0; i < rounds; i++) { /* the order turns each round */
        double b, n, s;
        if (i % 2) {
            n = pairs(new, dlock_acquire, dlock_release, window);
            s = sets(r, window);
            b = pairs(base, base_dlock_acquire, base_dlock_release, window);
        } else {
            b = pairs(base, base_dlock_acquire, base_dlock_release, window);
            s = sets(r, window);
            n = pairs(new, dlock_acquire, dlock_release, window);
        }
        vs_base[i] = n / b, new_set[i] = n / s, base_set[i] = b / s;
        printf("round %d: base %.0f pairs/s, new %.0f pairs/s, SET %.0f/s\n", i + 1, b, n, s);
    }
    printf("medians of %d rounds of %d ms: new/base %.3f, base/SET %.3f, new/SET %.3f\n",
           rounds, window, median(vs_base, rounds), median(base_set, rounds),
           median(new_set, rounds));
    redisFree(r);
    base_dlock_client_free(base);
    dlock_client_free(new);
    return 0;
}
