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

/* The session recorded for dst, or -1; the caller checks it is still up
 * and still carries *token. */
int peercache_session(const struct sockaddr *dst, uint64_t *token);
void peercache_set_session(const struct sockaddr *dst, int session, uint64_t token);

/* The local address the kernel would use to reach dst (port 0), learnt
 * once per destination address with a connected UDP socket. 0 or -errno. */
int peercache_source(const struct sockaddr *dst, struct sockaddr_storage *src, socklen_t *len);

/* Forgets everything (fork child that starts ferry anew). */
void peercache_reset(void);

#endif
