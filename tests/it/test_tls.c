/* test_tls.c - TLS on the wire, with a CA and certificates made at run time
 * (openssl; nothing secret is committed): stockd over HTTPS to curl and to
 * loadgen (PASS, and a certificate from another CA refused with its
 * reason), TLS 1.1 refused while 1.2 and 1.3 are taken, a key file others
 * may read, a key that is not the certificate's and a rediss:// address
 * refused at start, and stockd on a PostgreSQL with ssl=on through
 * sslmode=verify-full (and refused with the wrong CA). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <gnutls/gnutls.h>

#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define RUN_MS 60000 /* bounds a hang only */

static th_redis redis;
static th_stockd https;
static char dir[64], db[128];

/* dir/name, in one of a few static buffers. */
static const char *in_dir(const char *name)
{
    static char paths[8][160];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 160, "%s/%s", dir, name);
    return p;
}

/* Runs openssl with args (NULL-terminated); 0 when it exited 0. */
static int openssl(const char *const args[])
{
    const char *argv[32] = {"openssl"};
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return th_run(argv, in_dir("openssl.out"), RUN_MS);
}

/* A CA: dir/<name>.pem and its key dir/<name>.key. */
static int make_ca(const char *name)
{
    char subj[64], key[32], pem[32];
    snprintf(subj, sizeof(subj), "/CN=stockd test CA %s", name);
    snprintf(key, sizeof(key), "%s.key", name);
    snprintf(pem, sizeof(pem), "%s.pem", name);
    return openssl((const char *[]){"req", "-x509", "-newkey", "ec", "-pkeyopt",
                                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", in_dir(key),
                                    "-out", in_dir(pem), "-days", "2", "-subj", subj, NULL});
}

/* A server certificate for localhost and 127.0.0.1, signed by CA ca:
 * dir/<name>.pem, its key dir/<name>.key (0600). */
static int make_cert(const char *ca, const char *name)
{
    char key[32], pem[32], csr[32], ca_pem[32], ca_key[32];
    snprintf(key, sizeof(key), "%s.key", name);
    snprintf(pem, sizeof(pem), "%s.pem", name);
    snprintf(csr, sizeof(csr), "%s.csr", name);
    snprintf(ca_pem, sizeof(ca_pem), "%s.pem", ca);
    snprintf(ca_key, sizeof(ca_key), "%s.key", ca);
    FILE *f = fopen(in_dir("san.ext"), "w");
    if (f == NULL)
        return -1;
    fputs("subjectAltName=DNS:localhost,IP:127.0.0.1\n", f);
    fclose(f);
    if (openssl((const char *[]){"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                 "-nodes", "-keyout", in_dir(key), "-out", in_dir(csr), "-subj",
                                 "/CN=localhost", NULL}) != 0 ||
        openssl((const char *[]){"x509", "-req", "-in", in_dir(csr), "-CA", in_dir(ca_pem),
                                 "-CAkey", in_dir(ca_key), "-CAcreateserial", "-out",
                                 in_dir(pem), "-days", "2", "-extfile", in_dir("san.ext"),
                                 NULL}) != 0)
        return -1;
    return chmod(in_dir(key), 0600);
}

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (!th_have("openssl")) {
        fprintf(stderr, "test_tls: openssl is not installed (make deps)\n");
        return -1;
    }
    if (th_tempdir("stockd-tls", dir, sizeof(dir)) != 0 || make_ca("ca") != 0 ||
        make_ca("other-ca") != 0 || make_cert("ca", "server") != 0 ||
        make_cert("other-ca", "stranger") != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *flags[] = {"--tls-cert", in_dir("server.pem"), "--tls-key", in_dir("server.key"),
                           NULL};
    return th_stockd_start(&https, &redis, db, dir, flags);
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&https);
    th_redis_stop(&redis, 0);
    return rc;
}

static size_t keep_body(char *data, size_t size, size_t n, void *buf)
{
    size_t len = strlen(buf), add = size * n;
    if (len + add < 4096)
        memcpy((char *)buf + len, data, add), ((char *)buf)[len + add] = '\0';
    return add;
}

/* GET url with libcurl trusting cacert: the status, or -1 (curl's error
 * in body). */
static long curl_get(const char *url, const char *cacert, char body[4096])
{
    CURL *h = curl_easy_init();
    body[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, cacert);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
    long status = -1;
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    else
        snprintf(body, 4096, "%s", curl_easy_strerror(rc));
    curl_easy_cleanup(h);
    return status;
}

static void test_https_answers_curl_trusting_the_test_ca(void **state)
{
    (void)state;
    char body[4096], url[96];
    snprintf(url, sizeof(url), "%s/health", https.url);
    assert_int_equal(curl_get(url, in_dir("ca.pem"), body), 200);
    assert_non_null(strstr(body, "\"status\":\"ok\""));
    /* by name too: the certificate names localhost */
    snprintf(url, sizeof(url), "https://localhost:%d/health", https.port);
    assert_int_equal(curl_get(url, in_dir("ca.pem"), body), 200);
    /* another CA's trust refuses it */
    assert_int_equal(curl_get(url, in_dir("other-ca.pem"), body), -1);
}

/* Runs loadgen with args; its exit status, its output in out (malloc'd),
 * printed when the status is not expect. */
static int loadgen(int expect, const char *const args[], char **out)
{
    char bin[256];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    const char *argv[32] = {bin};
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    static int seq;
    char name[32];
    snprintf(name, sizeof(name), "loadgen-%d.out", seq++); /* th_run appends */
    int status = th_run(argv, in_dir(name), RUN_MS);
    *out = th_read_file(in_dir(name));
    if (status != expect)
        fprintf(stderr, "loadgen exited %d:\n%s\n", status, *out ? *out : "");
    return status;
}

static void test_loadgen_over_https_passes_verified(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(loadgen(0, (const char *[]){"--target", https.url, "--cacert",
                                              in_dir("ca.pem"), "-n", "400", "-c", "32", NULL},
                             &out),
                     0);
    assert_non_null(strstr(out, "VERDICT: PASS"));
    assert_non_null(strstr(out, "tls: certificates verified against --cacert"));
    free(out);
}

/* A replica that closes idle connections after a second, asked every 1.5 s:
 * each request after the first reconnects, and resumes the session. */
static void test_loadgen_resumes_the_session_on_reconnect(void **state)
{
    (void)state;
    th_stockd s = {0};
    const char *flags[] = {"--tls-cert", in_dir("server.pem"), "--tls-key", in_dir("server.key"),
                           "--idle-timeout-s", "1", NULL};
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, flags), 0);
    char *out = NULL;
    int status = loadgen(0, (const char *[]){"--target", s.url, "--cacert", in_dir("ca.pem"),
                                             "--get", "/health", "-n", "3", "-c", "1", "-R",
                                             "0.66", NULL}, &out);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    assert_int_equal(status, 0);
    unsigned long long done = 0, resumed = 0;
    const char *line = strstr(out, "handshakes, ");
    assert_non_null(line);
    while (line > out && line[-1] != ';')
        line--;
    assert_int_equal(sscanf(line, " %llu handshakes, %llu resumed", &done, &resumed), 2);
    if (resumed < 1 || done < 3)
        fail_msg("%llu handshakes, %llu resumed:\n%s", done, resumed, out);
    free(out);
}

static void test_loadgen_insecure_is_said_in_the_report(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(loadgen(0, (const char *[]){"--target", https.url, "--insecure", "-n", "50",
                                              "-c", "2", NULL}, &out),
                     0);
    assert_non_null(strstr(out, "--insecure: certificates NOT verified"));
    free(out);
}

static void test_loadgen_refuses_a_certificate_of_another_ca(void **state)
{
    (void)state;
    char *out = NULL;
    int status = loadgen(2, (const char *[]){"--target", https.url, "--cacert",
                                             in_dir("other-ca.pem"), "-n", "10", NULL}, &out);
    assert_int_equal(status, 2); /* a set-up error: the item could not be made */
    assert_non_null(strstr(out, "certificate does not verify"));
    assert_non_null(strstr(out, "issuer is unknown"));
    free(out);
}

/* A handshake with stockd offering only the versions in prio: the version
 * it took, or GnuTLS's error (negative). Nothing verified: only the
 * protocol is asked here. */
static int handshake_with(const char *prio)
{
    int fd = th_connect(https.port);
    assert_true(fd >= 0);
    gnutls_certificate_credentials_t cred;
    gnutls_session_t s;
    gnutls_certificate_allocate_credentials(&cred);
    gnutls_init(&s, GNUTLS_CLIENT);
    assert_int_equal(gnutls_priority_set_direct(s, prio, NULL), 0);
    gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred);
    gnutls_transport_set_int(s, fd);
    gnutls_handshake_set_timeout(s, 20000);
    int rc;
    do {
        rc = gnutls_handshake(s);
    } while (rc < 0 && !gnutls_error_is_fatal(rc));
    int version = rc < 0 ? rc : (int)gnutls_protocol_get_version(s);
    gnutls_deinit(s);
    gnutls_certificate_free_credentials(cred);
    close(fd);
    return version;
}

static void test_tls_1_1_refused_1_2_and_1_3_taken(void **state)
{
    (void)state;
    assert_int_equal(handshake_with("NORMAL:-VERS-ALL:+VERS-TLS1.3"), GNUTLS_TLS1_3);
    assert_int_equal(handshake_with("NORMAL:-VERS-ALL:+VERS-TLS1.2"), GNUTLS_TLS1_2);
    int old = handshake_with("NORMAL:-VERS-ALL:+VERS-TLS1.1:+VERS-TLS1.0");
    if (old >= 0)
        fail_msg("stockd took TLS version %d", old);
    /* refused by the server (an alert, or the connection closed on the
     * hello), not by this client before it sent one */
    if (old != GNUTLS_E_FATAL_ALERT_RECEIVED && old != GNUTLS_E_UNSUPPORTED_VERSION_PACKET &&
        old != GNUTLS_E_PREMATURE_TERMINATION)
        fail_msg("TLS 1.1: %s", gnutls_strerror(old));
}

/* Runs stockd with flags, which must stop it at start: its exit status,
 * its output in out (malloc'd). */
static int stockd_refuses(const char *const flags[], char **out)
{
    char bin[256], port[16];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(port, sizeof(port), "%d", th_free_port());
    const char *argv[24] = {bin, "--port", port, "--db", db, "--db-wait-s", "0"};
    int n = 7;
    for (int i = 0; flags[i] && n < 23; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    static int seq;
    char name[32];
    snprintf(name, sizeof(name), "stockd-%d.out", seq++);
    int status = th_run(argv, in_dir(name), RUN_MS);
    *out = th_read_file(in_dir(name));
    assert_non_null(*out);
    return status;
}

static void test_key_readable_by_others_is_refused_at_start(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(chmod(in_dir("server.key"), 0644), 0);
    int status = stockd_refuses((const char *[]){"--tls-cert", in_dir("server.pem"), "--tls-key",
                                                 in_dir("server.key"), NULL}, &out);
    chmod(in_dir("server.key"), 0600);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "readable by everyone (mode 0644)"));
    assert_non_null(strstr(out, "chmod 600"));
    free(out);
}

static void test_key_of_another_certificate_is_refused_at_start(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(stockd_refuses((const char *[]){"--tls-cert", in_dir("server.pem"),
                                                     "--tls-key", in_dir("stranger.key"), NULL},
                                    &out),
                     2);
    assert_non_null(strstr(out, "is not the key of --tls-cert"));
    free(out);
}

static void test_rediss_address_is_refused_with_the_reason(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(stockd_refuses((const char *[]){"--redis", "rediss://127.0.0.1:6380", NULL},
                                    &out),
                     2);
    assert_non_null(strstr(out, "TLS to Redis is not supported"));
    assert_non_null(strstr(out, "stunnel"));
    free(out);
}

/* PostgreSQL with ssl=on, its certificate from the test CA: verify-full
 * against that CA serves; against another CA, stockd does not start. */
static void test_postgres_verify_full(void **state)
{
    (void)state;
    if (!th_pg_available())
        th_skip("no PostgreSQL server installed\n");
    th_pg pg = {.ssl_cert = in_dir("server.pem"), .ssl_key = in_dir("server.key")};
    assert_int_equal(th_pg_start(&pg), 0);
    char conninfo[512], body[4096], url[96];
    /* host names the certificate's name; hostaddr is where the server listens */
    snprintf(conninfo, sizeof(conninfo), "host=localhost hostaddr=127.0.0.1 port=%d "
             "dbname=stock user=stock sslmode=verify-full sslrootcert=%s", pg.port,
             in_dir("ca.pem"));
    th_stockd s = {0};
    const char *flags[] = {"--db-wait-s", "0", NULL};
    assert_int_equal(th_stockd_start(&s, &redis, conninfo, dir, flags), 0);
    snprintf(url, sizeof(url), "%s/health", s.url);
    assert_int_equal(curl_get(url, in_dir("ca.pem"), body), 200);
    assert_non_null(strstr(body, "\"storage\":\"ok\""));
    assert_int_equal(th_stockd_stop_clean(&s), 0);

    snprintf(conninfo, sizeof(conninfo), "host=localhost hostaddr=127.0.0.1 port=%d "
             "dbname=stock user=stock sslmode=verify-full sslrootcert=%s", pg.port,
             in_dir("other-ca.pem"));
    char *out = NULL;
    int status = stockd_refuses((const char *[]){"--db", conninfo, "--redis-port", "1", NULL},
                                &out);
    th_pg_stop(&pg, SIGINT);
    assert_int_equal(status, 1);
    assert_non_null(strstr(out, "certificate verify failed"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_https_answers_curl_trusting_the_test_ca),
        cmocka_unit_test(test_loadgen_over_https_passes_verified),
        cmocka_unit_test(test_loadgen_resumes_the_session_on_reconnect),
        cmocka_unit_test(test_loadgen_insecure_is_said_in_the_report),
        cmocka_unit_test(test_loadgen_refuses_a_certificate_of_another_ca),
        cmocka_unit_test(test_tls_1_1_refused_1_2_and_1_3_taken),
        cmocka_unit_test(test_key_readable_by_others_is_refused_at_start),
        cmocka_unit_test(test_key_of_another_certificate_is_refused_at_start),
        cmocka_unit_test(test_rediss_address_is_refused_with_the_reason),
        cmocka_unit_test(test_postgres_verify_full),
    };
    return cmocka_run_group_tests_name("tls", tests, group_setup, group_teardown);
}
