/* profile_io.c - an --api profile's set-up and read calls: the request
 * rendered from the profile's templates, sent on api.c's blocking client, and
 * the answer read by the profile's pointers. */
#include "loadgen/profile_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETUP_BODY_MAX 65536

static const char *const call_names[LG_PROFILE_CALLS] = {"buy", "create", "set_stock", "read"};

/* Renders and sends one call of the profile; url gets where it went. */
static int exchange(const lg_profile *p, int which, const char *base, const lg_profile_vars *v,
                    int timeout_ms, lg_answer_full *a, char *url, size_t urlsize, lg_err *err)
{
    char path[1024], headers[LG_PROFILE_HEADERS_MAX], *body = NULL;
    int json = 1;
    memset(a, 0, sizeof(*a));
    snprintf(url, urlsize, "%s", base);
    if (!lg_profile_has(p, which))
        return lg_errf(err, LG_ERR_SETUP, "the profile has no %s", call_names[which]);
    int has_body = lg_profile_has_body(p, which, &json);
    int n = lg_profile_render(p, which, LG_PROFILE_PATH, v, path, sizeof(path));
    if (n >= 0 && snprintf(url, urlsize, "%s%s", base, path) >= (int)urlsize)
        n = -1;
    if (n >= 0)
        n = lg_profile_render(p, which, LG_PROFILE_HEADERS, v, headers, sizeof(headers));
    if (n >= 0 && has_body && (body = malloc(SETUP_BODY_MAX)) == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    if (n >= 0 && has_body)
        n = lg_profile_render(p, which, LG_PROFILE_BODY, v, body, SETUP_BODY_MAX);
    if (n < 0) {
        free(body);
        return lg_errf(err, LG_ERR_SETUP, "the profile's %s request does not fit",
                       call_names[which]);
    }
    int rc = lg_api_call_with(lg_profile_method(p, which), url, headers, json, body,
                              timeout_ms, a, err);
    free(body);
    return rc;
}

static int unexpected(lg_err *err, const lg_profile *p, int which, const char *url,
                      const lg_answer_full *a, const char *what)
{
    return lg_errf(err, LG_ERR_SETUP, "%s %s answered %ld (%s): %.200s",
                   lg_profile_method(p, which), url, a->status, what, a->body ? a->body : "");
}

int lg_profile_create(const lg_profile *p, const char *base, const char *name, long long stock,
                      lg_profile_id *id, lg_err *err)
{
    lg_profile_vars v = {.stock = stock, .name = name};
    lg_answer_full a;
    char url[1024], why[160];
    memset(id, 0, sizeof(*id));
    int rc = exchange(p, LG_PROFILE_CREATE, base, &v, 0, &a, url, sizeof(url), err);
    if (rc == LG_OK && !lg_profile_created(p, a.status))
        rc = unexpected(err, p, LG_PROFILE_CREATE, url, &a, "not a status create.status allows");
    else if (rc == LG_OK && (rc = lg_profile_answer_id(p, a.body, a.len, id, why,
                                                       sizeof(why))) != LG_OK)
        rc = unexpected(err, p, LG_PROFILE_CREATE, url, &a, why);
    lg_answer_full_free(&a);
    return rc;
}

int lg_profile_set_stock(const lg_profile *p, const char *base, const lg_profile_id *id,
                         long long stock, lg_err *err)
{
    lg_profile_vars v = {.item = id, .stock = stock};
    lg_answer_full a;
    char url[1024];
    int rc = exchange(p, LG_PROFILE_SET_STOCK, base, &v, 0, &a, url, sizeof(url), err);
    if (rc == LG_OK && (a.status < 200 || a.status > 299))
        rc = unexpected(err, p, LG_PROFILE_SET_STOCK, url, &a, "expected 2xx");
    lg_answer_full_free(&a);
    return rc;
}

int lg_profile_read(const lg_profile *p, const char *base, const lg_profile_id *id,
                    int timeout_ms, lg_item_state *st, lg_err *err)
{
    lg_profile_vars v = {.item = id};
    lg_answer_full a;
    char url[1024], why[160];
    memset(st, 0, sizeof(*st));
    st->id = id->num;
    st->sold = st->order_count = st->reserved = st->returned = -1;
    int rc = exchange(p, LG_PROFILE_READ, base, &v, timeout_ms, &a, url, sizeof(url), err);
    if (rc == LG_OK && (a.status == 429 || a.status == 503))
        rc = lg_errf(err, LG_ERR_LATER, "GET %s answered %ld: %.200s", url, a.status, a.body);
    else if (rc == LG_OK && (a.status < 200 || a.status > 299))
        rc = unexpected(err, p, LG_PROFILE_READ, url, &a, "expected 2xx");
    else if (rc == LG_OK &&
             lg_profile_answer_state(p, a.body, a.len, st, why, sizeof(why)) != LG_OK)
        rc = unexpected(err, p, LG_PROFILE_READ, url, &a, why);
    lg_answer_full_free(&a);
    return rc;
}
