/*
 * fencectl's HTTP client: one libcurl easy handle, a timeout on every request, retries of
 * transient failures, and the one-line error reports.
 *
 * A request is sent again only when that is safe: an attempt that never connected did
 * nothing, and a request with an Idempotency-Key (or a GET) can be repeated after a lost
 * answer because the gateway replays the first answer. The bearer token sits in one header
 * string that is never printed and is wiped before it is freed.
 */
#include "fc_internal.h"
#include "token_file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 3000
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 1000
#define MAX_ATTEMPTS 5

int64_t fc__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    /* A signal cuts the nap short; the caller's loop looks at the clock again. */
    nanosleep(&ts, NULL);
}

int fc__random_id(char *buf)
{
    unsigned char raw[FC_ID_LEN / 2];
    size_t got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        return -1;
    }
    while (got < sizeof raw) {
        ssize_t n = read(fd, raw + got, sizeof raw - got);
        if (n <= 0 && errno != EINTR) {
            break;
        }
        got += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    if (got < sizeof raw) {
        return -1;
    }
    for (size_t i = 0; i < sizeof raw; i++) {
        snprintf(buf + 2 * i, 3, "%02x", raw[i]);
    }
    return 0;
}

/* Reads the bearer token with the rule fencegate reads its own file by (token_file.h).
 * Returns a malloc'd "Authorization: Bearer <token>" or NULL with err. */
static char *read_auth_header(const char *path, char *err, size_t errlen)
{
    char token[FG_AUTH_TOKEN_MAX + 1];
    char *header = NULL;

    long len = fg_auth_token_read(path, token, err, errlen);
    if (len < 0) {
        return NULL;
    }
    size_t size = (size_t)len + sizeof "Authorization: Bearer ";
    header = malloc(size);
    if (header != NULL) {
        snprintf(header, size, "Authorization: Bearer %s", token);
    } else {
        snprintf(err, errlen, "out of memory");
    }
    memset(token, 0, sizeof token); /* as fc__client_free() wipes the header */
    return header;
}

int fc__client_init(fc_client *c, const fc_options *o, char *err, size_t errlen)
{
    const char *url = o->url;
    const char *token_file = o->auth_token_file;

    memset(c, 0, sizeof *c);
    c->verbose = o->verbose;
    if (url == NULL || url[0] == '\0') {
        url = getenv("FENCEGATE_URL");
    }
    if (url == NULL || url[0] == '\0') {
        url = FC_DEFAULT_URL;
    }
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        snprintf(err, errlen, "--url must start with http:// or https://");
        return -1;
    }
    if (token_file == NULL || token_file[0] == '\0') {
        token_file = getenv("FENCEGATE_AUTH_TOKEN_FILE");
    }
    if (token_file != NULL && token_file[0] != '\0') {
        c->auth_header = read_auth_header(token_file, err, errlen);
        if (c->auth_header == NULL) {
            return -1;
        }
    }
    c->base_url = strdup(url);
    c->curl = curl_easy_init();
    if (c->base_url == NULL || c->curl == NULL) {
        snprintf(err, errlen, "cannot set up libcurl");
        return -1;
    }
    /* TLS: the peer and its name are always verified (libcurl's defaults); these only say
     * what to trust and which client certificate to show. */
    const char *cacert = o->cacert != NULL ? o->cacert : getenv("FENCEGATE_CACERT");
    const char *cert = o->cert != NULL ? o->cert : getenv("FENCEGATE_CERT");
    const char *key = o->key != NULL ? o->key : getenv("FENCEGATE_KEY");
    if ((cert != NULL && cert[0] != '\0') != (key != NULL && key[0] != '\0')) {
        snprintf(err, errlen, "--cert and --key go together");
        return -1;
    }
    c->cacert = cacert != NULL && cacert[0] != '\0' ? cacert : NULL;
    c->cert = cert != NULL && cert[0] != '\0' ? cert : NULL;
    c->key = c->cert != NULL ? key : NULL;
    size_t len = strlen(c->base_url);
    while (len > 0 && c->base_url[len - 1] == '/') {
        c->base_url[--len] = '\0';
    }
    return 0;
}

void fc__client_free(fc_client *c)
{
    if (c->curl != NULL) {
        curl_easy_cleanup(c->curl);
    }
    if (c->auth_header != NULL) {
        memset(c->auth_header, 0, strlen(c->auth_header));
        free(c->auth_header);
    }
    free(c->base_url);
    memset(c, 0, sizeof *c);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    fc_response *r = userdata;
    size_t n = size * nmemb;
    char *grown = realloc(r->body, r->len + n + 1);

    if (grown == NULL) {
        return 0; /* libcurl fails the transfer with CURLE_WRITE_ERROR */
    }
    r->body = grown;
    memcpy(r->body + r->len, ptr, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

/* Copies the value of header `name` into out when line is that header. */
static void take_header(const char *line, size_t n, const char *name, char *out, size_t outlen)
{
    size_t name_len = strlen(name);

    if (n <= name_len || line[name_len] != ':' || strncasecmp(line, name, name_len) != 0) {
        return;
    }
    size_t start = name_len + 1;
    while (start < n && (line[start] == ' ' || line[start] == '\t')) {
        start++;
    }
    size_t end = n;
    while (end > start && isspace((unsigned char)line[end - 1])) {
        end--;
    }
    snprintf(out, outlen, "%.*s", (int)(end - start), line + start);
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *userdata)
{
    fc_response *r = userdata;
    size_t n = size * nmemb;

    take_header(line, n, "Content-Type", r->content_type, sizeof r->content_type);
    take_header(line, n, "Fencing-Token", r->fencing_token, sizeof r->fencing_token);
    return n;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    const fc_client *c = userdata;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return c->abort_flag != NULL && *c->abort_flag != 0;
}

void fc__response_free(fc_response *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/* The request's headers. curl_slist_append copies each line, so the buffers here may go. */
static struct curl_slist *build_headers(const fc_client *c, const fc_request *rq)
{
    char line[256];
    struct curl_slist *headers = NULL;

    /* No "Expect: 100-continue" round trip before a body. */
    headers = curl_slist_append(headers, "Expect:");
    if (c->auth_header != NULL) {
        headers = curl_slist_append(headers, c->auth_header);
    }
    if (rq->idem_key != NULL) {
        snprintf(line, sizeof line, "Idempotency-Key: %s", rq->idem_key);
        headers = curl_slist_append(headers, line);
    }
    if (rq->content_type != NULL) {
        snprintf(line, sizeof line, "Content-Type: %s", rq->content_type);
        headers = curl_slist_append(headers, line);
    }
    if (rq->fencing_token != NULL) {
        snprintf(line, sizeof line, "Fencing-Token: %s", rq->fencing_token);
        headers = curl_slist_append(headers, line);
    }
    return headers;
}

/* Sets every option of the reused handle for one attempt of rq into r. */
static void set_options(fc_client *c, const fc_request *rq, const char *url, char *errbuf,
                        fc_response *r)
{
    CURL *h = c->curl;

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)rq->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(rq->timeout_ms < CONNECT_TIMEOUT_MS ? rq->timeout_ms
                                                                : CONNECT_TIMEOUT_MS));
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    if (c->cacert != NULL) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cacert);
    }
    if (c->cert != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key);
    }
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
    if (rq->body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->len);
    }
}

/* One attempt of rq: fills *r, which it frees first. */
static void attempt(fc_client *c, const fc_request *rq, fc_response *r)
{
    char url[1024];
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *headers = NULL;

    fc__response_free(r);
    snprintf(url, sizeof url, "%s%s", c->base_url, rq->path);
    set_options(c, rq, url, errbuf, r);
    headers = build_headers(c, rq);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);

    CURLcode rc = curl_easy_perform(c->curl);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
        r->connected = 1;
    } else {
        r->connected = rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST;
        snprintf(r->transport_error, sizeof r->transport_error, "no answer from %s: %s",
                 c->base_url, errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc));
    }
    /* The handle points at this frame's buffers: reset it before they go. */
    curl_easy_reset(c->curl);
    curl_slist_free_all(headers);
    if (r->body == NULL) {
        r->body = calloc(1, 1);
    }
    json_t *root = r->body != NULL ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    if (json_is_object(root)) {
        r->json = root;
    } else {
        json_decref(root);
    }
}

/* 1 when another attempt may help and is safe. */
static int worth_retrying(const fc_request *rq, const fc_response *r)
{
    if (r->status == 0) {
        return !r->connected || rq->resend_safe;
    }
    return r->status == 502 || r->status == 503 || r->status == 504;
}

void fc__request(fc_client *c, const fc_request *rq, fc_response *r)
{
    int64_t backoff_ms = BACKOFF_FIRST_MS;

    memset(r, 0, sizeof *r);
    for (int n = 1;; n++) {
        attempt(c, rq, r);
        if (n >= MAX_ATTEMPTS || !worth_retrying(rq, r) ||
            (c->abort_flag != NULL && *c->abort_flag != 0)) {
            return;
        }
        int64_t now = fc__now_ms();
        if (now + backoff_ms >= rq->retry_until_ms) {
            return;
        }
        if (c->verbose) {
            fprintf(stderr, "fencectl: %s: %s; retrying in %lld ms\n", c->what,
                    r->status != 0 ? "the gateway is unavailable" : r->transport_error,
                    (long long)backoff_ms);
        }
        nap_ms(backoff_ms);
        backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
    }
}

void fc__post_json(fc_client *c, const char *path, json_t *body, const char *idem_key,
                   int64_t timeout_ms, int64_t retry_until_ms, fc_response *r)
{
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    fc_request rq = {.method = "POST",
                     .path = path,
                     .idem_key = idem_key,
                     .content_type = "application/json",
                     .body = text,
                     .len = text != NULL ? strlen(text) : 0,
                     .timeout_ms = timeout_ms,
                     .resend_safe = idem_key != NULL,
                     .retry_until_ms = retry_until_ms};

    json_decref(body);
    if (text == NULL) {
        memset(r, 0, sizeof *r);
        snprintf(r->transport_error, sizeof r->transport_error, "out of memory");
        return;
    }
    fc__request(c, &rq, r);
    free(text);
}

const char *fc__error_code(const fc_response *r)
{
    json_t *v = r->json != NULL ? json_object_get(r->json, "error") : NULL;
    return json_is_string(v) ? json_string_value(v) : "";
}

int64_t fc__json_int(const fc_response *r, const char *field)
{
    json_t *v = r->json != NULL ? json_object_get(r->json, field) : NULL;
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* The gateway's "message", or "" when there is none. */
static const char *message_of(const fc_response *r)
{
    json_t *v = r->json != NULL ? json_object_get(r->json, "message") : NULL;
    return json_is_string(v) ? json_string_value(v) : "";
}

int fc__report(const fc_client *c, const fc_response *r)
{
    const char *code = fc__error_code(r);
    const char *message = message_of(r);

    if (r->status == 0) {
        fprintf(stderr, "fencectl: %s: %s\n", c->what, r->transport_error);
        return FC_EXIT_UNAVAILABLE;
    }
    if (r->status == 409 && strcmp(code, "locked") == 0) {
        fprintf(stderr, "fencectl: %s: locked by another owner, retry after %lld ms\n",
                c->what, (long long)fc__json_int(r, "retry_after_ms"));
        return FC_EXIT_CONFLICT;
    }
    if (r->status == 409 && strcmp(code, "not_owner") == 0) {
        /* The gateway says whether another owner holds it now or nobody does. */
        fprintf(stderr, "fencectl: %s: %s\n", c->what,
                message[0] != '\0' ? message : "this owner does not hold the lock");
        return FC_EXIT_CONFLICT;
    }
    if (r->status == 409 && strcmp(code, "stale_token") == 0) {
        fprintf(stderr, "fencectl: %s: stale token %lld: token %lld has already written it\n",
                c->what, (long long)fc__json_int(r, "token"),
                (long long)fc__json_int(r, "highest_token"));
        return FC_EXIT_CONFLICT;
    }
    const char *hint = r->status == 401 ? " (check --auth-token-file)" : "";
    if (message[0] != '\0') {
        fprintf(stderr, "fencectl: %s: %s (%ld %s)%s\n", c->what, message, r->status, code,
                hint);
    } else {
        fprintf(stderr, "fencectl: %s: the gateway answered HTTP %ld%s\n", c->what, r->status,
                hint);
    }
    if (r->status == 409) {
        return FC_EXIT_CONFLICT;
    }
    return r->status >= 500 ? FC_EXIT_UNAVAILABLE : FC_EXIT_REFUSED;
}
