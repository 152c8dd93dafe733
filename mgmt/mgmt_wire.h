/*
 * The management channel's messages on the wire (kernel UDP between the
 * management threads of two processes): encoding and the checks a received
 * datagram must pass before anything in it is believed.
 */
#ifndef FERRY_MGMT_WIRE_H
#define FERRY_MGMT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "mgmt/mgmt_proc.h"
#include "transport/nic.h"

/* "FMG1" little-endian; its first byte is not PKTHDR_MAGIC, so a datagram
 * sent to the wrong port by either side is refused by the other's checks. */
#define MGMT_WIRE_MAGIC 0x31474d46u
#define MGMT_WIRE_VERSION 3
#define MGMT_WIRE_HDR_SIZE 24u
#define MGMT_WIRE_MAX_SIZE 128u

enum mgmt_msg_type {
	MGMT_CONNECT_REQ = 1,
	MGMT_CONNECT_RESP = 2,
	MGMT_DISCONNECT = 3,
	MGMT_PING = 4,
	MGMT_PONG = 5,
	MGMT_OFFER = 6,
};

/*
 * One message in host order. Every message names the session (token; 0 for
 * PING/PONG) and its sender's process (uuid). Which other fields carry
 * meaning depends on the type:
 *   CONNECT_REQ   route, session, data_per_pkt (the client's maximum),
 *                 proc (the sender's process)
 *   CONNECT_RESP  status (0 or a positive errno), route, session,
 *                 data_per_pkt (the agreed payload per packet), proc
 */
struct mgmt_msg {
	enum mgmt_msg_type type;
	uint64_t token;
	uint64_t uuid;
	int32_t status;
	uint16_t session;
	uint32_t data_per_pkt;
	struct nic_route route;
	/* DISCONNECT: the process meant (its uuid). Processes sharing a
	 * rendezvous socket (prefork workers) each answer a retried handshake
	 * with the same token; the goodbye to the unused answer must not end
	 * the used one in whichever process reads it. */
	uint64_t to;
	/* OFFER (token: the stream's session token): a connection process pid
	 * queued on a shared listener it let go of, stream sid there, the
	 * peer's peer_sid; whoever reads it may take it over. */
	uint32_t pid, sid, peer_sid;
	/* CONNECT_REQ/RESP: who sent it, so a peer on the same host can watch
	 * for its death (mgmt_proc.h). */
	struct mgmt_proc proc;
};

/* Writes msg into buf (at least MGMT_WIRE_MAX_SIZE bytes); returns the length. */
size_t mgmt_wire_encode(const struct mgmt_msg *msg, uint8_t *buf);

/* Decodes a received datagram. Returns 0, or -EBADMSG when its length, magic,
 * version, type, padding or route length do not fit. */
int mgmt_wire_decode(const uint8_t *buf, size_t len, struct mgmt_msg *out);

#endif
