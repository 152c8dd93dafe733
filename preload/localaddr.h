/*
 * This host's addresses, as the kernel tells a connection's local end from
 * a remote one: loopback's, and every interface's in this network
 * namespace. What a peer claims is checked against them (stream_open.c).
 */
#ifndef FERRY_PRELOAD_LOCALADDR_H
#define FERRY_PRELOAD_LOCALADDR_H

#include <stdbool.h>
#include <sys/socket.h>

/* Whether sa's address (not its port) is this host's. The interfaces'
 * addresses are cached and read again (getifaddrs) on a miss, at most
 * once a second, so an address added since counts soon after. Any thread. */
bool localaddr_is_local(const struct sockaddr *sa);

/* Whether a socket bound to src's address may connect to dst, as the
 * kernel's route lookup answers (a UDP socket bound there connects): 0, or
 * the -errno connect gives (-EINVAL for 127.0.0.1 towards another host). */
int localaddr_can_reach(const struct sockaddr *src, const struct sockaddr *dst);

#endif
