/*
 * The HTTP event loops (loops.c): one thread per loop, each driving its own libmicrohttpd
 * daemon in external-epoll mode on one listening socket they share, and the count of open
 * connections per client address across all of them. http/server.c makes the daemons (with its
 * callbacks) and hands them over; everything that resumes a connection goes through
 * gw__loops_resume().
 */
#ifndef GATEWAY_LOOPS_H
#define GATEWAY_LOOPS_H

#include <stddef.h>
#include <sys/socket.h>

#include <microhttpd.h>

typedef struct gw_loops gw_loops;
/* One open connection's share of its address's count (gw__loops_opened). */
typedef struct gw_addr_slot gw_addr_slot;

/* n loops (at least 1), not yet running; per_address is the most connections one client
 * address may hold across every loop (0: no limit), and refused (may be NULL) is called
 * with refused_arg for each connection refused for it, on the loop's thread. NULL with err
 * when out of memory or descriptors. */
gw_loops *gw__loops_new(unsigned int n, unsigned int per_address,
                        void (*refused)(void *arg, unsigned int limit), void *refused_arg,
                        char *err, size_t errlen);
/* Gives loop i its daemon, started with MHD_USE_EPOLL and no internal thread, on the shared
 * listening socket, and with gw__loops_accept and ls as its accept policy. Returns 0, or -1
 * with err (the daemon is then stopped here). */
int gw__loops_set(gw_loops *ls, unsigned int i, struct MHD_Daemon *d, char *err, size_t errlen);
/* Starts every loop's thread. Returns 0 or -1 with err (none then runs). */
int gw__loops_start(gw_loops *ls, char *err, size_t errlen);
/* Every loop stops accepting new connections (its daemon is quiesced on its own thread);
 * the connections it holds are served on. Returns once every loop has: the listening
 * socket is then in no epoll set, and its owner may close it. Any thread but a loop's. */
void gw__loops_quiesce(gw_loops *ls);
/* Stops the loop threads and waits for them; the daemons and ls stay, so a thread that may
 * still be resuming a connection (a pipeline finishing its batch, waitd) reads valid memory
 * until it is stopped too. Repeating it is a no-op; so is NULL. */
void gw__loops_join(gw_loops *ls);
/* Stops the threads (gw__loops_join), then every daemon (quiesced first, so none closes the
 * shared socket: its owner does), and frees ls. Only once no connection is suspended and no
 * other thread can call gw__loops_resume(). NULL is a no-op. */
void gw__loops_free(gw_loops *ls);

/* MHD_AcceptPolicyCallback with cls the gw_loops: refuses an address that already holds
 * per_address connections; otherwise it takes a place for the connection, which
 * gw__loops_opened() then hands to it on the same thread. */
enum MHD_Result gw__loops_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
/* MHD_CONNECTION_NOTIFY_STARTED on a loop thread: the place the accept policy took for this
 * connection, which gw__loops_closed() gives back. NULL when there is none (no limit, or
 * not on a loop thread). */
gw_addr_slot *gw__loops_opened(gw_loops *ls);
void gw__loops_closed(gw_loops *ls, gw_addr_slot *p);

/* A request of the address of p (gw__loops_opened; NULL: none, no limit) that may wait
 * takes one of the address's waiting places: at most its waiter share (all but an eighth of
 * --max-connections-per-address), so that its requests that do not wait always find a
 * connection. Returns 1 with a place, which gw__loops_wait_give() gives back; 0 when the
 * share is taken. Any thread. */
int gw__loops_wait_take(gw_loops *ls, gw_addr_slot *p);
void gw__loops_wait_give(gw_loops *ls, gw_addr_slot *p);
/* The waiter share of one address. */
unsigned int gw__loops_waiter_share(const gw_loops *ls);

/* Runs tick(arg) about every period_ms on the first loop's thread, between two runs of its
 * daemon, from gw__loops_start() until the loops stop (the first run at once): a periodic
 * chore that needs no thread of its own. A tick must not block; one with blocking work
 * hands it to a side pipeline. At most GW_LOOP_TICKS; returns 0, or -1 when they are all
 * taken. Call before gw__loops_start(). */
#define GW_LOOP_TICKS 4
int gw__loops_every(gw_loops *ls, unsigned int period_ms, void (*tick)(void *arg), void *arg);

/* Resumes a suspended connection of one of ls's daemons (MHD_resume_connection()) and
 * makes its loop run that daemon again soon: at once when called on that loop's thread, else
 * with at most one wake-up per round of the loop, however many connections are resumed.
 * Every resume goes through here: libmicrohttpd has no wake-up channel of its own in this
 * mode. Any thread. */
void gw__loops_resume(gw_loops *ls, struct MHD_Connection *conn);

#endif
