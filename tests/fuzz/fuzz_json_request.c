/*
 * Fuzz target: the request decoding and validation of every endpoint, through the functions
 * the handlers call: gw__parse_object() and gw__lock_args() for POST /lock,
 * gw__owner_args() for POST /unlock and /renew (they use gw__field_name, gw__field_int, the
 * "fair" flag and gw__idempotency_key), and gw__path_resource() for the {resource} of
 * GET /locks/{resource} and GET|PUT /resources/{resource}.
 *
 * These take a gw_request. The fake one here has a body, a {resource} and a connection that
 * is never dereferenced: libmicrohttpd's MHD_get_connection_values, MHD_queue_response and
 * MHD_create_response_from_buffer are replaced at link time (-Wl,--wrap, see
 * CMakeLists.txt), because a real connection cannot be made per fuzz input. The wrappers
 * serve the input's headers and record every queued answer and its body.
 *
 * Invariants:
 *   - a refused request queues exactly one answer: 400, a JSON object whose "error" is
 *     "invalid_request" and whose "message" is printable ASCII (client bytes never reach the
 *     answer raw); an accepted request queues nothing;
 *   - accepted arguments obey the API: resource [A-Za-z0-9._:-]{1,200}, owner {1,128} (the
 *     body's, else a generated one, the same again for the same Idempotency-Key), ttl_ms
 *     100..3600000, wait_ms 0..60000, fair 0 or 1, and the Idempotency-Key (16 characters at least) is the single
 *     header's value, valid, or NULL without one;
 *   - a path {resource} is accepted exactly when it is a valid resource name.
 *
 * Input: a first line naming the endpoint (lock, unlock, renew or path), header lines
 * "Name: value" up to an empty line, then the body (for path: the raw {resource} text).
 */
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "http/args.h"
#include "http/respond.h"
#include "rt/gateway.h"

#define MAX_HEADERS 8

/* What the MHD wrappers see and record for the current input. */
static struct {
    int n_headers;
    char *names[MAX_HEADERS];
    char *values[MAX_HEADERS];
    int queued;                  /* answers queued */
    unsigned int status;         /* of the last one */
    char *body;                  /* copy of the last response body built */
} fake;

static char fake_conn_storage;
#define FAKE_CONN ((struct MHD_Connection *)(void *)&fake_conn_storage)

int __wrap_MHD_get_connection_values(struct MHD_Connection *conn, enum MHD_ValueKind kind,
                                     MHD_KeyValueIterator it, void *cls);
enum MHD_Result __wrap_MHD_queue_response(struct MHD_Connection *conn, unsigned int status,
                                          struct MHD_Response *resp);
struct MHD_Response *__wrap_MHD_create_response_from_buffer(size_t size, void *buffer,
                                                            enum MHD_ResponseMemoryMode mode);
struct MHD_Response *__real_MHD_create_response_from_buffer(size_t size, void *buffer,
                                                            enum MHD_ResponseMemoryMode mode);

int __wrap_MHD_get_connection_values(struct MHD_Connection *conn, enum MHD_ValueKind kind,
                                     MHD_KeyValueIterator it, void *cls)
{
    fuzz_check(conn == FAKE_CONN, "headers are read from the request's connection");
    if ((kind & MHD_HEADER_KIND) == 0) {
        return 0;
    }
    for (int i = 0; i < fake.n_headers; i++) {
        if (it != NULL && it(cls, MHD_HEADER_KIND, fake.names[i], fake.values[i]) != MHD_YES) {
            return i + 1;
        }
    }
    return fake.n_headers;
}

enum MHD_Result __wrap_MHD_queue_response(struct MHD_Connection *conn, unsigned int status,
                                          struct MHD_Response *resp)
{
    fuzz_check(conn == FAKE_CONN && resp != NULL, "an answer is queued on the connection");
    fake.queued++;
    fake.status = status;
    return MHD_YES;
}

struct MHD_Response *__wrap_MHD_create_response_from_buffer(size_t size, void *buffer,
                                                            enum MHD_ResponseMemoryMode mode)
{
    free(fake.body);
    fake.body = malloc(size + 1);
    fuzz_check(fake.body != NULL, "malloc");
    memcpy(fake.body, buffer, size);
    fake.body[size] = '\0';
    return __real_MHD_create_response_from_buffer(size, buffer, mode);
}

static gw_server srv; /* zero: not shutting down, a zero owner secret */
static gw_config cfg; /* the defaults, as fencegate without flags has them */

/* srv with the default configuration (a handler reads limits such as --max-ttl from it). */
static void server_init(void)
{
    char argv0[] = "fencegate";
    char *argv[] = {argv0, NULL};
    char err[512];

    if (srv.rt.cfg == NULL) {
        fuzz_check(gw__config_parse(&cfg, 1, argv, err, sizeof err) == 0, "default configuration");
        srv.rt.cfg = &cfg;
    }
}

/* The one answer of a refused request is a well-formed 400 invalid_request. */
static void check_refused(void)
{
    json_error_t error;

    fuzz_check(fake.queued == 1, "a refused request queues exactly one answer");
    fuzz_check(fake.status == MHD_HTTP_BAD_REQUEST, "a refused request is a 400");
    json_t *doc = json_loads(fake.body != NULL ? fake.body : "", 0, &error);
    fuzz_check(json_is_object(doc), "the error body is a JSON object");
    const char *code = json_string_value(json_object_get(doc, "error"));
    const char *message = json_string_value(json_object_get(doc, "message"));
    fuzz_check(code != NULL && strcmp(code, "invalid_request") == 0, "error is invalid_request");
    fuzz_check(message != NULL && message[0] != '\0', "the error has a message");
    for (const char *p = message; *p != '\0'; p++) {
        fuzz_check(*p >= 0x20 && *p <= 0x7e, "the message is printable ASCII");
    }
    json_decref(doc);
}

/* The Idempotency-Key headers of the input: how many, and the last one. */
static int idem_headers(const char **last)
{
    int n = 0;
    *last = NULL;
    for (int i = 0; i < fake.n_headers; i++) {
        if (strcasecmp(fake.names[i], "Idempotency-Key") == 0) {
            n++;
            *last = fake.values[i];
        }
    }
    return n;
}

static void check_accepted(const gw_lock_args *a, json_t *root, int lock, int renew)
{
    const char *key = NULL;
    int n_keys = idem_headers(&key);

    fuzz_check(fake.queued == 0, "an accepted request queues nothing");
    fuzz_check(a->resource != NULL && fuzz_valid_name(a->resource, 200), "resource is valid");
    fuzz_check(a->resource == json_string_value(json_object_get(root, "resource")),
               "resource is the body's");
    fuzz_check(a->owner != NULL && fuzz_valid_name(a->owner, 128), "owner is valid");
    if (!a->owner_generated) {
        fuzz_check(a->owner == json_string_value(json_object_get(root, "owner")),
                   "owner is the body's");
    } else {
        fuzz_check(lock && json_object_get(root, "owner") == NULL && a->owner == a->owner_buf &&
                       strlen(a->owner) == 32,
                   "an owner is generated only for a /lock without one");
    }
    fuzz_check(n_keys <= 1, "a repeated Idempotency-Key is refused");
    fuzz_check(n_keys == 0 ? a->idem_key == NULL
                           : a->idem_key == key && fuzz_valid_name(key, 128) &&
                                 strlen(key) >= 16,
               "the Idempotency-Key is the header's, and valid");
    if (lock || renew) {
        fuzz_check(a->ttl_ms >= 100 && a->ttl_ms <= 3600000, "ttl_ms in 100..3600000");
    }
    if (lock) {
        fuzz_check(a->wait_ms >= 0 && a->wait_ms <= GW_MAX_WAIT_MS, "wait_ms in 0..60000");
        fuzz_check(a->fair == 0 || a->fair == 1, "fair is 0 or 1");
    }
}

static void run_body(gw_request *req, const char *endpoint)
{
    json_t *root = NULL;
    enum MHD_Result result = MHD_YES;
    gw_lock_args a, again;
    int lock = strcmp(endpoint, "lock") == 0, renew = strcmp(endpoint, "renew") == 0;

    if (gw__parse_object(req, &root, &result) != 0) {
        fuzz_check(root == NULL, "no document after a parse error");
        check_refused();
        return;
    }
    fuzz_check(json_is_object(root), "gw__parse_object returns an object");
    int rc = lock ? gw__lock_args(req, root, &a, &result)
                  : gw__owner_args(req, root, renew, &a, &result);
    fuzz_check(rc == 0 || rc == -1, "returns 0 or -1");
    if (rc != 0) {
        check_refused();
    } else {
        check_accepted(&a, root, lock, renew);
        if (lock && a.owner_generated && a.idem_key != NULL) {
            /* A retry with the same key must land on the same owner, or it cannot replay. */
            fuzz_check(gw__lock_args(req, root, &again, &result) == 0 &&
                           strcmp(again.owner, a.owner) == 0,
                       "the same Idempotency-Key derives the same owner");
        }
    }
    json_decref(root);
}

static void run_path(gw_request *req, const char *param)
{
    enum MHD_Result result = MHD_YES;

    /* As server.c's request_start() fills them from the router's param. */
    req->param = param;
    req->param_too_long = strlen(param) > LK_RESOURCE_MAX;
    int rc = gw__path_resource(req, &result);
    fuzz_check((rc == 0) == fuzz_valid_name(param, 200), "a path resource is a valid name");
    if (rc != 0) {
        check_refused();
    } else {
        fuzz_check(fake.queued == 0, "an accepted path queues nothing");
    }
}

/* Splits off the next line ("\n"-terminated) of text[*pos, size); NULL at the end. */
static char *next_line(char *text, size_t size, size_t *pos)
{
    if (*pos >= size) {
        return NULL;
    }
    char *line = text + *pos;
    char *nl = memchr(line, '\n', size - *pos);
    if (nl == NULL) {
        *pos = size;
        return line;
    }
    *nl = '\0';
    *pos = (size_t)(nl - text) + 1;
    return line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    size_t pos = 0;
    char *endpoint = next_line(text, size, &pos);
    gw_request req;

    if (endpoint == NULL || (strcmp(endpoint, "lock") != 0 && strcmp(endpoint, "unlock") != 0 &&
                             strcmp(endpoint, "renew") != 0 && strcmp(endpoint, "path") != 0)) {
        free(text);
        return 0;
    }
    memset(&fake, 0, sizeof fake);
    for (char *line = next_line(text, size, &pos); line != NULL && line[0] != '\0';
         line = next_line(text, size, &pos)) {
        char *colon = strchr(line, ':');
        if (colon != NULL && fake.n_headers < MAX_HEADERS) {
            *colon = '\0';
            /* MHD drops the spaces after the colon. */
            fake.names[fake.n_headers] = line;
            fake.values[fake.n_headers] = colon + 1 + strspn(colon + 1, " \t");
            fake.n_headers++;
        }
    }
    memset(&req, 0, sizeof req);
    server_init();
    req.srv = &srv;
    req.rt = &srv.rt;
    req.conn = FAKE_CONN;
    req.param = "";
    snprintf(req.method, sizeof req.method, "%s", strcmp(endpoint, "path") == 0 ? "GET" : "POST");
    size_t body_len = size - (pos < size ? pos : size);
    if (strcmp(endpoint, "path") == 0) {
        run_path(&req, text + (size - body_len));
    } else {
        /* As server.c's body_append() leaves it: exactly the bytes, then a NUL. */
        req.body = malloc(body_len + 1);
        fuzz_check(req.body != NULL, "malloc");
        memcpy(req.body, data + (size - body_len), body_len);
        req.body[body_len] = '\0';
        req.body_len = body_len;
        run_body(&req, endpoint);
        free(req.body);
    }
    free(fake.body);
    fake.body = NULL;
    free(text);
    return 0;
}
