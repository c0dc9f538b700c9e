/* compose.c - docker/docker-compose.yml read line by line, as far as the
 * Docker suites check it (see compose.h): no YAML library, because the file
 * keeps to a few shapes on purpose. */
#include "tests/support/compose.h"
#include "tests/support/harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A line below a key: an entry of depends_on ("  name:") and its condition. */
static void parse_nested(th_service *cur, const char *key)
{
    char name[64], value[64];
    if (cur->in_env && sscanf(key, "  %63[A-Z0-9_]: %63s", name, value) == 2 && cur->nenv < 8) {
        snprintf(cur->env[cur->nenv][0], sizeof(cur->env[0][0]), "%s", name);
        snprintf(cur->env[cur->nenv++][1], sizeof(cur->env[0][1]), "%s", value);
    }
    if (!cur->in_depends)
        return;
    if (key[2] != ' ' && sscanf(key, "  %63[a-z0-9-]:", name) == 1)
        snprintf(cur->dep, sizeof(cur->dep), "%s", name);
    else if (strstr(key, "condition: service_healthy") && cur->dep[0] &&
             strlen(cur->healthy) + strlen(cur->dep) + 3 < sizeof(cur->healthy))
        snprintf(cur->healthy + strlen(cur->healthy), sizeof(cur->healthy) - strlen(cur->healthy),
                 "%s%s,", cur->healthy[0] ? "" : ",", cur->dep);
}

/* One line of a service's (indent 4) or a template's (indent 2) own keys. */
static void parse_key(th_service *cur, const char *line, int indent)
{
    for (int i = 0; i < indent; i++)
        if (line[i] != ' ')
            return;
    const char *key = line + indent, *array = strchr(key, '[');
    if (key[0] == ' ') {
        parse_nested(cur, key);
        return;
    }
    cur->in_depends = strncmp(key, "depends_on:", 11) == 0;
    cur->in_env = strncmp(key, "environment:", 12) == 0;
    if (strncmp(key, "volumes:", 8) == 0)
        cur->volumes = 1;
    else if (strncmp(key, "secrets: ", 9) == 0)
        sscanf(key + 9, "%127[^\n]", cur->secrets);
    else if (strncmp(key, "network_mode: ", 14) == 0)
        sscanf(key + 14, "%15s", cur->network_mode);
    else if (strncmp(key, "ports: ", 7) == 0)
        sscanf(key + 7, "%63[^\n#]", cur->ports);
    else if (strncmp(key, "dns_opt: ", 9) == 0)
        sscanf(key + 9, "%63[^\n#]", cur->dns_opt);
    else if (strncmp(key, "<<: *", 5) == 0)
        sscanf(key + 5, "%31s", cur->uses);
    else if (strncmp(key, "build: ", 7) == 0)
        sscanf(key + 7, "%63s", cur->build);
    else if (strncmp(key, "image: ", 7) == 0)
        sscanf(key + 7, "%63s", cur->image);
    else if (strncmp(key, "command: ", 9) == 0 && array)
        cur->command = json_loads(array, 0, NULL);
    else if (strncmp(key, "entrypoint: ", 12) == 0 && array)
        cur->entrypoint = json_loads(array, 0, NULL);
}

/* What a service takes from the template it merges, unless it sets it itself. */
static void merge_template(const th_compose *c, th_service *svc)
{
    for (int t = 0; svc->uses[0] && t < c->ntemplates; t++) {
        const th_service *from = &c->templates[t];
        if (strcmp(from->name, svc->uses) != 0)
            continue;
        if (!svc->build[0])
            snprintf(svc->build, sizeof(svc->build), "%s", from->build);
        if (!svc->image[0])
            snprintf(svc->image, sizeof(svc->image), "%s", from->image);
        if (!svc->command && from->command)
            svc->command = json_incref(from->command);
        if (!svc->entrypoint && from->entrypoint)
            svc->entrypoint = json_incref(from->entrypoint);
        if (!svc->secrets[0])
            snprintf(svc->secrets, sizeof(svc->secrets), "%s", from->secrets);
        if (!svc->dns_opt[0])
            snprintf(svc->dns_opt, sizeof(svc->dns_opt), "%s", from->dns_opt);
        if (!svc->healthy[0])
            snprintf(svc->healthy, sizeof(svc->healthy), "%s", from->healthy);
        svc->volumes |= from->volumes;
    }
}

int th_compose_load(th_compose *c)
{
    memset(c, 0, sizeof(*c));
    FILE *f = fopen(TH_COMPOSE_FILE, "r");
    if (f == NULL)
        return -1;
    char line[512];
    int in_services = 0, indent = 0;
    th_service *cur = NULL;
    while (fgets(line, sizeof(line), f)) {
        char name[64], value[128];
        if (line[0] != ' ' && line[0] != '#' && line[0] != '\n') /* a top-level key */
            in_services = strncmp(line, "services:", 9) == 0, cur = NULL;
        if (sscanf(line, "x-%*[a-z0-9-]: &%63[a-z0-9-]", name) == 1 &&
            c->ntemplates < TH_COMPOSE_MAX_TEMPLATES) {
            cur = &c->templates[c->ntemplates++], indent = 2;
            snprintf(cur->name, sizeof(cur->name), "%s", name);
        }
        if (in_services && line[2] != ' ' && sscanf(line, "  %63[a-z0-9-]:", name) == 1 &&
            c->nservices < TH_COMPOSE_MAX_SERVICES) {
            cur = &c->services[c->nservices++], indent = 4;
            snprintf(cur->name, sizeof(cur->name), "%s", name);
        }
        /* the template's environment: "    STOCKD_NAME: value" before services: */
        if (!in_services && sscanf(line, "    %47[A-Z_]: %127s", name, value) == 2 &&
            strncmp(name, "STOCKD_", 7) == 0 && c->nenv < TH_COMPOSE_MAX_ENV) {
            snprintf(c->env[c->nenv][0], sizeof(c->env[0][0]), "%s", name);
            snprintf(c->env[c->nenv++][1], sizeof(c->env[0][1]), "%s", value);
        }
        /* the default network's "- subnet: X" and "gateway: X", under networks: */
        if (!in_services && !cur) {
            sscanf(line, " - subnet: %31s", c->subnet);
            sscanf(line, " gateway: %31s", c->gateway);
        }
        if (strstr(line, " image: ") && c->nimages <= TH_COMPOSE_MAX_SERVICES)
            sscanf(strstr(line, " image: "), " image: %63s", c->images[c->nimages++]);
        if (cur)
            parse_key(cur, line, indent);
    }
    fclose(f);
    for (int i = 0; i < c->nservices; i++)
        merge_template(c, &c->services[i]);
    return c->nservices > 0 ? 0 : -1;
}

void th_compose_free(th_compose *c)
{
    for (int i = 0; i < c->nservices; i++) {
        json_decref(c->services[i].command);
        json_decref(c->services[i].entrypoint);
    }
    for (int i = 0; i < c->ntemplates; i++) {
        json_decref(c->templates[i].command);
        json_decref(c->templates[i].entrypoint);
    }
}

int th_compose_is_replica(const th_service *svc) { return strcmp(svc->uses, "stockd") == 0; }
int th_compose_is_redis(const th_service *svc) { return strcmp(svc->build, "redis") == 0; }

int th_compose_is_patroni(const th_service *svc)
{
    const char *mode = json_string_value(json_array_get(svc->command, 0));
    return strcmp(svc->build, "patroni") == 0 && mode && strcmp(mode, "etcd") != 0;
}

int th_compose_is_etcd(const th_service *svc)
{
    const char *mode = json_string_value(json_array_get(svc->command, 0));
    return strcmp(svc->build, "patroni") == 0 && mode && strcmp(mode, "etcd") == 0;
}

const th_service *th_compose_service(const th_compose *c, const char *name)
{
    for (int i = 0; i < c->nservices; i++)
        if (strcmp(c->services[i].name, name) == 0)
            return &c->services[i];
    return NULL;
}

const char *th_compose_svc_env(const th_service *svc, const char *name)
{
    for (int e = 0; e < svc->nenv; e++)
        if (strcmp(svc->env[e][0], name) == 0)
            return svc->env[e][1];
    return NULL;
}

int th_compose_is_sentinel(const th_service *svc)
{
    const char *mode = json_string_value(json_array_get(svc->command, 0));
    return !svc->build[0] && strncmp(svc->image, "stocklock-redis:", 16) == 0 && mode &&
           strcmp(mode, "sentinel") == 0;
}

const char *th_compose_arg(const th_service *svc, const char *flag, int next)
{
    for (size_t i = 0; i < json_array_size(svc->command); i++)
        if (strcmp(json_string_value(json_array_get(svc->command, i)), flag) == 0)
            return json_string_value(json_array_get(svc->command, i + 1 + (size_t)next));
    return NULL;
}

const char *th_compose_env(const th_compose *c, const char *name)
{
    for (int e = 0; e < c->nenv; e++)
        if (strcmp(c->env[e][0], name) == 0)
            return c->env[e][1];
    return NULL;
}

void th_compose_local_addr(char *buf, size_t size, const char *name, const char *port, int local)
{
    char from[80], to[32], rest[512];
    snprintf(from, sizeof(from), "%.63s:%s", name, port);
    snprintf(to, sizeof(to), "127.0.0.1:%d", local);
    size_t len = strlen(from);
    for (char *p = strstr(buf, from); p; p = strstr(p + 1, from)) {
        if ((p > buf && strchr(",@/", p[-1]) == NULL) || (p[len] >= '0' && p[len] <= '9'))
            continue;
        snprintf(rest, sizeof(rest), "%s", p + len);
        snprintf(p, size - (size_t)(p - buf), "%s%s", to, rest);
    }
}

json_t *th_dockerfile_array(const char *path, const char *after, const char *key)
{
    char *text = th_read_file(path);
    const char *p = text ? strstr(text, after) : NULL;
    p = p ? strstr(p, key) : NULL;
    json_t *a = p ? json_loads(strchr(p, '['), JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    free(text);
    return a;
}
