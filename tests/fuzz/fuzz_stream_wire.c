/*
 * libFuzzer target: the stream protocol as one endpoint reads it from its
 * peer (preload/stream_*.c): the requests its handlers take (OPEN, DATA,
 * WINDOW, FIN, RESET, MOVE, ATTACH) and the answers its own requests get
 * back, which carry the peer's reply bytes and FIN. A ferry peer writes
 * these bytes, and so does anything that holds a session's token.
 *
 * Endpoint b runs the real stream layer with a listener on 127.0.0.1:7000;
 * endpoint a is the fuzzer's peer, joined to it by a session on the
 * in-process test nic. Input: a list of operations:
 *   0 t lo hi body  a sends request type STREAM_REQ_OPEN + (t & 7) with a
 *                   (hi << 8 | lo)-byte body; t & 0x80: its first 4 bytes
 *                   are the sid b gave the last stream it opened (a peer
 *                   knows its stream's id)
 *   1 lo hi body    a answers b's oldest request waiting with that body
 *   2 what n        b's application on its accepted stream (on its own
 *                   connection to a, opened then, when what & 0x80): send
 *                   n * 16 bytes, read up to n * 16, shut down writing,
 *                   close, or move it out ((what & 0x7f) % 5)
 *   3 n             both event loops run n % 8 + 1 times
 * Every input starts from fresh endpoints and an empty stream table.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "preload/listener.h"
#include "preload/stream.h"
#include "preload/stream_wire.h"
#include "tests/rpc_pair.h"
#include "transport/log.h"
#include "transport/msgbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HELD_MAX 64
#define PORT 7000

static struct rpc_pair P;
static char file_token; /* stands for the application's file: never read */
#define TEST_FILE ((struct ffile *)(void *)&file_token)
static struct listener *lis;
static struct stream *srv; /* b's accepted stream, once popped */
static struct stream *cli; /* b's own connection to the peer */
static uint32_t srv_sid;   /* the sid in b's last OPEN answer */
static struct rpc_req *held[HELD_MAX];
static unsigned nheld;
static uint8_t buf[1u << 16];

static void ready(struct ffile *file, uint32_t mask, uint32_t events)
{
}

/* a's handler for every request b sends: answered when the input says. */
static void peer_request(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	if (nheld == HELD_MAX) {
		rpc_respond(rpc, req);
		return;
	}
	held[nheld++] = req;
}

static void peer_answer(const uint8_t *body, uint32_t len)
{
	if (!nheld)
		return;
	struct rpc_req *req = held[0];
	memmove(held, held + 1, --nheld * sizeof(held[0]));
	struct msgbuf *m = rpc_resp_msg(P.a, req, len);
	if (m) {
		if (len)
			memcpy(m->buf, body, len);
		msgbuf_resize(m, len);
	}
	rpc_respond(P.a, req);
}

struct sent {
	struct msgbuf *m;
	uint8_t type;
};

static void peer_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct sent *s = tag;
	if (s->type == STREAM_REQ_OPEN && status == 0 &&
	    resp->data_size >= sizeof(struct wire_open_resp)) {
		const struct wire_open_resp *r = (const void *)resp->buf;
		if (r->status == 0)
			srv_sid = r->server_sid;
	}
	rpc_free_msg(rpc, s->m);
	free(s);
}

static void peer_request_send(uint8_t t, const uint8_t *body, uint32_t len)
{
	struct sent *s = malloc(sizeof(*s));
	struct msgbuf *m = s ? rpc_alloc_msg(P.a, len) : NULL;
	if (!m) {
		free(s);
		return;
	}
	memcpy(m->buf, body, len);
	if ((t & 0x80) && len >= 4)
		memcpy(m->buf, &srv_sid, 4);
	s->m = m;
	s->type = (uint8_t)(STREAM_REQ_OPEN + (t & 7));
	if (rpc_enqueue_request(P.a, P.sa, s->type, m, peer_cont, s) != 0) {
		rpc_free_msg(P.a, m);
		free(s);
	}
}

/* b's client stream: an OPEN to the peer, whose answer the input writes. */
static struct stream *client_open(void)
{
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(PORT + 1),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in src = dst;
	src.sin_port = htons(PORT + 2);
	struct stream *s = NULL;
	stream_open(P.b, P.sb, TEST_FILE, (struct sockaddr *)&dst, sizeof(dst),
		    (struct sockaddr *)&src, sizeof(src), &s);
	return s;
}

static void app(uint8_t what, uint8_t n)
{
	struct stream **sp = (what & 0x80) ? &cli : &srv;
	if (!*sp)
		*sp = (what & 0x80) ? client_open() : listener_pop(lis);
	if (!*sp)
		return;
	if (*sp == srv)
		stream_set_file(srv, TEST_FILE);
	struct iovec v = {buf, (size_t)n * 16};
	switch ((what & 0x7f) % 5) {
	case 0:
		stream_send(P.b, *sp, &v, 1);
		break;
	case 1:
		stream_recv(P.b, *sp, &v, 1, 0);
		break;
	case 2:
		stream_shutdown(P.b, *sp, SHUT_WR);
		break;
	case 3:
		stream_close(P.b, *sp);
		*sp = NULL;
		break;
	default:
		stream_move_out(P.b, *sp, 0xC00C1Eu + n);
		break;
	}
}

static void pump(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		stream_run_once(P.b);
		rpc_run_once(P.a);
	}
}

static void open_endpoints(void)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char why[256];
	if (rpc_pair_open(&P, "test", &cfg, why, sizeof(why)) != 0 ||
	    stream_init(P.b, ready) != 0)
		abort();
	for (unsigned t = STREAM_REQ_OPEN; t <= STREAM_REQ_ATTACH; t++)
		rpc_register_handler(P.a, (uint8_t)t, peer_request, NULL);
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	lis = listener_add((struct sockaddr *)&la, sizeof(la), 16, TEST_FILE);
	if (!lis)
		abort();
	rpc_lock(P.a);
	rpc_lock(P.b);
}

static void close_endpoints(void)
{
	while (nheld)
		peer_answer(NULL, 0);
	rpc_unlock(P.a);
	rpc_unlock(P.b);
	rpc_pair_close(&P);
	stream_forget_all();
	lis = NULL;
	srv = cli = NULL;
	srv_sid = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	if (!quiet) {
		ferry_log_init(FERRY_LOG_ERROR, NULL);
		quiet = true;
	}
	open_endpoints();
	while (size > 0) {
		uint8_t op = data[0] & 3;
		data++, size--;
		if ((op == 0 && size >= 3) || (op == 1 && size >= 2)) {
			uint8_t t = op == 0 ? *data++ : 0;
			size -= op == 0;
			uint32_t len = (uint32_t)data[0] | (uint32_t)data[1] << 8;
			data += 2, size -= 2;
			if (len > size)
				len = (uint32_t)size;
			if (op == 0)
				peer_request_send(t, data, len);
			else
				peer_answer(data, len);
			data += len, size -= len;
		} else if (op == 2 && size >= 2) {
			app(data[0], data[1]);
			data += 2, size -= 2;
		} else if (op == 3 && size >= 1) {
			pump(data[0] % 8 + 1);
			data++, size--;
		} else {
			break;
		}
	}
	pump(4);
	close_endpoints();
	return 0;
}
