/* series.c - outcome counts in time buckets that widen by doubling, so the
 * memory is fixed and every bucket covers the same span whatever the run's
 * length. */
#include "loadgen/series.h"

#include <stdlib.h>
#include <string.h>

#include "loadgen/err.h"

int lg_series_init(lg_series *s)
{
    s->width_ns = (int64_t)LG_SERIES_BASE_MS * 1000000;
    s->n = 0;
    s->counts = calloc(LG_SERIES_MAX, sizeof(*s->counts));
    return s->counts ? LG_OK : LG_ERR_NOMEM;
}

void lg_series_free(lg_series *s)
{
    free(s->counts);
    s->counts = NULL;
    s->n = 0;
}

/* Doubles the bucket width: bucket i takes in buckets 2i and 2i+1. */
static void widen(lg_series *s)
{
    size_t n = (s->n + 1) / 2;
    for (size_t i = 0; i < n; i++)
        for (int o = 0; o < LG_OUT_COUNT; o++)
            s->counts[i][o] = s->counts[2 * i][o] +
                              (2 * i + 1 < s->n ? s->counts[2 * i + 1][o] : 0);
    memset(s->counts + n, 0, (LG_SERIES_MAX - n) * sizeof(*s->counts));
    s->n = n;
    s->width_ns *= 2;
}

void lg_series_add(lg_series *s, int64_t t_ns, int outcome)
{
    if (s->counts == NULL || outcome < 0 || outcome >= LG_OUT_COUNT)
        return;
    if (t_ns < 0)
        t_ns = 0;
    while (t_ns / s->width_ns >= LG_SERIES_MAX)
        widen(s);
    size_t i = (size_t)(t_ns / s->width_ns);
    s->counts[i][outcome]++;
    if (i + 1 > s->n)
        s->n = i + 1;
}

void lg_series_merge(lg_series *dst, const lg_series *src)
{
    if (dst->counts == NULL || src->counts == NULL)
        return;
    while (dst->width_ns < src->width_ns)
        widen(dst);
    /* widths are both LG_SERIES_BASE_MS << k: the ratio is a whole power of two */
    size_t ratio = (size_t)(dst->width_ns / src->width_ns);
    for (size_t i = 0; i < src->n; i++) {
        size_t j = i / ratio;
        for (int o = 0; o < LG_OUT_COUNT; o++)
            dst->counts[j][o] += src->counts[i][o];
        if (j + 1 > dst->n)
            dst->n = j + 1;
    }
}

size_t lg_series_factor(const lg_series *s, size_t max)
{
    size_t f = 1;
    while ((s->n + f - 1) / f > max)
        f *= 2;
    return f;
}

uint64_t lg_series_count(const lg_series *s, size_t i, size_t factor, int outcome)
{
    uint64_t sum = 0;
    for (size_t k = i * factor; k < (i + 1) * factor && k < s->n; k++)
        sum += s->counts[k][outcome];
    return sum;
}
