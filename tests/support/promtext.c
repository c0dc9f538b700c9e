/* promtext.c - the checks of Prometheus's text exposition format that
 * promtool leaves out (see promtext.h). */
#include "tests/support/promtext.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_LEN 128
#define LABELS_LEN 512
#define MAX_FAMILIES 256
#define MAX_SERIES 8192
#define MAX_HIST_SERIES 64 /* series of one histogram family */

/* One series of the histogram family being read, by its labels without le. */
struct hist_series {
    char labels[LABELS_LEN];
    double last_le, last_count, inf_count, count;
    int buckets, has_inf, has_sum, has_count;
};

/* A sample line, split. */
struct sample {
    char name[NAME_LEN];
    char labels[LABELS_LEN]; /* `k="v",` for each label but le, as written */
    char le[32];             /* "" when it has none */
    double value;
};

struct checker {
    char *why;
    size_t size, used;
    int problems, line;
    /* the family being read: its HELP and TYPE came last */
    char family[NAME_LEN], type[16];
    int family_line, has_help, has_type, samples;
    struct hist_series hist[MAX_HIST_SERIES];
    int nhist;
    /* what came before, to find a family declared twice or a series repeated */
    char families[MAX_FAMILIES][NAME_LEN];
    int nfamilies;
    char *series[MAX_SERIES];
    int nseries;
};

static void problem(struct checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct checker *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->problems++;
    int n = snprintf(c->why + c->used, c->size - c->used, "line %d: %s\n", c->line, msg);
    if (n > 0) /* what did not fit is cut; the count stays right */
        c->used += (size_t)n < c->size - c->used ? (size_t)n : c->size - c->used - 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Reads one `key="value"` pair at *p into s (le apart); 0, or -1 when malformed. */
static int parse_label(const char **p, struct sample *s)
{
    const char *key = *p, *q = *p;
    while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' ||
           (q > key && *q >= '0' && *q <= '9'))
        q++;
    if (q == key || q[0] != '=' || q[1] != '"')
        return -1;
    const char *value = q + 2, *end = value;
    while (*end && *end != '"')
        end += end[0] == '\\' && end[1] ? 2 : 1;
    if (*end != '"')
        return -1;
    int klen = (int)(q - key), vlen = (int)(end - value);
    size_t used = strlen(s->labels);
    if (klen == 2 && strncmp(key, "le", 2) == 0)
        snprintf(s->le, sizeof(s->le), "%.*s", vlen, value);
    else if (used + (size_t)klen + (size_t)vlen + 5 < sizeof(s->labels))
        snprintf(s->labels + used, sizeof(s->labels) - used, "%.*s\"%.*s\",", klen + 1, key,
                 vlen, value);
    *p = end + 1;
    return 0;
}

/* Splits a sample line: name, optional {labels}, value. 0, or -1 when malformed. */
static int parse_sample(const char *line, struct sample *s)
{
    memset(s, 0, sizeof(*s));
    size_t n = strcspn(line, "{ ");
    if (n == 0 || n >= sizeof(s->name))
        return -1;
    memcpy(s->name, line, n);
    const char *p = line + n;
    if (*p == '{') {
        for (p++; *p != '}';) {
            if (parse_label(&p, s) != 0)
                return -1;
            if (*p == ',')
                p++;
            else if (*p != '}')
                return -1;
        }
        p++;
    }
    if (*p != ' ')
        return -1;
    char *end;
    s->value = strtod(p + 1, &end);
    return end == p + 1 ? -1 : 0;
}

static void check_histogram_series(struct checker *c, const struct hist_series *h)
{
    const char *f = c->family;
    if (!h->has_inf)
        problem(c, "%s{%s}: no bucket le=\"+Inf\"", f, h->labels);
    if (!h->has_sum)
        problem(c, "%s{%s}: no %s_sum", f, h->labels, f);
    if (!h->has_count)
        problem(c, "%s{%s}: no %s_count", f, h->labels, f);
    else if (h->has_inf && h->count != h->inf_count)
        problem(c, "%s{%s}: _count %g differs from the +Inf bucket %g", f, h->labels, h->count,
                h->inf_count);
}

/* The family read so far is complete: what it lacks. */
static void end_family(struct checker *c)
{
    if (!c->family[0])
        return;
    if (!c->has_help)
        problem(c, "family %s (line %d) has no HELP", c->family, c->family_line);
    if (!c->has_type)
        problem(c, "family %s (line %d) has no TYPE", c->family, c->family_line);
    if (strcmp(c->type, "counter") == 0 && !ends_with(c->family, "_total"))
        problem(c, "counter %s: the name does not end in _total", c->family);
    for (int i = 0; i < c->nhist; i++)
        check_histogram_series(c, &c->hist[i]);
    if (c->nfamilies < MAX_FAMILIES)
        snprintf(c->families[c->nfamilies++], NAME_LEN, "%s", c->family);
}

static void begin_family(struct checker *c, const char *name)
{
    end_family(c);
    for (int i = 0; i < c->nfamilies; i++)
        if (strcmp(c->families[i], name) == 0)
            problem(c, "family %s declared again: its lines must be together", name);
    snprintf(c->family, sizeof(c->family), "%s", name);
    c->type[0] = '\0';
    c->family_line = c->line;
    c->has_help = c->has_type = c->samples = c->nhist = 0;
}

/* "# HELP name text" or "# TYPE name type". */
static void metadata(struct checker *c, const char *line)
{
    char name[NAME_LEN] = "", word[16] = "";
    int is_type = strncmp(line, "# TYPE ", 7) == 0;
    sscanf(line + 7, "%127s %15s", name, word);
    if (strcmp(name, c->family) != 0)
        begin_family(c, name);
    if (!is_type) {
        if (c->has_help++)
            problem(c, "%s: a second HELP", name);
        return;
    }
    if (c->has_type++)
        problem(c, "%s: a second TYPE", name);
    if (c->samples)
        problem(c, "%s: TYPE after its samples", name);
    snprintf(c->type, sizeof(c->type), "%s", word);
}

static struct hist_series *hist_series_of(struct checker *c, const char *labels)
{
    for (int i = 0; i < c->nhist; i++)
        if (strcmp(c->hist[i].labels, labels) == 0)
            return &c->hist[i];
    if (c->nhist == MAX_HIST_SERIES)
        return NULL;
    struct hist_series *h = &c->hist[c->nhist++];
    memset(h, 0, sizeof(*h));
    snprintf(h->labels, sizeof(h->labels), "%s", labels);
    return h;
}

/* A sample of the histogram family being read: name is its suffix. */
static void histogram_sample(struct checker *c, const struct sample *s, const char *suffix)
{
    struct hist_series *h = hist_series_of(c, s->labels);
    if (h == NULL)
        return;
    if (strcmp(suffix, "_sum") == 0) {
        h->has_sum = 1;
    } else if (strcmp(suffix, "_count") == 0) {
        h->has_count = 1;
        h->count = s->value;
    } else if (!s->le[0]) {
        problem(c, "%s{%s}: a bucket without le", s->name, s->labels);
    } else {
        double le = strtod(s->le, NULL);
        if (h->buckets && !(le > h->last_le))
            problem(c, "%s{%s}: le=\"%s\" does not rise", s->name, s->labels, s->le);
        if (h->buckets && s->value < h->last_count)
            problem(c, "%s{%s}: le=\"%s\" %g below the bucket before (%g): not cumulative",
                    s->name, s->labels, s->le, s->value, h->last_count);
        if (isinf(le) && le > 0)
            h->has_inf = 1, h->inf_count = s->value;
        h->buckets++;
        h->last_le = le;
        h->last_count = s->value;
    }
}

/* The suffix that makes name a sample of the family being read ("" for the
 * family's own name), or NULL when it belongs to another family. */
static const char *suffix_in_family(const struct checker *c, const char *name)
{
    size_t n = strlen(c->family);
    if (!c->family[0] || strncmp(name, c->family, n) != 0)
        return NULL;
    const char *rest = name + n;
    int histogram = strcmp(c->type, "histogram") == 0 || strcmp(c->type, "summary") == 0;
    if (rest[0] == '\0')
        return strcmp(c->type, "histogram") == 0 ? NULL : rest;
    if (histogram && (strcmp(rest, "_bucket") == 0 || strcmp(rest, "_sum") == 0 ||
                      strcmp(rest, "_count") == 0))
        return rest;
    return NULL;
}

static void sample_line(struct checker *c, const char *line)
{
    struct sample s;
    if (parse_sample(line, &s) != 0) {
        problem(c, "not a sample: %.80s", line);
        return;
    }
    const char *suffix = suffix_in_family(c, s.name);
    if (suffix == NULL) {
        problem(c, "%s outside its family: HELP and TYPE must come right before it", s.name);
        return;
    }
    c->samples++;
    char key[NAME_LEN + LABELS_LEN + 48];
    snprintf(key, sizeof(key), "%s{%sle=\"%s\"}", s.name, s.labels, s.le);
    for (int i = 0; i < c->nseries; i++)
        if (strcmp(c->series[i], key) == 0)
            problem(c, "series %s twice", key);
    if (c->nseries < MAX_SERIES)
        c->series[c->nseries++] = strdup(key);
    if (strcmp(c->type, "histogram") == 0)
        histogram_sample(c, &s, suffix);
}

int th_promtext_problems(const char *text, char *why, size_t size)
{
    struct checker *c = calloc(1, sizeof(*c));
    if (c == NULL || size == 0)
        return -1;
    c->why = why, c->size = size;
    why[0] = '\0';
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        char *line = strndup(p, n);
        c->line++;
        if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0)
            metadata(c, line);
        else if (line[0] && line[0] != '#')
            sample_line(c, line);
        free(line);
        p += n + (p[n] == '\n');
    }
    end_family(c);
    int problems = c->problems;
    for (int i = 0; i < c->nseries; i++)
        free(c->series[i]);
    free(c);
    return problems;
}

/* Whether a line of text starts with prefix. */
static int has_line(const char *text, const char *prefix)
{
    char nl[NAME_LEN + 16];
    snprintf(nl, sizeof(nl), "\n%s", prefix);
    return strncmp(text, prefix, strlen(prefix)) == 0 || strstr(text, nl) != NULL;
}

int th_promtext_has_family(const char *text, const char *name)
{
    char help[NAME_LEN + 16], type[NAME_LEN + 16], plain[NAME_LEN + 8], labelled[NAME_LEN + 8],
        bucket[NAME_LEN + 16];
    snprintf(help, sizeof(help), "# HELP %s ", name);
    snprintf(type, sizeof(type), "# TYPE %s ", name);
    snprintf(plain, sizeof(plain), "%s ", name);
    snprintf(labelled, sizeof(labelled), "%s{", name);
    snprintf(bucket, sizeof(bucket), "%s_bucket{", name);
    return has_line(text, help) && has_line(text, type) &&
           (has_line(text, plain) || has_line(text, labelled) || has_line(text, bucket));
}
