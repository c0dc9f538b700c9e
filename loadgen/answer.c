/* answer.c - classifies stockd's answers for the report and the verdict. It
 * trusts nothing in the body: a 200 counts as a deduction only when it carries
 * integer quantity and remaining fields, an order's only when its lines repeat
 * the ones asked. */
#include "loadgen/answer.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

static const char *const names[LG_OUT_COUNT] = {
    "ok", "insufficient_stock", "lock_timeout", "lock_interrupted", "lock_lost",
    "redis_unavailable", "other_4xx", "other_5xx", "commit_unknown", "transport_error",
    "malformed", "retry_later", "refused", "unknown",
};

const char *lg_outcome_name(int outcome)
{
    return outcome >= 0 && outcome < LG_OUT_COUNT ? names[outcome] : "unknown";
}

static void reset(lg_answer *out, int outcome)
{
    memset(out, 0, sizeof(*out));
    out->outcome = outcome;
    out->quantity = -1;
    out->remaining = -1;
}

/* Reads an integer member; 0 when present and integral, -1 otherwise. */
static int get_int(json_t *obj, const char *key, long long *v)
{
    json_t *j = json_object_get(obj, key);
    if (!json_is_integer(j))
        return -1;
    *v = (long long)json_integer_value(j);
    return 0;
}

/* The lines of the POST /orders request an answer is read against. */
typedef struct order_ask {
    lg_answer_line *lines;
    int n;
} order_ask;

static void parse_ok(json_t *root, lg_answer *out)
{
    long long q, r;
    if (get_int(root, "quantity", &q) != 0 || get_int(root, "remaining", &r) != 0) {
        out->outcome = LG_OUT_MALFORMED;
        snprintf(out->why, sizeof(out->why), "200 without integer quantity/remaining");
        return;
    }
    out->quantity = q;
    out->remaining = r;
    out->replayed = json_is_true(json_object_get(root, "replayed"));
}

/* Reads answer line k into ask->lines[k].remaining; 0, or -1 with out->why set
 * when it is not the line asked. */
static int order_line(json_t *line, const order_ask *ask, int k, lg_answer *out)
{
    long long item, q, r;
    lg_answer_line *want = &ask->lines[k];
    if (get_int(line, "itemId", &item) != 0 || get_int(line, "quantity", &q) != 0 ||
        get_int(line, "remaining", &r) != 0) {
        snprintf(out->why, sizeof(out->why), "line %d without integer itemId/quantity/remaining",
                 k);
        return -1;
    }
    if (item != want->item_id || q != want->quantity) {
        snprintf(out->why, sizeof(out->why), "line %d is item %lld x %lld, asked item %lld x %lld",
                 k, item, q, want->item_id, want->quantity);
        return -1;
    }
    want->remaining = r;
    return 0;
}

static void parse_order_ok(json_t *root, const order_ask *ask, lg_answer *out)
{
    json_t *lines = json_object_get(root, "lines");
    int ok = json_is_array(lines) && json_array_size(lines) == (size_t)ask->n;
    if (!ok)
        snprintf(out->why, sizeof(out->why), "order answer without an array of %d lines", ask->n);
    for (int k = 0; ok && k < ask->n; k++)
        ok = order_line(json_array_get(lines, (size_t)k), ask, k, out) == 0;
    if (!ok) {
        out->outcome = LG_OUT_MALFORMED;
        for (int k = 0; k < ask->n; k++)
            ask->lines[k].remaining = -1;
        return;
    }
    out->replayed = json_is_true(json_object_get(root, "replayed"));
}

/* A refused order names its short lines: each claim feeds the verdict's
 * false-refusal check. Entries it cannot match to a line asked carry no claim. */
static void parse_short_lines(json_t *root, const order_ask *ask)
{
    json_t *lines = json_object_get(root, "lines");
    for (size_t i = 0; i < json_array_size(lines); i++) {
        long long item, r;
        json_t *line = json_array_get(lines, i);
        if (get_int(line, "itemId", &item) != 0 || get_int(line, "remaining", &r) != 0)
            continue;
        for (int k = 0; k < ask->n; k++)
            if (ask->lines[k].item_id == item)
                ask->lines[k].remaining = r;
    }
}

/* Maps an error code within a status class to an outcome. */
static int error_outcome(long status, const char *code)
{
    if (status == 409 && strcmp(code, "insufficient_stock") == 0)
        return LG_OUT_INSUFFICIENT;
    if (status == 503) {
        if (strcmp(code, "lock_timeout") == 0)
            return LG_OUT_LOCK_TIMEOUT;
        if (strcmp(code, "lock_interrupted") == 0)
            return LG_OUT_LOCK_INTERRUPTED;
        if (strcmp(code, "lock_lost") == 0)
            return LG_OUT_LOCK_LOST;
        if (strcmp(code, "redis_unavailable") == 0)
            return LG_OUT_REDIS_UNAVAILABLE;
        if (strcmp(code, "commit_unknown") == 0)
            return LG_OUT_COMMIT_UNKNOWN;
    }
    return status < 500 ? LG_OUT_OTHER_4XX : LG_OUT_OTHER_5XX;
}

static void parse_error(long status, json_t *root, const order_ask *ask, lg_answer *out)
{
    const char *code = json_string_value(json_object_get(root, "error"));
    if (code == NULL) {
        out->outcome = status < 500 ? LG_OUT_OTHER_4XX : LG_OUT_OTHER_5XX;
        snprintf(out->why, sizeof(out->why), "%ld without an error code", status);
        return;
    }
    snprintf(out->code, sizeof(out->code), "%s", code);
    out->outcome = error_outcome(status, code);
    if (out->outcome == LG_OUT_INSUFFICIENT && ask) {
        parse_short_lines(root, ask);
    } else if (out->outcome == LG_OUT_INSUFFICIENT) {
        /* both fields feed the verdict's false-refusal check; absent means "unknown" */
        if (get_int(root, "remaining", &out->remaining) != 0)
            out->remaining = -1;
        if (get_int(root, "requested", &out->quantity) != 0)
            out->quantity = -1;
    }
    if (out->outcome >= LG_OUT_OTHER_4XX) {
        const char *msg = json_string_value(json_object_get(root, "message"));
        snprintf(out->why, sizeof(out->why), "%ld %s%s%s", status, code, msg ? ": " : "",
                 msg ? msg : "");
    }
}

/* The skeleton of both parsers: ask is NULL for /reduceStock. */
static void parse_with(long status, const char *body, size_t len, const order_ask *ask,
                       lg_answer *out)
{
    reset(out, LG_OUT_MALFORMED);
    for (int k = 0; ask && k < ask->n; k++)
        ask->lines[k].remaining = -1;
    if (status < 200 || (status >= 300 && status < 400) || status >= 600) {
        snprintf(out->why, sizeof(out->why), "unexpected HTTP status %ld", status);
        return;
    }
    json_t *root = body && len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    int deducted = status == 200 || (ask && status == 201);
    if (!json_is_object(root)) {
        out->outcome = status < 300   ? LG_OUT_MALFORMED
                       : status < 500 ? LG_OUT_OTHER_4XX
                                      : LG_OUT_OTHER_5XX;
        snprintf(out->why, sizeof(out->why), "%ld with a body that is not a JSON object", status);
    } else if (deducted) {
        out->outcome = LG_OUT_OK;
        if (ask)
            parse_order_ok(root, ask, out);
        else
            parse_ok(root, out);
    } else if (status < 300) {
        snprintf(out->why, sizeof(out->why), "unexpected HTTP status %ld", status);
    } else {
        parse_error(status, root, ask, out);
    }
    json_decref(root);
}

void lg_answer_parse(long status, const char *body, size_t len, lg_answer *out)
{
    parse_with(status, body, len, NULL, out);
}

void lg_answer_parse_order(long status, const char *body, size_t len, lg_answer_line *lines,
                           int n, lg_answer *out)
{
    order_ask ask = {lines, n};
    parse_with(status, body, len, &ask, out);
}

void lg_answer_status(long status, lg_answer *out)
{
    reset(out, LG_OUT_MALFORMED);
    if (status >= 200 && status < 300)
        out->outcome = LG_OUT_OK;
    else if (status >= 400 && status < 500)
        out->outcome = LG_OUT_OTHER_4XX;
    else if (status >= 500 && status < 600)
        out->outcome = LG_OUT_OTHER_5XX;
    if (out->outcome != LG_OUT_OK)
        snprintf(out->why, sizeof(out->why), "HTTP status %ld", status);
}
