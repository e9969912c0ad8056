/*
 * The one-request subcommands: unlock, renew, write, read, status and release, and ls (one
 * request per page). Each prints the
 * gateway's answer on stdout (the stored bytes for read) and returns an FC_EXIT_* code;
 * failures are one line on stderr through fc__report().
 */
#include "fc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STDIN_MAX_BYTES (1024L * 1024 * 1024) /* far above any --max-value-bytes */

/* Prints r's JSON answer on one line. Returns FC_EXIT_OK, or FC_EXIT_UNAVAILABLE when it
 * is not JSON (something else answered at --url). */
static int print_json(const fc_client *c, const fc_response *r)
{
    if (r->json == NULL) {
        fprintf(stderr, "fencectl: %s: the answer is not JSON; is --url a fencegate?\n",
                c->what);
        return FC_EXIT_UNAVAILABLE;
    }
    if (json_dumpf(r->json, stdout, JSON_COMPACT) != 0 || fputc('\n', stdout) == EOF ||
        fflush(stdout) != 0) {
        fprintf(stderr, "fencectl: %s: cannot write to stdout\n", c->what);
        return FC_EXIT_USAGE;
    }
    return FC_EXIT_OK;
}

/* POST /unlock or /renew for --owner. */
static int owner_call(fc_client *c, const fc_options *o, int renew)
{
    char key[FC_ID_LEN + 1];
    fc_response r;
    json_t *body = json_pack("{s:s, s:s}", "resource", o->resource, "owner", o->owner);
    int rc;

    if (body == NULL || fc__random_id(key) != 0) {
        json_decref(body);
        fprintf(stderr, "fencectl: %s: cannot build the request\n", c->what);
        return FC_EXIT_INTERNAL;
    }
    if (renew) {
        json_object_set_new(body, "ttl_ms", json_integer(o->ttl_ms));
    }
    /* The key makes a retry after a lost answer replay the first answer: an unlock never
     * releases two holds. */
    fc__post_json(c, renew ? "/renew" : "/unlock", body, key, FC_REQUEST_TIMEOUT_MS,
                  fc__now_ms() + FC_RETRY_BUDGET_MS, &r);
    rc = r.status == 200 ? print_json(c, &r) : fc__report(c, &r);
    fc__response_free(&r);
    return rc;
}

int fc__cmd_unlock(fc_client *c, const fc_options *o)
{
    return owner_call(c, o, 0);
}

int fc__cmd_renew(fc_client *c, const fc_options *o)
{
    return owner_call(c, o, 1);
}

int fc__cmd_status(fc_client *c, const fc_options *o)
{
    char path[256];
    fc_response r;
    int rc;

    snprintf(path, sizeof path, "/locks/%s", o->resource);
    fc_request rq = {.method = "GET", .path = path, .timeout_ms = FC_REQUEST_TIMEOUT_MS,
                     .resend_safe = 1, .retry_until_ms = fc__now_ms() + FC_RETRY_BUDGET_MS};
    fc__request(c, &rq, &r);
    rc = r.status == 200 ? print_json(c, &r) : fc__report(c, &r);
    fc__response_free(&r);
    return rc;
}

int fc__cmd_read(fc_client *c, const fc_options *o)
{
    char path[256];
    fc_response r;
    int rc = FC_EXIT_OK;

    snprintf(path, sizeof path, "/resources/%s", o->resource);
    fc_request rq = {.method = "GET", .path = path, .timeout_ms = FC_REQUEST_TIMEOUT_MS,
                     .resend_safe = 1, .retry_until_ms = fc__now_ms() + FC_RETRY_BUDGET_MS};
    fc__request(c, &rq, &r);
    if (r.status != 200) {
        rc = fc__report(c, &r);
    } else if (fwrite(r.body, 1, r.len, stdout) != r.len || fflush(stdout) != 0) {
        fprintf(stderr, "fencectl: %s: cannot write to stdout\n", c->what);
        rc = FC_EXIT_USAGE;
    } else if (c->verbose) {
        fprintf(stderr, "fencectl: %s: %zu bytes written with token %s\n", c->what, r.len,
                r.fencing_token);
    }
    fc__response_free(&r);
    return rc;
}

/* Reads all of stdin into a malloc'd buffer (*out, *len). Returns 0 or -1 with a message
 * printed. */
static int slurp_stdin(const fc_client *c, char **out, size_t *len)
{
    char *buf = NULL;
    size_t used = 0, cap = 0;

    for (;;) {
        if (used == cap) {
            size_t want = cap == 0 ? 65536 : cap * 2;
            char *grown = want <= STDIN_MAX_BYTES ? realloc(buf, want) : NULL;
            if (grown == NULL) {
                fprintf(stderr, "fencectl: %s: stdin is too large\n", c->what);
                free(buf);
                return -1;
            }
            buf = grown;
            cap = want;
        }
        size_t n = fread(buf + used, 1, cap - used, stdin);
        used += n;
        if (n == 0) {
            break;
        }
    }
    if (ferror(stdin)) {
        fprintf(stderr, "fencectl: %s: cannot read stdin\n", c->what);
        free(buf);
        return -1;
    }
    *out = buf;
    *len = used;
    return 0;
}

int fc__cmd_write(fc_client *c, const fc_options *o)
{
    char path[256];
    char token_text[64];
    char *data = NULL;
    size_t len = 0;
    fc_response r;
    int rc;

    if (slurp_stdin(c, &data, &len) != 0) {
        return FC_EXIT_USAGE;
    }
    /* In `make-report | fencectl write ...` a producer that fails before printing leaves
     * stdin empty, and the pipeline's status is fencectl's: storing "" there would replace
     * the last good value and report success. An empty value must be asked for. */
    if (len == 0 && !o->allow_empty) {
        fprintf(stderr, "fencectl: %s: stdin is empty; nothing was written (pass --allow-empty "
                        "to store an empty value)\n", c->what);
        free(data);
        return FC_EXIT_USAGE;
    }
    snprintf(path, sizeof path, "/resources/%s", o->resource);
    snprintf(token_text, sizeof token_text, "%lld", (long long)o->token);
    /* Not resent after a lost answer: if the first write went through and a newer token
     * wrote since, a resend would report a stale token for a write that succeeded. */
    fc_request rq = {.method = "PUT",
                     .path = path,
                     .content_type = o->content_type != NULL ? o->content_type
                                                             : "application/octet-stream",
                     .fencing_token = token_text,
                     .body = data,
                     .len = len,
                     .timeout_ms = FC_REQUEST_TIMEOUT_MS,
                     .retry_until_ms = fc__now_ms() + FC_RETRY_BUDGET_MS};
    fc__request(c, &rq, &r);
    rc = r.status == 200 ? print_json(c, &r) : fc__report(c, &r);
    fc__response_free(&r);
    free(data);
    return rc;
}

int fc__cmd_ls(fc_client *c, const fc_options *o)
{
    char after[FG_RESOURCE_MAX + 1] = "";

    /* Page by page to the end; one JSON object per held lock and line, in name order. */
    for (;;) {
        char path[600];
        fc_response r;
        snprintf(path, sizeof path, "/locks?limit=1000%s%s%s%s",
                 o->prefix != NULL ? "&prefix=" : "", o->prefix != NULL ? o->prefix : "",
                 after[0] != '\0' ? "&after=" : "", after);
        fc_request rq = {.method = "GET", .path = path, .timeout_ms = FC_REQUEST_TIMEOUT_MS,
                         .resend_safe = 1,
                         .retry_until_ms = fc__now_ms() + FC_RETRY_BUDGET_MS};
        fc__request(c, &rq, &r);
        if (r.status != 200 || r.json == NULL) {
            int rc = r.status != 200 ? fc__report(c, &r) : print_json(c, &r);
            fc__response_free(&r);
            return rc;
        }
        json_t *locks = json_object_get(r.json, "locks");
        json_t *next = json_object_get(r.json, "next");
        for (size_t i = 0; i < json_array_size(locks); i++) {
            if (json_dumpf(json_array_get(locks, i), stdout, JSON_COMPACT) != 0 ||
                fputc('\n', stdout) == EOF) {
                fc__response_free(&r);
                fprintf(stderr, "fencectl: %s: cannot write to stdout\n", c->what);
                return FC_EXIT_USAGE;
            }
        }
        int more = json_is_string(next);
        if (more) {
            snprintf(after, sizeof after, "%s", json_string_value(next));
        }
        fc__response_free(&r);
        if (!more) {
            return fflush(stdout) == 0 ? FC_EXIT_OK : FC_EXIT_USAGE;
        }
    }
}

int fc__cmd_release(fc_client *c, const fc_options *o)
{
    fc_response r;
    json_t *body = json_pack("{s:s, s:s}", "resource", o->resource, "reason", o->reason);
    int rc;

    if (body == NULL) {
        fprintf(stderr, "fencectl: %s: cannot build the request\n", c->what);
        return FC_EXIT_INTERNAL;
    }
    /* Not resent after a lost answer (the gateway keeps no record of it): a second forced
     * release, by hand, finds nothing held and answers released false. */
    fc__post_json(c, "/admin/release", body, NULL, FC_REQUEST_TIMEOUT_MS,
                  fc__now_ms() + FC_RETRY_BUDGET_MS, &r);
    rc = r.status == 200 ? print_json(c, &r) : fc__report(c, &r);
    fc__response_free(&r);
    return rc;
}
