/* Management messages: little-endian, fixed layout per type, no padding. */
#include "autoconfig.h"

#include "mgmt/mgmt_wire.h"

#include <errno.h>
#include <string.h>

/*
 * Header:       magic u32, version u8, type u8, body length u16, token u64, uuid u64
 * CONNECT_REQ:  session u16, zero u16, data_per_pkt u32, route (50), proc (24)
 * CONNECT_RESP: status u32, session u16, zero u16, data_per_pkt u32, route (50), proc (24)
 * proc:         host u64, pid u32, zero u32, start u64
 * DISCONNECT:   to u64 (the uuid of the process meant)
 * OFFER:        pid u32, sid u32, peer_sid u32, zero u32
 * PING, PONG:   no body
 */
#define ROUTE_WIRE_SIZE (2u + NIC_ROUTE_BYTES)
#define PROC_WIRE_SIZE 24u
#define REQ_BODY (8u + ROUTE_WIRE_SIZE + PROC_WIRE_SIZE)
#define RESP_BODY (12u + ROUTE_WIRE_SIZE + PROC_WIRE_SIZE)
_Static_assert(MGMT_WIRE_HDR_SIZE + RESP_BODY <= MGMT_WIRE_MAX_SIZE, "buffer bound");

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) | ((uint32_t)get16(p + 2) << 16);
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

static size_t body_size(enum mgmt_msg_type type)
{
	switch (type) {
	case MGMT_CONNECT_REQ: return REQ_BODY;
	case MGMT_CONNECT_RESP: return RESP_BODY;
	case MGMT_DISCONNECT: return 8;
	case MGMT_OFFER: return 16;
	case MGMT_PING:
	case MGMT_PONG: return 0;
	}
	return SIZE_MAX;
}

static void put_route(uint8_t *p, const struct nic_route *r)
{
	uint8_t len = r->len <= NIC_ROUTE_BYTES ? r->len : NIC_ROUTE_BYTES;
	memset(p, 0, ROUTE_WIRE_SIZE);
	p[0] = r->kind;
	p[1] = len;
	memcpy(p + 2, r->data, len);
}

static int get_route(const uint8_t *p, struct nic_route *r)
{
	if (p[1] > NIC_ROUTE_BYTES)
		return -EBADMSG;
	/* put_route zeroes what the route does not use: bytes there are not ours. */
	for (unsigned i = 2u + p[1]; i < ROUTE_WIRE_SIZE; i++)
		if (p[i])
			return -EBADMSG;
	memset(r, 0, sizeof(*r));
	r->kind = p[0];
	r->len = p[1];
	memcpy(r->data, p + 2, r->len);
	return 0;
}

static void put_proc(uint8_t *p, const struct mgmt_proc *pr)
{
	put64(p, pr->host);
	put32(p + 8, pr->pid);
	put32(p + 12, 0);
	put64(p + 16, pr->start);
}

static int get_proc(const uint8_t *p, struct mgmt_proc *pr)
{
	pr->host = get64(p);
	pr->pid = get32(p + 8);
	pr->start = get64(p + 16);
	return get32(p + 12) == 0 ? 0 : -EBADMSG;
}

size_t mgmt_wire_encode(const struct mgmt_msg *msg, uint8_t *buf)
{
	size_t body = body_size(msg->type);
	if (body == SIZE_MAX)
		body = 0;
	put32(buf, MGMT_WIRE_MAGIC);
	buf[4] = MGMT_WIRE_VERSION;
	buf[5] = (uint8_t)msg->type;
	put16(buf + 6, (uint16_t)body);
	put64(buf + 8, msg->token);
	put64(buf + 16, msg->uuid);
	uint8_t *b = buf + MGMT_WIRE_HDR_SIZE;
	switch (msg->type) {
	case MGMT_CONNECT_REQ:
		put16(b, msg->session);
		put16(b + 2, 0);
		put32(b + 4, msg->data_per_pkt);
		put_route(b + 8, &msg->route);
		put_proc(b + 8 + ROUTE_WIRE_SIZE, &msg->proc);
		break;
	case MGMT_CONNECT_RESP:
		put32(b, (uint32_t)msg->status);
		put16(b + 4, msg->session);
		put16(b + 6, 0);
		put32(b + 8, msg->data_per_pkt);
		put_route(b + 12, &msg->route);
		put_proc(b + 12 + ROUTE_WIRE_SIZE, &msg->proc);
		break;
	case MGMT_DISCONNECT:
		put64(b, msg->to);
		break;
	case MGMT_OFFER:
		put32(b, msg->pid);
		put32(b + 4, msg->sid);
		put32(b + 8, msg->peer_sid);
		put32(b + 12, 0);
		break;
	default:
		break;
	}
	return MGMT_WIRE_HDR_SIZE + body;
}

int mgmt_wire_decode(const uint8_t *buf, size_t len, struct mgmt_msg *out)
{
	if (len < MGMT_WIRE_HDR_SIZE || get32(buf) != MGMT_WIRE_MAGIC ||
	    buf[4] != MGMT_WIRE_VERSION)
		return -EBADMSG;
	size_t body = body_size((enum mgmt_msg_type)buf[5]);
	if (body == SIZE_MAX || get16(buf + 6) != body || len != MGMT_WIRE_HDR_SIZE + body)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->type = (enum mgmt_msg_type)buf[5];
	out->token = get64(buf + 8);
	out->uuid = get64(buf + 16);
	const uint8_t *b = buf + MGMT_WIRE_HDR_SIZE;
	switch (out->type) {
	case MGMT_CONNECT_REQ:
		if (get16(b + 2) != 0)
			return -EBADMSG;
		out->session = get16(b);
		out->data_per_pkt = get32(b + 4);
		if (get_proc(b + 8 + ROUTE_WIRE_SIZE, &out->proc) < 0)
			return -EBADMSG;
		return get_route(b + 8, &out->route);
	case MGMT_CONNECT_RESP:
		out->status = (int32_t)get32(b);
		if (get16(b + 6) != 0 || out->status < 0 || out->status > 4095)
			return -EBADMSG;
		out->session = get16(b + 4);
		out->data_per_pkt = get32(b + 8);
		if (get_proc(b + 12 + ROUTE_WIRE_SIZE, &out->proc) < 0)
			return -EBADMSG;
		return get_route(b + 12, &out->route);
	case MGMT_DISCONNECT:
		out->to = get64(b);
		return 0;
	case MGMT_OFFER:
		out->pid = get32(b);
		out->sid = get32(b + 4);
		out->peer_sid = get32(b + 8);
		return get32(b + 12) == 0 && out->pid != 0 ? 0 : -EBADMSG;
	default:
		return 0;
	}
}
