/* answer.c - classifies stockd's answers for the report and the verdict. It
 * trusts nothing in the body: a 200 counts as a deduction only when it carries
 * integer quantity and remaining fields. */
#include "loadgen/answer.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

static const char *const names[LG_OUT_COUNT] = {
    "ok", "insufficient_stock", "lock_timeout", "lock_interrupted", "lock_lost",
    "redis_unavailable", "other_4xx", "other_5xx", "transport_error", "malformed",
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
    }
    return status < 500 ? LG_OUT_OTHER_4XX : LG_OUT_OTHER_5XX;
}

static void parse_error(long status, json_t *root, lg_answer *out)
{
    const char *code = json_string_value(json_object_get(root, "error"));
    if (code == NULL) {
        out->outcome = status < 500 ? LG_OUT_OTHER_4XX : LG_OUT_OTHER_5XX;
        snprintf(out->why, sizeof(out->why), "%ld without an error code", status);
        return;
    }
    snprintf(out->code, sizeof(out->code), "%s", code);
    out->outcome = error_outcome(status, code);
    if (out->outcome == LG_OUT_INSUFFICIENT) {
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

void lg_answer_parse(long status, const char *body, size_t len, lg_answer *out)
{
    reset(out, LG_OUT_MALFORMED);
    if (status < 200 || (status >= 300 && status < 400) || status >= 600) {
        snprintf(out->why, sizeof(out->why), "unexpected HTTP status %ld", status);
        return;
    }
    json_t *root = body && len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (!json_is_object(root)) {
        out->outcome = status < 300   ? LG_OUT_MALFORMED
                       : status < 500 ? LG_OUT_OTHER_4XX
                                      : LG_OUT_OTHER_5XX;
        snprintf(out->why, sizeof(out->why), "%ld with a body that is not a JSON object", status);
    } else if (status == 200) {
        out->outcome = LG_OUT_OK;
        parse_ok(root, out);
    } else if (status < 300) {
        snprintf(out->why, sizeof(out->why), "unexpected HTTP status %ld", status);
    } else {
        parse_error(status, root, out);
    }
    json_decref(root);
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
