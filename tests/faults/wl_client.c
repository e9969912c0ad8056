/*
 * The fault workload's request layer (wl_client.h): HTTP requests with libcurl, their
 * answers parsed with jansson, each appended to the history as one line.
 */
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "wl_client.h"

static uint64_t next_rand(client *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

long wl_rand_between(client *c, long lo, long hi)
{
    return lo + (long)(next_rand(c) % (uint64_t)(hi - lo + 1));
}

/* After an operation that got no answer or a 503, a short pause, so a client does not burn
 * its operation budget against a gateway or Redis that is down. A backoff, not a wait for
 * anything. */
void wl_back_off(const fh_op *op)
{
    struct timespec nap = {0, 20 * 1000000};
    if (op->status == 0 || op->status == 503)
        nanosleep(&nap, NULL);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    reply *rp = arg;
    size_t len = size * n;
    size_t room = sizeof rp->body - 1 - rp->len;
    memcpy(rp->body + rp->len, data, len < room ? len : room);
    rp->len += len < room ? len : room;
    rp->body[rp->len] = '\0';
    return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    reply *rp = arg;
    size_t len = size * n;
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(len < 255 ? len : 255), data);
    if (strncasecmp(line, "Fencing-Token:", 14) == 0)
        rp->header_token = strtoll(line + 14, NULL, 10);
    else if (strncasecmp(line, "ETag:", 5) == 0)
        rp->etag = strtoll(line + 5 + strspn(line + 5, " \""), NULL, 10);
    return len;
}

void wl_append_line(int fd, const fh_op *op)
{
    char line[2048];
    int n = fh_format(op, line, sizeof line);
    if (n > 0 && write(fd, line, (size_t)n) != n)
        perror("fg_workload: history write");
}

/* The gateway for the next request into buf: cf->url, or, when it is a comma-separated
 * list (several gateways sharing one store), the next of its entries in turn, so one client's
 * lock, write and unlock land on different gateways. */
static void base_url(const char *list, char *buf, size_t len)
{
    static unsigned long turn; /* one client per process: no lock needed */
    size_t n = 1;
    for (const char *c = list; *c != '\0'; c++) {
        n += *c == ',';
    }
    const char *start = list;
    for (unsigned long k = turn++ % n; k > 0; k--) {
        start = strchr(start, ',') + 1;
    }
    const char *end = strchr(start, ',');
    size_t m = end != NULL ? (size_t)(end - start) : strlen(start);
    snprintf(buf, len, "%.*s", (int)m, start);
}

/* Sets curl up for one request of op (its time limit is op's wait_ms + CURL_GRACE_MS) into
 * rp. body, if not NULL, must stay valid until the transfer is over. Returns the header
 * list, which the caller frees with curl_slist_free_all() after the transfer. */
struct curl_slist *wl_http_setup(CURL *curl, const conf *cf, const fh_op *op,
                                     const char *method, const char *path, const char *body,
                                     long long token, reply *rp)
{
    char url[512], hdr[64];
    struct curl_slist *headers = NULL;

    memset(rp, 0, sizeof *rp);
    base_url(cf->url, url, sizeof url);
    snprintf(url + strlen(url), sizeof url - strlen(url), "%s", path);
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, op->wait_ms + CURL_GRACE_MS);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, rp);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, rp);
    if (body != NULL) {
        headers = curl_slist_append(headers, token > 0 ? "Content-Type: text/plain"
                                                       : "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    }
    if (token > 0) {
        snprintf(hdr, sizeof hdr, "Fencing-Token: %lld", token);
        headers = curl_slist_append(headers, hdr);
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    return headers;
}

/* Fills op's status and error from the outcome rc of its transfer on curl. */
void wl_http_result(CURL *curl, CURLcode rc, fh_op *op)
{
    if (rc != CURLE_OK) {
        op->status = 0;
        snprintf(op->error, sizeof op->error, "curl%d", (int)rc);
        return;
    }
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    op->status = (int)status;
}

/* One HTTP request; fills op's times, status and error, and the reply. */
static void http(client *c, const conf *cf, fh_op *op, const char *method, const char *path,
                 const char *body, long long token, reply *rp)
{
    struct curl_slist *headers = wl_http_setup(c->curl, cf, op, method, path, body, token, rp);
    op->start_ns = fh_now_ns();
    CURLcode rc = curl_easy_perform(c->curl);
    op->end_ns = fh_now_ns();
    curl_slist_free_all(headers);
    wl_http_result(c->curl, rc, op);
}

/* Reads error, token and version out of a JSON answer into op. */
void wl_parse_json(const reply *rp, fh_op *op, int keep_token)
{
    json_error_t err;
    json_t *root = json_loadb(rp->body, rp->len, 0, &err);
    if (root == NULL)
        return;
    json_t *v = json_object_get(root, "error");
    if (json_is_string(v))
        snprintf(op->error, sizeof op->error, "%s", json_string_value(v));
    v = json_object_get(root, "token");
    if (json_is_integer(v) && !keep_token)
        op->token = json_integer_value(v);
    v = json_object_get(root, "version");
    if (json_is_integer(v))
        op->version = json_integer_value(v);
    json_decref(root);
}

static void op_init(fh_op *op, client *c, fh_kind kind, const char *resource, unsigned flags)
{
    memset(op, 0, sizeof *op);
    snprintf(op->client, sizeof op->client, "%s", c->name);
    snprintf(op->resource, sizeof op->resource, "%s", resource);
    op->kind = kind;
    op->flags = flags;
}

/* Fills op for a POST /lock of resource by a new owner of c's, and its JSON body. */
void wl_lock_op(fh_op *op, client *c, const char *resource, long ttl_ms, long wait_ms,
                    unsigned flags, char *body, size_t len)
{
    op_init(op, c, FH_LOCK, resource, flags);
    snprintf(op->owner, sizeof op->owner, "%s-%d-%ld", c->name, (int)getpid(), ++c->seq);
    op->ttl_ms = ttl_ms;
    op->wait_ms = wait_ms;
    snprintf(body, len,
             "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%ld,\"wait_ms\":%ld%s}",
             resource, op->owner, ttl_ms, wait_ms,
             (flags & FH_F_SHARED) != 0 ? ",\"mode\":\"shared\"" : "");
}

/* Fills op for a POST /renew or /unlock (kind) of grant's lock, and its JSON body. */
void wl_owner_op(fh_op *op, client *c, fh_kind kind, const fh_op *grant, unsigned flags,
                     char *body, size_t len)
{
    op_init(op, c, kind, grant->resource, flags);
    snprintf(op->owner, sizeof op->owner, "%s", grant->owner);
    op->token = grant->token;
    op->ttl_ms = kind == FH_RENEW ? grant->ttl_ms : 0;
    if (kind == FH_RENEW)
        snprintf(body, len, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%ld}",
                 grant->resource, grant->owner, grant->ttl_ms);
    else
        snprintf(body, len, "{\"resource\":\"%s\",\"owner\":\"%s\"}", grant->resource,
                 grant->owner);
}

const char *wl_owner_path(fh_kind kind)
{
    return kind == FH_RENEW ? "/renew" : "/unlock";
}

fh_op wl_lock(client *c, const conf *cf, const char *resource, long ttl_ms,
                     long wait_ms, unsigned flags)
{
    fh_op op;
    reply rp;
    char body[512];
    wl_lock_op(&op, c, resource, ttl_ms, wait_ms, flags, body, sizeof body);
    http(c, cf, &op, "POST", "/lock", body, 0, &rp);
    wl_parse_json(&rp, &op, 0);
    wl_append_line(c->fd, &op);
    return op;
}

void wl_lock_set(client *c, const conf *cf, const char *const *names, size_t n, long ttl_ms,
                 long wait_ms, unsigned flags, const char *const session[2], fh_op *ops)
{
    char body[1024], ignored[512];
    reply rp;
    int len = snprintf(body, sizeof body, "{\"resources\":[");

    for (size_t i = 0; i < n; i++) {
        wl_lock_op(&ops[i], c, names[i], ttl_ms, wait_ms, flags, ignored, sizeof ignored);
        if (i > 0) {
            snprintf(ops[i].owner, sizeof ops[i].owner, "%s", ops[0].owner);
        }
        if (session != NULL) {
            snprintf(ops[i].body, sizeof ops[i].body, "session:%s", session[1]);
        }
        len += snprintf(body + len, sizeof body - (size_t)len, "%s\"%s\"", i ? "," : "",
                        names[i]);
    }
    if (session != NULL) {
        snprintf(body + len, sizeof body - (size_t)len,
                 "],\"owner\":\"%s\",\"session\":\"%s\",\"wait_ms\":%ld%s}", ops[0].owner,
                 session[0], wait_ms,
                 (flags & FH_F_SHARED) != 0 ? ",\"mode\":\"shared\"" : "");
    } else {
        snprintf(body + len, sizeof body - (size_t)len,
                 "],\"owner\":\"%s\",\"ttl_ms\":%ld,\"wait_ms\":%ld%s}", ops[0].owner,
                 ttl_ms, wait_ms, (flags & FH_F_SHARED) != 0 ? ",\"mode\":\"shared\"" : "");
    }
    http(c, cf, &ops[0], "POST", "/lock", body, 0, &rp);
    wl_parse_json(&rp, &ops[0], 1);
    for (size_t i = 1; i < n; i++) {
        ops[i].start_ns = ops[0].start_ns;
        ops[i].end_ns = ops[0].end_ns;
        ops[i].status = ops[0].status;
        snprintf(ops[i].error, sizeof ops[i].error, "%s", ops[0].error);
    }
    json_t *root = ops[0].status == 200 ? json_loadb(rp.body, rp.len, 0, NULL) : NULL;
    size_t k;
    json_t *e;
    for (size_t i = 0; i < n; i++) {
        ops[i].token = 0;
        json_array_foreach(json_object_get(root, "locks"), k, e) {
            const char *name = json_string_value(json_object_get(e, "resource"));
            if (name != NULL && strcmp(name, names[i]) == 0) {
                ops[i].token = json_integer_value(json_object_get(e, "token"));
            }
        }
    }
    json_decref(root);
    for (size_t i = 0; i < n; i++) {
        wl_append_line(c->fd, &ops[i]);
    }
}

fh_op wl_owner_call(client *c, const conf *cf, fh_kind kind, const fh_op *grant,
                           unsigned flags)
{
    fh_op op;
    reply rp;
    char body[512];
    wl_owner_op(&op, c, kind, grant, flags, body, sizeof body);
    http(c, cf, &op, "POST", wl_owner_path(kind), body, 0, &rp);
    wl_parse_json(&rp, &op, kind != FH_RENEW);
    wl_append_line(c->fd, &op);
    return op;
}

fh_op wl_write(client *c, const conf *cf, const char *resource, long long token,
                      const char *owner, unsigned flags)
{
    fh_op op;
    reply rp;
    char path[256];
    op_init(&op, c, FH_WRITE, resource, flags);
    snprintf(op.owner, sizeof op.owner, "%s", owner);
    op.token = token;
    snprintf(op.body, sizeof op.body, "%s:%d:%ld:%lld", c->name, (int)getpid(), ++c->seq, token);
    snprintf(path, sizeof path, "/resources/%s", resource);
    http(c, cf, &op, "PUT", path, op.body, token, &rp);
    wl_parse_json(&rp, &op, 1);
    wl_append_line(c->fd, &op);
    return op;
}

/* A GET of resource, with token in Fencing-Token when it is > 0 (then recorded as sent). */
static void read_as(client *c, const conf *cf, const char *resource, fh_kind kind,
                    long long token, unsigned flags)
{
    fh_op op;
    reply rp;
    char path[256];
    op_init(&op, c, kind, resource, flags);
    op.token = token;
    snprintf(path, sizeof path, "/resources/%s", resource);
    http(c, cf, &op, "GET", path, NULL, token, &rp);
    if (op.status == 200) {
        op.token = token > 0 ? token : rp.header_token;
        op.version = rp.etag;
        snprintf(op.body, sizeof op.body, "%.*s", (int)sizeof op.body - 1, rp.body);
    } else {
        wl_parse_json(&rp, &op, token > 0);
    }
    wl_append_line(c->fd, &op);
}

void wl_read(client *c, const conf *cf, const char *resource, fh_kind kind)
{
    read_as(c, cf, resource, kind, 0, 0);
}

void wl_fenced_read(client *c, const conf *cf, const char *resource, long long token,
                    unsigned flags)
{
    read_as(c, cf, resource, FH_FENCED_READ, token, flags);
}

int wl_open_history(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        fprintf(stderr, "fg_workload: %s: %s\n", path, strerror(errno));
    return fd;
}

int wl_client_init(client *c, const char *name, int fd, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->fd = fd;
    c->rng = seed * 2654435761u + 88172645463325252ull;
    c->curl = curl_easy_init();
    return c->curl != NULL ? 0 : -1;
}

/* Appends a mark (event) that names a resource, an owner and its ttl_ms to fd. */
void wl_holder_mark(int fd, const char *resource, const char *owner, long ttl_ms,
                        const char *event)
{
    fh_op op = {0};
    snprintf(op.client, sizeof op.client, "p");
    op.kind = FH_MARK;
    snprintf(op.resource, sizeof op.resource, "%s", resource);
    snprintf(op.owner, sizeof op.owner, "%s", owner);
    op.ttl_ms = ttl_ms;
    op.start_ns = op.end_ns = fh_now_ns();
    snprintf(op.body, sizeof op.body, "%s", event);
    wl_append_line(fd, &op);
}
