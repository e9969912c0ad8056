/*
 * GET /ui/ and GET /ui/{file}: the status page, served from the binary. The gateway often
 * runs where nothing outside is reachable, so the page loads nothing from elsewhere: its
 * HTML, script and style sheet are built in (ui_files.h), and its Content-Security-Policy
 * lets it load and call only this gateway. The files are public, like /healthz; the page
 * asks the operator for a token and sends it with its own calls, which the gateway checks
 * as any other request's.
 */
#include <string.h>

#include "http/respond.h"
#include "ops/ui.h"
#include "ops/ui_files.h"

/* Only this origin, no inline script or style, no framing (no click-jacking of the release
 * button), no form posting elsewhere. */
#define UI_CSP                                                                            \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "       \
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static enum MHD_Result ui_start(gw_request *req)
{
    const char *name = req->param[0] != '\0' ? req->param : "index.html";
    const gw_ui_file *f = gw__ui_files;

    while (f->name != NULL && strcmp(f->name, name) != 0) {
        f++;
    }
    if (f->name == NULL) {
        return gw__send_error(req, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                              "the status page has no file by that name; it starts at /ui/");
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(f->len, (void *)f->bytes, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, f->type);
    MHD_add_response_header(resp, "Content-Security-Policy", UI_CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    /* A new gateway version's page is used at once, never a cached older one. */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return gw__queue(req, MHD_HTTP_OK, resp);
}

const gw_op gw__op_ui = {ui_start, NULL, NULL};
