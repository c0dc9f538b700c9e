/* test_docker.c - the Docker files, checked without a Docker engine (make
 * docker-demo runs them in one; test_docker_run.c runs the compose services
 * here as processes): the compose file validates (docker-compose config -q,
 * when installed); every image is ours and built FROM debian:bookworm-slim;
 * the replicas ask every Sentinel service for the primary the other Redis
 * services replicate, wait for them all to be healthy, and keep their stock
 * in the PostgreSQL service (its password a secret, waiting for its
 * health check, no shared volume); and each runtime image installs what its
 * binaries link and what its health check runs. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/compose.h"
#include "tests/support/harness.h"

#define DOCKERFILE "docker/Dockerfile"

static th_compose compose;

static int load_compose(void **state)
{
    (void)state;
    return th_compose_load(&compose);
}

static int free_compose(void **state)
{
    (void)state;
    th_compose_free(&compose);
    return 0;
}

/* Whether a "[a, b]" list names name. */
static int list_has(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(list, name); p; p = strstr(p + 1, name))
        if (strchr("[, ", p == list ? ' ' : p[-1]) && strchr("], ", p[len]) && p[len])
            return 1;
    return 0;
}

static void test_compose_file_validates(void **state)
{
    (void)state;
    if (!th_have("docker-compose"))
        th_skip("docker-compose is not installed (make docker-demo installs Debian's package)");
    const char *argv[] = {"docker-compose", "-f", TH_COMPOSE_FILE, "config", "-q", NULL};
    assert_int_equal(th_run(argv, NULL, 60000), 0);
    const char *with_profile[] = {"docker-compose", "-f", TH_COMPOSE_FILE, "--profile", "loadgen",
                                  "config", "-q", NULL};
    assert_int_equal(th_run(with_profile, NULL, 60000), 0);
}

/* Every FROM in a Dockerfile names debian:bookworm-slim or an earlier stage. */
static void assert_from_bookworm_slim(const char *path)
{
    char *text = th_read_file(path);
    assert_non_null(text);
    char stages[8][64];
    int nstages = 0, froms = 0;
    for (const char *p = text; (p = strstr(p, "\nFROM ")) != NULL; p++, froms++) {
        char image[64] = "", stage[64] = "";
        sscanf(p, "\nFROM %63s AS %63s", image, stage);
        int known = strcmp(image, "debian:bookworm-slim") == 0;
        for (int i = 0; i < nstages; i++)
            known |= strcmp(image, stages[i]) == 0;
        if (!known)
            fail_msg("%s: FROM %s: the demo's images need nothing but Debian's", path, image);
        if (stage[0] && nstages < 8)
            snprintf(stages[nstages++], sizeof(stages[0]), "%s", stage);
    }
    assert_true(froms > 0);
    free(text);
}

static void test_every_image_is_ours_and_built_from_debian_bookworm_slim(void **state)
{
    (void)state;
    assert_true(compose.nimages >= 2);
    for (int i = 0; i < compose.nimages; i++)
        if (strncmp(compose.images[i], "stocklock", 9) != 0)
            fail_msg("image %s is not one the demo builds (stocklock*)", compose.images[i]);
    assert_from_bookworm_slim(DOCKERFILE);
    for (int i = 0; i < compose.nservices; i++)
        if (compose.services[i].build[0]) {
            char path[160];
            snprintf(path, sizeof(path), "docker/%s/Dockerfile", compose.services[i].build);
            assert_from_bookworm_slim(path);
        }
}

/* The service a sentinel monitors ("--sentinel monitor NAME HOST PORT Q"): a
 * Redis service listening on its port that replicates no other. */
static const th_service *monitored_primary(const th_service *sentinel, const char **master,
                                           int *quorum)
{
    *master = th_compose_arg(sentinel, "monitor", 0);
    const char *host = th_compose_arg(sentinel, "monitor", 1);
    const char *port = th_compose_arg(sentinel, "monitor", 2);
    const char *q = th_compose_arg(sentinel, "monitor", 3);
    if (!*master || !host || !port || !q)
        fail_msg("service %s monitors no primary (--sentinel monitor NAME HOST PORT QUORUM)",
                 sentinel->name);
    *quorum = atoi(q);
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (th_compose_is_redis(svc) && strcmp(svc->name, host) == 0 &&
            strcmp(port, TH_COMPOSE_REDIS_PORT) == 0 && !th_compose_arg(svc, "--replicaof", 0))
            return svc;
    }
    fail_msg("service %s monitors %s:%s, not a Redis service that replicates none",
             sentinel->name, host, port);
    return NULL;
}

/* What a sentinel says of how it names servers: resolve-hostnames and
 * announce-hostnames on, before the monitor line that names one. */
static void assert_sentinel_names_by_hostname(const th_service *sentinel)
{
    char *text = json_dumps(sentinel->command, 0);
    const char *resolve = strstr(text, "\"resolve-hostnames\", \"yes\"");
    const char *announce = strstr(text, "\"announce-hostnames\", \"yes\"");
    const char *monitor = strstr(text, "\"monitor\"");
    if (!resolve || !announce || !monitor || resolve > monitor)
        fail_msg("service %s: resolve-hostnames and announce-hostnames yes, before monitor: %s",
                 sentinel->name, text);
    free(text);
}

/* A replica takes the secret that env var names (a file in /run/secrets/),
 * and so does svc. */
static void assert_takes_secret_of(const th_service *svc, const char *var)
{
    const char *file = th_compose_env(&compose, var);
    if (file == NULL || strncmp(file, TH_COMPOSE_SECRETS, strlen(TH_COMPOSE_SECRETS)) != 0)
        fail_msg("the x-stockd template's %s is %s, want a secret in %s", var,
                 file ? file : "unset", TH_COMPOSE_SECRETS);
    if (!list_has(svc->secrets, file + strlen(TH_COMPOSE_SECRETS)))
        fail_msg("service %s does not take the secret of %s (secrets: %s)", svc->name, var,
                 svc->secrets);
}

/* The Sentinel services: each listed once in STOCKD_REDIS_SENTINEL (list),
 * monitoring master on the one primary with a majority of them as quorum,
 * naming servers by hostname, with the replicas' passwords. Their number. */
static int check_sentinels(const char *list, const char *master, const th_service **primary)
{
    char node[80], padded[256];
    int n = 0, min_quorum = 1 << 30;
    snprintf(padded, sizeof(padded), ",%s,", list); /* every element between commas */
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_sentinel(svc))
            continue;
        n++;
        snprintf(node, sizeof(node), ",%.63s:%s,", svc->name, TH_COMPOSE_SENTINEL_PORT);
        if (strstr(padded, node) == NULL)
            fail_msg("STOCKD_REDIS_SENTINEL %s leaves out service %s", list, svc->name);
        const char *name;
        int quorum;
        const th_service *p = monitored_primary(svc, &name, &quorum);
        if (*primary && p != *primary)
            fail_msg("service %s monitors %s, another %s", svc->name, p->name, (*primary)->name);
        *primary = p;
        if (strcmp(name, master) != 0)
            fail_msg("service %s monitors %s, the replicas ask for %s", svc->name, name, master);
        min_quorum = quorum < min_quorum ? quorum : min_quorum;
        assert_sentinel_names_by_hostname(svc);
        assert_takes_secret_of(svc, "STOCKD_REDIS_SENTINEL_PASSWORD_FILE");
        assert_takes_secret_of(svc, "STOCKD_REDIS_PASSWORD_FILE"); /* its auth-pass */
    }
    int listed = 1;
    for (const char *p = list; *p; p++)
        listed += *p == ',';
    assert_int_equal(listed, n); /* and nothing else, none twice */
    assert_true(n >= 3 && n % 2 == 1);
    assert_true(min_quorum > n / 2);
    return n;
}

/* Each replica asks the Sentinel services for the primary: its
 * STOCKD_REDIS_SENTINEL names every one once (an odd number, at least three)
 * and its STOCKD_REDIS_MASTER is the name they monitor, with a majority of
 * them as quorum. They monitor the one Redis service that replicates none;
 * every other replicates it, and each announces its own service name (a
 * promoted replica is named by a name the replicas resolve). */
static void test_replicas_ask_every_sentinel_for_a_primary_the_redis_services_replicate(void **state)
{
    (void)state;
    const char *list = th_compose_env(&compose, "STOCKD_REDIS_SENTINEL");
    const char *master = th_compose_env(&compose, "STOCKD_REDIS_MASTER");
    if (list == NULL || master == NULL)
        fail_msg("the x-stockd template sets no STOCKD_REDIS_SENTINEL or STOCKD_REDIS_MASTER");
    if (th_compose_env(&compose, "STOCKD_REDIS"))
        fail_msg("the x-stockd template sets STOCKD_REDIS beside STOCKD_REDIS_SENTINEL");
    const th_service *primary = NULL;
    check_sentinels(list, master, &primary);
    int nredis = 0;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_redis(svc))
            continue;
        nredis++;
        assert_takes_secret_of(svc, "STOCKD_REDIS_PASSWORD_FILE");
        const char *announce = th_compose_arg(svc, "--replica-announce-ip", 0);
        const char *of = th_compose_arg(svc, "--replicaof", 0);
        const char *of_port = th_compose_arg(svc, "--replicaof", 1);
        if (!announce || strcmp(announce, svc->name) != 0)
            fail_msg("service %s announces %s, not its own name", svc->name,
                     announce ? announce : "nothing");
        if (svc != primary && (!of || strcmp(of, primary->name) != 0 || !of_port ||
                               strcmp(of_port, TH_COMPOSE_REDIS_PORT) != 0))
            fail_msg("service %s does not replicate the primary %s", svc->name, primary->name);
    }
    assert_true(nredis >= 2);
}

/* Every Redis and Sentinel service resolves names without AAAA queries:
 * Docker's DNS leaves one for a stopped container unanswered for 5 s, which a
 * Sentinel waits out in its only thread, and enters TILT mode instead of
 * failing the killed primary over (make docker-demo's failover). */
static void test_redis_and_sentinel_services_resolve_names_without_aaaa_queries(void **state)
{
    (void)state;
    int n = 0;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_redis(svc) && !th_compose_is_sentinel(svc))
            continue;
        n++;
        if (!list_has(svc->dns_opt, "no-aaaa"))
            fail_msg("service %s: dns_opt %s, want [no-aaaa]", svc->name,
                     svc->dns_opt[0] ? svc->dns_opt : "unset");
    }
    assert_true(n >= 6);
}

/* The replicas start once every Redis and Sentinel service is healthy (a
 * Sentinel's health check: enough of them know each other to fail over). */
static void test_replicas_wait_for_every_redis_and_sentinel_to_be_healthy(void **state)
{
    (void)state;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i], *dep = NULL;
        if (!th_compose_is_replica(svc))
            continue;
        for (int d = 0; d < compose.nservices; d++) {
            dep = &compose.services[d];
            char name[80];
            snprintf(name, sizeof(name), ",%s,", dep->name);
            if ((th_compose_is_redis(dep) || th_compose_is_sentinel(dep)) &&
                strstr(svc->healthy, name) == NULL)
                fail_msg("service %s does not wait for %s to be healthy (healthy: %s)", svc->name,
                         dep->name, svc->healthy);
        }
    }
}

/* The replicas keep stock and ledger in the PostgreSQL service, as role
 * stock with the password from the secret the server takes too, start only
 * once its health check passes, and share no volume: the database is the one
 * thing they share. */
static void test_replicas_keep_their_stock_in_the_postgres_service_and_share_no_volume(void **state)
{
    (void)state;
    const th_service *pg = th_compose_postgres(&compose);
    char want[160];
    snprintf(want, sizeof(want), "postgresql://stock@%s:%s/stock", pg->name, TH_COMPOSE_PG_PORT);
    const char *db = th_compose_env(&compose, "STOCKD_DB");
    const char *file = th_compose_env(&compose, "STOCKD_DB_PASSWORD_FILE");
    if (db == NULL || strcmp(db, want) != 0)
        fail_msg("the x-stockd template's STOCKD_DB is %s, want %s", db ? db : "unset", want);
    if (file == NULL || strncmp(file, TH_COMPOSE_SECRETS, strlen(TH_COMPOSE_SECRETS)) != 0)
        fail_msg("the x-stockd template's STOCKD_DB_PASSWORD_FILE is %s, want a secret in %s",
                 file ? file : "unset", TH_COMPOSE_SECRETS);
    const char *secret = file + strlen(TH_COMPOSE_SECRETS);
    if (!list_has(pg->secrets, secret))
        fail_msg("service %s does not take the secret %s (secrets: %s)", pg->name, secret,
                 pg->secrets);
    assert_true(pg->volumes); /* its data outlives the container */
    char dep[80];
    snprintf(dep, sizeof(dep), ",%s,", pg->name);
    int nreplicas = 0;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_replica(svc))
            continue;
        nreplicas++;
        if (!list_has(svc->secrets, secret))
            fail_msg("service %s does not take the secret %s (secrets: %s)", svc->name, secret,
                     svc->secrets);
        if (strstr(svc->healthy, dep) == NULL)
            fail_msg("service %s does not wait for %s to be healthy (healthy: %s)", svc->name,
                     pg->name, svc->healthy);
        if (svc->volumes)
            fail_msg("service %s mounts a volume: the replicas share only the database",
                     svc->name);
    }
    assert_int_equal(nreplicas, 3);
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

/* Whether pkg is one of the libraries the runtime stage installs by name:
 * what stockd and loadgen link, not what those pull in. */
static int named_library(const char *pkg)
{
    static const char *const ours[] = {"libhiredis", "libmicrohttpd", "libsqlite3", "libpq",
                                       "libjansson", "libhttp-parser", NULL};
    for (int i = 0; ours[i]; i++)
        if (strncmp(pkg, ours[i], strlen(ours[i])) == 0)
            return 1;
    return 0;
}

/* Every lib* package the runtime stage's apt-get line names must be one that
 * a binary needs (in needed, " pkg " words): none left behind by a binary
 * that stopped linking it (libcurl4 when loadgen dropped libcurl). */
static void assert_no_library_unneeded(const char *runtime, const char *needed)
{
    const char *install = strstr(runtime, "apt-get install");
    assert_non_null(install);
    const char *end = strstr(install, "&&");
    for (const char *p = strstr(install, " lib"); p && (!end || p < end);
         p = strstr(p + 1, " lib")) {
        char word[140];
        snprintf(word, sizeof(word), " %.*s ", (int)strcspn(p + 1, " \\\n"), p + 1);
        if (strstr(needed, word) == NULL)
            fail_msg("the runtime stage installs%sbut neither stockd nor loadgen links it", word);
    }
}

static void test_runtime_images_install_their_libraries_and_health_check_tools(void **state)
{
    (void)state;
    if (!th_have("dpkg") || !th_have("ldd"))
        th_skip("needs dpkg and ldd to map libraries to Debian packages");
    char *dockerfile = th_read_file(DOCKERFILE);
    const char *runtime = strstr(dockerfile, "\nFROM debian:bookworm-slim\n");
    assert_non_null(runtime); /* the second, unnamed stage */
    const char *bins[] = {"stockd", "loadgen"};
    char needed[2048] = " ";
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
            if (!named_library(pkg))
                continue; /* pulled in by those (the image installs them with their deps) */
            char word[140];
            snprintf(word, sizeof(word), " %s ", pkg);
            if (strstr(needed, word) == NULL && strlen(needed) + strlen(pkg) + 2 < sizeof(needed))
                strcat(strcat(needed, pkg), " ");
            if (strstr(runtime, word) == NULL)
                fail_msg("%s needs %s (package %s), which the runtime stage does not install",
                         bins[b], lib, pkg);
        }
        pclose(p);
    }
    assert_non_null(strstr(needed, " libhttp-parser2.9 ")); /* loadgen's, so ldd was read */
    assert_no_library_unneeded(runtime, needed);
    assert_non_null(strstr(runtime, " curl ")); /* the HEALTHCHECK's tool */
    assert_non_null(strstr(runtime, "USER stockd"));
    free(dockerfile);

    char *redis = th_read_file("docker/redis/Dockerfile");
    assert_non_null(redis);
    assert_non_null(strstr(redis, " redis-server "));
    assert_non_null(strstr(redis, " redis-sentinel ")); /* redis.sh sentinel */
    assert_non_null(strstr(redis, " redis-tools ")); /* redis-cli, for redis.sh --health */
    assert_non_null(strstr(redis, "USER redis"));
    free(redis);

    char *pg = th_read_file("docker/postgres/Dockerfile");
    assert_non_null(pg);
    assert_non_null(strstr(pg, " postgresql-15 ")); /* initdb, postgres, pg_isready */
    assert_non_null(strstr(pg, "USER postgres"));
    assert_non_null(strstr(pg, "STOPSIGNAL SIGINT")); /* docker stop: fast, not smart */
    free(pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compose_file_validates),
        cmocka_unit_test(test_every_image_is_ours_and_built_from_debian_bookworm_slim),
        cmocka_unit_test(test_replicas_ask_every_sentinel_for_a_primary_the_redis_services_replicate),
        cmocka_unit_test(test_replicas_wait_for_every_redis_and_sentinel_to_be_healthy),
        cmocka_unit_test(test_redis_and_sentinel_services_resolve_names_without_aaaa_queries),
        cmocka_unit_test(test_replicas_keep_their_stock_in_the_postgres_service_and_share_no_volume),
        cmocka_unit_test(test_runtime_images_install_their_libraries_and_health_check_tools),
    };
    return cmocka_run_group_tests_name("docker", tests, load_compose, free_compose);
}
