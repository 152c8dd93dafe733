/*
 * Where ferry's own UDP sockets (the control sockets and the udp datapath's)
 * listen. They start on loopback, so a program whose sockets are all
 * loopback exposes nothing on other interfaces; the first time the program
 * listens on or reaches another address, each moves to the wildcard at the
 * port it already has, so peers that know the port lose nothing.
 * doc/ports.md lists every socket.
 */
#ifndef FERRY_UDP_BIND_H
#define FERRY_UDP_BIND_H

#include <stdbool.h>
#include <sys/socket.h>

/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. */
bool udp_addr_is_loopback(const struct sockaddr *sa);

/* Binds fd (unbound, of family AF_INET or AF_INET6, as made) to
 * 127.0.0.1:0 or [::1]:0. 0 or -errno. */
int udp_bind_loopback(int fd, int family);

/*
 * Binds fd (unbound, its options set, of family as made) to that family's wildcard at the port
 * beside is bound to, while beside is still bound there: both take
 * SO_REUSEADDR for the moment of the bind only, so no other socket can
 * join the port afterwards. The caller then closes beside; until it does,
 * datagrams to beside's address still land in beside. 0 or -errno.
 */
int udp_bind_wide_beside(int fd, int family, int beside);

#endif
