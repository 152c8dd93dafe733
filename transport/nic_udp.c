/* The kernel UDP nic: one non-blocking socket, batched with sendmmsg/recvmmsg
 * under load, single datagrams with sendmsg/recv when traffic is sparse. */
#include "autoconfig.h"

#include "transport/nic_udp.h"
#include "transport/nic_udp_internal.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/pkthdr.h"
#include "transport/stats.h"
#include "transport/sys.h"
#include "transport/txdefer.h"
#include "transport/udp_bind.h"

/*
 * Route data: [0] family of the host bytes (4 or 6), [1..2] port in network
 * order, [3..6] IPv6 scope id little endian, [7..] host (4 or 16 bytes). A
 * local route carries the wildcard host: the socket is bound to any address,
 * so only the peer knows which one reached us (see route_fixup).
 */
#define UDP_ROUTE_HOST 7
#define UDP_ROUTE_LEN4 (UDP_ROUTE_HOST + 4)
#define UDP_ROUTE_LEN6 (UDP_ROUTE_HOST + 16)

static const uint8_t udp_zero_pad[8];
static const uint8_t udp_loopback4[4] = {127, 0, 0, 1};

static void nic_udp_size_buffers(int fd);
static int nic_udp_wide_socket(int *family, int beside);
static int nic_udp_peer_socket(struct nic_peer *p);

static struct nic_udp *nic_udp_of(struct nic *nic)
{
	return (struct nic_udp *)nic;
}

static const struct nic_udp *nic_udp_of_const(const struct nic *nic)
{
	return (const struct nic_udp *)nic;
}

static bool is_temporary(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS;
}

static uint32_t pad8(uint32_t len)
{
	return (8u - (len & 7u)) & 7u;
}

/* Bundle fields are little endian and may sit anywhere in a buffer: one
 * unaligned load or store each (a loop over the bytes cost a bundled
 * packet about 95 instructions on receive, callgrind). */
static void put_le16(uint8_t *b, uint16_t v)
{
	v = htole16(v);
	memcpy(b, &v, sizeof(v));
}

static void put_le32(uint8_t *b, uint32_t v)
{
	v = htole32(v);
	memcpy(b, &v, sizeof(v));
}

static uint16_t get_le16(const uint8_t *b)
{
	uint16_t v;
	memcpy(&v, b, sizeof(v));
	return le16toh(v);
}

static uint32_t get_le32(const uint8_t *b)
{
	uint32_t v;
	memcpy(&v, b, sizeof(v));
	return le32toh(v);
}

/*
 * The largest bundle for a peer. Where the kernel segments, a bundle stays
 * within the path MTU, as a fragmented datagram costs the kernel a packet
 * per fragment and a reassembly, and full-sized packets are left to
 * segmentation. Without it, a bundle up to the nic's packet size still
 * costs less than its packets sent one by one.
 */
static uint32_t bundle_limit(const struct nic_udp *u, const struct nic_peer *to)
{
	uint32_t limit = u->base.max_pkt_size;
	if (u->gso && !to->gso_refused && to->path_payload && to->path_payload < limit)
		limit = to->path_payload;
	return limit;
}

/* How many packets from pkts[0..k) go in the next datagram (1: alone). */
static unsigned bundle_extent(const struct nic_udp *u, const struct nic_tx *pkts, unsigned k)
{
	uint32_t first = nic_tx_len(&pkts[0]);
	size_t total = UDP_BUNDLE_HDR + UDP_FRAME_HDR + first + pad8(first);
	uint32_t limit = bundle_limit(u, pkts[0].peer);
	unsigned n = 1;
	while (n < k && n < UDP_BUNDLE_MAX && pkts[n].peer == pkts[0].peer) {
		uint32_t len = nic_tx_len(&pkts[n]);
		if (total + UDP_FRAME_HDR + len + pad8(len) > limit)
			break;
		total += UDP_FRAME_HDR + len + pad8(len);
		n++;
	}
	return n;
}

/* Builds datagrams from pkts[0..k) into tx_msgs; returns how many. */
static unsigned nic_udp_build(struct nic_udp *u, const struct nic_tx *pkts, unsigned k)
{
	unsigned m = 0, iov = 0, i = 0;
	while (i < k) {
		struct nic_peer *peer = pkts[i].peer;
		if (peer->lazy_left && --peer->lazy_left == 0)
			peer->fd = nic_udp_peer_socket(peer);
		unsigned n = bundle_extent(u, pkts + i, k - i);
		/* Segmented: n packets, each a datagram of its own on the wire. */
		unsigned segs = n == 1 ? udp_gso_extent(u, pkts + i, k - i) : 1;
		if (segs > 1)
			n = segs;
		bool bundle = n > 1 && segs == 1;
		struct iovec *first_iov = &u->tx_iov[iov];
		if (bundle) {
			uint8_t *h = u->tx_hdr[m];
			memset(h, 0, UDP_BUNDLE_HDR);
			h[0] = UDP_BUNDLE_MARK;
			h[1] = UDP_BUNDLE_VERSION;
			put_le16(h + 2, (uint16_t)n);
			u->tx_iov[iov++] = (struct iovec){.iov_base = h, .iov_len = UDP_BUNDLE_HDR};
		}
		for (unsigned j = 0; j < n; j++) {
			const struct nic_tx *p = &pkts[i + j];
			uint32_t len = nic_tx_len(p);
			if (bundle) {
				uint8_t *f = u->tx_frame[i + j];
				memset(f, 0, UDP_FRAME_HDR);
				put_le32(f, len);
				u->tx_iov[iov++] = (struct iovec){.iov_base = f, .iov_len = UDP_FRAME_HDR};
			}
			for (unsigned s = 0; s < p->nsge; s++)
				u->tx_iov[iov++] = (struct iovec){.iov_base = (void *)p->sge[s].addr,
								  .iov_len = p->sge[s].len};
			if (bundle && pad8(len))
				u->tx_iov[iov++] = (struct iovec){.iov_base = (void *)udp_zero_pad,
								  .iov_len = pad8(len)};
		}
		const struct nic_peer *to = pkts[i].peer;
		u->tx_msgs[m].msg_hdr = (struct msghdr){
			.msg_name = to->fd >= 0 ? NULL : (void *)&to->addr,
			.msg_namelen = to->fd >= 0 ? 0 : to->len,
			.msg_iov = first_iov,
			.msg_iovlen = (size_t)(&u->tx_iov[iov] - first_iov)};
		u->tx_fd[m] = to->fd >= 0 ? to->fd : u->fd;
		u->tx_pkts[m] = n;
		if (segs > 1)
			udp_gso_attach(u, m, nic_tx_len(&pkts[i]));
		m++;
		i += n;
	}
	return m;
}

static void nic_udp_report_failure(const struct nic_peer *peer, int err)
{
	char dst[INET6_ADDRSTRLEN] = "?";
	if (peer->addr.sa.sa_family == AF_INET6)
		inet_ntop(AF_INET6, &peer->addr.in6.sin6_addr, dst, sizeof(dst));
	else
		inet_ntop(AF_INET, &peer->addr.in.sin_addr, dst, sizeof(dst));
	ferry_log_once(FERRY_LOG_WARN, "udp: send to %s failed: %s (packet dropped)", dst,
		       strerror(err));
}

static size_t udp_msg_len(const struct msghdr *h)
{
	size_t len = 0;
	for (size_t i = 0; i < h->msg_iovlen; i++)
		len += h->msg_iov[i].iov_len;
	return len;
}

/* Sends pkts[0..k) (k <= NIC_UDP_BATCH); returns how many packets the caller
 * may count as accepted. */
static unsigned nic_udp_send_chunk(struct nic_udp *u, const struct nic_tx *pkts, unsigned k,
				   bool *full)
{
	unsigned m = nic_udp_build(u, pkts, k);
	unsigned done = 0, accepted = 0;
	while (done < m) {
		int fd = u->tx_fd[done];
		const struct msghdr *h = &u->tx_msgs[done].msg_hdr;
		/* A small datagram waits for the endpoint lock to be let go
		 * (txdefer.h); a segmented one is sent now, where a refusal of
		 * segmentation can still be answered. */
		if (!h->msg_controllen &&
		    txdefer_add(fd, h->msg_name, h->msg_namelen, h->msg_iov, h->msg_iovlen,
				udp_msg_len(h), &u->tx_failures, u->tx_pkts[done])) {
			accepted += u->tx_pkts[done++];
			continue;
		}
		txdefer_flush(); /* what is staged leaves first */
		unsigned run = 1;
		while (done + run < m && u->tx_fd[done + run] == fd)
			run++;
		int r;
		/* One datagram: sendmsg spares sendmmsg's per-call overhead. */
		if (run == 1)
			r = sys()->sendmsg(fd, &u->tx_msgs[done].msg_hdr, MSG_DONTWAIT) >= 0 ? 1 : -1;
		else
			r = sys()->sendmmsg(fd, u->tx_msgs + done, run, MSG_DONTWAIT);
		if (r > 0) {
			for (int d = 0; d < r; d++) {
				udp_gso_sent(u, done);
				accepted += u->tx_pkts[done++];
			}
			continue;
		}
		int err = r < 0 ? errno : EAGAIN;
		if (err == EINTR)
			continue;
		/* The peer now sends plainly: the caller sends these again. */
		if (udp_gso_refused(u, pkts[accepted].peer, done, err))
			return accepted;
		if (is_temporary(err)) {
			/* The socket is full: what remains is not accepted, and
			 * the caller's retransmission covers it. */
			*full = true;
			return accepted;
		}
		/*
		 * A hard error belongs to this one destination (EMSGSIZE,
		 * ENETUNREACH, EACCES from a firewall, ECONNREFUSED on a peer's
		 * connected socket once its port has gone). Stopping here would let
		 * one bad peer stall every packet behind it, so the datagram is
		 * lost as if on the wire and the burst goes on.
		 */
		__atomic_add_fetch(&u->tx_failures, u->tx_pkts[done], __ATOMIC_RELAXED);
		/* A refusal is an earlier datagram's ICMP answer: the peer's
		 * port has gone, which mgmt reports as the peer's death. It must
		 * not use up the one warning a real failure gets. */
		if (err == ECONNREFUSED) {
			__atomic_store_n(&pkts[accepted].peer->gone, true, __ATOMIC_RELAXED);
			log_debug("udp: a peer's port is gone (packet dropped)");
		} else
			nic_udp_report_failure(pkts[accepted].peer, err);
		accepted += u->tx_pkts[done++];
	}
	return accepted;
}

static unsigned nic_udp_tx_burst(struct nic *nic, const struct nic_tx *pkts, unsigned n)
{
	struct nic_udp *u = nic_udp_of(nic);
	unsigned sent = 0;
	while (sent < n) {
		unsigned k = n - sent < NIC_UDP_BATCH ? n - sent : NIC_UDP_BATCH;
		bool full = false;
		sent += nic_udp_send_chunk(u, pkts + sent, k, &full);
		if (full) {
			__atomic_add_fetch(&u->tx_failures, n - sent, __ATOMIC_RELAXED);
			log_debug("udp: socket full, %u of %u packets not sent", n - sent, n);
			break;
		}
	}
	return sent;
}

/* Hands out one packet of buffer b: to the caller while it has room, else
 * to the pending queue. */
static void rx_emit(struct nic_udp *u, struct nic_rx *out, unsigned max, unsigned *n, uint32_t b,
		    uint8_t *pkt, uint32_t len)
{
	struct nic_rx r = {.pkt = pkt, .len = len, .buf = u->bufs + (size_t)b * u->stride};
	u->refs[b]++;
	if (*n < max)
		out[(*n)++] = r;
	else
		u->pending[u->pending_head + u->pending_n++] = r;
}

/* The packets of a bundle, or 0 if it is malformed (then nothing is emitted). */
static unsigned bundle_count(const uint8_t *d, uint32_t len)
{
	if (len < UDP_BUNDLE_HDR || d[1] != UDP_BUNDLE_VERSION || get_le32(d + 4) != 0)
		return 0;
	unsigned count = get_le16(d + 2);
	if (count < 2 || count > UDP_BUNDLE_MAX)
		return 0;
	uint32_t off = UDP_BUNDLE_HDR;
	for (unsigned i = 0; i < count; i++) {
		if (len - off < UDP_FRAME_HDR)
			return 0;
		uint32_t plen = get_le32(d + off);
		if (plen == 0 || get_le32(d + off + 4) != 0 || plen > len - off - UDP_FRAME_HDR)
			return 0;
		off += UDP_FRAME_HDR + plen;
		if (pad8(plen) > len - off)
			return 0;
		off += pad8(plen);
	}
	return off == len ? count : 0;
}

/* Splits the datagram at off in buffer b into packets (dropping a
 * malformed bundle, counted). */
static void rx_datagram(struct nic_udp *u, struct nic_rx *out, unsigned max, unsigned *n,
			uint32_t b, uint32_t off, uint32_t len)
{
	uint8_t *d = u->bufs + (size_t)b * u->stride + off;
	if (len == 0 || d[0] != UDP_BUNDLE_MARK) {
		rx_emit(u, out, max, n, b, d, len);
		return;
	}
	unsigned count = bundle_count(d, len);
	if (!count) {
		if (u->base.stats)
			stats_drop(u->base.stats, bundle);
		return;
	}
	uint32_t at = UDP_BUNDLE_HDR;
	for (unsigned i = 0; i < count; i++) {
		uint32_t plen = get_le32(d + at);
		rx_emit(u, out, max, n, b, d + at + UDP_FRAME_HDR, plen);
		at += UDP_FRAME_HDR + plen + pad8(plen);
	}
}

/* Lets go of the hold rx_burst keeps on a received buffer while it splits it. */
static void rx_release(struct nic_udp *u, uint32_t b)
{
	if (--u->refs[b] == 0)
		u->free_stack[u->nfree++] = b;
}

/*
 * Splits received slots into packets while the caller has room: a datagram
 * at a time, so a coalesced one (up to 64 KB of small packets) never floods
 * the pending queue; the rest waits for the next call. Once every received
 * slot is split, the slots not reached by the receive move to the front.
 */
static void rx_split(struct nic_udp *u, struct nic_rx *out, unsigned max, unsigned *n)
{
	while (*n < max && u->rx_next < u->rx_ready) {
		unsigned i = u->rx_next;
		uint32_t b = u->rx_idx[i], len = u->rx_msgs[i].msg_len, seg = u->rx_seg[i];
		/* A coalesced buffer is larger than a packet; its datagrams are not. */
		if ((u->rx_msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ||
		    (seg != UINT32_MAX && (seg ? seg : len) > u->base.max_pkt_size)) {
			if (u->base.stats)
				stats_drop(u->base.stats, size); /* larger than this nic's packets */
			u->rx_off = len;
		} else if (seg == UINT32_MAX) {
			u->rx_off = len; /* counted by udp_gro_segment */
		} else {
			uint32_t take = seg && seg < len - u->rx_off ? seg : len - u->rx_off;
			rx_datagram(u, out, max, n, b, u->rx_off, take);
			u->rx_off += take;
		}
		if (u->rx_off >= len) {
			rx_release(u, b);
			u->rx_next++;
			u->rx_off = 0;
		}
	}
	if (u->rx_ready && u->rx_next == u->rx_ready) {
		unsigned rest = u->rx_filled - u->rx_ready;
		memmove(u->rx_idx, u->rx_idx + u->rx_ready, rest * sizeof(u->rx_idx[0]));
		memmove(u->rx_iov, u->rx_iov + u->rx_ready, rest * sizeof(u->rx_iov[0]));
		u->rx_filled = rest;
		u->rx_next = u->rx_ready = 0;
	}
}

/* Receives into slot 0 as recvmmsg would: 1, 0 (nothing queued) or -1. */
static int nic_udp_recv_one(struct nic_udp *u)
{
	ssize_t len;
	if (u->gro) {
		/* The segment size comes in a control message. */
		len = sys()->recvmsg(u->fd, &u->rx_msgs[0].msg_hdr, MSG_DONTWAIT);
		if (len >= 0)
			u->rx_msgs[0].msg_len = (unsigned)len;
	} else {
		size_t cap = u->rx_iov[0].iov_len;
		/* MSG_TRUNC makes recv return the datagram's full length. */
		len = sys()->recv(u->fd, u->rx_iov[0].iov_base, cap, MSG_DONTWAIT | MSG_TRUNC);
		if (len >= 0) {
			u->rx_msgs[0].msg_len = (unsigned)((size_t)len < cap ? (size_t)len : cap);
			u->rx_msgs[0].msg_hdr.msg_flags = (size_t)len > cap ? MSG_TRUNC : 0;
		}
	}
	if (len < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
	return 1;
}

static unsigned nic_udp_rx_burst(struct nic *nic, struct nic_rx *out, unsigned max)
{
	struct nic_udp *u = nic_udp_of(nic);
	unsigned n = 0;
	while (n < max && u->pending_n) {
		out[n++] = u->pending[u->pending_head++];
		u->pending_n--;
	}
	if (!u->pending_n)
		u->pending_head = 0;
	if (n == max || u->pending_n)
		return n;
	/* Datagrams wait in the socket until every received one is split. */
	rx_split(u, out, max, &n);
	if (n == max || u->rx_ready)
		return n;
	/* Receive slots [0, rx_filled) hold buffers with their headers ready,
	 * so an empty poll writes nothing; what a receive empties is refilled
	 * from the free stack. */
	unsigned want = max - n < NIC_UDP_BATCH ? max - n : NIC_UDP_BATCH;
	while (u->rx_filled < want && u->nfree) {
		uint32_t b = u->free_stack[--u->nfree];
		u->rx_idx[u->rx_filled] = b;
		u->rx_iov[u->rx_filled++].iov_base = u->bufs + (size_t)b * u->stride;
	}
	/* With every buffer out, datagrams wait in the socket (and past
	 * SO_RCVBUF the kernel drops them) instead of overwriting held ones. */
	unsigned k = u->rx_filled < want ? u->rx_filled : want;
	if (k == 0)
		return n;
	/* A look after a wake-up taken from the socket receives in a batch:
	 * the wake-up spent the edge, so what is queued wakes nobody and all
	 * of it comes out now, not one datagram alone (a postgres backend got
	 * the stream's ack and the client's first bytes together). */
	uint64_t look = __atomic_add_fetch(&nic->rx_looks, 1, __ATOMIC_ACQ_REL);
	bool one = u->rx_sparse &&
		   __atomic_load_n(&nic->rx_notified_look, __ATOMIC_ACQUIRE) != look - 1;
	int r = one ? nic_udp_recv_one(u)
		    : sys()->recvmmsg(u->fd, u->rx_msgs, k, MSG_DONTWAIT, NULL);
	/* A receive that took fewer than it asked for emptied the socket; a
	 * lone one that got its datagram cannot tell. One that failed found
	 * the queue empty: a socket reports its error only then. */
	bool empty = r <= 0 || (!one && (unsigned)r < k);
	__atomic_store_n(&nic->rx_empty_look, empty ? look : 0, __ATOMIC_RELEASE);
	if (r <= 0) {
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			ferry_log_once(FERRY_LOG_WARN, "udp: receive failed: %s", strerror(errno));
		u->rx_sparse = true;
		return n;
	}
	/* A lone datagram after a quiet spell may be the first of a burst. */
	u->rx_sparse = !u->rx_sparse && r == 1;
	for (unsigned i = 0; i < (unsigned)r; i++) {
		u->refs[u->rx_idx[i]] = 1; /* rx_split's hold */
		u->rx_seg[i] = udp_gro_segment(u, i);
	}
	u->rx_ready = (unsigned)r;
	rx_split(u, out, max, &n);
	return n;
}

static void nic_udp_post_recvs(struct nic *nic, void *const *bufs, unsigned n)
{
	struct nic_udp *u = nic_udp_of(nic);
	for (unsigned i = 0; i < n; i++) {
		size_t off = (size_t)((uint8_t *)bufs[i] - u->bufs);
		size_t b = off / u->stride;
		if ((uint8_t *)bufs[i] < u->bufs || off % u->stride || b >= NIC_UDP_RX_BUFS ||
		    !u->refs[b]) {
			/* A foreign or twice-returned buffer would later hold two
			 * packets at once; fail where the bug is. */
			log_error("udp: post_recvs got a buffer it did not hand out (%p)", bufs[i]);
			abort();
		}
		if (--u->refs[b] == 0)
			u->free_stack[u->nfree++] = (uint32_t)b;
	}
}

/* sendmmsg copied the packets into the kernel before returning. */
static void nic_udp_flush(struct nic *nic) {}

static int nic_udp_notify_fd(const struct nic *nic)
{
	return nic_udp_of_const(nic)->fd;
}

/*
 * Packets split out of a bundle, or received datagrams not yet split, wait
 * here: no sleep. Otherwise the socket decides. A poll on it returns at
 * once while a datagram is queued, but the epoll sleepers watch it edge
 * triggered, where a datagram already queued wakes nobody: so a look first,
 * unless the last one left the socket empty and no wake-up was taken since
 * (nic_rx_drained); a MSG_PEEK would be a system call as well. A caller that
 * holds every receive buffer cannot look: it sleeps (or, polling, sees the
 * fd readable and rx_burst return 0) until it posts some back.
 */
static int nic_udp_arm_notify(struct nic *nic)
{
	const struct nic_udp *u = nic_udp_of(nic);
	if (u->pending_n || u->rx_next < u->rx_ready)
		return 1;
	bool can_look = u->rx_filled || u->nfree;
	return can_look && !nic_rx_drained(nic) ? 1 : 0;
}

/* Nothing to pin: the kernel copies from user memory on every send. */
static int nic_udp_reg_mem(struct nic *nic, void *addr, size_t len, struct nic_mr *out)
{
	out->lkey = 0;
	out->handle = NULL;
	return 0;
}

static void nic_udp_dereg_mem(struct nic *nic, struct nic_mr *mr) {}

static bool nic_udp_pins_memory(const struct nic *nic)
{
	return false;
}

static bool route_valid(const struct nic_route *r)
{
	return r->kind == FERRY_TRANSPORT_UDP &&
	       ((r->data[0] == 4 && r->len == UDP_ROUTE_LEN4) ||
		(r->data[0] == 6 && r->len == UDP_ROUTE_LEN6));
}

static const uint8_t v4mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool route_host_is_wildcard(const struct nic_route *r)
{
	const uint8_t *h = r->data + UDP_ROUTE_HOST;
	size_t hl = r->data[0] == 4 ? 4 : 16;
	if (hl == 16 && memcmp(h, v4mapped_prefix, 12) == 0) {
		h += 12; /* ::ffff:0.0.0.0 is the v4 wildcard */
		hl = 4;
	}
	for (size_t i = 0; i < hl; i++)
		if (h[i])
			return false;
	return true;
}

static void route_set_host(struct nic_route *r, int family, const void *host, uint32_t scope)
{
	r->data[0] = family == AF_INET ? 4 : 6;
	for (int i = 0; i < 4; i++)
		r->data[3 + i] = (uint8_t)(scope >> (8 * i));
	memcpy(r->data + UDP_ROUTE_HOST, host, family == AF_INET ? 4 : 16);
	r->len = family == AF_INET ? UDP_ROUTE_LEN4 : UDP_ROUTE_LEN6;
}

static void nic_udp_local_route(const struct nic *nic, struct nic_route *out)
{
	const struct nic_udp *u = nic_udp_of_const(nic);
	static const uint8_t any[16];
	memset(out, 0, sizeof(*out));
	out->kind = FERRY_TRANSPORT_UDP;
	/* On loopback the host is said outright: a peer would fill in the
	 * control socket's source, which may be ::1, where we do not listen. */
	if (u->wide)
		route_set_host(out, u->family, any, 0);
	else
		route_set_host(out, AF_INET, udp_loopback4, 0);
	uint16_t port = htons(u->port);
	memcpy(out->data + 1, &port, 2);
}

static void nic_udp_route_fixup(const struct nic *nic, struct nic_route *route,
				const struct sockaddr *seen, socklen_t seen_len)
{
	const struct nic_udp *u = nic_udp_of_const(nic);
	if (!route_valid(route) || !route_host_is_wildcard(route) || !seen)
		return;
	if (seen->sa_family == AF_INET && seen_len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)seen;
		if (u->family == AF_INET6) {
			uint8_t mapped[16];
			memcpy(mapped, v4mapped_prefix, 12);
			memcpy(mapped + 12, &in->sin_addr, 4);
			route_set_host(route, AF_INET6, mapped, 0);
		} else {
			route_set_host(route, AF_INET, &in->sin_addr, 0);
		}
	} else if (seen->sa_family == AF_INET6 &&
		   seen_len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)seen;
		const uint8_t *a = in6->sin6_addr.s6_addr;
		/* A nic on 127.0.0.1 reaches a peer seen at ::1 there: the
		 * peer's socket is on 127.0.0.1 too, or dual-stack. */
		if (!u->wide && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			route_set_host(route, AF_INET, udp_loopback4, 0);
		else if (u->family == AF_INET && memcmp(a, v4mapped_prefix, 12) == 0)
			route_set_host(route, AF_INET, a + 12, 0);
		else
			route_set_host(route, AF_INET6, a, in6->sin6_scope_id);
	}
}

/* Set once the FORCE options were refused (no CAP_NET_ADMIN): not asked
 * again for every peer's socket, nor in a fork child (atomic). */
static int nic_udp_force_refused;

/* Sets one socket buffer as large as allowed; returns what the kernel gave,
 * in the units setsockopt takes (getsockopt reports double, for overhead). */
static int nic_udp_grow_buffer(int fd, int force_opt, int opt)
{
	int want = NIC_UDP_SOCKBUF;
	/* The FORCE variant ignores net.core.*mem_max but needs CAP_NET_ADMIN. */
	bool forced = false;
	if (!__atomic_load_n(&nic_udp_force_refused, __ATOMIC_RELAXED)) {
		forced = sys()->setsockopt(fd, SOL_SOCKET, force_opt, &want, sizeof(want)) == 0;
		if (!forced && errno == EPERM)
			__atomic_store_n(&nic_udp_force_refused, 1, __ATOMIC_RELAXED);
	}
	if (!forced)
		sys()->setsockopt(fd, SOL_SOCKET, opt, &want, sizeof(want));
	int got = 0;
	socklen_t len = sizeof(got);
	if (sys()->getsockopt(fd, SOL_SOCKET, opt, &got, &len) < 0)
		return 0;
	return got / 2;
}

/*
 * Peer sockets live at half RLIMIT_NOFILE or above (as preload/phpool's
 * hidden descriptors), never at a number the application would get next,
 * and take at most a small share of its descriptors: a server with many
 * client processes would otherwise run out of numbers long before the
 * kernel's TCP would. Past the share, a peer sends from the nic's socket.
 * The floor is capped, as the kernel's table grows to the highest number in
 * use (and a fork copies it). Counted per process, as the limit is.
 */
#define NIC_UDP_PEER_FD_SHARE 32
static int nic_udp_peer_fds; /* atomic */

/* Moves fd above the application's numbers and counts it; closes it and
 * returns -1 if it cannot go there or the share is used up. */
static int nic_udp_hide_fd(int fd)
{
	int high = -1;
	int lim = sys_fd_limit();
	if (lim >= 0) {
		int floor = sys_fd_floor_of(lim);
		int share = lim / NIC_UDP_PEER_FD_SHARE;
		if (__atomic_add_fetch(&nic_udp_peer_fds, 1, __ATOMIC_RELAXED) <= share)
			high = sys()->fcntl(fd, F_DUPFD_CLOEXEC, floor);
		if (high < 0)
			__atomic_sub_fetch(&nic_udp_peer_fds, 1, __ATOMIC_RELAXED);
	}
	sys()->close(fd);
	return high;
}

/* Under the endpoint lock (session_free), the only one under which datagrams
 * to fd are staged (txdefer_close's condition). */
static void nic_udp_peer_fd_close(int fd)
{
	txdefer_close(fd);
	__atomic_sub_fetch(&nic_udp_peer_fds, 1, __ATOMIC_RELAXED);
}

/*
 * The peer's own sending socket, connected to it; -1 if it cannot be made,
 * and the nic's socket sends instead. A v4-mapped peer gets a plain IPv4
 * socket, whose send path is the shorter. Datagrams from it carry another
 * source port than the nic's; receivers go by the packet header, never by
 * the source address.
 */
static int nic_udp_peer_socket(struct nic_peer *p)
{
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} a;
	socklen_t alen = p->len;
	memcpy(&a, &p->addr, sizeof(a));
	if (a.sa.sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&p->addr.in6.sin6_addr)) {
		a.in = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = p->addr.in6.sin6_port};
		memcpy(&a.in.sin_addr, p->addr.in6.sin6_addr.s6_addr + 12, 4);
		alen = sizeof(a.in);
	}
	int fd = sys()->socket(a.sa.sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	fd = nic_udp_hide_fd(fd);
	if (fd < 0)
		return -1;
	nic_udp_grow_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
	if (sys()->connect(fd, &a.sa, alen) != 0) {
		log_debug("udp: no connected socket for a peer (%s); the nic's socket sends",
			  strerror(errno));
		nic_udp_peer_fd_close(fd);
		return -1;
	}
	int mtu = 0;
	socklen_t ml = sizeof(mtu);
	bool v4 = a.sa.sa_family == AF_INET;
	if (sys()->getsockopt(fd, v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_MTU : IPV6_MTU, &mtu, &ml) == 0 &&
	    mtu > (v4 ? 28 : 48))
		p->path_payload = (uint32_t)mtu - (v4 ? 28u : 48u);
	return fd;
}

static int nic_udp_peer_create(struct nic *nic, const struct nic_route *route,
			       struct nic_peer **out)
{
	const struct nic_udp *u = nic_udp_of(nic);
	if (!route_valid(route))
		return -EAFNOSUPPORT;
	if (route_host_is_wildcard(route))
		return -EDESTADDRREQ; /* route_fixup never saw the peer */
	uint16_t port;
	memcpy(&port, route->data + 1, 2);
	if (port == 0)
		return -EINVAL;
	const uint8_t *host = route->data + UDP_ROUTE_HOST;
	bool mapped = route->data[0] == 6 && memcmp(host, v4mapped_prefix, 12) == 0;
	if (u->family == AF_INET && route->data[0] == 6 && !mapped)
		return -EAFNOSUPPORT; /* an IPv6 peer, and this host has no IPv6 */

	struct nic_peer *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (u->family == AF_INET6) {
		p->addr.in6.sin6_family = AF_INET6;
		p->addr.in6.sin6_port = port;
		if (route->data[0] == 4) {
			memcpy(p->addr.in6.sin6_addr.s6_addr, v4mapped_prefix, 12);
			memcpy(p->addr.in6.sin6_addr.s6_addr + 12, host, 4);
		} else {
			memcpy(p->addr.in6.sin6_addr.s6_addr, host, 16);
			const uint8_t *s = route->data + 3;
			p->addr.in6.sin6_scope_id = (uint32_t)s[0] | (uint32_t)s[1] << 8 |
						    (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
		}
		p->len = sizeof(p->addr.in6);
	} else {
		p->addr.in.sin_family = AF_INET;
		p->addr.in.sin_port = port;
		memcpy(&p->addr.in.sin_addr, mapped ? host + 12 : host, 4);
		p->len = sizeof(p->addr.in);
	}
	bool loopback = route->data[0] == 4 ? host[0] == 127
			: mapped	   ? host[12] == 127
					   : memcmp(host, in6addr_loopback.s6_addr, 16) == 0;
	p->fd = -1;
	if (loopback)
		p->lazy_left = NIC_UDP_PEER_LAZY;
	else
		p->fd = nic_udp_peer_socket(p);
	*out = p;
	return 0;
}

static void nic_udp_peer_destroy(struct nic *nic, struct nic_peer *peer)
{
	if (peer->fd >= 0)
		nic_udp_peer_fd_close(peer->fd);
	free(peer);
}

static void nic_udp_route_format(const struct nic_route *route, char *buf, size_t cap)
{
	if (!route_valid(route)) {
		snprintf(buf, cap, "udp:?");
		return;
	}
	char host[INET6_ADDRSTRLEN];
	int af = route->data[0] == 4 ? AF_INET : AF_INET6;
	inet_ntop(af, route->data + UDP_ROUTE_HOST, host, sizeof(host));
	uint16_t port;
	memcpy(&port, route->data + 1, 2);
	const uint8_t *s = route->data + 3;
	uint32_t scope = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 |
			 (uint32_t)s[3] << 24;
	if (scope)
		snprintf(buf, cap, "udp:[%s%%%u]:%u", host, scope, ntohs(port));
	else
		snprintf(buf, cap, "udp:[%s]:%u", host, ntohs(port));
}

static void nic_udp_free(struct nic_udp *u)
{
	txdefer_quiesce(); /* staged datagrams use u->fd and count into u */
	if (u->fd >= 0)
		sys()->close(u->fd);
	if (u->bufs)
		munmap(u->bufs, u->map_len);
	free(u);
}

static void nic_udp_close(struct nic *nic)
{
	nic_udp_free(nic_udp_of(nic));
}

/*
 * The wildcard at the same port, on the same descriptor number: dup3 puts
 * the new socket where the old one was, which closes the old one, so the
 * loopback address goes to the new socket too. Datagrams the old socket
 * still held are lost, as on any network; go-back-N sends them again.
 */
static int nic_udp_widen(struct nic *nic)
{
	struct nic_udp *u = nic_udp_of(nic);
	if (u->wide)
		return 0;
	int family;
	int fd = nic_udp_wide_socket(&family, u->fd);
	int rc = fd < 0 ? fd : 0;
	if (rc == 0 && sys()->dup3(fd, u->fd, O_CLOEXEC) < 0)
		rc = -errno;
	if (fd >= 0)
		sys()->close(fd);
	if (rc) {
		log_warn("udp: cannot listen beyond loopback (%s): peers on other hosts cannot "
			 "reach this process",
			 strerror(-rc));
		return rc;
	}
	u->family = family;
	u->wide = true;
	nic_udp_size_buffers(u->fd);
	udp_gso_restart(u);
	log_debug("udp nic: now on %s port %u", family == AF_INET6 ? "[::]" : "0.0.0.0", u->port);
	return 0;
}

static void nic_udp_forked_child(struct nic *nic)
{
	struct nic_udp *u = nic_udp_of(nic);
	if (u->fd >= 0)
		sys()->close(u->fd);
	u->fd = -1;
}

static bool nic_udp_peer_gone(const struct nic *nic, const struct nic_peer *peer)
{
	(void)nic;
	return __atomic_load_n(&peer->gone, __ATOMIC_RELAXED);
}

/* Only a connected socket hears that the peer's port is gone: a lazy peer
 * gets its own with its next datagram. */
static void nic_udp_peer_unanswered(struct nic *nic, struct nic_peer *peer)
{
	(void)nic;
	if (peer->lazy_left > 1)
		peer->lazy_left = 1;
}

static const struct nic_ops nic_udp_ops = {
	.tx_burst = nic_udp_tx_burst,
	.rx_burst = nic_udp_rx_burst,
	.post_recvs = nic_udp_post_recvs,
	.flush = nic_udp_flush,
	.notify_fd = nic_udp_notify_fd,
	.arm_notify = nic_udp_arm_notify,
	.reg_mem = nic_udp_reg_mem,
	.dereg_mem = nic_udp_dereg_mem,
	.pins_memory = nic_udp_pins_memory,
	.local_route = nic_udp_local_route,
	.route_fixup = nic_udp_route_fixup,
	.peer_create = nic_udp_peer_create,
	.peer_destroy = nic_udp_peer_destroy,
	.route_format = nic_udp_route_format,
	.close = nic_udp_close,
	.widen = nic_udp_widen,
	.forked_child = nic_udp_forked_child,
	.peer_gone = nic_udp_peer_gone,
	.peer_unanswered = nic_udp_peer_unanswered,
};

/* Binds fd to its family's wildcard: at beside's port while beside holds
 * it (udp_bind.h), or at a port the kernel picks (beside -1). */
static int nic_udp_bind_wide(int fd, int family, int beside)
{
	if (beside >= 0)
		return udp_bind_wide_beside(fd, family, beside);
	struct sockaddr_storage any = {.ss_family = (sa_family_t)family};
	socklen_t len = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	return sys()->bind(fd, (struct sockaddr *)&any, len) == 0 ? 0 : -errno;
}

/* A socket on the wildcard (see nic_udp_bind_wide): dual-stack IPv6 when
 * the host has IPv6, else IPv4. Returns the fd or -errno. */
static int nic_udp_wide_socket(int *family, int beside)
{
	int fd = sys()->socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		int off = 0;
		if (sys()->setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) == 0 &&
		    nic_udp_bind_wide(fd, AF_INET6, beside) == 0) {
			*family = AF_INET6;
			return fd;
		}
		sys()->close(fd);
	}
	fd = sys()->socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = nic_udp_bind_wide(fd, AF_INET, beside);
	if (rc < 0) {
		sys()->close(fd);
		return rc;
	}
	*family = AF_INET;
	return fd;
}

/* 127.0.0.1:0 (udp_bind.h); the wildcard if loopback cannot be had.
 * Returns the fd or -errno. */
static int nic_udp_socket(int *family, bool *wide)
{
	int fd = sys()->socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0 && udp_bind_loopback(fd, AF_INET) == 0) {
		*family = AF_INET;
		*wide = false;
		return fd;
	}
	if (fd >= 0)
		sys()->close(fd);
	*wide = true;
	return nic_udp_wide_socket(family, -1);
}

static void nic_udp_size_buffers(int fd)
{
	int rcv = nic_udp_grow_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
	int snd = nic_udp_grow_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
	if (rcv < NIC_UDP_SOCKBUF || snd < NIC_UDP_SOCKBUF)
		ferry_log_once(FERRY_LOG_WARN,
			       "udp: socket buffers are %d KiB receive, %d KiB send; ferry wants %d KiB "
			       "each or large messages will be dropped and resent. As root: sysctl -w "
			       "net.core.rmem_max=%d net.core.wmem_max=%d",
			       rcv / 1024, snd / 1024, NIC_UDP_SOCKBUF / 1024, NIC_UDP_SOCKBUF,
			       NIC_UDP_SOCKBUF);
}

static struct nic *nic_udp_fail(struct nic_udp *u, int err, int *errp, char *msg, size_t msglen,
				const char *what)
{
	if (errp)
		*errp = err;
	if (msg && msglen)
		snprintf(msg, msglen, "udp nic: %s: %s", what, strerror(-err));
	nic_udp_free(u);
	return NULL;
}

struct nic *nic_udp_open(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			 char *msg, size_t msglen)
{
	struct nic_udp *u = calloc(1, sizeof(*u));
	if (!u) {
		if (err)
			*err = -ENOMEM;
		if (msg && msglen)
			snprintf(msg, msglen, "udp nic: out of memory");
		return NULL;
	}
	u->fd = -1;
	u->base.ops = &nic_udp_ops;
	u->base.name = "udp";
	u->base.rx_syscall = true;
	/* Past a quarter held, the rest still takes a full batch and more. */
	u->base.rx_keep_max = NIC_UDP_RX_BUFS / 4;
	u->base.stats = stats;
	unsigned mtu = cfg && cfg->mtu ? cfg->mtu : NIC_UDP_MAX_PAYLOAD;
	if (mtu > NIC_UDP_MAX_PAYLOAD)
		mtu = NIC_UDP_MAX_PAYLOAD;
	if (mtu <= PKTHDR_SIZE)
		return nic_udp_fail(u, -EINVAL, err, msg, msglen,
				    "FERRY_MTU must leave room after the 32-byte packet header");
	u->base.max_pkt_size = mtu;

	int fd = nic_udp_socket(&u->family, &u->wide);
	if (fd < 0)
		return nic_udp_fail(u, fd, err, msg, msglen, "cannot open a UDP socket");
	u->fd = fd;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	if (sys()->getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0)
		return nic_udp_fail(u, -errno, err, msg, msglen, "getsockname");
	u->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	nic_udp_size_buffers(fd);
	u->gso_mode = cfg ? cfg->udp_gso : FERRY_UDP_GSO_AUTO;
	udp_gso_start(u);

	/* What GRO coalesces takes a buffer of its own, split in place. */
	size_t rx_cap = u->gro ? NIC_UDP_GRO_BUF : mtu;
	u->stride = (rx_cap + 63) & ~(size_t)63;
	u->map_len = u->stride * NIC_UDP_RX_BUFS;
	void *m = mmap(NULL, u->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return nic_udp_fail(u, -errno, err, msg, msglen, "cannot map receive buffers");
	/* A fork child starts a nic of its own: sharing these would only
	 * make each of the parent's receives after a fork a copy-on-write
	 * fault (postgres forks a backend per connection). */
	madvise(m, u->map_len, MADV_DONTFORK);
	u->bufs = m;
	/* Low buffers on top, so light traffic keeps reusing the same few pages. */
	for (unsigned i = 0; i < NIC_UDP_RX_BUFS; i++)
		u->free_stack[i] = NIC_UDP_RX_BUFS - 1 - i;
	u->nfree = NIC_UDP_RX_BUFS;
	/* recvmmsg only writes msg_len and msg_flags (no name, and control
	 * only under GRO, udp_gro_arm), so the headers are filled once; slots
	 * get their buffers in rx_burst. */
	for (unsigned i = 0; i < NIC_UDP_BATCH; i++) {
		u->rx_iov[i].iov_len = rx_cap;
		u->rx_msgs[i].msg_hdr = (struct msghdr){.msg_iov = &u->rx_iov[i], .msg_iovlen = 1};
	}
	udp_gro_arm(u);
	log_debug("udp nic: %s port %u, packets up to %u bytes, segmentation offload %s/%s",
		  !u->wide ? "127.0.0.1" : u->family == AF_INET6 ? "[::]" : "0.0.0.0", u->port, mtu,
		  u->gso ? "send" : "-", u->gro ? "receive" : "-");
	return &u->base;
}

uint64_t nic_udp_tx_failures(const struct nic *nic)
{
	return __atomic_load_n(&nic_udp_of_const(nic)->tx_failures, __ATOMIC_RELAXED);
}
