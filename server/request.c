/* request.c - parsing and validation of request bodies and path/query values,
 * with messages that tell the client exactly which field is wrong. */
#include "server/request.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Parses body as a JSON object. Returns it (caller json_decref) or NULL with err set. */
static json_t *load_object(const char *body, size_t len, int *code, char *err, size_t errlen)
{
    json_error_t e;
    json_t *root = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &e) : NULL;
    *code = REQ_ERR_JSON;
    if (len == 0) {
        snprintf(err, errlen, "request body is empty; expected a JSON object");
    } else if (root == NULL) {
        if (json_error_code(&e) == json_error_numeric_overflow)
            *code = REQ_ERR_INVALID;
        snprintf(err, errlen, "%s: %s at byte %d",
                 *code == REQ_ERR_INVALID ? "number out of range" : "malformed JSON", e.text,
                 e.position);
    } else if (!json_is_object(root)) {
        snprintf(err, errlen, "request body must be a JSON object");
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* Reads an integer field. Returns 1 when present and valid, 0 when absent and
 * optional, -1 with err set otherwise. */
static int int_field(json_t *obj, const char *key, int required, int64_t min, int64_t max,
                     int64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || (!required && json_is_null(v))) {
        if (!required)
            return 0;
        snprintf(err, errlen, "missing field \"%s\"", key);
        return -1;
    }
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "field \"%s\" must be an integer", key);
        return -1;
    }
    json_int_t n = json_integer_value(v);
    if (n < min || n > max) {
        snprintf(err, errlen, "field \"%s\" must be between %lld and %lld", key, (long long)min,
                 (long long)max);
        return -1;
    }
    *out = n;
    return 1;
}

#define STR_(x) #x
#define STR(x) STR_(x)
#define REQUEST_ID_RULE "a string of 1-" STR(RULE_REQUEST_ID_MAX) " printable ASCII characters"
#define BUYER_ID_RULE "a string of 1-" STR(RULE_BUYER_ID_MAX) " printable ASCII characters"
#define NAME_RULE "a string of 1-" STR(RULE_NAME_MAX) " characters without control characters"

/* Reads a string field that valid() accepts into out (room for all it
 * accepts, plus the NUL). Returns 1 when read, 0 when absent or null and
 * optional, -1 with err set ("field ... must be <rule>") otherwise. */
static int string_field(json_t *obj, const char *key, int required,
                        int (*valid)(const char *s, size_t len), char *out, const char *rule,
                        char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if ((v == NULL || json_is_null(v)) && !required)
        return 0;
    if (!json_is_string(v) || !valid(json_string_value(v), json_string_length(v))) {
        snprintf(err, errlen, "field \"%s\" must be %s", key, rule);
        return -1;
    }
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 1;
}

static int valid_request_id(const char *s, size_t len)
{
    if (len < 1 || len > RULE_REQUEST_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return 0;
    return 1;
}

/* itemId and quantity of one line, from obj. 0, or -1 with err set. */
static int line_fields(json_t *obj, req_line *l, char *err, size_t errlen)
{
    return int_field(obj, "itemId", 1, 1, INT64_MAX, &l->item_id, err, errlen) >= 0 &&
                   int_field(obj, "quantity", 1, 1, RULE_QUANTITY_MAX, &l->quantity, err,
                             errlen) >= 0
               ? 0
               : -1;
}

static int valid_buyer_id(const char *s, size_t len)
{
    return len <= RULE_BUYER_ID_MAX && valid_request_id(s, len);
}

/* requestId, buyerId and workMs, the fields every order may carry. 0, or -1
 * with err set. */
static int order_fields(json_t *root, req_order *out, char *err, size_t errlen)
{
    if (int_field(root, "workMs", 0, 0, RULE_WORK_MS_MAX, &out->work_ms, err, errlen) < 0)
        return -1;
    int rid = string_field(root, "requestId", 0, valid_request_id, out->request_id,
                           REQUEST_ID_RULE, err, errlen);
    out->has_request_id = rid > 0;
    int bid = rid < 0 ? -1 : string_field(root, "buyerId", 0, valid_buyer_id, out->buyer_id,
                                          BUYER_ID_RULE, err, errlen);
    out->has_buyer_id = bid > 0;
    return bid >= 0 ? 0 : -1;
}

int req_parse_reduce(const char *body, size_t len, req_order *out, char *err, size_t errlen)
{
    int code;
    memset(out, 0, sizeof(*out));
    json_t *root = load_object(body, len, &code, err, errlen);
    if (root == NULL)
        return code;
    out->nlines = 1;
    int rc = line_fields(root, &out->lines[0], err, errlen) == 0 &&
                     order_fields(root, out, err, errlen) == 0
                 ? REQ_OK
                 : REQ_ERR_INVALID;
    json_decref(root);
    return rc;
}

/* Line i of the "lines" array into out->lines[i]: an object with its
 * fields, for an item no earlier line has. 0, or -1 with err naming it. */
static int order_line(json_t *v, size_t i, req_order *out, char *err, size_t errlen)
{
    char why[200];
    req_line *l = &out->lines[i];
    if (!json_is_object(v)) {
        snprintf(err, errlen, "lines[%zu] must be an object {\"itemId\",\"quantity\"}", i);
        return -1;
    }
    if (line_fields(v, l, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "lines[%zu]: %s", i, why);
        return -1;
    }
    for (size_t j = 0; j < i; j++)
        if (out->lines[j].item_id == l->item_id) {
            snprintf(err, errlen, "lines[%zu]: itemId %lld already in lines[%zu]; an order has "
                     "one line per item", i, (long long)l->item_id, j);
            return -1;
        }
    return 0;
}

/* An order's fields from root (lines, requestId, buyerId, workMs). */
static int order_of(json_t *root, req_order *out, char *err, size_t errlen)
{
    json_t *lines = json_object_get(root, "lines"), *v;
    size_t i, n = json_array_size(lines);
    int rc = REQ_ERR_INVALID;
    if (!json_is_array(lines) || n < 1 || n > RULE_ORDER_LINES_MAX) {
        snprintf(err, errlen, "field \"lines\" must be an array of 1-%d lines",
                 RULE_ORDER_LINES_MAX);
    } else if (order_fields(root, out, err, errlen) == 0) {
        rc = REQ_OK;
        json_array_foreach(lines, i, v) {
            if (order_line(v, i, out, err, errlen) != 0) {
                rc = REQ_ERR_INVALID;
                break;
            }
            out->nlines = (int)i + 1;
        }
    }
    return rc;
}

int req_parse_order(const char *body, size_t len, req_order *out, char *err, size_t errlen)
{
    int code;
    memset(out, 0, sizeof(*out));
    json_t *root = load_object(body, len, &code, err, errlen);
    if (root == NULL)
        return code;
    int rc = order_of(root, out, err, errlen);
    json_decref(root);
    return rc;
}

int req_parse_reservation(const char *body, size_t len, int64_t max_hold_ms,
                          req_reservation *out, char *err, size_t errlen)
{
    int code;
    memset(out, 0, sizeof(*out));
    json_t *root = load_object(body, len, &code, err, errlen);
    if (root == NULL)
        return code;
    int rc = order_of(root, &out->order, err, errlen);
    if (rc == REQ_OK && int_field(root, "holdMs", 0, RULE_HOLD_MS_MIN, max_hold_ms,
                                  &out->hold_ms, err, errlen) < 0)
        rc = REQ_ERR_INVALID;
    json_decref(root);
    return rc;
}

int req_parse_extend(const char *body, size_t len, int64_t max_hold_ms, int64_t *hold_ms,
                     char *err, size_t errlen)
{
    int code;
    json_t *root = load_object(body, len, &code, err, errlen);
    if (root == NULL)
        return code;
    int rc = int_field(root, "holdMs", 1, RULE_HOLD_MS_MIN, max_hold_ms, hold_ms, err,
                       errlen) > 0 ? REQ_OK : REQ_ERR_INVALID;
    json_decref(root);
    return rc;
}

int req_parse_cancel(const char *body, size_t len, req_cancel *out, char *err, size_t errlen)
{
    int code;
    memset(out, 0, sizeof(*out));
    if (len == 0) /* the body is optional */
        return REQ_OK;
    json_t *root = load_object(body, len, &code, err, errlen);
    if (root == NULL)
        return code;
    int rid = string_field(root, "requestId", 0, valid_request_id, out->request_id,
                           REQUEST_ID_RULE, err, errlen);
    out->has_request_id = rid > 0;
    json_decref(root);
    return rid >= 0 ? REQ_OK : REQ_ERR_INVALID;
}

/* Counts UTF-8 characters (jansson has already checked the encoding) and
 * refuses control characters. */
static int valid_name(const char *s, size_t len)
{
    size_t chars = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
        chars += (c & 0xc0) != 0x80;
    }
    return chars >= 1 && chars <= RULE_NAME_MAX;
}

/* perBuyerLimit into *out: 1..RULE_STOCK_MAX; absent: absent (left as it
 * is); null: 0 when it may clear (PUT), else absent too. 1 when given, 0
 * when absent, -1 with err set. */
static int limit_field(json_t *root, int clearable, int64_t absent, int64_t *out, char *err,
                       size_t errlen)
{
    json_t *v = json_object_get(root, "perBuyerLimit");
    *out = absent;
    if (v && json_is_null(v) && clearable) {
        *out = 0;
        return 1;
    }
    return int_field(root, "perBuyerLimit", 0, 1, RULE_STOCK_MAX, out, err, errlen);
}

int req_parse_item(const char *body, size_t len, int need_name, req_item *out, char *err,
                   size_t errlen)
{
    int code;
    memset(out, 0, sizeof(*out));
    json_t *root = load_object(body, len, &code, err, errlen);
    if (root == NULL)
        return code;
    int rc = REQ_ERR_INVALID;
    /* PUT may set the limit alone; POST needs the stock */
    int limit = limit_field(root, !need_name, need_name ? 0 : -1, &out->per_buyer_limit, err,
                            errlen);
    int stock = limit < 0 ? -1 : int_field(root, "stock", need_name || limit == 0, 0,
                                           RULE_STOCK_MAX, &out->stock, err, errlen);
    if (stock >= 0) {
        out->has_stock = stock > 0;
        int name = need_name ? string_field(root, "name", 1, valid_name, out->name, NAME_RULE,
                                            err, errlen)
                             : 0;
        out->has_name = name > 0;
        int rid = name >= 0 && need_name
                      ? string_field(root, "requestId", 0, valid_request_id, out->request_id,
                                     REQUEST_ID_RULE, err, errlen)
                      : 0;
        out->has_request_id = rid > 0;
        rc = name >= 0 && rid >= 0 ? REQ_OK : REQ_ERR_INVALID;
    }
    json_decref(root);
    return rc;
}

int req_parse_id(const char *s, int64_t *out)
{
    if (s == NULL || s[0] < '1' || s[0] > '9' || strlen(s) > 19)
        return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}

int req_parse_int_arg(const char *s, int64_t def, int64_t min, int64_t max, int64_t *out)
{
    if (s == NULL) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* RFC 9110 5.6.2: a token's characters (a field name, a transfer coding). */
static int is_tchar(char c)
{
    return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* s[0..n) is a token. */
static int is_token_n(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_tchar(s[i]))
            return 0;
    return n > 0;
}

/* Notes the first field with a malformed shape, and why. */
static void bad_field(req_framing *f, const char *name, const char *why)
{
    if (!f->bad_name[0]) {
        snprintf(f->bad_name, sizeof(f->bad_name), "%s", name[0] ? name : "(empty)");
        f->bad_why = why;
    }
}

/* One Transfer-Encoding value: libmicrohttpd 0.9.75 reads a body as chunked
 * only when the value is "chunked" itself, any case, and reads any other
 * value (a trailing blank, an empty list element, "chunked, chunked") as an
 * unknown coding, up to the connection's end; a proxy may read those as
 * chunked. Which codings the list names decides the refusal's code. */
static void add_coding(req_framing *f, const char *value)
{
    if (f->encodings++ == 0) {
        snprintf(f->coding, sizeof(f->coding), "%s", value);
        f->chunked = strcasecmp(value, "chunked") == 0;
    }
    for (const char *p = value; *p;) { /* the list's elements, blanks trimmed */
        size_t n = strcspn(p, ",");
        const char *e = p + n;
        while (p < e && (*p == ' ' || *p == '\t'))
            p++;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (is_token_n(p, (size_t)(e - p)) && !((size_t)(e - p) == 7 &&
                                               strncasecmp(p, "chunked", 7) == 0))
            f->other_coding = 1;
        p += strcspn(p, ",");
        p += *p == ',';
    }
}

void req_framing_add(req_framing *f, const char *name, const char *value, int folded)
{
    int length = strcasecmp(name, "Content-Length") == 0;
    int coding = strcasecmp(name, "Transfer-Encoding") == 0;
    if (folded)
        bad_field(f, name, "a field folded onto the next line (obs-fold)");
    else if (!is_token_n(name, strlen(name)))
        bad_field(f, name, "not a token: a blank before its colon, or a folded line");
    else if (!length && !coding && (strncasecmp(name, "Content-Length", 14) == 0 ||
                                    strncasecmp(name, "Transfer-Encoding", 17) == 0))
        bad_field(f, name, "a framing field's name with more glued to it (a folded line)");
    else if (strchr(value, '\r'))
        bad_field(f, name, "a carriage return in its value, which a proxy may take for a "
                           "line's end");
    if (length) {
        if (f->lengths++ == 0)
            f->length_digits = value[0] && strspn(value, "0123456789") == strlen(value);
    } else if (coding) {
        add_coding(f, value);
    }
}

int req_check_framing(const req_framing *f, char *err, size_t errlen)
{
    if (f->bad_name[0]) {
        snprintf(err, errlen, "header field '%s' is malformed (%s); send each field as "
                              "Name: value on one line", f->bad_name, f->bad_why);
        return REQ_ERR_FRAMING;
    }
    if (f->encodings && f->lengths) {
        snprintf(err, errlen, "both Content-Length and Transfer-Encoding: the body's length "
                              "is ambiguous; send one of them");
        return REQ_ERR_FRAMING;
    }
    if (f->lengths > 1) {
        snprintf(err, errlen, "Content-Length given %d times; send it once", f->lengths);
        return REQ_ERR_FRAMING;
    }
    if (f->lengths && !f->length_digits) {
        snprintf(err, errlen, "Content-Length is not digits alone; send its decimal length");
        return REQ_ERR_FRAMING;
    }
    if (f->encodings && f->http10) {
        snprintf(err, errlen, "Transfer-Encoding in an HTTP/1.0 request; send Content-Length");
        return REQ_ERR_FRAMING;
    }
    if (f->encodings == 1 && f->chunked)
        return REQ_OK;
    if (f->encodings == 1 && f->other_coding) {
        snprintf(err, errlen, "transfer coding '%s' is not supported; send chunked alone, "
                              "or Content-Length", f->coding);
        return REQ_ERR_CODING;
    }
    if (f->encodings) {
        snprintf(err, errlen, "Transfer-Encoding '%s'%s is not exactly chunked (a blank, an "
                 "empty list element or a repeat reads two ways); send Transfer-Encoding: "
                 "chunked once", f->coding, f->encodings > 1 ? " (and more fields)" : "");
        return REQ_ERR_FRAMING;
    }
    return REQ_OK;
}

void req_head_add(req_head *h, const char *name, size_t name_len, size_t value_len)
{
    size_t line = name_len + 2 + value_len;
    h->fields++;
    if (line > h->longest) {
        h->longest = line;
        snprintf(h->long_name, sizeof(h->long_name), "%s", name);
    }
}

int req_check_head(const req_head *h, size_t head_size, char *err, size_t errlen)
{
    if (head_size > RULE_HEAD_MAX) {
        snprintf(err, errlen, "request headers of %zu bytes; at most %d with the request line",
                 head_size, RULE_HEAD_MAX);
    } else if (h->fields > RULE_HEAD_FIELDS_MAX) {
        snprintf(err, errlen, "%d header fields; at most %d", h->fields, RULE_HEAD_FIELDS_MAX);
    } else if (h->longest > RULE_HEAD_LINE_MAX) {
        snprintf(err, errlen, "header field '%s' is a line of %zu bytes; at most %d",
                 h->long_name, h->longest, RULE_HEAD_LINE_MAX);
    } else {
        return REQ_OK;
    }
    return REQ_ERR_HEAD;
}
