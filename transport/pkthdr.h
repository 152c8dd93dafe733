/* The transport's packet header: layout on the wire, encoding, validation. */
#ifndef FERRY_PKTHDR_H
#define FERRY_PKTHDR_H

#include <stddef.h>
#include <stdint.h>

#define PKTHDR_MAGIC 0xF5
#define PKTHDR_SIZE 32u

/* Largest message the transport carries. */
#define RPC_MAX_MSG_SIZE (8u << 20)
/* Smallest payload per packet any session uses: sizes msgbuf header areas. */
#define RPC_MIN_PKT_DATA 992u

enum pkt_type {
	PKT_REQ = 0,  /* a request packet */
	PKT_RESP = 1, /* a response packet */
	PKT_CR = 2,   /* credit return: request packet received (all but the last) */
	PKT_RFR = 3,  /* request for response packet pkt_num (all but the first) */
};

/* Flag on a PKT_CR: "request packet pkt_num is the next one I expect"; the
 * requester goes back to it at once instead of waiting for a timeout. */
#define PKT_FLAG_NACK 0x01
#define PKT_FLAGS_KNOWN PKT_FLAG_NACK

/* Wire format, little-endian, no padding. */
struct pkthdr {
	uint8_t magic;
	uint8_t pkt_type;
	uint8_t req_type;
	uint8_t flags;
	uint16_t dest_session;
	uint16_t pkt_num;
	uint32_t msg_size;
	uint32_t reserved; /* zero */
	uint64_t req_num;
	uint64_t token;
};
_Static_assert(sizeof(struct pkthdr) == PKTHDR_SIZE, "packet header is 32 bytes");

/* The header's fields in host order. */
struct pkt_info {
	enum pkt_type type;
	uint8_t req_type;
	uint8_t flags;
	uint16_t dest_session;
	uint16_t pkt_num;
	uint32_t msg_size;
	uint64_t req_num;
	uint64_t token;
};

/* Why a received packet was refused; each maps to a drop_ counter. */
enum pkt_error {
	PKT_OK = 0,
	PKT_ERR_SHORT,  /* shorter than a header */
	PKT_ERR_MAGIC,  /* wrong magic or reserved bits set */
	PKT_ERR_TYPE,   /* unknown packet type or flag */
	PKT_ERR_SIZE,   /* message size, packet number and length disagree */
};

void pkthdr_encode(struct pkthdr *wire, const struct pkt_info *info);

/*
 * Decodes and checks everything a header can prove about itself, given the
 * received length and the sender's payload per packet (data_per_pkt): the
 * magic, type, flags, that msg_size fits RPC_MAX_MSG_SIZE, that pkt_num is
 * inside the message and that len is exactly header + that packet's payload
 * (header only for PKT_CR and PKT_RFR). Session, token and numbers are the
 * session's to check.
 */
enum pkt_error pkthdr_decode(const void *pkt, size_t len, uint32_t data_per_pkt,
			     struct pkt_info *out);

/* Number of packets a message of msg_size needs (at least 1). */
static inline uint32_t pkt_count(uint32_t msg_size, uint32_t data_per_pkt)
{
	return msg_size == 0 ? 1 : (msg_size + data_per_pkt - 1) / data_per_pkt;
}

/* Payload bytes packet pkt_num of a message carries. */
static inline uint32_t pkt_data_len(uint32_t msg_size, uint32_t data_per_pkt, uint32_t pkt_num)
{
	uint32_t off = pkt_num * data_per_pkt;
	uint32_t left = msg_size > off ? msg_size - off : 0;
	return left < data_per_pkt ? left : data_per_pkt;
}

#endif
