/*
 * fencectl: the command-line client of the fencegate gateway. main() parses the command
 * line (fc_args.c), sets up the HTTP client (fc_http.c) and runs one subcommand
 * (fc_commands.c, fc_lock.c). Its exit code is the subcommand's (see fc__help).
 */
#include <stdio.h>

#include "fc_internal.h"

#ifndef FENCEGATE_VERSION
#error "FENCEGATE_VERSION must come from the build (PROJECT_VERSION)"
#endif

static int dispatch(fc_client *c, const fc_options *o)
{
    switch (o->cmd) {
    case FC_CMD_LOCK: return fc__cmd_lock(c, o);
    case FC_CMD_UNLOCK: return fc__cmd_unlock(c, o);
    case FC_CMD_RENEW: return fc__cmd_renew(c, o);
    case FC_CMD_WRITE: return fc__cmd_write(c, o);
    case FC_CMD_READ: return fc__cmd_read(c, o);
    case FC_CMD_STATUS: return fc__cmd_status(c, o);
    case FC_CMD_LS: return fc__cmd_ls(c, o);
    case FC_CMD_RELEASE: return fc__cmd_release(c, o);
    default: return FC_EXIT_USAGE;
    }
}

int main(int argc, char **argv)
{
    fc_options o;
    fc_client c;
    char err[512];
    char what[256];

    if (fc__parse_args(argc, argv, &o, err, sizeof err) != 0) {
        fprintf(stderr, "fencectl: %s\n", err);
        return FC_EXIT_USAGE;
    }
    if (o.version) {
        printf("fencectl %s\n", FENCEGATE_VERSION);
        return FC_EXIT_OK;
    }
    if (o.help) {
        fputs(fc__help(o.cmd), stdout);
        return FC_EXIT_OK;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "fencectl: cannot initialise libcurl\n");
        return FC_EXIT_INTERNAL;
    }
    int rc = FC_EXIT_USAGE;
    if (fc__client_init(&c, &o, err, sizeof err) != 0) {
        fprintf(stderr, "fencectl: %s\n", err);
    } else {
        snprintf(what, sizeof what, "%s %s", fc__command_name(o.cmd),
                 o.resource != NULL ? o.resource : o.prefix != NULL ? o.prefix : "");
        c.what = what;
        rc = dispatch(&c, &o);
    }
    fc__client_free(&c);
    curl_global_cleanup();
    return rc;
}
