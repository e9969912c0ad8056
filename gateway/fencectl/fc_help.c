/*
 * The --help texts of fencectl and of each subcommand. The exit codes listed here are the
 * FC_EXIT_* values of fc_args.h.
 */
#include "fc_args.h"

#define GLOBAL_OPTIONS                                                                       \
    "Options of every command:\n"                                                            \
    "  --url URL               the gateway (default $FENCEGATE_URL, else " FC_DEFAULT_URL ")\n" \
    "  --auth-token-file FILE  send 'Authorization: Bearer TOKEN' (default\n"                \
    "                          $FENCEGATE_AUTH_TOKEN_FILE). TOKEN is the whole file\n"      \
    "                          without the white space around it, as fencegate reads\n"     \
    "                          it: 1 to 511 bytes of printable ASCII with no white\n"       \
    "                          space inside (a second line is refused), in a file of at\n"  \
    "                          most 4096 bytes. It is never printed.\n"                     \
    "  --cacert FILE           PEM CAs to check an https:// gateway's certificate against\n" \
    "                          (default $FENCEGATE_CACERT, else the system's)\n"           \
    "  --cert FILE, --key FILE a PEM client certificate and its key, for a gateway with\n" \
    "                          --tls-client-ca (default $FENCEGATE_CERT, $FENCEGATE_KEY)\n" \
    "  --verbose, -v           progress on stderr\n"                                         \
    "  --help, -h              this text\n"                                                  \
    "  --version               the version\n"

#define DURATIONS "Durations are a whole number with a unit: 500ms, 30s, 2m.\n"

#define EXIT_CODES                                                                           \
    "Exit codes:\n"                                                                          \
    "  0  done\n"                                                                            \
    "  1  conflict: the lock is held by another owner (lock: see --conflict-exit-code),\n"   \
    "     this owner does not hold the lock (not_owner), or the token is stale\n"            \
    "  2  usage: a bad option or value, an unreadable --auth-token-file or stdin,\n"         \
    "     or (write) an empty stdin without --allow-empty\n"                                 \
    "  4  refused by the gateway: invalid request, 401 unauthorized, 403 unknown token,\n"   \
    "     404 not found, 413 too large\n"                                                    \
    "  5  the gateway did not answer, timed out, or answered 503 or another 5xx\n"           \
    "     (after a few retries)\n"

static const char help_overview[] =
    "Usage: fencectl [OPTIONS] COMMAND RESOURCE [ARGS...]\n"
    "\n"
    "A client of the fencegate gateway: fencing-token locks and token-checked writes.\n"
    "\n"
    "Commands:\n"
    "  lock RESOURCE [--ttl 30s] [--wait 0s] -- COMMAND [ARGS...]\n"
    "                    run COMMAND while holding the lock (FENCING_TOKEN in its env)\n"
    "  unlock RESOURCE --owner OWNER      release a lock taken with OWNER\n"
    "  renew RESOURCE --owner OWNER [--ttl 30s]\n"
    "                                     reset the lease of a lock taken with OWNER\n"
    "  write RESOURCE --token N [--content-type T] [--allow-empty] < FILE\n"
    "                                     store stdin if N is the newest token\n"
    "  read RESOURCE                      the stored bytes, to stdout\n"
    "  status RESOURCE                    the lock's state as JSON, to stdout\n"
    "  ls [PREFIX]                        the held locks, one JSON line each, in name order\n"
    "  release --force RESOURCE --reason TEXT\n"
    "                                     force a lock free and fence its holder (admin)\n"
    "\n"
    "'fencectl COMMAND --help' describes one command.\n"
    "\n" GLOBAL_OPTIONS "\n" DURATIONS "\n" EXIT_CODES;

static const char help_lock[] =
    "Usage: fencectl lock RESOURCE [OPTIONS] [--] COMMAND [ARGS...]\n"
    "\n"
    "Opens a session on the gateway with the lease --ttl, takes the lock on RESOURCE in\n"
    "it, runs COMMAND (no shell) with FENCING_TOKEN and FENCING_RESOURCE in its\n"
    "environment, renews the session every ttl/3 while COMMAND runs (one request for all\n"
    "its locks), and ends the session when COMMAND exits: the lock is released and its\n"
    "token fenced, so nothing COMMAND left behind can write with it. If fencectl dies, the\n"
    "session expires after --ttl and the gateway releases and fences the lock. The session\n"
    "id is never printed and is not in COMMAND's environment. Pass FENCING_TOKEN with every\n"
    "write (fencectl write RESOURCE --token \"$FENCING_TOKEN\").\n"
    "\n"
    "A gateway without sessions (Redlock answers 400 sessions_unavailable; a gateway older\n"
    "than sessions, 404) gets no session: fencectl then renews the lock itself and\n"
    "releases it with /unlock (--verbose says so); a fencectl that dies leaves the lock to\n"
    "run out its lease, unfenced.\n"
    "\n"
    "If the lock is lost while COMMAND runs (the session ended or no longer holds it, the\n"
    "gateway answers not_owner to a renewal, or renewals fail until the lease has run\n"
    "out), COMMAND gets SIGTERM, then SIGKILL after --kill-grace, and fencectl exits 3.\n"
    "SIGINT, SIGTERM and SIGHUP sent to fencectl are passed on to COMMAND (Ctrl-C already\n"
    "reaches it through the terminal). Signals go to COMMAND's process only, not to\n"
    "processes it started.\n"
    "\n"
    "fencectl lock A B C -- COMMAND takes the set of resources before \"--\" as one lock,\n"
    "every one or none (up to 64; waiting holds none of them), in the one session.\n"
    "COMMAND then gets FENCING_TOKEN_<name> per resource (every byte outside\n"
    "[A-Za-z0-9_] as '_', so orders.eu-1 gives FENCING_TOKEN_orders_eu_1; two names\n"
    "giving one variable are refused), FENCING_TOKENS='{\"orders.eu-1\":5,\"stock\":9}'\n"
    "and FENCING_RESOURCES (the names, comma-separated) instead of FENCING_TOKEN and\n"
    "FENCING_RESOURCE.\n"
    "\n"
    "Options:\n"
    "  --ttl DURATION              the session's lease, or the lock's without a session\n"
    "                              (default 30s, from 100ms to 60m)\n"
    "  --wait DURATION             how long to wait for a held lock (default 0s, up to 60m)\n"
    "  --conflict-exit-code N      the exit code when the lock stays held by another owner\n"
    "                              (default 1, like flock -E)\n"
    "  --kill-grace DURATION       between SIGTERM and SIGKILL after a lock loss\n"
    "                              (default 10s)\n"
    "\n" GLOBAL_OPTIONS "\n" DURATIONS "\n"
    "Exit codes:\n"
    "  COMMAND's own status once it ran, or 128+N when signal N ended it (like a shell)\n"
    "  1    the lock is held by another owner after --wait (see --conflict-exit-code)\n"
    "  2    usage: a bad option or value, an unreadable --auth-token-file\n"
    "  3    the lock was lost while COMMAND ran; COMMAND was terminated\n"
    "  4    refused by the gateway (invalid request, 401 unauthorized)\n"
    "  5    the gateway did not answer, timed out, or answered 503 (after a few retries)\n"
    "  125  fencectl itself failed (fork, pipe, memory)\n"
    "  126  COMMAND could not be executed\n"
    "  127  COMMAND was not found\n";

static const char help_unlock[] =
    "Usage: fencectl unlock RESOURCE --owner OWNER [OPTIONS]\n"
    "\n"
    "Releases one hold of the lock on RESOURCE taken with OWNER, and prints the gateway's\n"
    "answer {\"resource\", \"released\", \"holds\"} as JSON.\n"
    "\n" GLOBAL_OPTIONS "\n" EXIT_CODES;

static const char help_renew[] =
    "Usage: fencectl renew RESOURCE --owner OWNER [--ttl DURATION] [OPTIONS]\n"
    "\n"
    "Resets the lease of the lock on RESOURCE taken with OWNER to --ttl (default 30s) and\n"
    "prints the gateway's answer {\"resource\", \"token\", \"ttl_ms\"} as JSON.\n"
    "\n" GLOBAL_OPTIONS "\n" DURATIONS "\n" EXIT_CODES;

static const char help_write[] =
    "Usage: fencectl write RESOURCE --token N [--content-type TYPE] [--allow-empty]\n"
    "                      [OPTIONS] < FILE\n"
    "\n"
    "Stores stdin as the value of RESOURCE if N is a token issued for RESOURCE and no newer\n"
    "token has written it, and prints the gateway's answer {\"resource\", \"token\",\n"
    "\"highest_token\", \"version\"} as JSON. A stale token exits 1, an unknown one 4.\n"
    "\n"
    "An empty stdin is refused (exit 2, nothing sent): it is what a producer that failed\n"
    "leaves in 'producer | fencectl write'. Write the producer's output to a file first\n"
    "and run fencectl only if it succeeded ('producer > out && fencectl write ... < out').\n"
    "\n"
    "Options:\n"
    "  --content-type TYPE     the value's Content-Type (default application/octet-stream)\n"
    "  --allow-empty           store an empty stdin as an empty value\n"
    "\n" GLOBAL_OPTIONS "\n" EXIT_CODES;

static const char help_read[] =
    "Usage: fencectl read RESOURCE [OPTIONS]\n"
    "\n"
    "Writes the stored value of RESOURCE to stdout, byte for byte. A resource never\n"
    "written exits 4.\n"
    "\n" GLOBAL_OPTIONS "\n" EXIT_CODES;

static const char help_status[] =
    "Usage: fencectl status RESOURCE [OPTIONS]\n"
    "\n"
    "Prints the lock's state as JSON: {\"resource\", \"locked\", \"token\", \"holds\",\n"
    "\"ttl_ms\", \"last_token\"} while held, {\"resource\", \"locked\": false, \"last_token\"}\n"
    "when free. It never contains the owner.\n"
    "\n" GLOBAL_OPTIONS "\n" EXIT_CODES;

static const char help_ls[] =
    "Usage: fencectl ls [PREFIX] [OPTIONS]\n"
    "\n"
    "Prints the held locks whose name starts with PREFIX (every held lock without one), in\n"
    "name order, one JSON object per line: {\"resource\", \"token\", \"holds\", \"ttl_ms\",\n"
    "\"waiters\"}. It never contains an owner. It pages through GET /locks to the end.\n"
    "\n" GLOBAL_OPTIONS "\n" EXIT_CODES;

static const char help_release[] =
    "Usage: fencectl release --force RESOURCE --reason TEXT [OPTIONS]\n"
    "\n"
    "Frees the lock on RESOURCE whoever holds it, and fences its holder: its renew and\n"
    "unlock are refused from then on, and so is its write with its token, even if nobody\n"
    "locks RESOURCE again. Prints {\"resource\", \"released\", \"fenced_token\"} as JSON\n"
    "(released false when nothing was held). Needs the admin right; the gateway logs\n"
    "TEXT with the client's address.\n"
    "\n"
    "Options:\n"
    "  --force                 required: this releases someone else's lock\n"
    "  --reason TEXT           why (1 to 500 bytes), for the gateway's log\n"
    "\n" GLOBAL_OPTIONS "\n" EXIT_CODES;

const char *fc__help(fc_command cmd)
{
    switch (cmd) {
    case FC_CMD_LOCK: return help_lock;
    case FC_CMD_UNLOCK: return help_unlock;
    case FC_CMD_RENEW: return help_renew;
    case FC_CMD_WRITE: return help_write;
    case FC_CMD_READ: return help_read;
    case FC_CMD_STATUS: return help_status;
    case FC_CMD_LS: return help_ls;
    case FC_CMD_RELEASE: return help_release;
    default: return help_overview;
    }
}
