/*
 * Fuzz target: the URL path router (gw__route_match), on raw request paths (the gateway
 * never percent-decodes them).
 *
 * Invariants:
 *   - 200: the route's method is the request's (HEAD is served by the GET routes), the path is
 *     the template (no {param}) or the template's prefix, a non-empty param and the
 *     template's tail after the param ("/renew"); param points into the path and
 *     ends where it ends, so it is never longer than the path;
 *   - 405: the path matches some template but none with this method; allow lists exactly
 *     those templates' methods, with HEAD after each GET (when the buffer holds them), and is always NUL-terminated
 *     inside the buffer, whatever its size;
 *   - 404: no template matches the path.
 *
 * Input: one byte for the size of the Allow buffer (0..80), then METHOD, a space, and the
 * path up to the end (or a NUL).
 */
#include <string.h>

#include "fuzz.h"
#include "base/routes.h"

/* The oracle: 1 when path matches tmpl, written from the route table's documented rule. */
static int template_matches(const char *tmpl, const char *path)
{
    const char *brace = strchr(tmpl, '{');
    if (brace == NULL) {
        return strcmp(tmpl, path) == 0;
    }
    /* The template's prefix, a non-empty param, then what follows the param's braces (the
     * tail, "/renew" say; empty for most). */
    size_t prefix = (size_t)(brace - tmpl);
    const char *tail = strchr(brace, '}') + 1;
    size_t tlen = strlen(tail), plen = strlen(path);
    return plen > prefix + tlen && memcmp(tmpl, path, prefix) == 0 &&
           memcmp(path + plen - tlen, tail, tlen) == 0;
}

/* 1 when a route of route_method serves a request of method: its own, and HEAD for GET. */
static int serves(const char *route_method, const char *method)
{
    return strcmp(route_method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(route_method, "GET") == 0);
}

static void check_allow(const char *method, const char *path, const char *allow, size_t cap)
{
    char want[128] = "";
    int any = 0;

    for (int i = 0; i < GW_R_COUNT; i++) {
        if (template_matches(gw__routes[i].path, path)) {
            fuzz_check(!serves(gw__routes[i].method, method), "405 although a route fits");
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s%s",
                     any ? ", " : "", gw__routes[i].method,
                     strcmp(gw__routes[i].method, "GET") == 0 ? ", HEAD" : "");
            any = 1;
        }
    }
    fuzz_check(any, "405 for a path no template matches");
    if (cap > strlen(want)) {
        fuzz_check(strcmp(allow, want) == 0, "Allow lists the path's methods");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    size_t cap = data[0] % 81;
    char *text = fuzz_cstr(data + 1, size - 1);
    char *space = strchr(text, ' ');
    if (space == NULL) {
        free(text);
        return 0;
    }
    *space = '\0';
    const char *method = text, *path = space + 1;
    /* Exactly cap bytes (at least 1 for malloc): ASan sees a write past the buffer. */
    char *allow = malloc(cap > 0 ? cap : 1);
    fuzz_check(allow != NULL, "malloc");
    memset(allow, 'x', cap > 0 ? cap : 1);

    const gw_route *route = NULL;
    const char *param = NULL;
    int status = gw__route_match(method, path, &route, &param, allow, cap);

    fuzz_check(param != NULL, "param is set");
    if (cap > 0) {
        fuzz_check(memchr(allow, '\0', cap) != NULL, "allow is NUL-terminated in its buffer");
    }
    if (status == 200) {
        fuzz_check(route != NULL && route >= gw__routes && route < gw__routes + GW_R_COUNT,
                   "200 names a served route");
        fuzz_check(serves(route->method, method), "200 only for the route's method");
        fuzz_check(template_matches(route->path, path), "200 only for a matching path");
        if (strchr(route->path, '{') == NULL) {
            fuzz_check(param[0] == '\0', "no {resource}: param is empty");
        } else {
            size_t plen = strlen(param);
            fuzz_check(plen > 0, "param of a {resource} route is not empty");
            fuzz_check(plen <= strlen(path), "param is never longer than the path");
            fuzz_check(param >= path && param + plen == path + strlen(path),
                       "param is the end of the path");
            fuzz_check(memcmp(route->path, path, (size_t)(param - path)) == 0,
                       "what precedes param is the template's prefix");
        }
        /* The first fitting route wins, so no earlier one fits too. */
        for (const gw_route *r = gw__routes; r < route; r++) {
            fuzz_check(!(serves(r->method, method) && template_matches(r->path, path)),
                       "the first fitting route is chosen");
        }
    } else if (status == 405) {
        fuzz_check(route == NULL && param[0] == '\0', "405 returns no route");
        check_allow(method, path, allow, cap);
    } else {
        fuzz_check(status == 404, "status is 200, 404 or 405");
        fuzz_check(route == NULL && param[0] == '\0', "404 returns no route");
        for (int i = 0; i < GW_R_COUNT; i++) {
            fuzz_check(!template_matches(gw__routes[i].path, path), "404 for a known path");
        }
    }
    free(allow);
    free(text);
    return 0;
}
