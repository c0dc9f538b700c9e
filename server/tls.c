/* tls.c - the certificate and key stockd serves HTTPS with: read, their
 * file's permissions checked, and the pair loaded once by GnuTLS (as
 * libmicrohttpd will) so that a key that is not the certificate's is an
 * error at start. */
#include "server/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <microhttpd.h>

#define PEM_MAX (1 << 20) /* a certificate chain is kilobytes; this is a wrong file */

int tls_supported(void)
{
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/* path's whole text into *out (malloc'd, NUL-terminated); with is_key, the
 * file must not be readable by group or others (checked on the open file). */
static int read_pem(const char *flag, const char *path, int is_key, char **out, size_t *len,
                    char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "--%s %s: %s", flag, path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (is_key && (st.st_mode & (S_IRGRP | S_IROTH))) {
        snprintf(err, errlen, "--%s %s: the private key is readable by %s (mode %04o); make it "
                 "readable by its owner only (chmod 600 %s)", flag, path,
                 st.st_mode & S_IROTH ? "everyone" : "its group",
                 (unsigned)(st.st_mode & 07777), path);
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > PEM_MAX) {
        snprintf(err, errlen, "--%s %s: not a PEM file (want a regular file of 1 byte to 1 MiB)",
                 flag, path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *buf = malloc(size + 1);
    while (buf && got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (buf == NULL || got != size) {
        snprintf(err, errlen, "--%s %s: could not read it whole", flag, path);
        free(buf);
        return -1;
    }
    buf[size] = '\0';
    *out = buf;
    *len = size;
    return 0;
}

/* Loads the pair as libmicrohttpd will: GnuTLS says when the key is not the
 * certificate's (GNUTLS_E_CERTIFICATE_KEY_MISMATCH) or either is no PEM. */
static int check_pair(const tls_pem *t, const char *cert_path, const char *key_path, char *err,
                      size_t errlen)
{
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    gnutls_datum_t cert = {(unsigned char *)t->cert, (unsigned)strlen(t->cert)};
    gnutls_datum_t key = {(unsigned char *)t->key, (unsigned)t->key_len};
    int rc = gnutls_certificate_set_x509_key_mem(cred, &cert, &key, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(cred);
    if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
        snprintf(err, errlen, "--tls-key %s is not the key of --tls-cert %s (%s)", key_path,
                 cert_path, gnutls_strerror(rc));
    else if (rc < 0)
        snprintf(err, errlen, "--tls-cert %s / --tls-key %s: %s", cert_path, key_path,
                 gnutls_strerror(rc));
    return rc < 0 ? -1 : 0;
}

int tls_pem_load(tls_pem *t, const char *cert_path, const char *key_path, char *err,
                 size_t errlen)
{
    size_t cert_len;
    memset(t, 0, sizeof(*t));
    if (!tls_supported()) {
        snprintf(err, errlen, "--tls-cert: this libmicrohttpd was built without TLS");
        return -1;
    }
    if (read_pem("tls-cert", cert_path, 0, &t->cert, &cert_len, err, errlen) != 0 ||
        read_pem("tls-key", key_path, 1, &t->key, &t->key_len, err, errlen) != 0 ||
        check_pair(t, cert_path, key_path, err, errlen) != 0) {
        tls_pem_free(t);
        return -1;
    }
    return 0;
}

void tls_pem_free(tls_pem *t)
{
    if (t->key)
        explicit_bzero(t->key, t->key_len);
    free(t->key);
    free(t->cert);
    memset(t, 0, sizeof(*t));
}

struct tls_tickets {
    gnutls_datum_t key;
};

tls_tickets *tls_tickets_new(void)
{
    tls_tickets *t = calloc(1, sizeof(*t));
    if (t && gnutls_session_ticket_key_generate(&t->key) != GNUTLS_E_SUCCESS) {
        free(t);
        return NULL;
    }
    return t;
}

void tls_tickets_enable(const tls_tickets *t, void *session)
{
    gnutls_session_ticket_enable_server((gnutls_session_t)session, &t->key);
}

void tls_tickets_free(tls_tickets *t)
{
    if (t == NULL)
        return;
    gnutls_memset(t->key.data, 0, t->key.size);
    gnutls_free(t->key.data);
    free(t);
}
