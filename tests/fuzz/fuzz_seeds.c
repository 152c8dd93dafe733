/*
 * Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) with
 * ferry's own encoders, so every seed is something ferry really sends:
 * `make fuzz-seeds` runs it into the source tree. The input formats are
 * the targets' (see the comment at the top of each).
 */
#include "autoconfig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include "mgmt/mgmt_wire.h"
#include "preload/stream.h"
#include "preload/stream_wire.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/pkthdr.h"
#include "transport/stats.h"

static const char *top;

static void put(const char *target, const char *name, const void *buf, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", top, target);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/%s", top, target, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		perror(path);
		exit(1);
	}
}

/* --- pkthdr: [payload per packet u16][packet] --- */

static void seed_pkt(const char *name, uint32_t dpp, const struct pkt_info *in)
{
	uint8_t buf[2 + PKTHDR_SIZE + 2048] = {(uint8_t)dpp, (uint8_t)(dpp >> 8)};
	pkthdr_encode((struct pkthdr *)(void *)(buf + 2), in);
	size_t payload = in->type == PKT_REQ || in->type == PKT_RESP
				 ? pkt_data_len(in->msg_size, dpp, in->pkt_num)
				 : 0;
	memset(buf + 2 + PKTHDR_SIZE, 0x5a, payload);
	put("pkthdr", name, buf, 2 + PKTHDR_SIZE + payload);
}

static void seeds_pkthdr(void)
{
	uint32_t dpp = RPC_MIN_PKT_DATA;
	seed_pkt("req-small", dpp, &(struct pkt_info){.type = PKT_REQ, .req_type = 3,
						     .dest_session = 1, .msg_size = 40,
						     .req_num = 8, .token = 0x1234});
	seed_pkt("req-second-of-three", dpp,
		 &(struct pkt_info){.type = PKT_REQ, .dest_session = 2, .pkt_num = 1,
				    .msg_size = 2 * dpp + 10, .req_num = 9, .token = 0x1234});
	seed_pkt("resp-empty", dpp, &(struct pkt_info){.type = PKT_RESP, .req_num = 8});
	seed_pkt("cr-nack", dpp, &(struct pkt_info){.type = PKT_CR, .flags = PKT_FLAG_NACK,
						   .pkt_num = 1, .msg_size = 3 * dpp});
	seed_pkt("rfr", dpp, &(struct pkt_info){.type = PKT_RFR, .pkt_num = 2,
					       .msg_size = 3 * dpp});
}

/* --- mgmt_wire: one datagram --- */

static struct nic_route udp_route(void)
{
	struct ferry_config cfg;
	struct ferry_stats st = {0};
	ferry_config_defaults(&cfg);
	char why[256];
	int err;
	struct nic *nic = nic_udp_open(&cfg, &st, &err, why, sizeof(why));
	if (!nic) {
		fprintf(stderr, "fuzz_seeds: %s\n", why);
		exit(1);
	}
	struct nic_route r;
	nic_local_route(nic, &r);
	nic_close(nic);
	/* Its port (bytes 1..2) is the kernel's pick: a fixed one keeps the
	 * seeds the same each time they are written. */
	r.data[1] = 0x1f;
	r.data[2] = 0x90;
	return r;
}

static const struct mgmt_msg *messages(unsigned *n)
{
	static struct mgmt_msg msgs[6];
	struct nic_route r = udp_route();
	msgs[0] = (struct mgmt_msg){.type = MGMT_CONNECT_REQ, .token = 0xAB, .uuid = 0x77,
				    .session = 3, .data_per_pkt = 1440, .route = r};
	msgs[1] = (struct mgmt_msg){.type = MGMT_CONNECT_RESP, .token = 0xAB, .uuid = 0x88,
				    .session = 5, .data_per_pkt = 1440, .route = r};
	msgs[2] = (struct mgmt_msg){.type = MGMT_PING, .uuid = 0x77};
	msgs[3] = (struct mgmt_msg){.type = MGMT_PONG, .uuid = 0x88};
	msgs[4] = (struct mgmt_msg){.type = MGMT_DISCONNECT, .token = 0xAB, .uuid = 0x77,
				    .to = 0x5EED};
	msgs[5] = (struct mgmt_msg){.type = MGMT_OFFER, .token = 0xCD, .uuid = 0x77,
				    .pid = 1234, .sid = 1, .peer_sid = 2};
	*n = 6;
	return msgs;
}

static const char *const msg_names[] = {"connect-req", "connect-resp", "ping",
					"pong", "disconnect", "offer"};

static void seeds_mgmt_wire(const struct mgmt_msg *msgs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint8_t buf[MGMT_WIRE_MAX_SIZE];
		put("mgmt_wire", msg_names[i], buf, mgmt_wire_encode(&msgs[i], buf));
	}
}

/* --- rendezvous: records of [flags][length][datagram] --- */

static size_t record(uint8_t *out, uint8_t flags, const struct mgmt_msg *msg)
{
	out[0] = flags;
	out[1] = (uint8_t)mgmt_wire_encode(msg, out + 2);
	return 2 + out[1];
}

static void seeds_rendezvous(const struct mgmt_msg *msgs)
{
	uint8_t buf[8 * (2 + MGMT_WIRE_MAX_SIZE)];
	size_t n = record(buf, 0, &msgs[0]); /* a request ... */
	n += record(buf + n, 16, &msgs[0]);  /* ... retried a second later */
	n += record(buf + n, 0, &msgs[2]);   /* the peer's heartbeat */
	n += record(buf + n, 0, &msgs[4]);   /* and its goodbye */
	put("rendezvous", "request-retry-ping-goodbye", buf, n);
	n = record(buf, 1 | 2, &msgs[0]); /* on the control socket, over IPv6 */
	put("rendezvous", "request-control-v6", buf, n);
	n = record(buf, 4 | 8, &msgs[1]); /* the answer to our own connect */
	n += record(buf + n, 16, &msgs[3]);
	put("rendezvous", "answer-pong", buf, n);
	n = record(buf, 0, &msgs[5]);
	put("rendezvous", "offer", buf, n);
}

/* --- softib_ring: operations (see fuzz_softib_ring.c); the packets are
 * placed by softib's own sender in the target --- */

#define RING_POST(area, len) 1, (area), (uint8_t)(len), (uint8_t)((len) >> 8)
#define RING_SEND(len) 2, (uint8_t)((len) / 4), (uint8_t)((len) / 4 >> 8)
#define RING_POLL(max) 3, (max)

static void seeds_softib_ring(void)
{
	/* Receives in the area: the sender writes them itself. */
	const uint8_t direct[] = {RING_POST(1, 2048), RING_POST(1, 2048), RING_SEND(64),
				  RING_SEND(2000), RING_POLL(7), RING_POST(1, 100), RING_SEND(80),
				  RING_POLL(0)};
	put("softib_ring", "direct", direct, sizeof(direct));
	/* Receives elsewhere: staged in a slot, scattered at poll; one too small. */
	const uint8_t staged[] = {RING_POST(0, 4096), RING_POST(0, 64), RING_SEND(1024),
				  RING_SEND(1024), RING_POLL(1), RING_POLL(1)};
	put("softib_ring", "staged", staged, sizeof(staged));
	/* Nothing posted: dropped; then the ring wraps. */
	uint8_t wrap[64] = {RING_SEND(16)};
	size_t n = 3;
	for (int i = 0; i < 6; i++) {
		const uint8_t step[] = {RING_POST(1, 512), RING_SEND(256), RING_POLL(0)};
		memcpy(wrap + n, step, sizeof(step));
		n += sizeof(step);
	}
	put("softib_ring", "drop-then-wrap", wrap, n);
}

/* --- stream_wire: operations (see fuzz_stream_wire.c) --- */

struct ops {
	uint8_t b[1024];
	size_t n;
};

static void op_bytes(struct ops *o, const void *p, size_t len)
{
	memcpy(o->b + o->n, p, len);
	o->n += len;
}

/* A request of type, its sid replaced by the stream b opened when mine. */
static void op_request(struct ops *o, uint8_t type, bool mine, const void *body, uint16_t len)
{
	const uint8_t head[] = {0, (uint8_t)((type - STREAM_REQ_OPEN) | (mine ? 0x80 : 0)),
				(uint8_t)len, (uint8_t)(len >> 8)};
	op_bytes(o, head, sizeof(head));
	op_bytes(o, body, len);
}

static void op_answer(struct ops *o, const void *body, uint16_t len)
{
	const uint8_t head[] = {1, (uint8_t)len, (uint8_t)(len >> 8)};
	op_bytes(o, head, sizeof(head));
	op_bytes(o, body, len);
}

static void op_app(struct ops *o, uint8_t what, uint8_t n)
{
	op_bytes(o, (uint8_t[]){2, what, n}, 3);
}

static void op_pump(struct ops *o)
{
	op_bytes(o, (uint8_t[]){3, 3}, 2);
}

/* The client's OPEN of 127.0.0.1:7000 (the target's listener), and its answer. */
static void op_open(struct ops *o)
{
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7000),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in src = dst;
	src.sin_port = htons(40000);
	struct wire_open w = {.client_sid = 1, .window = 256u << 10};
	wire_addr_from(&w.dst, (struct sockaddr *)&dst);
	wire_addr_from(&w.src, (struct sockaddr *)&src);
	op_request(o, STREAM_REQ_OPEN, false, &w, sizeof(w));
	op_pump(o);
}

static void op_data(struct ops *o, uint64_t seq, const char *text)
{
	uint8_t body[sizeof(struct wire_seg) + 64];
	struct wire_seg seg = {.value = seq};
	memcpy(body, &seg, sizeof(seg));
	memcpy(body + sizeof(seg), text, strlen(text));
	op_request(o, STREAM_REQ_DATA, true, body, (uint16_t)(sizeof(seg) + strlen(text)));
}

static void op_ack(struct ops *o, uint32_t flags, uint64_t seq, const char *reply)
{
	uint8_t body[sizeof(struct wire_ack) + 64];
	struct wire_ack a = {.flags = flags, .seq = seq};
	memcpy(body, &a, sizeof(a));
	memcpy(body + sizeof(a), reply, strlen(reply));
	op_answer(o, body, (uint16_t)(sizeof(a) + strlen(reply)));
}

static void op_seg(struct ops *o, uint8_t type, uint64_t value)
{
	struct wire_seg seg = {.value = value};
	op_request(o, type, true, &seg, sizeof(seg));
}

static void seeds_stream_wire(void)
{
	struct ops o = {.n = 0};
	op_open(&o);
	op_data(&o, 0, "GET / HTTP/1.0\r\n\r\n");
	op_pump(&o);
	op_app(&o, 1, 4); /* read it */
	op_app(&o, 0, 2); /* reply, in DATA's answer */
	op_pump(&o);
	op_seg(&o, STREAM_REQ_FIN, 18);
	op_pump(&o);
	op_app(&o, 3, 0); /* close */
	op_pump(&o);
	put("stream_wire", "open-data-reply-fin", o.b, o.n);

	o.n = 0;
	op_open(&o);
	op_app(&o, 0, 64); /* b writes first: DATA to the peer */
	op_pump(&o);
	op_ack(&o, 0, 0, "pong");
	op_ack(&o, ACK_FIN, 4, "");
	op_seg(&o, STREAM_REQ_WINDOW, 1024);
	op_pump(&o);
	op_app(&o, 1, 8);
	op_seg(&o, STREAM_REQ_RESET, 0);
	op_pump(&o);
	put("stream_wire", "server-writes-answers-reset", o.b, o.n);

	o.n = 0;
	op_open(&o);
	op_seg(&o, STREAM_REQ_MOVE, 0xC00C1E);
	op_pump(&o);
	struct wire_attach at = {.seg = {.value = 0xC00C1E}, .sid = 9, .window = 256u << 10};
	op_request(&o, STREAM_REQ_ATTACH, true, &at, sizeof(at));
	op_pump(&o);
	op_app(&o, 4, 1); /* and b moves it out */
	op_pump(&o);
	op_ack(&o, 0, 0, "");
	op_pump(&o);
	put("stream_wire", "move-attach", o.b, o.n);

	o.n = 0;
	op_app(&o, 0x80 | 0, 4); /* b connects to the peer and writes */
	op_pump(&o);
	struct wire_open_resp r = {.server_sid = 3, .window = 256u << 10};
	op_answer(&o, &r, sizeof(r));
	op_pump(&o);
	op_ack(&o, 0, 0, "reply");
	op_app(&o, 0x80 | 1, 4);
	op_app(&o, 0x80 | 3, 0);
	op_pump(&o);
	op_ack(&o, ACK_FIN, 5, "");
	op_pump(&o);
	put("stream_wire", "client-open-answered", o.b, o.n);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
		return 2;
	}
	top = argv[1];
	ferry_log_init(FERRY_LOG_ERROR, NULL);
	unsigned n;
	const struct mgmt_msg *msgs = messages(&n);
	seeds_pkthdr();
	seeds_mgmt_wire(msgs, n);
	seeds_rendezvous(msgs);
	seeds_softib_ring();
	seeds_stream_wire();
	return 0;
}
