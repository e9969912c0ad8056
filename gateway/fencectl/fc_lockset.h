/*
 * fencectl lock with several resources (fc_lockset.c): the request bodies, the tokens of
 * the answer and COMMAND's environment, for one resource or a set alike.
 */
#ifndef FC_LOCKSET_H
#define FC_LOCKSET_H

#include <stdint.h>

#include <jansson.h>

#include "fc_args.h"
#include "fc_internal.h"

/* Adds "resource" (one) or "resources" (a set) to body. Returns 0, or -1 (body NULL). */
int fc__set_names(json_t *body, const fc_options *o);
/* The token of each resource from a 200 of /lock or /renew, into tokens[0..nresources).
 * Returns 0, or -1 when one is missing. */
int fc__set_tokens(const fc_options *o, const fc_response *r, int64_t *tokens);
/* Puts the tokens into fencectl's environment for COMMAND. Returns 0, or -1 (errno). */
int fc__set_export(const fc_options *o, const int64_t *tokens);
/* The first resource a set's 409 names as held, or "". */
const char *fc__set_held(const fc_response *r);

#endif
