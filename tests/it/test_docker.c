/* test_docker.c - the Docker files, checked without a Docker engine (make
 * docker-demo runs them in one; test_docker_run.c runs the compose services
 * here as processes): the compose file validates (docker-compose config -q,
 * when installed); every image is ours and built FROM debian:bookworm-slim;
 * the replicas ask every Sentinel service for the primary the other Redis
 * services replicate, wait for them all to be healthy, and keep their stock
 * in PostgreSQL under Patroni (a multi-host conninfo naming every node,
 * read-write only; its password a secret; waiting for every node's health
 * check; no shared volume); haproxy fronts them on the host's loopback, the
 * replicas believe X-Forwarded-For from haproxy's address alone, keep their
 * per-address limit and give a drain notice, and the host's buyers go
 * through haproxy over HTTPS; and each runtime image installs what its
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
    assert_from_bookworm_slim("docker/haproxy/Dockerfile"); /* built from the repository's root */
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

/* Every Redis, Sentinel, Patroni and replica service resolves names without
 * AAAA queries: Docker's DNS leaves one for a stopped container unanswered
 * for 5 s, which a Sentinel waits out in its only thread, and enters TILT
 * mode instead of failing the killed primary over (make docker-demo's
 * failover); a replica's libpq would wait as long for the killed PostgreSQL
 * leader's name on each new connection. */
static void test_services_resolve_names_without_aaaa_queries(void **state)
{
    (void)state;
    int n = 0;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_redis(svc) && !th_compose_is_sentinel(svc) &&
            !th_compose_is_patroni(svc) && !th_compose_is_replica(svc))
            continue;
        n++;
        if (!list_has(svc->dns_opt, "no-aaaa"))
            fail_msg("service %s: dns_opt %s, want [no-aaaa]", svc->name,
                     svc->dns_opt[0] ? svc->dns_opt : "unset");
    }
    assert_true(n >= 12);
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

/* A Patroni node: in hosts (",name:5432,..." of STOCKD_DB), running as its
 * own service name, taking the replicas' password secret (the bootstrapping
 * node gives it to role stock), waiting for an etcd service to be healthy. */
static void check_patroni_node(const th_service *node, const char *hosts, const char *secret)
{
    char want[96];
    snprintf(want, sizeof(want), ",%.63s:%s,", node->name, TH_COMPOSE_PG_PORT);
    if (strstr(hosts, want) == NULL)
        fail_msg("STOCKD_DB's hosts %s leave out the Patroni node %s", hosts, node->name);
    const char *name = json_string_value(json_array_get(node->command, 0));
    if (!name || strcmp(name, node->name) != 0)
        fail_msg("service %s runs Patroni node %s, not its own name (the others and the "
                 "replicas resolve that)", node->name, name ? name : "unnamed");
    if (!list_has(node->secrets, secret))
        fail_msg("service %s does not take the secret %s (secrets: %s)", node->name, secret,
                 node->secrets);
    int etcd = 0;
    for (int d = 0; d < compose.nservices; d++)
        if (th_compose_is_etcd(&compose.services[d])) {
            char dep[80];
            snprintf(dep, sizeof(dep), ",%.63s,", compose.services[d].name);
            etcd += strstr(node->healthy, dep) != NULL;
        }
    if (etcd == 0)
        fail_msg("service %s does not wait for an etcd service to be healthy (healthy: %s)",
                 node->name, node->healthy);
}

/* The replicas keep stock and ledger in PostgreSQL under Patroni: their
 * STOCKD_DB names every Patroni node (at least three, each its own service
 * name, each waiting for etcd) and asks for a read-write session, so that
 * they write to whichever leads; as role stock with the password from the
 * secret the nodes take too (the bootstrapping one sets it). They start once
 * every node's health check passes, and share no volume: the database is the
 * one thing they share. */
static void test_replicas_write_to_whichever_patroni_node_leads_and_share_no_volume(void **state)
{
    (void)state;
    const char *db = th_compose_env(&compose, "STOCKD_DB");
    const char *file = th_compose_env(&compose, "STOCKD_DB_PASSWORD_FILE");
    if (db == NULL || strncmp(db, "postgresql://stock@", 19) != 0 ||
        strstr(db, "target_session_attrs=read-write") == NULL)
        fail_msg("the x-stockd template's STOCKD_DB is %s, want postgresql://stock@<every "
                 "node>/stock?target_session_attrs=read-write", db ? db : "unset");
    if (file == NULL || strncmp(file, TH_COMPOSE_SECRETS, strlen(TH_COMPOSE_SECRETS)) != 0)
        fail_msg("the x-stockd template's STOCKD_DB_PASSWORD_FILE is %s, want a secret in %s",
                 file ? file : "unset", TH_COMPOSE_SECRETS);
    const char *secret = file + strlen(TH_COMPOSE_SECRETS);
    char hosts[256];
    snprintf(hosts, sizeof(hosts), ",%.*s,", (int)strcspn(db + 19, "/"), db + 19);
    int nodes = 0, listed = 1;
    for (const char *p = hosts + 1; p[1]; p++)
        listed += *p == ',';
    for (int i = 0; i < compose.nservices; i++)
        if (th_compose_is_patroni(&compose.services[i])) {
            check_patroni_node(&compose.services[i], hosts, secret);
            nodes++;
        }
    assert_true(nodes >= 3);
    assert_int_equal(listed, nodes); /* and nothing else */
    int nreplicas = 0;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_replica(svc))
            continue;
        nreplicas++;
        if (!list_has(svc->secrets, secret))
            fail_msg("service %s does not take the secret %s (secrets: %s)", svc->name, secret,
                     svc->secrets);
        for (int d = 0; d < compose.nservices; d++) {
            char dep[80];
            snprintf(dep, sizeof(dep), ",%.63s,", compose.services[d].name);
            if (th_compose_is_patroni(&compose.services[d]) && strstr(svc->healthy, dep) == NULL)
                fail_msg("service %s does not wait for %s to be healthy (healthy: %s)", svc->name,
                         compose.services[d].name, svc->healthy);
        }
        if (svc->volumes)
            fail_msg("service %s mounts a volume: the replicas share only the database",
                     svc->name);
    }
    assert_int_equal(nreplicas, 3);
}

/* The host port a replica publishes its port on, on the host's loopback only
 * ("127.0.0.1:HOST:8080"); fails otherwise. */
static int published_loopback_port(const th_service *svc)
{
    int port = 0;
    char container[16] = "";
    if (sscanf(svc->ports, "[\"127.0.0.1:%d:%15[0-9]\"]", &port, container) != 2 ||
        strcmp(container, TH_COMPOSE_STOCKD_PORT) != 0)
        fail_msg("service %s publishes %s, want its port %s on the host's loopback only",
                 svc->name, svc->ports[0] ? svc->ports : "nothing", TH_COMPOSE_STOCKD_PORT);
    return port;
}

/* haproxy, in the host's network (each buyer keeps its own address), serves
 * HTTPS on the host's loopback in front of every replica's published port,
 * once they are healthy. The replicas believe X-Forwarded-For from the
 * network's gateway alone (where haproxy's connections through docker-proxy
 * come from, the network's subnet fixed so that this address is known), keep
 * the default per-address limit, and give a drain notice longer than
 * haproxy's two failed checks 500 ms apart. */
static void test_haproxy_fronts_every_replica_which_trusts_only_its_address(void **state)
{
    (void)state;
    const th_service *front = th_compose_service(&compose, "haproxy");
    assert_non_null(front);
    assert_string_equal(front->network_mode, "host");
    const char *bind = th_compose_svc_env(front, "FRONT_BIND");
    if (!bind || strncmp(bind, "127.0.0.1:", 10) != 0)
        fail_msg("haproxy's FRONT_BIND is %s, want the host's loopback", bind ? bind : "unset");
    for (const char *v = "FRONT_CONN_MAX\0FRONT_RATE_MAX\0"; *v; v += strlen(v) + 1)
        if (!th_compose_svc_env(front, v) || atoi(th_compose_svc_env(front, v)) <= 0)
            fail_msg("haproxy sets no %s", v);
    int n = 0;
    for (int i = 0; i < compose.nservices; i++) {
        const th_service *svc = &compose.services[i];
        if (!th_compose_is_replica(svc))
            continue;
        char var[24], want[48], dep[80];
        snprintf(var, sizeof(var), "FRONT_S%d", ++n);
        snprintf(want, sizeof(want), "127.0.0.1:%d", published_loopback_port(svc));
        const char *s = th_compose_svc_env(front, var);
        if (!s || strcmp(s, want) != 0)
            fail_msg("haproxy's %s is %s, want %s, service %s's published port", var,
                     s ? s : "unset", want, svc->name);
        snprintf(dep, sizeof(dep), ",%.63s,", svc->name);
        if (strstr(front->healthy, dep) == NULL)
            fail_msg("haproxy does not wait for %s to be healthy", svc->name);
    }
    assert_int_equal(n, 3);
    if (!compose.subnet[0] || !compose.gateway[0])
        fail_msg("the default network has no fixed subnet and gateway");
    const char *trusted = th_compose_env(&compose, "STOCKD_TRUSTED_PROXIES");
    if (!trusted || strcmp(trusted, compose.gateway) != 0)
        fail_msg("the x-stockd template's STOCKD_TRUSTED_PROXIES is %s, want the gateway %s "
                 "alone", trusted ? trusted : "unset", compose.gateway);
    const char *per_ip = th_compose_env(&compose, "STOCKD_MAX_CONNECTIONS_PER_IP");
    if (per_ip && atoi(per_ip) == 0)
        fail_msg("the replicas' per-address limit is off (0): buyers have their addresses again");
    const char *notice = th_compose_env(&compose, "STOCKD_DRAIN_NOTICE_MS");
    if (!notice || atoi(notice) < 1000)
        fail_msg("the replicas' STOCKD_DRAIN_NOTICE_MS is %s, want at least haproxy's two "
                 "checks 500 ms apart", notice ? notice : "unset");
}

/* The services that buy from the host (flash, buyer) go through haproxy's
 * HTTPS, trusting its CA from a secret. */
static void test_the_host_buyers_go_through_haproxy_over_https(void **state)
{
    (void)state;
    const char *bind = th_compose_svc_env(th_compose_service(&compose, "haproxy"), "FRONT_BIND");
    assert_non_null(bind);
    char want[64];
    snprintf(want, sizeof(want), "https://%s", bind);
    for (const char *name = "flash\0buyer\0"; *name; name += strlen(name) + 1) {
        const th_service *svc = th_compose_service(&compose, name);
        assert_non_null(svc);
        assert_string_equal(svc->network_mode, "host");
        const char *target = th_compose_arg(svc, "--target", 0);
        if (!target || strcmp(target, want) != 0)
            fail_msg("service %s buys at %s, want %s", name, target ? target : "nothing", want);
        char *entry = json_dumps(svc->entrypoint, 0);
        const char *ca = entry ? strstr(entry, "\"--cacert\", \"" TH_COMPOSE_SECRETS) : NULL;
        if (!ca)
            fail_msg("service %s trusts no CA from a secret: %s", name, entry ? entry : "");
        char secret[64] = "";
        sscanf(ca + strlen("\"--cacert\", \"" TH_COMPOSE_SECRETS), "%63[^\"]", secret);
        if (!list_has(svc->secrets, secret))
            fail_msg("service %s does not take the secret %s", name, secret);
        free(entry);
    }
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
                                       "libjansson", "libhttp-parser", "libsystemd", NULL};
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

    char *pg = th_read_file("docker/patroni/Dockerfile");
    assert_non_null(pg);
    assert_non_null(strstr(pg, " postgresql-15 "));
    assert_non_null(strstr(pg, " patroni "));
    assert_non_null(strstr(pg, " python3-etcd ")); /* Patroni's etcd client */
    assert_non_null(strstr(pg, " etcd-server ")); /* patroni.sh etcd */
    assert_non_null(strstr(pg, " curl ")); /* patroni.sh --health, and who leads */
    assert_non_null(strstr(pg, "USER postgres"));
    free(pg);

    char *front = th_read_file("docker/haproxy/Dockerfile");
    assert_non_null(front);
    assert_non_null(strstr(front, " haproxy "));
    assert_non_null(strstr(front, " openssl ")); /* front-door.sh makes the CA */
    assert_non_null(strstr(front, " curl ")); /* the HEALTHCHECK */
    assert_non_null(strstr(front, "COPY scripts/front-door.sh "));
    assert_non_null(strstr(front, "COPY docker/haproxy/haproxy.cfg "));
    assert_non_null(strstr(front, "USER haproxy"));
    free(front);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compose_file_validates),
        cmocka_unit_test(test_every_image_is_ours_and_built_from_debian_bookworm_slim),
        cmocka_unit_test(test_replicas_ask_every_sentinel_for_a_primary_the_redis_services_replicate),
        cmocka_unit_test(test_replicas_wait_for_every_redis_and_sentinel_to_be_healthy),
        cmocka_unit_test(test_services_resolve_names_without_aaaa_queries),
        cmocka_unit_test(test_replicas_write_to_whichever_patroni_node_leads_and_share_no_volume),
        cmocka_unit_test(test_haproxy_fronts_every_replica_which_trusts_only_its_address),
        cmocka_unit_test(test_the_host_buyers_go_through_haproxy_over_https),
        cmocka_unit_test(test_runtime_images_install_their_libraries_and_health_check_tools),
    };
    return cmocka_run_group_tests_name("docker", tests, load_compose, free_compose);
}
