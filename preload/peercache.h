/*
 * What connect() remembers per destination ip:port: that it is a plain TCP
 * peer (for a while, so later connects skip the rendezvous), the live
 * session to it (so a new stream costs one OPEN), and which local address
 * reaches it. Small fixed tables, thread-safe, least recently set evicted.
 */
#ifndef FERRY_PRELOAD_PEERCACHE_H
#define FERRY_PRELOAD_PEERCACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* How long a destination stays known as plain. */
#define PEERCACHE_PLAIN_NS (5ull * 1000000000ull)

bool peercache_is_plain(const struct sockaddr *dst, uint64_t now_ns);
void peercache_set_plain(const struct sockaddr *dst, uint64_t now_ns);

/*
 * The session to open a stream to dst on, or -1: a rendezvous first. The
 * caller checks the session is still up and still carries *token, and
 * forgets it (peercache_drop_session) if not.
 *
 * A listener may be shared by several processes (prefork workers), each
 * answering the rendezvous in turn, and the kernel would spread
 * connections over them: so the first PEERCACHE_PROBES connections to dst
 * each rendezvous (*another: with MGMT_CONNECT_ANOTHER), and so does one in
 * PEERCACHE_REPROBE_MANY (one in PEERCACHE_REPROBE_ONE while only one
 * process has answered); the others take the processes found in turn.
 */
#define PEERCACHE_HOLDERS 4
#define PEERCACHE_PROBES 3
#define PEERCACHE_REPROBE_MANY 8
#define PEERCACHE_REPROBE_ONE 64
int peercache_session(const struct sockaddr *dst, uint64_t *token, bool *another);
/* What a rendezvous with dst gave: one more of its processes, or one met
 * again. */
void peercache_set_session(const struct sockaddr *dst, int session, uint64_t token);
void peercache_drop_session(const struct sockaddr *dst, int session);
/* The session whose turn it is among those dst's rendezvous found, or -1
 * when none is known; as peercache_session, without asking again. A burst
 * of connections that waited on one rendezvous is spread over the
 * processes that the others (MGMT_CONNECT_ANOTHER) found meanwhile. */
int peercache_next(const struct sockaddr *dst, uint64_t *token);

/* The local address the kernel would use to reach dst (port 0), learnt
 * once per destination address with a connected UDP socket. 0 or -errno. */
int peercache_source(const struct sockaddr *dst, struct sockaddr_storage *src, socklen_t *len);

/* Forgets everything (fork child that starts ferry anew). */
void peercache_reset(void);

#endif
