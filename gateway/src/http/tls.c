/*
 * TLS on the listener, with libmicrohttpd's own GnuTLS: the files are read once at start
 * (a certificate is rotated by restarting the gateway: libmicrohttpd 0.9.75 takes its
 * certificate only when a daemon starts) and checked here first, so that a bad file stops
 * the start with its name instead of a daemon that cannot start, or one that serves a
 * certificate nobody can use. Nothing falls back to plain HTTP.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "http/tls.h"
#include "rt/log.h"
#include "rt/util.h"

/* Parses the certificates in pem (at least one). Returns how many, or a GnuTLS error. */
static int parse_certs(const char *pem, gnutls_x509_crt_t **list, unsigned int *n)
{
    gnutls_datum_t d = {(unsigned char *)(uintptr_t)pem, (unsigned int)strlen(pem)};
    int rc = gnutls_x509_crt_list_import2(list, n, &d, GNUTLS_X509_FMT_PEM, 0);
    return rc < 0 ? rc : (int)*n;
}

static void free_certs(gnutls_x509_crt_t *list, unsigned int n)
{
    for (unsigned int i = 0; i < n; i++) {
        gnutls_x509_crt_deinit(list[i]);
    }
    gnutls_free(list);
}

/* Checks the pair as GnuTLS will use it. Returns 0 or -1 with err. */
static int check_pair(const gw_config *cfg, gw_tls *t, char *err, size_t errlen)
{
    gnutls_x509_crt_t *certs = NULL;
    unsigned int n = 0;
    int rc = parse_certs(t->cert_pem, &certs, &n);
    if (rc <= 0) {
        snprintf(err, errlen, "--tls-cert %s: no PEM certificate in it (%s)", cfg->tls_cert,
                 rc < 0 ? gnutls_strerror(rc) : "empty");
        return -1;
    }
    t->not_after = gnutls_x509_crt_get_expiration_time(certs[0]);
    free_certs(certs, n);
    if (t->not_after != (time_t)-1 && t->not_after <= time(NULL)) {
        snprintf(err, errlen, "--tls-cert %s: the certificate has expired", cfg->tls_cert);
        return -1;
    }
    gnutls_x509_privkey_t key;
    gnutls_datum_t kd = {(unsigned char *)t->key_pem, (unsigned int)strlen(t->key_pem)};
    if (gnutls_x509_privkey_init(&key) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = gnutls_x509_privkey_import2(key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_x509_privkey_deinit(key);
    if (rc < 0) {
        snprintf(err, errlen, "--tls-key %s: no PEM private key in it (%s)", cfg->tls_key,
                 gnutls_strerror(rc));
        return -1;
    }
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    gnutls_datum_t cd = {(unsigned char *)t->cert_pem, (unsigned int)strlen(t->cert_pem)};
    rc = gnutls_certificate_set_x509_key_mem2(cred, &cd, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_certificate_free_credentials(cred);
    if (rc < 0) {
        snprintf(err, errlen, "--tls-key %s does not go with --tls-cert %s (%s)", cfg->tls_key,
                 cfg->tls_cert, gnutls_strerror(rc));
        return -1;
    }
    return 0;
}

int gw__tls_load(const gw_config *cfg, gw_tls *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (gw__read_file(cfg->tls_cert, GW_TLS_FILE_MAX, &t->cert_pem, NULL, err, errlen,
                      "--tls-cert") != 0 ||
        gw__read_file(cfg->tls_key, GW_TLS_FILE_MAX, &t->key_pem, NULL, err, errlen,
                      "--tls-key") != 0 ||
        (cfg->tls_client_ca[0] != '\0' &&
         gw__read_file(cfg->tls_client_ca, GW_TLS_FILE_MAX, &t->ca_pem, NULL, err, errlen,
                       "--tls-client-ca") != 0) ||
        check_pair(cfg, t, err, errlen) != 0) {
        gw__tls_free(t);
        return -1;
    }
    if (t->ca_pem != NULL) {
        gnutls_x509_crt_t *cas = NULL;
        unsigned int n = 0;
        int rc = parse_certs(t->ca_pem, &cas, &n);
        if (rc <= 0) {
            snprintf(err, errlen, "--tls-client-ca %s: no PEM certificate in it (%s)",
                     cfg->tls_client_ca, rc < 0 ? gnutls_strerror(rc) : "empty");
            gw__tls_free(t);
            return -1;
        }
        free_certs(cas, n);
    }
    return 0;
}

void gw__tls_free(gw_tls *t)
{
    if (t->key_pem != NULL) {
        /* The key does not stay in freed memory. */
        volatile char *p = t->key_pem;
        while (*p != '\0') {
            *p++ = '\0';
        }
    }
    free(t->cert_pem);
    free(t->key_pem);
    free(t->ca_pem);
    t->cert_pem = t->key_pem = t->ca_pem = NULL;
}

void gw__tls_options(const gw_tls *t, struct MHD_OptionItem *opts)
{
    int i = 0;
    opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, t->key_pem};
    opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, t->cert_pem};
    opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                        (void *)(uintptr_t)GW_TLS_PRIORITIES};
    if (t->ca_pem != NULL) {
        /* libmicrohttpd then asks every client for a certificate (GNUTLS_CERT_REQUEST): the
         * handshake goes on without one, and gw__tls_client_ok() refuses the request, so
         * /healthz stays open to probes without a certificate. */
        opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, t->ca_pem};
    }
    opts[i] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int gw__tls_client_ok(struct MHD_Connection *conn, char cn[GW_CERT_CN_MAX + 1], char *why,
                      size_t whylen)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    gnutls_session_t s = ci != NULL ? (gnutls_session_t)ci->tls_session : NULL;
    unsigned int status = 0, n = 0;

    cn[0] = '\0';
    if (s == NULL) {
        snprintf(why, whylen, "the connection has no TLS session");
        return 0;
    }
    const gnutls_datum_t *peers = gnutls_certificate_get_peers(s, &n);
    if (peers == NULL || n == 0) {
        snprintf(why, whylen, "this endpoint needs a client certificate signed by the "
                              "gateway's --tls-client-ca; none was sent");
        return 0;
    }
    int rc = gnutls_certificate_verify_peers2(s, &status);
    if (rc < 0 || status != 0) {
        gnutls_datum_t out = {NULL, 0};
        char reason[200] = "it does not verify";
        if (rc >= 0 && gnutls_certificate_verification_status_print(
                           status, GNUTLS_CRT_X509, &out, 0) == 0) {
            gw__printable(reason, sizeof reason, (const char *)out.data);
            gnutls_free(out.data);
        }
        snprintf(why, whylen, "the client certificate is refused: %s", reason);
        return 0;
    }
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) == 0) {
        char buf[GW_CERT_CN_MAX + 1];
        size_t len = sizeof buf;
        if (gnutls_x509_crt_import(crt, &peers[0], GNUTLS_X509_FMT_DER) == 0 &&
            gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &len) ==
                0) {
            gw__printable(cn, GW_CERT_CN_MAX + 1, buf);
        }
        gnutls_x509_crt_deinit(crt);
    }
    return 1;
}

void gw__tls_expiry_check(const gw_config *cfg, gw_tls *t)
{
    time_t now = time(NULL);
    if (t->cert_pem == NULL || t->not_after == (time_t)-1) {
        return;
    }
    if (now >= t->not_after && !t->warned_expired) {
        t->warned_expired = 1;
        gw__log_event(cfg, "error", "--tls-cert %s has expired: clients refuse the handshake "
                                    "until a new certificate is in place and the gateway is "
                                    "restarted", cfg->tls_cert);
    } else if (now < t->not_after && t->not_after - now <= 7 * 86400 && !t->warned_soon) {
        t->warned_soon = 1;
        gw__log_event(cfg, "warn", "--tls-cert %s expires in %lld hours: rotate it (restart "
                                   "one gateway at a time with the new file)",
                      cfg->tls_cert, (long long)((t->not_after - now) / 3600));
    }
}
