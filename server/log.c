/* log.c - one line per event on stderr, as logfmt text or one JSON object.
 * Lines are built in a fixed buffer by hand rather than through jansson: no
 * allocation on a request's path, and a value that does not fit is rolled
 * back whole, so a line is never cut inside a value or an escape. */
#include "server/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Both set once at start-up, read-only after. */
static enum log_level min_level = LOG_INFO;
static enum log_format format = LOG_FORMAT_TEXT;

const char *const log_level_names[] = {"debug", "info", "warn", "error", NULL};
const char *const log_format_names[] = {"text", "json", NULL};

/* Room kept at the end of a line: for the <key>Omitted markers of lists
 * (MARKERS), and within that for fieldsOmitted and the line's end (FINAL). */
#define MARKERS 128
#define FINAL 32

void log_set_level(enum log_level level) { min_level = level; }
void log_set_format(enum log_format f) { format = f; }
int log_enabled(enum log_level level) { return level >= min_level; }

struct line {
    char buf[LOG_LINE_MAX];
    size_t n;     /* bytes so far */
    size_t limit; /* where what is being written must end */
    int over;     /* something did not fit since the caller's last mark */
    int json;
};

/* Appends len bytes, all or none; once one append fails, so do the rest
 * until the caller rolls back (l->n = mark, l->over = 0). */
static void put(struct line *l, const char *s, size_t len)
{
    if (l->over || l->n + len > l->limit) {
        l->over = 1;
        return;
    }
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void put_s(struct line *l, const char *s) { put(l, s, strlen(s)); }

/* Printable ASCII that needs no escape inside quotes. */
static int plain(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

/* s with '"' and '\' escaped and every byte outside printable ASCII as
 * \n, \r, \t or \xNN (text) / \u00NN (JSON): the body of a quoted value. */
static void put_escaped(struct line *l, const char *s)
{
    while (*s && !l->over) {
        size_t run = 0;
        while (plain((unsigned char)s[run]))
            run++;
        put(l, s, run);
        s += run;
        if (*s == '\0')
            break;
        unsigned char c = (unsigned char)*s++;
        char e[8] = {'\\', (char)c};
        int k = 2;
        if (c == '\n' || c == '\r' || c == '\t')
            e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        else if (c != '"' && c != '\\')
            k = snprintf(e, sizeof(e), l->json ? "\\u%04x" : "\\x%02x", c);
        put(l, e, (size_t)k);
    }
}

/* Whether a text value must be quoted: empty, "-" (which stands for no
 * value), or anything but printable ASCII without space, '"', '=', '\'. */
static int needs_quotes(const char *s)
{
    if (s[0] == '\0' || strcmp(s, "-") == 0)
        return 1;
    for (; *s; s++)
        if (!plain((unsigned char)*s) || *s == ' ' || *s == '=')
            return 1;
    return 0;
}

/* A string value: bare or quoted (text), a JSON string, or no value. */
static void put_str(struct line *l, const char *s)
{
    if (s == NULL) {
        put_s(l, l->json ? "null" : "-");
    } else if (l->json || needs_quotes(s)) {
        put(l, "\"", 1);
        put_escaped(l, s);
        put(l, "\"", 1);
    } else {
        put_s(l, s);
    }
}

/* v in decimal into b (at least 21 bytes); returns its length. By hand:
 * snprintf was a third of a line's cost. */
static size_t decimal(char *b, long long v)
{
    char t[21];
    size_t n = 0, k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        t[n++] = (char)('0' + u % 10);
    while ((u /= 10) > 0);
    if (v < 0)
        b[k++] = '-';
    while (n > 0)
        b[k++] = t[--n];
    return k;
}

static void put_int(struct line *l, long long v)
{
    char b[24];
    put(l, b, decimal(b, v));
}

/* A duration as ms with 3 decimals (rounded to the microsecond). */
static void put_ms(struct line *l, double d)
{
    if (!(d > -1e15 && d < 1e15)) { /* NaN, or nothing a duration could be */
        put_str(l, NULL);
        return;
    }
    long long us = (long long)(d * 1000.0 + (d < 0 ? -0.5 : 0.5));
    unsigned long long a = us < 0 ? 0ULL - (unsigned long long)us : (unsigned long long)us;
    char b[32];
    size_t k = 0;
    if (us < 0)
        b[k++] = '-';
    k += decimal(b + k, (long long)(a / 1000));
    b[k++] = '.';
    b[k++] = (char)('0' + a / 100 % 10);
    b[k++] = (char)('0' + a / 10 % 10);
    b[k++] = (char)('0' + a % 10);
    put(l, b, k);
}

static void put_key(struct line *l, const char *key)
{
    put_s(l, l->json ? ",\"" : " ");
    put_s(l, key);
    put_s(l, l->json ? "\":" : "=");
}

/* Element i of list f; inside quotes (text) when quoted. */
static void put_element(struct line *l, const log_field *f, int i, int quoted)
{
    if (f->type == LOG_T_INTS)
        put_int(l, f->v.ints[i]);
    else if (quoted)
        put_escaped(l, f->v.strs[i] ? f->v.strs[i] : "-");
    else
        put_str(l, f->v.strs[i]);
}

/* A text list is one value, a,b,c: quoted as a whole when any element
 * needs it (or it is empty). */
static int list_needs_quotes(const log_field *f)
{
    if (f->n == 0)
        return 1;
    for (int i = 0; f->type == LOG_T_STRS && i < f->n; i++)
        if (f->v.strs[i] == NULL || needs_quotes(f->v.strs[i]))
            return 1;
    return 0;
}

/* Writes list f with as many elements as fit; returns how many did not (all
 * of them when not even the first did: then nothing is written). */
static int put_list(struct line *l, const log_field *f)
{
    int quoted = !l->json && list_needs_quotes(f);
    const char *close = l->json ? "]" : quoted ? "\"" : "";
    put_key(l, f->key);
    put_s(l, l->json ? "[" : quoted ? "\"" : "");
    if (l->over) /* not even the key: the caller takes back what was written */
        return f->n > 0 ? f->n : 1;
    l->limit -= strlen(close); /* the close always fits */
    int i = 0;
    for (; i < f->n && !l->over; i++) {
        size_t mark = l->n;
        if (i > 0)
            put(l, ",", 1);
        put_element(l, f, i, quoted);
        if (l->over) {
            l->n = mark;
            break;
        }
    }
    l->limit += strlen(close);
    if (l->over && i == 0 && f->n > 0)
        return f->n;
    l->over = 0;
    put_s(l, close);
    return f->n - i;
}

/* <key>Omitted=count, in the room kept for markers; 0 when even that is full. */
static int put_omitted(struct line *l, const char *key, int count)
{
    char k[96];
    size_t mark = l->n, limit = l->limit;
    snprintf(k, sizeof(k), "%.80sOmitted", key);
    l->limit = LOG_LINE_MAX - FINAL;
    put_key(l, k);
    put_int(l, count);
    int ok = !l->over;
    if (!ok)
        l->n = mark;
    l->over = 0;
    l->limit = limit;
    return ok;
}

/* Field f whole, or (a list) in part; returns 1 when it was left out. */
static int put_field(struct line *l, const log_field *f)
{
    size_t mark = l->n;
    int left = 0;
    switch (f->type) {
    case LOG_T_STR: put_key(l, f->key), put_str(l, f->v.s); break;
    case LOG_T_INT: put_key(l, f->key), put_int(l, f->v.i); break;
    case LOG_T_MS: put_key(l, f->key), put_ms(l, f->v.d); break;
    case LOG_T_INTS:
    case LOG_T_STRS: left = put_list(l, f); break;
    }
    if (l->over) {
        l->n = mark;
        l->over = 0;
        return 1;
    }
    return left > 0 && !put_omitted(l, f->key, left);
}

/* The UTC date and time of a second, "YYYY-MM-DDTHH:MM:SS", kept per
 * thread for the second it was made for: gmtime and strftime are the
 * slowest part of a line, and a thread logs many lines a second. */
static _Thread_local struct {
    time_t sec;
    char text[32];
} ts_cache = {-1, ""};

static void put_ts(struct line *l)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != ts_cache.sec) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        strftime(ts_cache.text, sizeof(ts_cache.text), "%Y-%m-%dT%H:%M:%S", &tm);
        ts_cache.sec = tv.tv_sec;
    }
    int ms = (int)(tv.tv_usec / 1000);
    char frac[6] = {'.', (char)('0' + ms / 100), (char)('0' + ms / 10 % 10),
                    (char)('0' + ms % 10), 'Z'};
    put_s(l, ts_cache.text);
    put(l, frac, 5);
}

/* ts, level and msg, the start of every line. */
static void put_head(struct line *l, enum log_level level, const char *msg)
{
    put_s(l, l->json ? "{\"ts\":\"" : "ts=");
    put_ts(l);
    put_s(l, l->json ? "\",\"level\":\"" : " level=");
    put_s(l, log_level_names[level]);
    put_s(l, l->json ? "\",\"msg\":\"" : " msg=\"");
    size_t mark = l->n;
    put_escaped(l, msg);
    if (l->over) /* msg is the caller's short constant: never, but never half of it */
        l->n = mark, l->over = 0;
    put_s(l, "\"");
}

void log_event(enum log_level level, const char *msg, const log_field *f, int n)
{
    if (level < min_level)
        return;
    struct line l;
    l.n = 0, l.over = 0, l.json = format == LOG_FORMAT_JSON;
    l.limit = LOG_LINE_MAX - MARKERS;
    put_head(&l, level, msg);
    int left_out = 0;
    for (int i = 0; i < n; i++)
        left_out += put_field(&l, &f[i]);
    l.limit = LOG_LINE_MAX - 2;
    if (left_out > 0) {
        put_key(&l, "fieldsOmitted");
        put_int(&l, left_out);
    }
    put_s(&l, l.json ? "}\n" : "\n");
    ssize_t w;
    do /* one write: lines never interleave */
        w = write(STDERR_FILENO, l.buf, l.n);
    while (w < 0 && errno == EINTR);
}
