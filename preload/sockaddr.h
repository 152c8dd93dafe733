/* IPv4 and IPv6 socket addresses as the interposer handles them. */
#ifndef FERRY_PRELOAD_SOCKADDR_H
#define FERRY_PRELOAD_SOCKADDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* The port of an AF_INET or AF_INET6 address, in host order. */
uint16_t sockaddr_port(const struct sockaddr *sa);
void sockaddr_set_port(struct sockaddr *sa, uint16_t port);
/* Whether the address is the wildcard (0.0.0.0, ::). */
bool sockaddr_is_any(const struct sockaddr *sa);
/* The wildcard made loopback (127.0.0.1, ::1), as connect reads it. */
void sockaddr_any_to_loopback(struct sockaddr_storage *ss);
/* The length of a family's address (AF_INET, else AF_INET6). */
socklen_t sockaddr_len(int family);
/* sa into out, a v4-mapped v6 address as the v4 address the rendezvous
 * goes to; returns out's length. */
socklen_t sockaddr_unmap(const struct sockaddr *sa, struct sockaddr_storage *out);
/* As the kernel hands an address out: truncated to *alen, which is set to
 * the full length. Nothing when addr or alen is NULL. */
void sockaddr_copy_out(const struct sockaddr_storage *ss, socklen_t len, struct sockaddr *addr,
		       socklen_t *alen);

#endif
