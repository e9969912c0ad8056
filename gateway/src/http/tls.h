/*
 * TLS on the listener (tls.c): the certificate, key and client CA files read and checked
 * with GnuTLS at start, handed to every loop's libmicrohttpd daemon (MHD_USE_TLS, its own
 * GnuTLS), and the client certificate of a mutual-TLS connection checked once per
 * connection.
 */
#ifndef GATEWAY_TLS_H
#define GATEWAY_TLS_H

#include <stddef.h>
#include <time.h>

#include <microhttpd.h>

#include "base/config.h"

/* TLS 1.2 and 1.3 only, GnuTLS's NORMAL ciphers. */
#define GW_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"
/* The longest certificate, key or CA file read. */
#define GW_TLS_FILE_MAX (1024 * 1024)
/* The longest client name a certificate's subject CN may give. */
#define GW_CERT_CN_MAX 64

typedef struct gw_tls {
    char *cert_pem;               /* NUL-terminated PEM, as libmicrohttpd takes them */
    char *key_pem;
    char *ca_pem;                 /* NULL without --tls-client-ca */
    time_t not_after;             /* the server certificate's end of validity */
    int warned_soon, warned_expired; /* gw__tls_expiry_check's lines, logged once each */
} gw_tls;

/* Reads cfg's --tls-cert, --tls-key and --tls-client-ca and checks them with GnuTLS: each
 * parses, the key is the certificate's, the certificate has not expired. Returns 0, or -1
 * with a message naming the file and the problem in err (nothing kept). */
int gw__tls_load(const gw_config *cfg, gw_tls *t, char *err, size_t errlen);
void gw__tls_free(gw_tls *t);

/* libmicrohttpd options for t, ended by MHD_OPTION_END, in opts (at least 5 items). */
void gw__tls_options(const gw_tls *t, struct MHD_OptionItem *opts);

/* Mutual TLS: checks conn's client certificate against the trusted CAs. Returns 1 when it
 * has one that verifies (its subject CN, printable, in cn; "" when it has none), 0 when it
 * has none or one that does not (why in why). */
int gw__tls_client_ok(struct MHD_Connection *conn, char cn[GW_CERT_CN_MAX + 1], char *why,
                      size_t whylen);

/* Logs once a warning when the server certificate expires within a week, and once an error
 * when it has expired (clients then refuse the handshake; serving goes on). */
void gw__tls_expiry_check(const gw_config *cfg, gw_tls *t);

#endif
