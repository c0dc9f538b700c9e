/* hist.c - log-linear histogram: values below 2*SUB are counted exactly; above,
 * each power of two is split into SUB linear buckets, so the relative error of
 * a reported value is below 1/SUB whatever its magnitude. */
#include "loadgen/hist.h"

#include <stdlib.h>
#include <string.h>

#define SUB_BITS 7
#define SUB (1u << SUB_BITS)
#define MAX_BITS 40 /* values fit in 40 bits, see HIST_MAX_VALUE */
#define NBUCKETS ((MAX_BITS - SUB_BITS + 1) * SUB)

struct hist {
    uint64_t count, min, max;
    long double sum; /* for the mean; long double keeps microseconds exact for any run length */
    uint64_t buckets[NBUCKETS];
};

/* Bucket index of v: v itself below 2*SUB; otherwise shift v right until it
 * has SUB_BITS+1 significant bits and place it among the SUB buckets of that shift. */
static unsigned bucket_of(uint64_t v)
{
    if (v < 2 * SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - SUB_BITS;
    return (shift + 1) * SUB + (unsigned)((v >> shift) - SUB);
}

/* The highest value that falls into bucket i (inverse of bucket_of). */
static uint64_t bucket_high(unsigned i)
{
    if (i < 2 * SUB)
        return i;
    unsigned shift = i / SUB - 1;
    uint64_t m = (uint64_t)(i % SUB) + SUB;
    return ((m + 1) << shift) - 1;
}

hist *hist_new(void)
{
    hist *h = calloc(1, sizeof(*h));
    return h;
}

void hist_free(hist *h)
{
    free(h);
}

void hist_reset(hist *h)
{
    memset(h, 0, sizeof(*h));
}

void hist_record(hist *h, uint64_t value)
{
    if (value > HIST_MAX_VALUE)
        value = HIST_MAX_VALUE;
    if (h->count == 0 || value < h->min)
        h->min = value;
    if (value > h->max)
        h->max = value;
    h->count++;
    h->sum += value;
    h->buckets[bucket_of(value)]++;
}

void hist_merge(hist *dst, const hist *src)
{
    if (src->count == 0)
        return;
    if (dst->count == 0 || src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    dst->count += src->count;
    dst->sum += src->sum;
    for (unsigned i = 0; i < NBUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
}

uint64_t hist_count(const hist *h)
{
    return h->count;
}

uint64_t hist_min(const hist *h)
{
    return h->min;
}

uint64_t hist_max(const hist *h)
{
    return h->max;
}

double hist_mean(const hist *h)
{
    return h->count ? (double)(h->sum / h->count) : 0.0;
}

uint64_t hist_percentile(const hist *h, double p)
{
    if (h->count == 0)
        return 0;
    if (p <= 0)
        return h->min;
    if (p >= 100)
        return h->max;
    /* rank of the value wanted, 1-based: ceil(p% of count). The small allowance
     * keeps 99.9 % of 1000 at rank 999: 99.9 is not exact in binary. */
    long double exact = (long double)p / 100.0L * (long double)h->count - 1e-6L;
    uint64_t rank = (uint64_t)exact;
    if ((long double)rank < exact)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t v = bucket_high(i);
            return v < h->min ? h->min : v > h->max ? h->max : v;
        }
    }
    return h->max;
}
