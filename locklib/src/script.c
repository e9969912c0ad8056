/* Filling a built script call (script_internal.h). The sizes are fixed by the call kinds of
 * calls.c, the only builders: running past them is a bug there, so it is asserted. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

#include "script_internal.h"

void lk__cmd_start(lk__cmd *cmd, enum lk__script script, const char *resource)
{
    cmd->script = script;
    cmd->route = resource;
    cmd->out = NULL;
    cmd->nkeys = cmd->argc = cmd->nstr = cmd->nnum = 0;
}

/* The next string slot, appended to argv. */
static char *next_str(lk__cmd *cmd)
{
    assert(cmd->nstr < LK__CMD_KEYS && cmd->argc < LK__ARGV_MAX);
    char *s = cmd->str[cmd->nstr++];
    cmd->argv[cmd->argc++] = s;
    return s;
}

void lk__cmd_key(lk__cmd *cmd, const char *suffix)
{
    assert(cmd->argc == cmd->nkeys);
    lk__key(next_str(cmd), cmd->route, suffix);
    cmd->nkeys++;
}

void lk__cmd_idem_key(lk__cmd *cmd, const char *idem_key)
{
    if (idem_key == NULL) {
        lk__cmd_key(cmd, "idem:");
        return;
    }
    assert(cmd->argc == cmd->nkeys);
    lk__idem_key(next_str(cmd), cmd->route, idem_key);
    cmd->nkeys++;
}

void lk__cmd_arg(lk__cmd *cmd, const char *arg)
{
    assert(cmd->argc < LK__ARGV_MAX);
    cmd->argv[cmd->argc++] = arg;
}

void lk__cmd_num(lk__cmd *cmd, int64_t n)
{
    assert(cmd->nnum < LK__CMD_NUMS);
    char *s = cmd->num[cmd->nnum++];
    snprintf(s, sizeof cmd->num[0], "%" PRId64, n);
    lk__cmd_arg(cmd, s);
}

void lk__cmd_hold_id(lk__cmd *cmd)
{
    assert(cmd->nnum < LK__CMD_NUMS);
    char *s = cmd->num[cmd->nnum++];
    lk__hold_id(s);
    lk__cmd_arg(cmd, s);
}

void lk__cmd_channel(lk__cmd *cmd)
{
    lk_channel_name(cmd->route, next_str(cmd), LK__KEY_MAX);
}
