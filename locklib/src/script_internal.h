/*
 * A built script call (lk__cmd): which script, its keys and its arguments, and the resource
 * whose hash tag every key carries. It is what the call kinds (calls.c) produce and what a
 * transport (transport.c) sends; neither needs to know the other. The scripts themselves are
 * the generated table (script_table.h, one entry per locklib/lua/NAME.lua).
 * Layer: above util and decimal only. Never installed.
 */
#ifndef LOCKLIB_SCRIPT_INTERNAL_H
#define LOCKLIB_SCRIPT_INTERNAL_H

#include "decimal_internal.h"
#include "script_table.h"
#include "util_internal.h"

#define LK__ARGV_MAX 28 /* keys and arguments of one call (acquire.lua with a hand-off: 10 + 12) */
#define LK__CMD_KEYS 14 /* key names and other long strings (the channel) one call may hold
                        * (release.lua with a hand-off: 12 keys and the channel) */
#define LK__CMD_NUMS 12 /* numbers one call may hold (acquire.lua with a hand-off: nine) */

/* Keys first, then the arguments, all pointing into the storage below or into the caller's
 * strings (which must outlive the send). `route` is the resource: every key is
 * fg:{route}:..., one hash slot, so a Cluster transport sends the call to the node owning
 * the slot of `route` and a Redlock transport sends it to every node as it is. */
typedef struct lk__cmd {
    enum lk__script script;
    const char *route;
    /* The call this was built from (lk__run sets it), or NULL. A transport that decodes
     * by itself (Redlock: a combiner merges N decoded replies) writes the outcome there and
     * answers with a NULL reply (transport_internal.h, lk__reply_fn). */
    lk_call *out;
    int nkeys, argc;
    const char *argv[LK__ARGV_MAX];
    int nstr, nnum;
    char str[LK__CMD_KEYS][LK__KEY_MAX];
    char num[LK__CMD_NUMS][LK__DECIMAL_MAX]; /* numbers (lk__decimal) and hold ids */
} lk__cmd;
_Static_assert(LK__HOLD_ID_LEN + 1 <= LK__DECIMAL_MAX, "a hold id fits a number's slot");

/* Starts a call of `script` on the keys of `resource` (a valid name, kept by pointer). */
void lk__cmd_start(lk__cmd *cmd, enum lk__script script, const char *resource);
/* Appends the key fg:{resource}:suffix. Keys come before any argument. */
void lk__cmd_key(lk__cmd *cmd, const char *suffix);
/* Appends the idempotency record key of idem_key (a valid name), or, for NULL, a key the
 * script will not touch: every key a script may touch is declared. */
void lk__cmd_idem_key(lk__cmd *cmd, const char *idem_key);
/* Appends an argument: a string (kept by pointer), a number, or the resource's release
 * channel fg:{resource}:released. */
void lk__cmd_arg(lk__cmd *cmd, const char *arg);
void lk__cmd_num(lk__cmd *cmd, int64_t n);
void lk__cmd_channel(lk__cmd *cmd);
/* A new hold id (lk__hold_id) as the next argument. */
void lk__cmd_hold_id(lk__cmd *cmd);

#endif
