/* Filling a built script call (script_internal.h). The sizes are fixed by the call kinds of
 * calls.c, the only builders: running past them is a bug there. It is checked in every
 * build, not only where assert() is compiled in: an array overrun inside a batch of calls
 * would otherwise show only as a wrong argument of the next call (as it did once, when a
 * script gained an argument and LK__CMD_NUMS did not). */
#include <stdio.h>
#include <stdlib.h>

#include "script_internal.h"

/* Stops the process on a builder's bug: a call that does not fit its fixed arrays. */
static void fits(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "locklib: a script call overran its %s (LK__* sizes in "
                        "script_internal.h): a bug in calls.c\n", what);
        abort();
    }
}

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
    fits(cmd->nstr < LK__CMD_KEYS && cmd->argc < LK__ARGV_MAX, "strings");
    char *s = cmd->str[cmd->nstr++];
    cmd->argv[cmd->argc++] = s;
    return s;
}

void lk__cmd_key(lk__cmd *cmd, const char *suffix)
{
    fits(cmd->argc == cmd->nkeys, "keys (a key after an argument)");
    lk__key(next_str(cmd), cmd->route, suffix);
    cmd->nkeys++;
}

void lk__cmd_idem_key(lk__cmd *cmd, const char *idem_key)
{
    if (idem_key == NULL) {
        lk__cmd_key(cmd, "idem:");
        return;
    }
    fits(cmd->argc == cmd->nkeys, "keys (a key after an argument)");
    lk__idem_key(next_str(cmd), cmd->route, idem_key);
    cmd->nkeys++;
}

void lk__cmd_arg(lk__cmd *cmd, const char *arg)
{
    fits(cmd->argc < LK__ARGV_MAX, "arguments");
    cmd->argv[cmd->argc++] = arg;
}

void lk__cmd_num(lk__cmd *cmd, int64_t n)
{
    fits(cmd->nnum < LK__CMD_NUMS, "numbers");
    char *s = cmd->num[cmd->nnum++];
    lk__decimal(s, n);
    lk__cmd_arg(cmd, s);
}

void lk__cmd_hold_id(lk__cmd *cmd)
{
    fits(cmd->nnum < LK__CMD_NUMS, "numbers");
    char *s = cmd->num[cmd->nnum++];
    lk__hold_id(s);
    lk__cmd_arg(cmd, s);
}

void lk__cmd_channel(lk__cmd *cmd)
{
    lk_channel_name(cmd->route, next_str(cmd), LK__KEY_MAX);
}
