/*
 * fencectl lock's session (fc_session.h): one session holds every lock of a command, so
 * fencectl renews one lease however many locks it holds, and if fencectl dies the gateway
 * ends the session when its lease runs out, releasing every lock and fencing its token.
 *
 * The session id is a credential, like an owner id: whoever knows it can renew it, end it and
 * lock in it. It lives in this process's memory and in the paths of its requests only: never
 * in a message (c->what names the locks, and transport errors name the gateway's base URL,
 * never a path), never in COMMAND's environment.
 */
#include "fc_session.h"

#include <stdio.h>
#include <string.h>

/* 1 when id is 32 lowercase hex digits: safe to put in a path. */
static int valid_id(const char *id)
{
    return id != NULL && strlen(id) == FC_ID_LEN && strspn(id, "0123456789abcdef") == FC_ID_LEN;
}

int fc__session_open(fc_client *c, const fc_options *o, fc_session *s)
{
    fc_response r;

    memset(s, 0, sizeof *s);
    s->sent_ms = fc__now_ms();
    fc__post_json(c, "/sessions", json_pack("{s:I}", "ttl_ms", (json_int_t)o->ttl_ms), NULL,
                  FC_REQUEST_TIMEOUT_MS, s->sent_ms + FC_RETRY_BUDGET_MS, &r);
    /* Redlock has none; a gateway older than sessions has no such endpoint. */
    if ((r.status == 400 && strcmp(fc__error_code(&r), "sessions_unavailable") == 0) ||
        (r.status == 404 && strcmp(fc__error_code(&r), "not_found") == 0)) {
        if (c->verbose) {
            fprintf(stderr, "fencectl: %s: sessions are not available on this gateway (%s); "
                    "renewing the lock itself\n", c->what,
                    r.status == 400 ? "Redlock" : "no /sessions");
        }
        fc__response_free(&r);
        return FC_EXIT_OK;
    }
    json_t *id = r.status == 201 ? json_object_get(r.json, "session") : NULL;
    if (r.status == 201 && !valid_id(json_string_value(id))) {
        fprintf(stderr, "fencectl: %s: the gateway's session answer carries no session\n",
                c->what);
        fc__response_free(&r);
        return FC_EXIT_UNAVAILABLE;
    }
    if (r.status != 201) {
        int rc = fc__report(c, &r);
        fc__response_free(&r);
        return rc;
    }
    snprintf(s->id, sizeof s->id, "%s", json_string_value(id));
    s->on = 1;
    fc__response_free(&r);
    return FC_EXIT_OK;
}

fc_session_renewal fc__session_renew(fc_client *c, fc_session *s, int nlocks,
                                     int64_t timeout_ms, fc_response *r)
{
    char path[64];
    int64_t sent = fc__now_ms();

    snprintf(path, sizeof path, "/sessions/%s/renew", s->id);
    fc__post_json(c, path, json_object(), NULL, timeout_ms, 0, r);
    if (r->status == 200 && fc__json_int(r, "renewed") == nlocks &&
        fc__json_int(r, "locks") == nlocks) {
        s->sent_ms = sent;
        return FC_SESSION_RENEWED;
    }
    if ((r->status == 200 && fc__json_int(r, "lost") > 0) ||
        (r->status == 404 && strcmp(fc__error_code(r), "session_not_found") == 0)) {
        return FC_SESSION_LOST;
    }
    return FC_SESSION_FAILED;
}

void fc__session_end(fc_client *c, fc_session *s, int held)
{
    char path[64];
    fc_response r;

    if (!s->on) {
        return;
    }
    snprintf(path, sizeof path, "/sessions/%s", s->id);
    fc_request rq = {.method = "DELETE",
                     .path = path,
                     .timeout_ms = FC_REQUEST_TIMEOUT_MS,
                     .retry_until_ms = fc__now_ms() + FC_RETRY_BUDGET_MS};
    fc__request(c, &rq, &r);
    int gone = r.status == 404 && strcmp(fc__error_code(&r), "session_not_found") == 0;
    if (r.status != 200 && (held || !gone)) {
        fc__report(c, &r);
        if (r.status != 404) {
            fprintf(stderr, "fencectl: %s: the gateway ends the session when its lease runs "
                    "out\n", c->what);
        }
    } else if (c->verbose) {
        fprintf(stderr, "fencectl: %s: released (the session ended)\n", c->what);
    }
    fc__response_free(&r);
    s->on = 0;
    memset(s->id, 0, sizeof s->id);
}
