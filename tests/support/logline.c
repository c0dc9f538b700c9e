/* logline.c - a strict logfmt reader for the tests of stockd's log lines. */
#include "tests/support/logline.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
}

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A quoted value at *p (past its opening quote) unescaped into out; moves
 * *p past the closing quote. Returns the bytes written, or -1. */
static int quoted_value(const char **p, char *out, size_t room)
{
    size_t n = 0;
    const char *s = *p;
    for (; *s != '"'; s++) {
        char c = *s;
        if (c == '\0' || (unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            return -1; /* the line ended, or a raw byte that must have been escaped */
        if (c == '\\') {
            c = *++s;
            if (c == 'n' || c == 'r' || c == 't')
                c = c == 'n' ? '\n' : c == 'r' ? '\r' : '\t';
            else if (c == 'x' && hex(s[1]) >= 0 && hex(s[2]) >= 0)
                c = (char)(hex(s[1]) * 16 + hex(s[2])), s += 2;
            else if (c != '"' && c != '\\')
                return -1;
        }
        if (n + 1 >= room)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    *p = s + 1;
    return (int)n;
}

int th_logfmt_parse(const char *line, th_logfmt *l)
{
    const char *p = line;
    size_t used = 0;
    l->n = 0;
    while (*p) {
        if (l->n > 0 && *p++ != ' ')
            return -1;
        size_t klen = 0;
        while (key_char(p[klen]))
            klen++;
        if (klen == 0 || p[klen] != '=' || l->n == TH_LOGFMT_PAIRS ||
            used + klen + 2 >= sizeof(l->buf))
            return -1;
        l->key[l->n] = memcpy(l->buf + used, p, klen);
        l->buf[used + klen] = '\0';
        used += klen + 1;
        p += klen + 1;
        char *v = l->buf + used;
        int vlen, quoted = *p == '"';
        if (quoted) {
            p++;
            if ((vlen = quoted_value(&p, v, sizeof(l->buf) - used)) < 0)
                return -1;
        } else {
            vlen = (int)strcspn(p, " ");
            if (vlen == 0 || used + (size_t)vlen + 1 >= sizeof(l->buf))
                return -1;
            for (int i = 0; i < vlen; i++)
                if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f ||
                    strchr("\"=\\", p[i]))
                    return -1;
            memcpy(v, p, (size_t)vlen);
            v[vlen] = '\0';
            p += vlen;
        }
        l->val[l->n++] = !quoted && strcmp(v, "-") == 0 ? NULL : v;
        used += (size_t)vlen + 1;
        if (*p && *p != ' ')
            return -1;
    }
    return l->n > 0 ? 0 : -1;
}

int th_logfmt_count(const th_logfmt *l, const char *key)
{
    int n = 0;
    for (int i = 0; i < l->n; i++)
        n += strcmp(l->key[i], key) == 0;
    return n;
}

const char *th_logfmt_get(const th_logfmt *l, const char *key, int *found)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->key[i], key) == 0) {
            if (found)
                *found = 1;
            return l->val[i];
        }
    if (found)
        *found = 0;
    return NULL;
}

int th_next_line(const char **next, char *line, size_t size)
{
    const char *p = *next;
    if (p == NULL || *p == '\0')
        return 0;
    size_t len = strcspn(p, "\n");
    if (len + 1 > size)
        fail_msg("log line of %zu bytes: %.200s...", len, p);
    memcpy(line, p, len);
    line[len] = '\0';
    *next = p + len + (p[len] == '\n');
    return 1;
}

static int same(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* *to = *from, its keys and values pointing into its own buffer. */
static void copy_parsed(th_logfmt *to, const th_logfmt *from)
{
    *to = *from;
    for (int i = 0; i < from->n; i++) {
        to->key[i] = to->buf + (from->key[i] - from->buf);
        to->val[i] = from->val[i] ? to->buf + (from->val[i] - from->buf) : NULL;
    }
}

int th_log_find(const char *text, const char *key, const char *value, th_logfmt *first)
{
    static th_logfmt l; /* 8 KiB: not on the stack of a test */
    char line[8192];
    int n = 0, found;
    for (const char *next = text; th_next_line(&next, line, sizeof(line));) {
        if (th_logfmt_parse(line, &l) != 0)
            fail_msg("not a logfmt line: %s", line);
        const char *v = th_logfmt_get(&l, key, &found);
        if (found && same(v, value) && n++ == 0 && first)
            copy_parsed(first, &l);
    }
    return n;
}

json_t *th_log_find_json(const char *text, const char *key, const char *value, int *count)
{
    char line[8192];
    json_t *hit = NULL;
    *count = 0;
    for (const char *next = text; th_next_line(&next, line, sizeof(line));) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!json_is_object(j) || !json_is_string(json_object_get(j, "ts")) ||
            !json_is_string(json_object_get(j, "level")) ||
            !json_is_string(json_object_get(j, "msg")))
            fail_msg("not a JSON log line (%s): %s", e.text, line);
        json_t *v = json_object_get(j, key);
        if (v && (value ? same(json_string_value(v), value) : json_is_null(v)) && (*count)++ == 0)
            hit = json_incref(j);
        json_decref(j);
    }
    return hit;
}
