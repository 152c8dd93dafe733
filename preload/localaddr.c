/* This host's addresses (see localaddr.h). */
#include "autoconfig.h"

#include "preload/localaddr.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "preload/sockaddr.h"
#include "transport/clock.h"
#include "transport/sys.h"
#include "transport/udp_bind.h"

#define LOCALADDR_MAX 64
#define LOCALADDR_REFRESH_NS 1000000000ull

static pthread_mutex_t la_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t la_addrs[LOCALADDR_MAX][16]; /* IPv4 as v4-mapped IPv6 */
static unsigned la_n;
static uint64_t la_loaded_ns;
static bool la_loaded;

/* sa's address as 16 bytes (IPv4 mapped); false for another family. */
static bool la_key(const struct sockaddr *sa, uint8_t out[16])
{
	if (sa->sa_family == AF_INET) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
		return true;
	}
	return false;
}

/* Reads the interfaces' addresses; under la_lock. */
static void la_load(uint64_t now)
{
	la_loaded = true;
	la_loaded_ns = now;
	struct ifaddrs *ifs;
	if (getifaddrs(&ifs) != 0)
		return;
	la_n = 0;
	for (struct ifaddrs *i = ifs; i && la_n < LOCALADDR_MAX; i = i->ifa_next)
		if (i->ifa_addr && la_key(i->ifa_addr, la_addrs[la_n]))
			la_n++;
	freeifaddrs(ifs);
}

static bool la_find(const uint8_t k[16])
{
	for (unsigned i = 0; i < la_n; i++)
		if (!memcmp(la_addrs[i], k, 16))
			return true;
	return false;
}

bool localaddr_is_local(const struct sockaddr *sa)
{
	uint8_t k[16];
	if (!la_key(sa, k))
		return false;
	if (udp_addr_is_loopback(sa))
		return true;
	pthread_mutex_lock(&la_lock);
	bool found = la_loaded && la_find(k);
	if (!found) {
		uint64_t now = clock_now_ns();
		if (!la_loaded || now - la_loaded_ns >= LOCALADDR_REFRESH_NS) {
			la_load(now);
			found = la_find(k);
		}
	}
	pthread_mutex_unlock(&la_lock);
	return found;
}

int localaddr_can_reach(const struct sockaddr *src, const struct sockaddr *dst)
{
	const struct sys_fns *c = sys();
	struct sockaddr_storage a;
	socklen_t alen = sockaddr_len(src->sa_family);
	memcpy(&a, src, alen);
	sockaddr_set_port((struct sockaddr *)&a, 0);
	int fd = c->socket(src->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	socklen_t dlen = sockaddr_len(dst->sa_family);
	int rc = c->bind(fd, (struct sockaddr *)&a, alen) == 0 && c->connect(fd, dst, dlen) == 0
			 ? 0
			 : -errno;
	c->close(fd);
	return rc;
}
