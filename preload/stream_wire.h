/* The stream protocol's messages as they cross the wire (little-endian,
 * checked at build time), and the address form OPEN carries. */
#ifndef FERRY_PRELOAD_STREAM_WIRE_H
#define FERRY_PRELOAD_STREAM_WIRE_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire structs are little-endian");

struct wire_addr {
	uint16_t family;
	uint16_t port; /* network order, as in sockaddr */
	uint32_t scope;
	uint8_t addr[16];
};
_Static_assert(sizeof(struct wire_addr) == 24, "wire layout");

struct wire_open {
	uint32_t client_sid;
	uint32_t window;
	struct wire_addr dst, src;
};
_Static_assert(sizeof(struct wire_open) == 56, "wire layout");

struct wire_open_resp {
	int32_t status;
	uint32_t server_sid;
	uint32_t window;
	uint32_t pad;
};

/*
 * DATA's header (payload follows), and WINDOW/FIN/RESET's whole body. Every
 * message, answers too, also says how far its sender has read (a window
 * update) and received the other direction, so those ride on whatever
 * goes anyway.
 */
#define SEG_URG 1u /* DATA: its last byte is urgent (MSG_OOB) */
struct wire_seg {
	uint32_t sid;
	uint32_t flags;
	uint64_t value;    /* DATA: sequence number; WINDOW: consumed; FIN: final seq */
	uint64_t consumed; /* the sender's rx.head */
	uint64_t received; /* the sender's rx.tail */
};
_Static_assert(sizeof(struct wire_seg) == 32, "wire layout");

/* Every answer but OPEN's. A held answer (to DATA or FIN) may carry the
 * answering side's own bytes, starting at seq, after it (the application's
 * reply), and its FIN after those (ACK_FIN): the answer to a peer's FIN is
 * usually our own close, as a TCP FIN-ACK. The last byte of a DATA, or of
 * an answer's bytes, may be urgent (TCP's urgent pointer: send with
 * MSG_OOB): SEG_URG, ACK_URG. */
#define ACK_FIN 1u
#define ACK_URG 2u /* the last of the bytes it carries is urgent (MSG_OOB) */
struct wire_ack {
	int32_t status;
	uint32_t flags;
	uint64_t consumed;
	uint64_t received;
	uint64_t seq;
};
_Static_assert(sizeof(struct wire_ack) == 32, "wire layout");


/* ATTACH's body: the peer's id for the stream and the cookie (seg), then
 * the new owner's. */
struct wire_attach {
	struct wire_seg seg;
	uint32_t sid;
	uint32_t window;
};
_Static_assert(sizeof(struct wire_attach) == 40, "wire layout");

/* The errno a negative status from the wire stands for: a peer may write
 * anything there, and anything but an errno is a protocol error. */
static inline int wire_errno(int32_t status)
{
	return status < 0 && status >= -4095 ? -status : EPROTO;
}

/* sa (NULL: all zero) as OPEN carries it. */
void wire_addr_from(struct wire_addr *w, const struct sockaddr *sa);
/* w as the kernel shows it on a socket of family (v4 on a v6 socket is
 * mapped); returns the address's length. */
socklen_t wire_addr_to(const struct wire_addr *w, int family, struct sockaddr_storage *ss);

#endif
