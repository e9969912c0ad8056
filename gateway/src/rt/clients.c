/*
 * Clients and their scopes: the --clients file read and checked, tokens looked up by their
 * SHA-256 (GnuTLS's, never hand-written), and the table swapped in on SIGHUP (clients.h says
 * how no loop thread ever waits for a swap).
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <jansson.h>

#include "locklib/locklib.h"

#include "rt/clients.h"
#include "rt/util.h"

static void clients_free(gw_clients *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        for (size_t j = 0; j < t->c[i].n_allow; j++) {
            free(t->c[i].allow[j].prefix);
        }
        free(t->c[i].allow);
    }
    free(t->c);
    free(t);
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > GW_CLIENT_NAME_MAX) {
        return 0;
    }
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int parse_sha256(const char *s, unsigned char out[32])
{
    if (strlen(s) != 64) {
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return -1;
        }
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* The first key of o not in known, or NULL. */
static const char *unknown_key(json_t *o, const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int found = 0;
        for (int i = 0; known[i] != NULL; i++) {
            found |= strcmp(k, known[i]) == 0;
        }
        if (!found) {
            return k;
        }
    }
    return NULL;
}

#define FAIL(...)                                                                            \
    do {                                                                                     \
        int at_ = snprintf(err, errlen, "--clients %s: ", path);                             \
        if (at_ > 0 && (size_t)at_ < errlen) {                                               \
            snprintf(err + at_, errlen - (size_t)at_, __VA_ARGS__);                          \
        }                                                                                    \
        return -1;                                                                           \
    } while (0)

static int parse_allow(const char *path, json_t *a, size_t ci, size_t ai, gw_allow *out,
                       char *err, size_t errlen)
{
    static const char *const keys[] = {"prefix", "ops", NULL};
    const char *bad = json_is_object(a) ? unknown_key(a, keys) : NULL;
    if (!json_is_object(a)) {
        FAIL("clients[%zu].allow[%zu] is not an object", ci, ai);
    }
    if (bad != NULL) {
        char shown[64];
        gw__printable(shown, sizeof shown, bad);
        FAIL("clients[%zu].allow[%zu]: unknown field '%s' (prefix, ops)", ci, ai, shown);
    }
    json_t *p = json_object_get(a, "prefix"), *ops = json_object_get(a, "ops");
    if (!json_is_string(p)) {
        FAIL("clients[%zu].allow[%zu]: \"prefix\" must be a string (\"\" for every resource)",
             ci, ai);
    }
    const char *ps = json_string_value(p);
    size_t plen = json_string_length(p);
    if (plen > LK_RESOURCE_MAX || strlen(ps) != plen || (plen > 0 && !lk_valid_resource(ps))) {
        FAIL("clients[%zu].allow[%zu]: prefix is not the beginning of a resource name (1 to "
             "%d bytes of A-Z a-z 0-9 . _ : -)", ci, ai, LK_RESOURCE_MAX);
    }
    if (!json_is_array(ops) || json_array_size(ops) == 0) {
        FAIL("clients[%zu].allow[%zu]: \"ops\" must be a non-empty array of lock, write, read, "
             "admin, metrics", ci, ai);
    }
    size_t k;
    json_t *op;
    json_array_foreach(ops, k, op) {
        gw_scope s = json_is_string(op) ? gw__scope_parse(json_string_value(op)) : GW_SCOPE_UNSET;
        if (s == GW_SCOPE_UNSET) {
            char shown[64] = "(not a string)";
            if (json_is_string(op)) {
                gw__printable(shown, sizeof shown, json_string_value(op));
            }
            FAIL("clients[%zu].allow[%zu].ops[%zu]: unknown operation '%s' (lock, write, read, "
                 "admin, metrics)", ci, ai, k, shown);
        }
        out->ops |= 1u << s;
    }
    out->prefix = strdup(ps);
    out->prefix_len = plen;
    if (out->prefix == NULL) {
        FAIL("out of memory");
    }
    return 0;
}

static int parse_client(const char *path, json_t *o, size_t ci, gw_client *c, char *err,
                        size_t errlen)
{
    static const char *const keys[] = {"name", "token_sha256", "allow", NULL};
    if (!json_is_object(o)) {
        FAIL("clients[%zu] is not an object", ci);
    }
    const char *bad = unknown_key(o, keys);
    if (bad != NULL) {
        char shown[64];
        gw__printable(shown, sizeof shown, bad);
        FAIL("clients[%zu]: unknown field '%s' (name, token_sha256, allow)", ci, shown);
    }
    json_t *name = json_object_get(o, "name"), *hash = json_object_get(o, "token_sha256"),
           *allow = json_object_get(o, "allow");
    if (!json_is_string(name) || !valid_name(json_string_value(name))) {
        FAIL("clients[%zu]: \"name\" must be 1 to %d bytes of A-Z a-z 0-9 . _ -", ci,
             GW_CLIENT_NAME_MAX);
    }
    snprintf(c->name, sizeof c->name, "%s", json_string_value(name));
    if (!json_is_string(hash) || parse_sha256(json_string_value(hash), c->token_sha256) != 0) {
        FAIL("client '%s': \"token_sha256\" must be 64 hex digits (sha256sum of the token)",
             c->name);
    }
    if (!json_is_array(allow)) {
        FAIL("client '%s': \"allow\" must be an array of {\"prefix\", \"ops\"}", c->name);
    }
    c->n_allow = json_array_size(allow);
    c->allow = calloc(c->n_allow > 0 ? c->n_allow : 1, sizeof *c->allow);
    if (c->allow == NULL) {
        FAIL("out of memory");
    }
    for (size_t j = 0; j < c->n_allow; j++) {
        if (parse_allow(path, json_array_get(allow, j), ci, j, &c->allow[j], err, errlen) != 0) {
            return -1;
        }
        c->any_ops |= c->allow[j].ops;
    }
    return 0;
}

static int parse_clients(const char *path, json_t *root, gw_clients *t, char *err,
                         size_t errlen)
{
    static const char *const keys[] = {"clients", NULL};
    if (!json_is_object(root)) {
        FAIL("not a JSON object {\"clients\": [...]}");
    }
    const char *bad = unknown_key(root, keys);
    if (bad != NULL) {
        char shown[64];
        gw__printable(shown, sizeof shown, bad);
        FAIL("unknown field '%s' (clients)", shown);
    }
    json_t *list = json_object_get(root, "clients");
    if (!json_is_array(list)) {
        FAIL("\"clients\" must be an array");
    }
    t->n = json_array_size(list);
    t->c = calloc(t->n > 0 ? t->n : 1, sizeof *t->c);
    if (t->c == NULL) {
        FAIL("out of memory");
    }
    for (size_t i = 0; i < t->n; i++) {
        if (parse_client(path, json_array_get(list, i), i, &t->c[i], err, errlen) != 0) {
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t->c[j].name, t->c[i].name) == 0) {
                FAIL("the name '%s' is given twice", t->c[i].name);
            }
            if (memcmp(t->c[j].token_sha256, t->c[i].token_sha256, 32) == 0) {
                FAIL("clients '%s' and '%s' have the same token_sha256", t->c[j].name,
                     t->c[i].name);
            }
        }
    }
    return 0;
}

gw_clients *gw__clients_load(const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    json_error_t jerr;

    if (gw__read_file(path, GW_CLIENTS_FILE_MAX, &text, &len, err, errlen, "--clients") != 0) {
        return NULL;
    }
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (root == NULL) {
        char shown[200];
        gw__printable(shown, sizeof shown, jerr.text);
        snprintf(err, errlen, "--clients %s: line %d: %s", path, jerr.line, shown);
        return NULL;
    }
    gw_clients *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "--clients %s: out of memory", path);
    } else if (parse_clients(path, root, t, err, errlen) != 0) {
        clients_free(t);
        t = NULL;
    } else {
        atomic_init(&t->refs, 1);
    }
    json_decref(root);
    return t;
}

gw_clients *gw__clients_single(const char *token, size_t len)
{
    gw_clients *t = calloc(1, sizeof *t);
    gw_client *c = calloc(1, sizeof *c);
    gw_allow *a = calloc(1, sizeof *a);
    char *all = strdup("");
    if (t == NULL || c == NULL || a == NULL || all == NULL ||
        gnutls_hash_fast(GNUTLS_DIG_SHA256, token, len, c->token_sha256) != 0) {
        free(t);
        free(c);
        free(a);
        free(all);
        return NULL;
    }
    snprintf(c->name, sizeof c->name, "default");
    a->prefix = all;
    for (int s = GW_SCOPE_LOCK; s < GW_SCOPE_COUNT; s++) {
        a->ops |= 1u << s;
    }
    c->allow = a;
    c->n_allow = 1;
    c->any_ops = a->ops;
    t->c = c;
    t->n = 1;
    atomic_init(&t->refs, 1);
    return t;
}

const gw_client *gw__clients_by_token(const gw_clients *t, const char *token, size_t len)
{
    unsigned char h[32];
    const gw_client *found = NULL;

    if (t == NULL || gnutls_hash_fast(GNUTLS_DIG_SHA256, token, len, h) != 0) {
        return NULL;
    }
    /* Every client is compared, and every byte: the time tells nothing of which matched or
     * where the others differ. Comparing hashes, not tokens, also hides the token's length. */
    for (size_t i = 0; i < t->n; i++) {
        volatile unsigned char diff = 0;
        for (int j = 0; j < 32; j++) {
            diff |= (unsigned char)(h[j] ^ t->c[i].token_sha256[j]);
        }
        if (diff == 0) {
            found = &t->c[i];
        }
    }
    return found;
}

const gw_client *gw__clients_by_name(const gw_clients *t, const char *name)
{
    for (size_t i = 0; t != NULL && i < t->n; i++) {
        if (strcmp(t->c[i].name, name) == 0) {
            return &t->c[i];
        }
    }
    return NULL;
}

int gw__client_allows(const gw_client *c, gw_scope op, const char *resource)
{
    unsigned bit = 1u << op;
    if (resource == NULL) {
        return (c->any_ops & bit) != 0;
    }
    for (size_t i = 0; i < c->n_allow; i++) {
        const gw_allow *a = &c->allow[i];
        if ((a->ops & bit) != 0 && strncmp(resource, a->prefix, a->prefix_len) == 0) {
            return 1;
        }
    }
    return 0;
}

void gw__clients_release(gw_clients *t)
{
    if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1) {
        clients_free(t);
    }
}

gw_clients *gw__clients_acquire(gw_clients_box *box)
{
    unsigned e;
    for (;;) {
        e = atomic_load(&box->epoch);
        atomic_fetch_add(&box->readers[e & 1], 1);
        if (atomic_load(&box->epoch) == e) {
            break;
        }
        atomic_fetch_sub(&box->readers[e & 1], 1); /* a swap began: take the new epoch */
    }
    gw_clients *t = atomic_load(&box->cur);
    if (t != NULL) {
        atomic_fetch_add(&t->refs, 1);
    }
    atomic_fetch_sub(&box->readers[e & 1], 1);
    return t;
}

void gw__clients_swap(gw_clients_box *box, gw_clients *t)
{
    gw_clients *old = atomic_exchange(&box->cur, t);
    unsigned e = atomic_fetch_add(&box->epoch, 1);
    /* A reader of epoch e may have loaded old and not yet counted its reference: wait for
     * every one of them (each holds the epoch for a few instructions). */
    while (atomic_load(&box->readers[e & 1]) != 0) {
        struct timespec nap = {0, 100000L};
        nanosleep(&nap, NULL);
    }
    gw__clients_release(old);
}
