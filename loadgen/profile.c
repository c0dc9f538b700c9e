/* profile.c - the --api profile: parsed once with jansson into templates
 * (literal text and placeholders, each with the escaping its place needs)
 * and answer rules, so that rendering a request in the load's hot path is a
 * concatenation and classifying an answer parses its body at most once. */
#include "loadgen/profile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#define RULES_MAX 32
#define STATUSES_MAX 16
#define FILE_MAX (1024 * 1024)

/* Placeholders, and which calls may name them. */
enum ph { PH_ITEM, PH_QUANTITY, PH_REQUEST, PH_BUYER, PH_NAME, PH_STOCK, PH_COUNT };
static const char *const ph_names[PH_COUNT] = {"item", "quantity", "request", "buyer", "name",
                                               "stock"};
static const unsigned ph_allowed[LG_PROFILE_CALLS] = {
    [LG_PROFILE_BUY] = 1u << PH_ITEM | 1u << PH_QUANTITY | 1u << PH_REQUEST | 1u << PH_BUYER,
    [LG_PROFILE_CREATE] = 1u << PH_NAME | 1u << PH_STOCK,
    [LG_PROFILE_SET_STOCK] = 1u << PH_ITEM | 1u << PH_STOCK,
    [LG_PROFILE_READ] = 1u << PH_ITEM,
};
static const char *const call_names[LG_PROFILE_CALLS] = {"buy", "create", "set_stock", "read"};
static const char *const default_methods[LG_PROFILE_CALLS] = {"POST", "POST", "PUT", "GET"};

/* How a placeholder's value is written where it stands. */
enum mode { M_RAW, M_URL, M_JSTR /* inside a JSON string */, M_TYPED /* a JSON value */ };

typedef struct seg {
    int ph;      /* enum ph, or -1 for literal text */
    int mode;    /* enum mode */
    char *text;  /* the literal */
    size_t len;
} seg;

typedef struct tmpl {
    seg *s;
    int n;
    unsigned uses; /* placeholders named, a bit each */
} tmpl;

/* A status list: codes 100..599, or a class 1..5 for "1xx".."5xx". */
typedef struct statuses {
    int v[STATUSES_MAX];
    int n;
} statuses;

typedef struct rule {
    statuses st;
    char *field;     /* JSON pointer, or NULL */
    json_t *equals;  /* with field */
    int outcome;     /* enum lg_outcome */
    char *remaining; /* ok rules: JSON pointer, or NULL */
    char code[40];
} rule;

typedef struct req_spec {
    int present;
    char method[16];
    char *path_src;
    tmpl path, headers, body;
    int has_body, json;
    statuses st;     /* create: the statuses that mean created (n 0: any 2xx) */
    char *id;        /* create: pointer to the new id */
    char *stock, *sold, *orders; /* read */
} req_spec;

struct lg_profile {
    char name[64];
    req_spec calls[LG_PROFILE_CALLS];
    rule rules[RULES_MAX];
    int nrules;
};

/* Where parsing is: the file's name for messages, and the error. */
typedef struct ctx {
    const char *file;
    lg_err *err;
} ctx;

__attribute__((format(printf, 3, 4))) static int bad(const ctx *c, const char *key,
                                                      const char *fmt, ...)
{
    char what[LG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return lg_errf(c->err, LG_ERR_USAGE, "profile %.150s: %.100s: %s", c->file, key, what);
}

static int nomem(const ctx *c)
{
    return lg_errf(c->err, LG_ERR_NOMEM, "out of memory reading profile %.200s", c->file);
}

/* ---- templates ---- */

static int add_seg(tmpl *t, int ph, int mode, const char *text, size_t len)
{
    if (ph < 0 && len == 0)
        return 0;
    if (ph < 0 && t->n > 0 && t->s[t->n - 1].ph < 0) { /* one literal, not many */
        seg *last = &t->s[t->n - 1];
        char *grown = realloc(last->text, last->len + len + 1);
        if (grown == NULL)
            return -1;
        memcpy(grown + last->len, text, len);
        last->len += len;
        grown[last->len] = '\0';
        last->text = grown;
        return 0;
    }
    seg *grown = realloc(t->s, (size_t)(t->n + 1) * sizeof(*grown));
    if (grown == NULL)
        return -1;
    t->s = grown;
    seg *s = &t->s[t->n];
    *s = (seg){ph, mode, NULL, len};
    if (ph < 0 && (s->text = strndup(text, len)) == NULL)
        return -1;
    if (ph >= 0)
        t->uses |= 1u << ph;
    t->n++;
    return 0;
}

static void tmpl_free(tmpl *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->s[i].text);
    free(t->s);
    memset(t, 0, sizeof(*t));
}

/* Writes text escaped for mode into out (JSON escaping for M_JSTR; the caller
 * adds quotes for M_TYPED). Returns the new length, or -1. */
static int put_escaped(char *out, size_t size, int used, const char *text, size_t len, int mode)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len && used >= 0; i++) {
        unsigned char ch = (unsigned char)text[i];
        char tmp[8];
        size_t n = 0;
        if (mode == M_URL && !(ch >= 'A' && ch <= 'Z') && !(ch >= 'a' && ch <= 'z') &&
            !(ch >= '0' && ch <= '9') && !strchr("-._~", ch)) {
            tmp[n++] = '%', tmp[n++] = hex[ch >> 4], tmp[n++] = hex[ch & 15];
        } else if ((mode == M_JSTR || mode == M_TYPED) && (ch == '"' || ch == '\\')) {
            tmp[n++] = '\\', tmp[n++] = (char)ch;
        } else if ((mode == M_JSTR || mode == M_TYPED) && ch < 0x20) {
            n = (size_t)snprintf(tmp, sizeof(tmp), "\\u%04x", ch);
        } else {
            tmp[n++] = (char)ch;
        }
        if ((size_t)used + n >= size)
            return -1;
        memcpy(out + used, tmp, n);
        used += (int)n;
    }
    if (used >= 0)
        out[used] = '\0';
    return used;
}

/* Scans a template string for {placeholder}s: literal pieces go through
 * lit_mode's escaping (only M_JSTR escapes), placeholders get ph_mode. */
static int compile_text(const ctx *c, const char *key, const char *src, int lit_mode,
                        int ph_mode, unsigned allowed, tmpl *t)
{
    const char *p = src, *lit = src;
    char buf[4096];
    while ((p = strchr(p, '{')) != NULL) {
        size_t n = strspn(p + 1, "abcdefghijklmnopqrstuvwxyz_");
        if (n == 0 || p[1 + n] != '}') {
            p++;
            continue;
        }
        int ph = 0;
        while (ph < PH_COUNT && (strlen(ph_names[ph]) != n || strncmp(ph_names[ph], p + 1, n)))
            ph++;
        if (ph == PH_COUNT)
            return bad(c, key, "unknown placeholder {%.*s} (known: {item}, {quantity}, "
                       "{request}, {buyer}, {name}, {stock})", (int)n, p + 1);
        if (!(allowed & 1u << ph))
            return bad(c, key, "{%s} has no value here", ph_names[ph]);
        int len = lit_mode == M_JSTR ? put_escaped(buf, sizeof(buf), 0, lit, (size_t)(p - lit),
                                                   M_JSTR)
                                     : (int)(p - lit);
        if (len < 0 || add_seg(t, -1, 0, lit_mode == M_JSTR ? buf : lit, (size_t)len) != 0 ||
            add_seg(t, ph, ph_mode, NULL, 0) != 0)
            return len < 0 ? bad(c, key, "too long") : nomem(c);
        p += n + 2;
        lit = p;
    }
    int len = lit_mode == M_JSTR ? put_escaped(buf, sizeof(buf), 0, lit, strlen(lit), M_JSTR)
                                 : (int)strlen(lit);
    if (len < 0)
        return bad(c, key, "too long");
    return add_seg(t, -1, 0, lit_mode == M_JSTR ? buf : lit, (size_t)len) != 0 ? nomem(c) : 0;
}

/* Whether s is exactly one placeholder: its index, else -1. */
static int sole_placeholder(const char *s)
{
    size_t n = strlen(s);
    for (int ph = 0; n > 2 && s[0] == '{' && s[n - 1] == '}' && ph < PH_COUNT; ph++)
        if (strlen(ph_names[ph]) == n - 2 && strncmp(ph_names[ph], s + 1, n - 2) == 0)
            return ph;
    return -1;
}

static int lit(const ctx *c, tmpl *t, const char *text)
{
    return add_seg(t, -1, 0, text, strlen(text)) != 0 ? nomem(c) : 0;
}

/* A JSON body: the value written compactly, its strings scanned for placeholders. */
static int compile_json(const ctx *c, const char *key, json_t *v, unsigned allowed, tmpl *t)
{
    int rc = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *item;
        int first = 1;
        rc = lit(c, t, "{");
        json_object_foreach(v, k, item) {
            char kbuf[1024];
            int n = put_escaped(kbuf, sizeof(kbuf), 0, k, strlen(k), M_JSTR);
            if (rc == 0 && n < 0)
                rc = bad(c, key, "a key is too long");
            if (rc == 0 && (rc = lit(c, t, first ? "\"" : ",\"")) == 0 &&
                (rc = lit(c, t, kbuf)) == 0)
                rc = lit(c, t, "\":");
            if (rc == 0)
                rc = compile_json(c, key, item, allowed, t);
            first = 0;
        }
        return rc ? rc : lit(c, t, "}");
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *item;
        rc = lit(c, t, "[");
        json_array_foreach(v, i, item) {
            if (rc == 0 && i > 0)
                rc = lit(c, t, ",");
            if (rc == 0)
                rc = compile_json(c, key, item, allowed, t);
        }
        return rc ? rc : lit(c, t, "]");
    }
    if (json_is_string(v)) {
        int ph = sole_placeholder(json_string_value(v));
        if (ph >= 0 && (allowed & 1u << ph))
            return add_seg(t, ph, M_TYPED, NULL, 0) != 0 ? nomem(c) : 0;
        if ((rc = lit(c, t, "\"")) == 0 &&
            (rc = compile_text(c, key, json_string_value(v), M_JSTR, M_JSTR, allowed, t)) == 0)
            rc = lit(c, t, "\"");
        return rc;
    }
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (text == NULL)
        return nomem(c);
    rc = lit(c, t, text);
    free(text);
    return rc;
}

/* ---- rendering ---- */

static int put(char *out, size_t size, int used, const char *text, size_t len)
{
    if (used < 0 || (size_t)used + len >= size)
        return -1;
    memcpy(out + used, text, len);
    out[used + (int)len] = '\0';
    return used + (int)len;
}

/* One placeholder's value. */
static int put_value(char *out, size_t size, int used, int ph, int mode,
                     const lg_profile_vars *v)
{
    char num[32];
    const char *s = NULL;
    long long n = 0;
    int is_num = 0;
    switch (ph) {
    case PH_ITEM:
        if (v->item == NULL)
            return -1;
        s = v->item->str, n = v->item->num, is_num = s == NULL;
        break;
    case PH_QUANTITY: n = v->quantity, is_num = 1; break;
    case PH_STOCK: n = v->stock, is_num = 1; break;
    case PH_REQUEST: s = v->request; break;
    case PH_BUYER: s = v->buyer; break;
    case PH_NAME: s = v->name; break;
    }
    if (is_num) {
        int len = snprintf(num, sizeof(num), "%lld", n);
        return put(out, size, used, num, (size_t)len);
    }
    if (s == NULL)
        return -1;
    if (mode != M_TYPED)
        return used < 0 ? -1 : put_escaped(out, size, used, s, strlen(s), mode);
    used = put(out, size, used, "\"", 1);
    used = used < 0 ? -1 : put_escaped(out, size, used, s, strlen(s), M_TYPED);
    return put(out, size, used, "\"", 1);
}

static int render(const tmpl *t, const lg_profile_vars *v, char *out, size_t size)
{
    int used = size > 0 ? 0 : -1;
    if (used == 0)
        out[0] = '\0';
    for (int i = 0; i < t->n && used >= 0; i++) {
        const seg *s = &t->s[i];
        used = s->ph < 0 ? put(out, size, used, s->text, s->len)
                         : v ? put_value(out, size, used, s->ph, s->mode, v) : -1;
    }
    return used;
}

int lg_profile_render(const lg_profile *p, int call, int part, const lg_profile_vars *v,
                      char *buf, size_t size)
{
    if (call < 0 || call >= LG_PROFILE_CALLS || !p->calls[call].present)
        return -1;
    const struct req_spec *c = &p->calls[call];
    const tmpl *t = part == LG_PROFILE_PATH ? &c->path
                    : part == LG_PROFILE_HEADERS ? &c->headers : &c->body;
    return render(t, v, buf, size);
}

/* ---- parsing ---- */

/* Refuses keys of o not in allowed (a NULL-terminated list). */
static int known_keys(const ctx *c, const char *where, json_t *o, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0)
            i++;
        if (allowed[i] == NULL) {
            char key[160];
            snprintf(key, sizeof(key), "%s%s%.100s", where, where[0] ? "." : "", k);
            return bad(c, key, "unknown key");
        }
    }
    return 0;
}

/* An RFC 6901 pointer: "" or "/..." with ~ only as ~0 or ~1. */
static int pointer_key(const ctx *c, const char *key, json_t *v, char **out)
{
    const char *s = json_string_value(v);
    if (!json_is_string(v))
        return bad(c, key, "expected a JSON pointer string like \"/remaining\"");
    if (s[0] != '\0' && s[0] != '/')
        return bad(c, key, "\"%.80s\" is not a JSON pointer (it starts with '/')", s);
    for (const char *t = strchr(s, '~'); t; t = strchr(t + 1, '~'))
        if (t[1] != '0' && t[1] != '1')
            return bad(c, key, "\"%.80s\": '~' must be ~0 or ~1 in a JSON pointer", s);
    return (*out = strdup(s)) ? 0 : nomem(c);
}

static json_t *pointer_get(json_t *root, const char *ptr)
{
    json_t *cur = root;
    for (const char *p = ptr; *p == '/' && cur; ) {
        char tok[256];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~')
                ch = *++p == '1' ? '/' : '~';
            if (n < sizeof(tok) - 1)
                tok[n++] = ch;
        }
        tok[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur) && n > 0 && strspn(tok, "0123456789") == n &&
                   (n == 1 || tok[0] != '0')) {
            cur = json_array_get(cur, strtoul(tok, NULL, 10));
        } else {
            cur = NULL;
        }
    }
    return cur;
}

static int status_list(const ctx *c, const char *key, json_t *v, statuses *st)
{
    size_t i;
    json_t *e;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > STATUSES_MAX)
        return bad(c, key, "expected a list of 1..%d statuses like [200, 201] or [\"4xx\"]",
                   STATUSES_MAX);
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        if (json_is_integer(e) && json_integer_value(e) >= 100 && json_integer_value(e) <= 599)
            st->v[st->n++] = (int)json_integer_value(e);
        else if (s && strlen(s) == 3 && s[0] >= '1' && s[0] <= '5' && strcmp(s + 1, "xx") == 0)
            st->v[st->n++] = s[0] - '0';
        else
            return bad(c, key, "entry %zu: expected a status 100..599 or \"1xx\"..\"5xx\"", i);
    }
    return 0;
}

static int status_in(const statuses *st, long status)
{
    if (st->n == 0)
        return status >= 200 && status <= 299;
    for (int i = 0; i < st->n; i++)
        if (st->v[i] == status || (st->v[i] < 10 && status / 100 == st->v[i]))
            return 1;
    return 0;
}

/* "Name: value\r\n" lines of an object of strings, appended to t. */
static int compile_headers(const ctx *c, const char *where, json_t *h, unsigned allowed,
                           tmpl *t, int *content_type)
{
    const char *k;
    json_t *v;
    char key[160];
    snprintf(key, sizeof(key), "%s%sheaders", where, where[0] ? "." : "");
    if (!json_is_object(h))
        return bad(c, key, "expected an object of header names and string values");
    json_object_foreach(h, k, v) {
        char hk[240];
        snprintf(hk, sizeof(hk), "%s.%.60s", key, k);
        size_t n = strlen(k);
        if (n == 0 || n > 64 || strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789!#$%&'*+-.^_`|~") != n)
            return bad(c, hk, "not a header name");
        if (strcasecmp(k, "Host") == 0 || strcasecmp(k, "Content-Length") == 0 ||
            strcasecmp(k, "Transfer-Encoding") == 0 || strcasecmp(k, "Connection") == 0)
            return bad(c, hk, "loadgen sets this header itself");
        if (!json_is_string(v) || strpbrk(json_string_value(v), "\r\n"))
            return bad(c, hk, "expected a string of one line");
        if (strcasecmp(k, "Content-Type") == 0)
            *content_type = 1;
        int rc = lit(c, t, k);
        if (rc == 0 && (rc = lit(c, t, ": ")) == 0 &&
            (rc = compile_text(c, hk, json_string_value(v), M_RAW, M_RAW, allowed, t)) == 0)
            rc = lit(c, t, "\r\n");
        if (rc)
            return rc;
    }
    return 0;
}

static int method_key(const ctx *c, const char *key, json_t *v, char *out)
{
    const char *s = json_string_value(v);
    if (!json_is_string(v) || !s[0] || strlen(s) > 15 ||
        strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(s))
        return bad(c, key, "expected a method in capitals, like \"POST\"");
    strcpy(out, s);
    return 0;
}

/* method, path, headers and body of one call. */
static int parse_request(const ctx *c, int which, json_t *o, json_t *top_headers, req_spec *out)
{
    const char *name = call_names[which];
    char key[64];
    unsigned allowed = ph_allowed[which];
    json_t *v;
    int rc = 0, content_type = 0;
    out->present = 1;
    snprintf(key, sizeof(key), "%s.method", name);
    strcpy(out->method, default_methods[which]);
    if ((v = json_object_get(o, "method")) && (rc = method_key(c, key, v, out->method)))
        return rc;
    snprintf(key, sizeof(key), "%s.path", name);
    const char *path = json_string_value(json_object_get(o, "path"));
    if (path == NULL || path[0] != '/' || strlen(path) >= 256 || strpbrk(path, " \r\n\t"))
        return bad(c, key, "expected a path starting with '/' (no blanks, under 256 "
                   "characters), like \"/items/{item}\"");
    if ((out->path_src = strdup(path)) == NULL)
        return nomem(c);
    if ((rc = compile_text(c, key, path, M_RAW, M_URL, allowed, &out->path)))
        return rc;
    if (top_headers && (rc = compile_headers(c, "", top_headers, allowed, &out->headers,
                                             &content_type)))
        return rc;
    if ((v = json_object_get(o, "headers")) &&
        (rc = compile_headers(c, name, v, allowed, &out->headers, &content_type)))
        return rc;
    snprintf(key, sizeof(key), "%s.body", name);
    if ((v = json_object_get(o, "body")) == NULL)
        return 0;
    out->has_body = 1;
    if (json_is_string(v)) {
        if (!content_type)
            return bad(c, key, "a text body needs a Content-Type in the headers");
        return compile_text(c, key, json_string_value(v), M_RAW, M_RAW, allowed, &out->body);
    }
    if (!json_is_object(v) && !json_is_array(v))
        return bad(c, key, "expected a JSON object or array, or a string (a text template)");
    out->json = !content_type;
    return compile_json(c, key, v, allowed, &out->body);
}

static const char *const outcome_classes[] = {"ok", "sold_out", "retry", "refused", "unknown"};
static const int outcome_values[] = {LG_OUT_OK, LG_OUT_INSUFFICIENT, LG_OUT_RETRY,
                                     LG_OUT_REFUSED, LG_OUT_UNKNOWN};

static int parse_rule(const ctx *c, int i, json_t *o, rule *r)
{
    static const char *const keys[] = {"status", "field", "equals", "class", "remaining", NULL};
    char where[32], key[64];
    snprintf(where, sizeof(where), "answers[%d]", i);
    if (!json_is_object(o))
        return bad(c, where, "expected an object with status and class");
    int rc = known_keys(c, where, o, keys);
    snprintf(key, sizeof(key), "%s.status", where);
    if (rc == 0)
        rc = status_list(c, key, json_object_get(o, "status"), &r->st);
    snprintf(key, sizeof(key), "%s.class", where);
    const char *cls = json_string_value(json_object_get(o, "class"));
    size_t k = 0;
    while (cls && k < 5 && strcmp(cls, outcome_classes[k]) != 0)
        k++;
    if (rc == 0 && (cls == NULL || k == 5))
        rc = bad(c, key, "\"%.40s\" is not one of ok, sold_out, retry, refused, unknown",
                 cls ? cls : "(none)");
    if (rc)
        return rc;
    r->outcome = outcome_values[k];
    json_t *field = json_object_get(o, "field"), *equals = json_object_get(o, "equals");
    snprintf(key, sizeof(key), "%s.%s", where, field ? "equals" : "field");
    if ((field == NULL) != (equals == NULL))
        return bad(c, key, "field and equals go together");
    if (equals && !json_is_string(equals) && !json_is_number(equals) && !json_is_boolean(equals))
        return bad(c, key, "expected a string, number or boolean");
    snprintf(key, sizeof(key), "%s.field", where);
    if (field && (rc = pointer_key(c, key, field, &r->field)))
        return rc;
    r->equals = json_incref(equals);
    if (json_is_string(equals))
        snprintf(r->code, sizeof(r->code), "%s", json_string_value(equals));
    json_t *rem = json_object_get(o, "remaining");
    snprintf(key, sizeof(key), "%s.remaining", where);
    if (rem && r->outcome != LG_OUT_OK)
        return bad(c, key, "only an ok rule has a remaining stock");
    return rem ? pointer_key(c, key, rem, &r->remaining) : 0;
}

static int parse_answers(const ctx *c, json_t *a, lg_profile *p)
{
    size_t i;
    json_t *o;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > RULES_MAX)
        return bad(c, "answers", "expected a list of 1..%d rules", RULES_MAX);
    json_array_foreach(a, i, o) {
        int rc = parse_rule(c, (int)i, o, &p->rules[i]);
        p->nrules = (int)i + 1;
        if (rc)
            return rc;
    }
    return 0;
}

/* One call's object: its request keys plus the call's own. */
static int parse_call(const ctx *c, int which, json_t *root, lg_profile *p)
{
    static const char *const allowed[LG_PROFILE_CALLS][10] = {
        [LG_PROFILE_BUY] = {"method", "path", "headers", "body", NULL},
        [LG_PROFILE_CREATE] = {"method", "path", "headers", "body", "status", "id", NULL},
        [LG_PROFILE_SET_STOCK] = {"method", "path", "headers", "body", NULL},
        [LG_PROFILE_READ] = {"method", "path", "headers", "stock", "sold", "orders", NULL},
    };
    const char *name = call_names[which];
    json_t *o = json_object_get(root, name);
    req_spec *out = &p->calls[which];
    if (o == NULL)
        return which == LG_PROFILE_BUY || which == LG_PROFILE_READ
                   ? bad(c, name, "missing (the profile needs buy, answers and read)")
                   : 0;
    if (!json_is_object(o))
        return bad(c, name, "expected an object");
    int rc = known_keys(c, name, o, allowed[which]);
    if (rc == 0)
        rc = parse_request(c, which, o, json_object_get(root, "headers"), out);
    char key[64];
    json_t *v;
    snprintf(key, sizeof(key), "%s.status", name);
    if (rc == 0 && (v = json_object_get(o, "status")))
        rc = status_list(c, key, v, &out->st);
    snprintf(key, sizeof(key), "%s.id", name);
    if (rc == 0 && which == LG_PROFILE_CREATE)
        rc = (v = json_object_get(o, "id")) ? pointer_key(c, key, v, &out->id)
                                            : bad(c, key, "missing: where the new item's id is");
    if (rc || which != LG_PROFILE_READ)
        return rc;
    snprintf(key, sizeof(key), "%s.stock", name);
    rc = (v = json_object_get(o, "stock")) ? pointer_key(c, key, v, &out->stock)
                                           : bad(c, key, "missing: where the item's stock is");
    snprintf(key, sizeof(key), "%s.sold", name);
    if (rc == 0 && (v = json_object_get(o, "sold")))
        rc = pointer_key(c, key, v, &out->sold);
    snprintf(key, sizeof(key), "%s.orders", name);
    if (rc == 0 && (v = json_object_get(o, "orders")))
        rc = pointer_key(c, key, v, &out->orders);
    return rc;
}

static int parse_root(const ctx *c, json_t *root, lg_profile *p)
{
    static const char *const keys[] = {"name", "headers", "buy", "answers", "create",
                                       "set_stock", "read", NULL};
    if (!json_is_object(root))
        return bad(c, "(top)", "expected a JSON object");
    int rc = known_keys(c, "", root, keys);
    json_t *name = json_object_get(root, "name");
    if (rc == 0 && name && !json_is_string(name))
        rc = bad(c, "name", "expected a string");
    if (rc == 0 && name)
        snprintf(p->name, sizeof(p->name), "%s", json_string_value(name));
    for (int w = 0; rc == 0 && w < LG_PROFILE_CALLS; w++)
        rc = parse_call(c, w, root, p);
    json_t *answers = json_object_get(root, "answers");
    if (rc == 0)
        rc = answers ? parse_answers(c, answers, p)
                     : bad(c, "answers", "missing (the rules that classify a buy's answer)");
    return rc;
}

int lg_profile_parse(const char *name, const char *text, size_t len, lg_profile **out,
                     lg_err *err)
{
    ctx c = {name, err};
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return bad(&c, "(file)", "not JSON: line %d: %s", jerr.line, jerr.text);
    lg_profile *p = calloc(1, sizeof(*p));
    int rc = p ? parse_root(&c, root, p) : nomem(&c);
    json_decref(root);
    if (rc != 0) {
        lg_profile_free(p);
        return rc;
    }
    *out = p;
    return LG_OK;
}

int lg_profile_load(const char *path, lg_profile **out, lg_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return lg_errf(err, LG_ERR_USAGE, "--api %.300s: %s", path, strerror(errno));
    char *text = malloc(FILE_MAX);
    size_t n = text ? fread(text, 1, FILE_MAX, f) : 0;
    int large = text && n == FILE_MAX;
    fclose(f);
    int rc = text == NULL ? lg_errf(err, LG_ERR_NOMEM, "out of memory")
             : large      ? lg_errf(err, LG_ERR_USAGE, "--api %.300s: larger than %d bytes",
                                    path, FILE_MAX)
                          : lg_profile_parse(path, text, n, out, err);
    free(text);
    return rc;
}

void lg_profile_free(lg_profile *p)
{
    if (p == NULL)
        return;
    for (int w = 0; w < LG_PROFILE_CALLS; w++) {
        req_spec *c = &p->calls[w];
        tmpl_free(&c->path);
        tmpl_free(&c->headers);
        tmpl_free(&c->body);
        free(c->path_src);
        free(c->id);
        free(c->stock);
        free(c->sold);
        free(c->orders);
    }
    for (int i = 0; i < p->nrules; i++) {
        free(p->rules[i].field);
        free(p->rules[i].remaining);
        json_decref(p->rules[i].equals);
    }
    free(p);
}

/* ---- accessors ---- */

const char *lg_profile_name(const lg_profile *p)
{
    return p->name;
}

int lg_profile_has(const lg_profile *p, int call)
{
    return call >= 0 && call < LG_PROFILE_CALLS && p->calls[call].present;
}

int lg_profile_has_sold(const lg_profile *p)
{
    return p->calls[LG_PROFILE_READ].sold != NULL;
}

int lg_profile_has_orders(const lg_profile *p)
{
    return p->calls[LG_PROFILE_READ].orders != NULL;
}

const char *lg_profile_method(const lg_profile *p, int call)
{
    return p->calls[call].method;
}

const char *lg_profile_path(const lg_profile *p, int call)
{
    return p->calls[call].path_src ? p->calls[call].path_src : "";
}

int lg_profile_head_varies(const lg_profile *p, int call)
{
    return (p->calls[call].path.uses | p->calls[call].headers.uses) != 0;
}

int lg_profile_has_body(const lg_profile *p, int call, int *json)
{
    if (json)
        *json = p->calls[call].json;
    return p->calls[call].has_body;
}

/* ---- answers ---- */

void lg_profile_classify(const lg_profile *p, long status, const char *body, size_t len,
                         lg_answer *out)
{
    memset(out, 0, sizeof(*out));
    out->quantity = out->remaining = -1;
    json_t *root = NULL;
    int parsed = 0;
    const rule *r = NULL;
    for (int i = 0; i < p->nrules && r == NULL; i++) {
        const rule *x = &p->rules[i];
        if (!status_in(&x->st, status))
            continue;
        if (x->field && !parsed++)
            root = json_loadb(body ? body : "", body ? len : 0, 0, NULL);
        if (x->field && !json_equal(pointer_get(root, x->field), x->equals))
            continue;
        r = x;
    }
    if (r == NULL) {
        out->outcome = status >= 200 && status <= 299 ? LG_OUT_MALFORMED
                       : status >= 400 && status <= 499 ? LG_OUT_OTHER_4XX
                                                        : LG_OUT_UNKNOWN;
        snprintf(out->why, sizeof(out->why), "%ld matched no answers rule: %.80s", status,
                 body && len ? body : "(no body)");
        json_decref(root);
        return;
    }
    out->outcome = r->outcome;
    snprintf(out->code, sizeof(out->code), "%s", r->code);
    if (r->remaining) {
        if (!parsed++)
            root = json_loadb(body ? body : "", body ? len : 0, 0, NULL);
        json_t *rem = pointer_get(root, r->remaining);
        if (json_is_integer(rem)) {
            out->remaining = (long long)json_integer_value(rem);
        } else {
            out->outcome = LG_OUT_MALFORMED;
            snprintf(out->why, sizeof(out->why), "%ld with no integer at %.30s: %.60s",
                     status, r->remaining, body && len ? body : "(no body)");
        }
    }
    json_decref(root);
}

/* ---- what set-up and read-back answers say ---- */

/* A string id is kept as the service wrote it: it must stay one header line
 * and fit the request buffers. */
static int id_string_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > LG_PROFILE_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

int lg_profile_created(const lg_profile *p, long status)
{
    return status_in(&p->calls[LG_PROFILE_CREATE].st, status);
}

int lg_profile_answer_id(const lg_profile *p, const char *body, size_t len, lg_profile_id *id,
                         char *why, size_t whysize)
{
    const char *ptr = p->calls[LG_PROFILE_CREATE].id;
    memset(id, 0, sizeof(*id));
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, NULL);
    json_t *j = ptr ? pointer_get(root, ptr) : NULL;
    int rc = 0;
    if (json_is_integer(j) && json_integer_value(j) >= 1)
        id->num = (long long)json_integer_value(j);
    else if (json_is_string(j) && id_string_ok(json_string_value(j)))
        rc = (id->str = strdup(json_string_value(j))) ? 0 : LG_ERR_NOMEM;
    else
        rc = LG_ERR_SETUP;
    if (rc == LG_ERR_SETUP)
        snprintf(why, whysize, "no id at %s (an integer >= 1 or a string of 1..%d printable "
                 "characters)", ptr ? ptr : "(none)", LG_PROFILE_ID_MAX);
    else if (rc == LG_ERR_NOMEM)
        snprintf(why, whysize, "out of memory");
    json_decref(root);
    return rc;
}

/* The integer at pointer ptr, or -1 with *bad_value set. */
static long long int_at(json_t *root, const char *ptr, int *bad_value)
{
    json_t *j = pointer_get(root, ptr);
    if (!json_is_integer(j)) {
        *bad_value = 1;
        return -1;
    }
    return (long long)json_integer_value(j);
}

int lg_profile_answer_state(const lg_profile *p, const char *body, size_t len,
                            lg_item_state *st, char *why, size_t whysize)
{
    const req_spec *c = &p->calls[LG_PROFILE_READ];
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, NULL);
    int bad_value = 0;
    st->sold = st->order_count = st->reserved = st->returned = -1;
    st->stock = int_at(root, c->stock, &bad_value);
    if (c->sold)
        st->sold = int_at(root, c->sold, &bad_value);
    if (c->orders)
        st->order_count = int_at(root, c->orders, &bad_value);
    json_decref(root);
    if (bad_value)
        snprintf(why, whysize, "expected integers at %s%s%s%s%s", c->stock,
                 c->sold ? ", " : "", c->sold ? c->sold : "", c->orders ? ", " : "",
                 c->orders ? c->orders : "");
    return bad_value ? LG_ERR_SETUP : 0;
}

int lg_profile_id_parse(const char *text, int k, lg_profile_id *id, lg_err *err)
{
    memset(id, 0, sizeof(*id));
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] >= '0' && text[0] <= '9' && *end == '\0' && errno == 0 && v >= 1) {
        id->num = v;
        return LG_OK;
    }
    if (!id_string_ok(text))
        return lg_errf(err, LG_ERR_USAGE, "--item: expected an id of 1..%d printable "
                       "characters", LG_PROFILE_ID_MAX);
    id->num = k + 1;
    return (id->str = strdup(text)) ? LG_OK : lg_errf(err, LG_ERR_NOMEM, "out of memory");
}

void lg_profile_id_free(lg_profile_id *id)
{
    free(id->str);
    id->str = NULL;
}
