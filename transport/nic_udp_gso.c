/* UDP segmentation offload for the kernel UDP nic: a run of equal packets to
 * one peer leaves in one send (UDP_SEGMENT), and what the kernel coalesced
 * arrives in one receive (UDP_GRO), to be split back in nic_udp.c. */
#include "autoconfig.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/log.h"
#include "transport/nic_udp_internal.h"
#include "transport/pkthdr.h"
#include "transport/stats.h"
#include "transport/sys.h"

/*
 * Segments per send. Kernels since 4.18 take 64 (UDP_MAX_SEGMENTS; newer
 * ones 128), and GRO coalesces at most 64, so a send of more would arrive
 * as two receives anyway.
 */
#define UDP_GSO_SEGS 64u

/* The level of the one message saying offload is off: asked for, a warning. */
static enum ferry_log_level udp_gso_level(const struct nic_udp *u)
{
	return u->gso_mode == FERRY_UDP_GSO_ON ? FERRY_LOG_WARN : FERRY_LOG_INFO;
}

void udp_gso_start(struct nic_udp *u)
{
	if (u->gso_mode == FERRY_UDP_GSO_OFF)
		return;
	/* Size 0 on the socket: each send says its own in a control message,
	 * so only the runs udp_gso_extent finds are segmented. The option is
	 * set only to learn whether the kernel knows it. */
	int zero = 0, one = 1;
	int gso = sys()->setsockopt(u->fd, IPPROTO_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0
			  ? 0
			  : errno;
	int gro = sys()->setsockopt(u->fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0 ? 0 : errno;
	u->gso = gso == 0;
	u->gro = gro == 0;
	if (u->base.stats)
		stats_add(&u->base.stats->udp_gso_unsupported, (gso != 0) + (gro != 0));
	if (gso || gro)
		ferry_log_once(udp_gso_level(u),
			       "udp: the kernel refused %s (%s): %s",
			       gso && gro ? "UDP_SEGMENT and UDP_GRO"
			       : gso	  ? "UDP_SEGMENT"
					  : "UDP_GRO",
			       strerror(gso ? gso : gro),
			       gso ? "each packet is a datagram of its own (bundles stay)"
				   : "coalesced datagrams arrive split by the kernel");
}

void udp_gso_restart(struct nic_udp *u)
{
	int one = 1;
	if (u->gro && sys()->setsockopt(u->fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) != 0) {
		/* Without the option the kernel splits coalesced datagrams
		 * itself: slower, never wrong. */
		u->gro = false;
		udp_gro_arm(u);
		if (u->base.stats)
			stats_inc(u->base.stats->udp_gso_unsupported);
		ferry_log_once(udp_gso_level(u), "udp: the kernel refused UDP_GRO on the wildcard socket (%s)",
			       strerror(errno));
	}
}

unsigned udp_gso_extent(const struct nic_udp *u, const struct nic_tx *pkts, unsigned k)
{
	const struct nic_peer *to = pkts[0].peer;
	if (!u->gso || to->gso_refused || k < 2)
		return 1;
	uint32_t seg = nic_tx_len(&pkts[0]);
	/* The kernel refuses segments that the route would fragment; such
	 * packets leave whole, fragmented, as without offload. */
	if (seg < PKTHDR_SIZE || (to->path_payload && seg > to->path_payload))
		return 1;
	size_t total = seg;
	unsigned n = 1;
	while (n < k && n < UDP_GSO_SEGS && pkts[n].peer == to) {
		uint32_t len = nic_tx_len(&pkts[n]);
		/* A segment of its own under PKTHDR_SIZE would be dropped as
		 * unsplittable by the receiver (udp_gro_segment). */
		if (len > seg || len == 0 || total + len > NIC_UDP_MAX_PAYLOAD)
			break;
		total += len;
		n++;
		if (len < seg)
			break; /* only the last segment may be shorter */
	}
	return n;
}

void udp_gso_attach(struct nic_udp *u, unsigned m, uint32_t seg)
{
	struct msghdr *h = &u->tx_msgs[m].msg_hdr;
	h->msg_control = u->tx_cmsg[m].bytes;
	h->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
	struct cmsghdr *c = CMSG_FIRSTHDR(h);
	c->cmsg_level = IPPROTO_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	uint16_t size = (uint16_t)seg;
	memcpy(CMSG_DATA(c), &size, sizeof(size));
}

void udp_gso_sent(struct nic_udp *u, unsigned m)
{
	if (u->tx_msgs[m].msg_hdr.msg_controllen && u->base.stats) {
		stats_inc(u->base.stats->udp_gso_sends);
		stats_add(&u->base.stats->udp_gso_pkts, u->tx_pkts[m]);
	}
}

bool udp_gso_refused(struct nic_udp *u, struct nic_peer *peer, unsigned m, int err)
{
	/* What the kernel answers when it cannot segment for this route: a
	 * segment past the path MTU (EINVAL), no checksum offload or IPsec on
	 * the way (EIO), a kernel or device without it. Other errors belong to
	 * the destination, and plain sends would meet them as well. */
	if (!u->tx_msgs[m].msg_hdr.msg_controllen ||
	    (err != EINVAL && err != EIO && err != EMSGSIZE && err != EOPNOTSUPP && err != ENOPROTOOPT))
		return false;
	peer->gso_refused = true;
	if (u->base.stats)
		stats_inc(u->base.stats->udp_gso_refused);
	ferry_log_once(udp_gso_level(u), "udp: the kernel refused a segmented send (%s): that peer gets "
			 "plain datagrams", strerror(err));
	return true;
}

void udp_gro_arm(struct nic_udp *u)
{
	/* The kernel writes back how much of the room it used, and only into
	 * the slots it filled: udp_gro_segment gives those theirs back, so an
	 * empty poll touches no slot. */
	for (unsigned i = 0; i < NIC_UDP_BATCH; i++) {
		u->rx_msgs[i].msg_hdr.msg_control = u->gro ? u->rx_cmsg[i].bytes : NULL;
		u->rx_msgs[i].msg_hdr.msg_controllen = u->gro ? sizeof(u->rx_cmsg[i].bytes) : 0;
	}
}

/* The UDP_GRO segment size in slot i's control messages (see udp_gro_segment). */
static uint32_t udp_gro_cmsg_segment(struct nic_udp *u, unsigned i)
{
	struct msghdr *h = &u->rx_msgs[i].msg_hdr;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
		if (c->cmsg_level != IPPROTO_UDP || c->cmsg_type != UDP_GRO ||
		    c->cmsg_len < CMSG_LEN(sizeof(int)))
			continue;
		int seg;
		memcpy(&seg, CMSG_DATA(c), sizeof(seg));
		if (u->base.stats)
			stats_inc(u->base.stats->udp_gro_datagrams);
		/* Segments are datagrams a peer sent: none is shorter than a
		 * packet header, and a smaller size would let one buffer hold
		 * more packets than its count can say. */
		if (seg < (int)PKTHDR_SIZE) {
			if (u->base.stats)
				stats_drop(u->base.stats, gro);
			return UINT32_MAX;
		}
		return u->rx_msgs[i].msg_len > (unsigned)seg ? (uint32_t)seg : 0;
	}
	return 0;
}

uint32_t udp_gro_segment(struct nic_udp *u, unsigned i)
{
	struct msghdr *h = &u->rx_msgs[i].msg_hdr;
	if (!u->gro || !h->msg_control)
		return 0;
	uint32_t seg = udp_gro_cmsg_segment(u, i);
	h->msg_controllen = sizeof(u->rx_cmsg[i].bytes); /* room for the next receive */
	return seg;
}
