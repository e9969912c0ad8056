/*
 * Building answers and reading request input: the single error helper, JSON responses, and
 * the field checks shared by the operations. Every error body is {"error": "<code>",
 * "message": "..."} and is built by gw__error_response().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/respond.h"
#include "rt/gateway.h"
#include "rt/log.h"
#include "rt/util.h"

/* Answers up to this many bytes are written on the stack (a lock's answer is about 100),
 * larger ones into a heap buffer of their own (a Redlock /readyz or its 503, which
 * gateway_redlock reads with 3 and 5 masters, is one). */
#define GW_ANSWER_STACK 512

static struct MHD_Response *json_response(json_t *body)
{
    char small[GW_ANSWER_STACK];
    struct MHD_Response *resp = NULL;

    if (body == NULL) {
        return NULL;
    }
    /* json_dumpb writes into a given buffer, where json_dumps grows a heap buffer step by
     * step and copies it out: four allocations fewer per answer. MHD copies the bytes. */
    size_t len = json_dumpb(body, small, sizeof small, JSON_COMPACT);
    if (len > 0 && len <= sizeof small) {
        json_decref(body);
        resp = MHD_create_response_from_buffer(len, small, MHD_RESPMEM_MUST_COPY);
    } else {
        char *text = len > 0 ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (text == NULL) {
            return NULL;
        }
        /* jansson allocates with malloc (we never change its allocator), so MHD may free
         * it. */
        resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL) {
            free(text);
        }
    }
    if (resp == NULL) {
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return resp;
}

static struct MHD_Response *build_error(const char *code, json_t *extra, const char *fmt,
                                        va_list ap)
{
    char message[512];
    vsnprintf(message, sizeof message, fmt, ap);
    /* Messages may quote client input (jansson's "near '...'"), which may not be UTF-8 and
     * would make the JSON answer impossible to build: keep them to printable ASCII. */
    for (char *p = message; *p != '\0'; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            *p = '?';
        }
    }
    /* "error" and "message" come first; extra fields follow in their own order. */
    json_t *body = json_pack("{s:s, s:s}", "error", code, "message", message);
    if (body == NULL || (extra != NULL && json_object_update_missing(body, extra) != 0)) {
        json_decref(body);
        json_decref(extra);
        return NULL;
    }
    json_decref(extra);
    return json_response(body);
}

struct MHD_Response *gw__error_response(const char *code, json_t *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    struct MHD_Response *resp = build_error(code, extra, fmt, ap);
    va_end(ap);
    return resp;
}

enum MHD_Result gw__queue(gw_request *req, unsigned int status, struct MHD_Response *resp)
{
    if (resp == NULL) {
        return MHD_NO; /* out of memory: MHD closes the connection */
    }
    if (atomic_load(&req->srv->shutting_down)) {
        /* Keep-alive clients must reconnect elsewhere: this process is going away. */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    req->answered = 1;
    req->status = (int)status;
    enum MHD_Result result = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    return result;
}

enum MHD_Result gw__send_json(gw_request *req, unsigned int status, json_t *body)
{
    return gw__queue(req, status, json_response(body));
}

enum MHD_Result gw__send_error(gw_request *req, unsigned int status, const char *code,
                               json_t *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    struct MHD_Response *resp = build_error(code, extra, fmt, ap);
    va_end(ap);
    return gw__queue(req, status, resp);
}

void gw__note_redis(gw_rt *rt, lk_status st)
{
    atomic_store(&rt->metrics.redis_up, st == LK_EUNAVAILABLE ? 0 : 1);
}

enum MHD_Result gw__send_lk_error(gw_request *req, const char *why, lk_status st)
{
    switch (st) {
    case LK_EINVAL:
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                              "invalid argument");
    case LK_EIDEMPOTENCY:
        return gw__send_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "idempotency_key_reused", NULL,
                              "this Idempotency-Key was already used by another request "
                              "on this resource (another owner or operation)");
    case LK_EUNAVAILABLE:
    case LK_EREPLICAS:
    case LK_EREDIS:
    case LK_ENOMEM:
        /* The reason goes to the log, not to the client: it may describe our deployment. */
        gw__log_event(req->rt->cfg, "warn", "redis: %s: %s", lk_status_name(st),
                      why != NULL ? why : "no client");
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the lock service (Redis) is unavailable: %s; try again",
                              lk_status_str(st));
    default:
        gw__log_event(req->rt->cfg, "error", "locklib: unexpected %s", lk_status_name(st));
        return gw__send_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", NULL,
                              "unexpected lock service answer: %s", lk_status_name(st));
    }
}

#define KEY_SHOWN_MAX 64     /* longer keys are not named: they are not ours anyway */
#define KEY_COLONS_MAX 256    /* ':' examined at most: bounds the work on a hostile body */

static int is_json_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* 1 when body[i] is a '"' that no backslash escapes. */
static int is_real_quote(const char *body, size_t i)
{
    size_t backslashes = 0;
    if (body[i] != '"') {
        return 0;
    }
    while (backslashes < i && body[i - 1 - backslashes] == '\\') {
        backslashes++;
    }
    return backslashes % 2 == 0;
}

/* Scans forward from just after a key's ':' to end, in the raw text. Returns 1 when the
 * value that starts there is still open at end (the error lies inside it), 0 when it closed
 * before (a ',' or the object's closing brace at its own depth came first). */
static int value_open_at(const char *body, size_t from, size_t end)
{
    int depth = 0, in_string = 0;

    for (size_t i = from; i < end; i++) {
        char ch = body[i];
        if (in_string) {
            if (ch == '\\') {
                i++; /* skips the escaped byte; i < end is checked again by the loop */
            } else if (ch == '"') {
                in_string = 0;
            }
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            if (--depth < 0) {
                return 0;
            }
        } else if (ch == ',' && depth == 0) {
            return 0;
        }
    }
    return 1;
}

/* Finds the object key whose value holds byte offset pos of the raw body: the last `"key":`
 * before pos whose value is still open at pos (see value_open_at). A heuristic for error
 * messages only: it never reads outside body[0, min(pos, len)). Returns 1 with the key's
 * start and length, or 0 when none is found (a syntax error between members, trailing
 * bytes, a key too long to show). */
static int key_before(const char *body, size_t len, long pos, size_t *key_start,
                      size_t *key_len)
{
    size_t end = pos < 0 ? 0 : (size_t)pos > len ? len : (size_t)pos;
    int colons = 0;

    for (size_t c = end; c-- > 0 && colons < KEY_COLONS_MAX;) {
        if (body[c] != ':') {
            continue;
        }
        colons++;
        /* `"key"   :` -- the closing quote of the key, then its opening quote. */
        size_t q = c;
        while (q > 0 && is_json_space(body[q - 1])) {
            q--;
        }
        if (q == 0 || !is_real_quote(body, q - 1)) {
            continue;
        }
        size_t close = q - 1;
        size_t open = close;
        while (open > 0 && !is_real_quote(body, open - 1)) {
            open--;
        }
        if (open == 0) {
            continue; /* no opening quote */
        }
        open--; /* body[open] is the opening quote */
        /* A key follows '{' or ','; a quoted ':' inside a string value does not. */
        size_t before = open;
        while (before > 0 && is_json_space(body[before - 1])) {
            before--;
        }
        if (before == 0 || (body[before - 1] != '{' && body[before - 1] != ',')) {
            continue;
        }
        size_t n = close - open - 1;
        if (n == 0 || n > KEY_SHOWN_MAX || !value_open_at(body, c + 1, end)) {
            continue; /* an enclosing key may still hold the error */
        }
        *key_start = open + 1;
        *key_len = n;
        return 1;
    }
    return 0;
}

int gw__parse_object(gw_request *req, json_t **root, enum MHD_Result *result)
{
    json_error_t error;

    *root = NULL;
    if (req->body_len == 0) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "the body must be a JSON object");
        return -1;
    }
    /* jansson checks UTF-8, rejects NUL in strings, integers out of int64 and reals that
     * overflow (1e400), and with this flag, duplicate keys. */
    json_t *doc = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &error);
    if (doc == NULL) {
        char field[KEY_SHOWN_MAX + 16] = "";
        size_t key_start = 0, key_len = 0;
        /* jansson names the token ("near '1e400'"), not the field: find the key it is in. */
        if (key_before(req->body, req->body_len, (long)error.position, &key_start, &key_len)) {
            snprintf(field, sizeof field, "field '%.*s': ", (int)key_len,
                     req->body + key_start);
        }
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "the body is not valid JSON: %s%s (at byte %d)", field,
                                 error.text, error.position);
        return -1;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "the body must be a JSON object");
        return -1;
    }
    *root = doc;
    return 0;
}

int gw__fields_known(gw_request *req, json_t *root, const char *const *known,
                     enum MHD_Result *result)
{
    const char *key = NULL;
    json_t *value = NULL;
    char names[128] = "";

    json_object_foreach(root, key, value) {
        int found = 0;
        for (int i = 0; known[i] != NULL && !found; i++) {
            found = strcmp(key, known[i]) == 0;
        }
        if (found) {
            continue;
        }
        size_t used = 0;
        for (int i = 0; known[i] != NULL; i++) {
            int n = snprintf(names + used, sizeof names - used, "%s%s", i > 0 ? ", " : "",
                             known[i]);
            if (n < 0 || (size_t)n >= sizeof names - used) {
                break;
            }
            used += (size_t)n;
        }
        /* The key is client bytes: cut to KEY_SHOWN_MAX, build_error keeps it printable. */
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field '%.*s' is not known here (known: %s)", KEY_SHOWN_MAX,
                                 key, names);
        return -1;
    }
    return 0;
}

/* The name rules of fencegate/limits.h, in words, for the 400 answers. */
#define STR_(x) #x
#define STR(x) STR_(x)
#define RESOURCE_RULE "1 to " STR(FG_RESOURCE_MAX) " characters of " FG_NAME_CHARS
#define OWNER_RULE "1 to " STR(FG_OWNER_MAX) " characters of " FG_NAME_CHARS

int gw__field_name(gw_request *req, json_t *root, const char *field, int required,
                   const char **out, enum MHD_Result *result)
{
    json_t *v = json_object_get(root, field);
    int is_resource = strcmp(field, "resource") == 0;
    const char *rule = is_resource ? RESOURCE_RULE : OWNER_RULE;

    *out = NULL;
    if (v == NULL) {
        if (!required) {
            return 0;
        }
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field '%s' is required", field);
        return -1;
    }
    /* null is a wrong type like any other, not a way to leave the field out: a client that
     * sends "owner": null has a bug we should show, not a random owner it never asked for. */
    if (!json_is_string(v)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field '%s' must be a string of %s%s", field, rule,
                                 json_is_null(v) ? ", not null (leave it out instead)" : "");
        return -1;
    }
    const char *s = json_string_value(v);
    /* json_string_length catches an embedded NUL that strlen would hide. */
    int ok = strlen(s) == json_string_length(v) &&
             (is_resource ? lk_valid_resource(s) : lk_valid_owner(s));
    if (!ok) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field '%s' must be %s", field, rule);
        return -1;
    }
    *out = s;
    return 0;
}

int gw__field_int(gw_request *req, json_t *root, const char *field, int64_t def, int64_t min,
                  int64_t max, int64_t *out, enum MHD_Result *result)
{
    json_t *v = json_object_get(root, field);

    *out = def;
    if (v == NULL) {
        return 0;
    }
    /* 100.0, 1.5 and 1e3 are reals in JSON: a whole number is asked for. null is a wrong
     * type too (see gw__field_name). */
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field '%s' must be an integer from %lld to %lld%s", field,
                                 (long long)min, (long long)max,
                                 json_is_null(v) ? ", not null (leave it out instead)" : "");
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

int gw__idempotency_key(gw_request *req, const char **key, enum MHD_Result *result)
{
    const char *value = NULL;
    int n = gw__header_count(req->conn, "Idempotency-Key", &value);

    *key = NULL;
    if (n == 0) {
        return 0;
    }
    if (n > 1 || !lk_valid_owner(value)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "Idempotency-Key must appear once and be " OWNER_RULE);
        return -1;
    }
    /* A key is a credential: a second request with the same key gets the first one's
     * answer, owner included. A short key can be guessed. */
    if (strlen(value) < GW_IDEM_KEY_MIN) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "Idempotency-Key must be at least %d characters and "
                                 "unguessable (a random UUID, say): whoever sends the same "
                                 "key gets the first answer, owner included",
                                 GW_IDEM_KEY_MIN);
        return -1;
    }
    *key = value;
    return 0;
}

int gw__path_resource(gw_request *req, enum MHD_Result *result)
{
    /* The path is not percent-decoded (see no_unescape in server.c), so '%' fails here. */
    if (req->param_too_long || !lk_valid_resource(req->param)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "resource in the path must be " RESOURCE_RULE
                                 ", not percent-encoded");
        return -1;
    }
    return 0;
}
