/* test_docker.c - the Docker files, checked without a Docker engine: the
 * compose file validates (docker-compose config -q, when installed); every
 * command it runs exists and takes its flags (run here with --help appended,
 * under the same environment); and the runtime image installs the package of
 * every shared library the binaries link and the tools its health checks use. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/harness.h"

#define COMPOSE "docker/docker-compose.yml"
#define DOCKERFILE "docker/Dockerfile"
#define MAX_SERVICES 16
#define MAX_ARGS 32

struct service {
    char name[64];
    json_t *entrypoint, *command; /* JSON arrays, NULL when not given */
    int from_template;            /* uses the x-stockd template (its environment) */
};

static struct service services[MAX_SERVICES];
static int nservices;
static char template_env[8][160]; /* "NAME=value" from the template's environment */
static int nenv;

static int have(const char *cmd)
{
    char probe[160];
    snprintf(probe, sizeof(probe), "command -v %s >/dev/null 2>&1", cmd);
    return system(probe) == 0;
}

/* Reads the parts of the compose file the checks need. Its commands are
 * one-line JSON arrays by convention (the file says so). */
static int load_compose(void **state)
{
    (void)state;
    FILE *f = fopen(COMPOSE, "r");
    if (f == NULL)
        return -1;
    char line[512];
    int in_services = 0;
    struct service *cur = NULL;
    while (fgets(line, sizeof(line), f)) {
        char name[64], value[64];
        if (strncmp(line, "services:", 9) == 0)
            in_services = 1;
        if (in_services && line[2] != ' ' && sscanf(line, "  %63[a-z0-9-]:", name) == 1 &&
            nservices < MAX_SERVICES) {
            cur = &services[nservices++];
            snprintf(cur->name, sizeof(cur->name), "%s", name);
        }
        /* the template's environment: "    STOCKD_NAME: value" before services: */
        if (!in_services && sscanf(line, "    STOCKD_%40[A-Z_]: %63s", name, value) == 2 &&
            nenv < 8)
            snprintf(template_env[nenv++], sizeof(template_env[0]), "STOCKD_%s=%s", name, value);
        const char *array = strchr(line, '[');
        if (cur && strstr(line, "<<: *stockd"))
            cur->from_template = 1;
        if (cur && array && strstr(line, " command:"))
            cur->command = json_loads(array, 0, NULL);
        if (cur && array && strstr(line, " entrypoint:"))
            cur->entrypoint = json_loads(array, 0, NULL);
    }
    fclose(f);
    return nservices > 0 ? 0 : -1;
}

static int free_compose(void **state)
{
    (void)state;
    for (int i = 0; i < nservices; i++) {
        json_decref(services[i].command);
        json_decref(services[i].entrypoint);
    }
    return 0;
}

/* The Dockerfile's ENTRYPOINT binary ("stockd"), into buf. */
static const char *image_entrypoint(char *buf, size_t size)
{
    char *text = th_read_file(DOCKERFILE);
    const char *p = text ? strstr(text, "ENTRYPOINT [\"") : NULL;
    buf[0] = '\0';
    if (p)
        snprintf(buf, size, "%.*s", (int)strcspn(p + 13, "\""), p + 13);
    free(text);
    return buf;
}

static void test_compose_file_validates(void **state)
{
    (void)state;
    if (!have("docker-compose"))
        th_skip("docker-compose is not installed (make docker-demo installs Debian's package)");
    const char *argv[] = {"docker-compose", "-f", COMPOSE, "config", "-q", NULL};
    assert_int_equal(th_run(argv, NULL, 60000), 0);
    const char *with_profile[] = {"docker-compose", "-f", COMPOSE, "--profile", "loadgen",
                                  "config", "-q", NULL};
    assert_int_equal(th_run(with_profile, NULL, 60000), 0);
}

/* Runs one service's command: our binaries with --help appended (they check
 * every flag before printing help), others with --version. */
static void run_service(const struct service *s, const char *entry)
{
    const char *argv[MAX_ARGS + 3];
    char bin[256];
    int n = 0;
    json_t *v;
    size_t i;
    const char *exe = s->entrypoint ? json_string_value(json_array_get(s->entrypoint, 0))
                      : s->from_template ? entry
                                         : json_string_value(json_array_get(s->command, 0));
    int ours = strcmp(exe, "stockd") == 0 || strcmp(exe, "loadgen") == 0;
    snprintf(bin, sizeof(bin), "%s/%s", th_build_dir(), exe);
    argv[n++] = ours ? bin : exe;
    json_array_foreach(s->command, i, v)
        if (ours && n < MAX_ARGS) /* redis-server's own flags are not ours to check */
            argv[n++] = json_string_value(v);
    argv[n++] = ours ? "--help" : "--version";
    argv[n] = NULL;
    for (int e = 0; s->from_template && e < nenv; e++)
        putenv(template_env[e]);
    char out[128];
    snprintf(out, sizeof(out), "/tmp/compose-%s.out", s->name);
    int status = th_run(argv, out, 30000);
    if (status != 0) {
        char *text = th_read_file(out);
        fail_msg("service %s: %s exited %d:\n%s", s->name, exe, status, text ? text : "");
    }
    unlink(out);
}

static void test_every_compose_command_exists_with_its_flags(void **state)
{
    (void)state;
    char entry[64];
    image_entrypoint(entry, sizeof(entry));
    assert_string_equal(entry, "stockd");
    int ran = 0;
    for (int i = 0; i < nservices; i++)
        if (services[i].command) {
            run_service(&services[i], entry);
            ran++;
        }
    assert_true(ran >= 5); /* redis, three replicas, loadgen */
    assert_true(have("redis-cli")); /* redis's health check */
}

/* The package that ships a shared library, e.g. libhiredis0.14, or "". */
static void package_of(const char *lib, char *pkg, size_t size)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "dpkg -S '*/%s' 2>/dev/null | head -n 1 | cut -d: -f1", lib);
    FILE *p = popen(cmd, "r");
    pkg[0] = '\0';
    if (p && fgets(pkg, (int)size, p))
        pkg[strcspn(pkg, "\n")] = '\0';
    if (p)
        pclose(p);
}

static void test_runtime_image_installs_every_library_the_binaries_need(void **state)
{
    (void)state;
    if (!have("dpkg") || !have("ldd"))
        th_skip("needs dpkg and ldd to map libraries to Debian packages");
    char *dockerfile = th_read_file(DOCKERFILE);
    const char *runtime = strstr(dockerfile, "\nFROM debian:bookworm-slim\n");
    assert_non_null(runtime); /* the second, unnamed stage */
    const char *bins[] = {"stockd", "loadgen"};
    for (int b = 0; b < 2; b++) {
        char cmd[256], line[512];
        snprintf(cmd, sizeof(cmd), "ldd %s/%s", th_build_dir(), bins[b]);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        while (fgets(line, sizeof(line), p)) {
            char lib[128], pkg[128];
            if (sscanf(line, " %127s =>", lib) != 1 || strstr(lib, "libc.so") ||
                strstr(lib, "linux-vdso") || strstr(lib, "libm.so") || strstr(lib, "ld-linux"))
                continue;
            package_of(lib, pkg, sizeof(pkg));
            if (!pkg[0] || strstr(line, "libasan") || strstr(line, "libtsan") ||
                strstr(line, "libubsan"))
                continue; /* not from a package we ship, or a sanitizer build's runtime */
            if (strncmp(pkg, "libcurl", 7) != 0 && strncmp(pkg, "libhiredis", 10) != 0 &&
                strncmp(pkg, "libmicrohttpd", 13) != 0 && strncmp(pkg, "libsqlite3", 10) != 0 &&
                strncmp(pkg, "libjansson", 10) != 0)
                continue; /* pulled in by those (the image installs them with their deps) */
            char word[140];
            snprintf(word, sizeof(word), " %s ", pkg);
            if (strstr(runtime, word) == NULL)
                fail_msg("%s needs %s (package %s), which the runtime stage does not install",
                         bins[b], lib, pkg);
        }
        pclose(p);
    }
    assert_non_null(strstr(runtime, " curl ")); /* the HEALTHCHECK's tool */
    assert_non_null(strstr(runtime, "USER stockd"));
    free(dockerfile);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compose_file_validates),
        cmocka_unit_test(test_every_compose_command_exists_with_its_flags),
        cmocka_unit_test(test_runtime_image_installs_every_library_the_binaries_need),
    };
    return cmocka_run_group_tests_name("docker", tests, load_compose, free_compose);
}
