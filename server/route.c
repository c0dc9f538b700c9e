/* route.c - maps an HTTP method and path to one of stockd's routes. */
#include "server/route.h"

#include <stdio.h>
#include <string.h>

#include "server/request.h"

struct path_rule {
    enum route_id id;
    const char *path;  /* exact path, or with_id: the prefix before the id */
    const char *allow; /* allowed methods; HEAD goes with GET */
    int with_id;
    const char *suffix; /* with_id: what follows the id ("/confirm"), NULL for nothing */
    enum route_role read, write; /* the role GET and HEAD need; the role the others need */
};

#define BUYER ROUTE_ROLE_BUYER
static const struct path_rule rules[] = {
    {ROUTE_REDUCE, "/reduceStock", "POST", 0, NULL, BUYER, BUYER},
    {ROUTE_ITEMS, "/items", "GET, HEAD, POST", 0, NULL, BUYER, ROUTE_ROLE_OPERATOR},
    {ROUTE_ITEM, "/items/", "GET, HEAD, PUT", 1, NULL, BUYER, ROUTE_ROLE_OPERATOR},
    {ROUTE_ORDERS, "/orders", "POST", 0, NULL, BUYER, BUYER},
    {ROUTE_ORDER, "/orders/", "GET, HEAD", 1, NULL, BUYER, BUYER},
    {ROUTE_ORDER_CANCEL, "/orders/", "POST", 1, "/cancel", BUYER, BUYER},
    {ROUTE_RESERVATIONS, "/reservations", "POST", 0, NULL, BUYER, BUYER},
    {ROUTE_RESERVATION, "/reservations/", "GET, HEAD", 1, NULL, BUYER, BUYER},
    {ROUTE_RESERVATION_CONFIRM, "/reservations/", "POST", 1, "/confirm", BUYER, BUYER},
    {ROUTE_RESERVATION_CANCEL, "/reservations/", "POST", 1, "/cancel", BUYER, BUYER},
    {ROUTE_RESERVATION_EXTEND, "/reservations/", "POST", 1, "/extend", BUYER, BUYER},
    {ROUTE_HEALTH, "/health", "GET, HEAD", 0, NULL, ROUTE_ROLE_OPEN, ROUTE_ROLE_OPEN},
    {ROUTE_METRICS, "/metrics", "GET, HEAD", 0, NULL, ROUTE_ROLE_SCRAPE, ROUTE_ROLE_SCRAPE},
};

/* Whether path is prefix, an id, then suffix (NULL: nothing); the id's
 * text (cut at 31 bytes: longer is no id) into id. */
static int matches_with_id(const char *path, const char *prefix, const char *suffix, char *id)
{
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) != 0)
        return 0;
    const char *start = path + n, *slash = strchr(start, '/');
    size_t idlen = slash ? (size_t)(slash - start) : strlen(start);
    if (idlen == 0 || (suffix ? slash == NULL || strcmp(slash, suffix) != 0 : slash != NULL))
        return 0;
    snprintf(id, 32, "%.*s", (int)(idlen < 31 ? idlen : 31), start);
    if (idlen >= 31)
        id[0] = 'x'; /* too long for any id: refused as one */
    return 1;
}

static int method_allowed(const char *allow, const char *method)
{
    size_t len = strlen(method);
    if (len == 0)
        return 0;
    for (const char *p = allow; (p = strstr(p, method)) != NULL; p += len)
        if ((p == allow || p[-1] == ' ') && (p[len] == ',' || p[len] == '\0'))
            return 1;
    return 0;
}

void route_match(const char *method, const char *path, route_result *out)
{
    memset(out, 0, sizeof(*out));
    out->id = ROUTE_NOT_FOUND;
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        const struct path_rule *r = &rules[i];
        if (r->with_id) {
            char id[32];
            if (!matches_with_id(path, r->path, r->suffix, id))
                continue;
            out->bad_id = req_parse_id(id, &out->path_id) != 0;
        } else if (strcmp(path, r->path) != 0) {
            continue;
        }
        out->id = r->id;
        out->allow = r->allow;
        out->method_ok = method_allowed(r->allow, method);
        int reads = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        out->role = reads ? r->read : r->write;
        return;
    }
}

const char *route_name(enum route_id id)
{
    static const char *const names[ROUTE_COUNT] = {
        "other", "reduceStock", "items", "item", "orders", "order", "health", "metrics",
        "reservations", "reservation", "reservationConfirm", "reservationCancel",
        "reservationExtend", "orderCancel"};
    return id < ROUTE_COUNT ? names[id] : "other";
}

const char *route_role_name(enum route_role role)
{
    static const char *const names[ROUTE_ROLE_COUNT] = {"open", "buyer", "operator", "scrape"};
    return role < ROUTE_ROLE_COUNT ? names[role] : NULL;
}

int route_is_probe(enum route_id id) { return id == ROUTE_HEALTH || id == ROUTE_METRICS; }
