/* This process's entry for ferry-stat: see statmap.h and statmap_layout.h. */
#include "autoconfig.h"

#include "preload/statmap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/listener.h"
#include "preload/statmap_layout.h"
#include "transport/clock.h"
#include "preload/stream.h"
#include "transport/log.h"
#include "transport/mark.h"
#include "transport/procinfo.h"
#include "transport/rpc.h"
#include "transport/sys.h"

static struct statmap_hdr *sm_hdr;
static int sm_wake = -1;
static char sm_path[64];

/* Sessions beyond this are left out (counted in "more"); listeners keep
 * room of their own so a crowd of streams cannot hide them. */
#define STATMAP_SESSIONS_MAX 1024u
#define STATMAP_LISTENERS_MAX 256u

static void statmap_path(char *buf, size_t len, unsigned uid, long pid)
{
	snprintf(buf, len, STATMAP_DIR "/" STATMAP_PREFIX "%u.%ld", uid, pid);
}

/* Files of our user's processes that died without their exit handler
 * (SIGKILL, _exit): nobody else removes them while no ferry-stat runs. */
static void statmap_sweep(unsigned uid)
{
	DIR *d = opendir(STATMAP_DIR);
	if (!d)
		return;
	char prefix[32];
	int plen = snprintf(prefix, sizeof(prefix), STATMAP_PREFIX "%u.", uid);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char path[64];
		statmap_path(path, sizeof(path), uid, pid);
		unlink(path);
	}
	closedir(d);
}

/*
 * A sweep lists /dev/shm and signals every file's owner: a server that forks
 * per connection (postgres, inetd) would otherwise sweep once per
 * connection, for files a sweep removed moments ago. So one sweep in
 * STATMAP_SWEEP_EVERY_NS does, by this process or the ancestor it was forked
 * from (sm_swept_ns, inherited) or by any process of our user (a marker
 * file's modification time: a fork child's sweep is never its parent's
 * news, and postgres's backends, all children of one postmaster, swept
 * each in turn once it was 10 s old).
 */
#define STATMAP_SWEEP_EVERY_NS (10ull * 1000000000ull)
#define STATMAP_SWEPT_MARK STATMAP_DIR "/ferry-swept.%u"
static uint64_t sm_swept_ns; /* 0: never (the monotonic clock counts from boot) */

static void statmap_sweep_now_and_then(unsigned uid)
{
	uint64_t now = clock_now_ns();
	if (sm_swept_ns && now - sm_swept_ns < STATMAP_SWEEP_EVERY_NS)
		return;
	char mark[64];
	snprintf(mark, sizeof(mark), STATMAP_SWEPT_MARK, uid);
	if (!mark_fresh(mark, uid, STATMAP_SWEEP_EVERY_NS)) {
		statmap_sweep(uid);
		/* Another user's file under the name is left alone: we then
		 * sweep each time, as before the mark. */
		mark_touch(mark);
	}
	sm_swept_ns = now;
}

/* The socket a reader wakes us on: abstract, so it goes with the process. */
static int statmap_wake_open(unsigned uid, pid_t pid)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, STATMAP_WAKE_FMT, uid, (int)pid);
	int fd = sys()->socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	if (sys()->bind(fd, (struct sockaddr *)&a, len) != 0) {
		sys()->close(fd);
		return -1;
	}
	return fd;
}

struct ferry_stats *statmap_open(void)
{
	unsigned uid = (unsigned)getuid();
	pid_t pid = getpid();
	statmap_sweep_now_and_then(uid);
	statmap_path(sm_path, sizeof(sm_path), uid, pid);
	/* Ours from an image before exec (same pid), or a dead one's. O_EXCL
	 * and O_NOFOLLOW: /dev/shm is everyone's, and a file someone else
	 * planted under our name is never written. */
	unlink(sm_path);
	int fd = open(sm_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_debug("ferry-stat cannot see this process: %s: %s", sm_path, strerror(errno));
		sm_path[0] = '\0';
		return NULL;
	}
	void *p = MAP_FAILED;
	if (ftruncate(fd, STATMAP_SIZE) == 0)
		p = mmap(NULL, STATMAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	sm_wake = p == MAP_FAILED ? -1 : statmap_wake_open(uid, pid);
	if (sm_wake < 0) {
		log_debug("ferry-stat cannot see this process: %s", strerror(errno));
		if (p != MAP_FAILED)
			munmap(p, STATMAP_SIZE);
		unlink(sm_path);
		sm_path[0] = '\0';
		return NULL;
	}
	struct statmap_hdr *h = p;
	h->version = STATMAP_VERSION;
	h->size = STATMAP_SIZE;
	h->hdr_size = (uint32_t)sizeof(*h);
	h->stats_size = (uint32_t)sizeof(struct ferry_stats);
	h->rec_sizes = STATMAP_REC_SIZES;
	h->pid = (int32_t)pid;
	h->uid = uid;
	h->start_time = procinfo_start_time(0);
	h->net_ns = procinfo_ns_inode("net");
	snprintf(h->program, sizeof(h->program), "%s", program_invocation_short_name);
	__atomic_store_n(&h->magic, STATMAP_MAGIC, __ATOMIC_RELEASE);
	sm_hdr = h;
	return &h->stats;
}

void statmap_set_transport(const char *name)
{
	if (sm_hdr)
		snprintf(sm_hdr->transport, sizeof(sm_hdr->transport), "%s", name);
}

int statmap_wake_fd(void)
{
	return sm_wake;
}

static void statmap_addr_from(struct statmap_addr *a, const struct sockaddr_storage *ss)
{
	memset(a, 0, sizeof(*a));
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;
		a->family = AF_INET;
		a->port = ntohs(in->sin_port);
		memcpy(a->addr, &in->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;
		a->family = AF_INET6;
		a->port = ntohs(in6->sin6_port);
		memcpy(a->addr, &in6->sin6_addr, 16);
	}
}

static uint32_t statmap_fill_sessions(struct statmap_session *out, uint32_t cap, uint32_t *more)
{
	uint32_t n = 0, cursor = 0;
	struct rpc_session_info si;
	while (rpc_session_next(ferry.rpc, &cursor, &si)) {
		if (n == cap) {
			(*more)++;
			continue;
		}
		struct sockaddr_storage none = {0};
		out[n] = (struct statmap_session){
			.num = si.num,
			.peer_num = si.peer_num,
			.up = si.up,
			.credits_used = si.credits_used,
			.credits_max = si.credits_max,
			.busy_slots = si.busy_slots,
			.backlog = si.backlog,
			.rtt_ns = si.rtt_ns,
			.rate_bps = si.rate_bps,
			.retransmits = si.retransmits,
			.drops = si.drops,
		};
		statmap_addr_from(&out[n].peer, si.origin_len ? &si.origin : &none);
		out[n].peer.port = 0; /* the origin's port means nothing */
		n++;
	}
	return n;
}

static uint32_t statmap_fill_streams(struct statmap_stream *out, uint32_t cap, uint32_t *more)
{
	size_t total = stream_stat_fill(NULL, 0);
	size_t n = total < cap ? total : cap;
	struct stream_stat *st = n ? malloc(n * sizeof(*st)) : NULL;
	if (!st) {
		*more += (uint32_t)total;
		return 0;
	}
	stream_stat_fill(st, n);
	*more += (uint32_t)(total - n);
	for (size_t i = 0; i < n; i++) {
		out[i] = (struct statmap_stream){
			.sid = st[i].sid,
			.session = st[i].session,
			.state = (uint32_t)st[i].state,
			.owner = sm_hdr->pid,
			.bytes_tx = st[i].bytes_tx,
			.bytes_rx = st[i].bytes_rx,
			.unread = st[i].unread,
			.unacked = st[i].unacked,
		};
		statmap_addr_from(&out[i].local, &st[i].local);
		statmap_addr_from(&out[i].peer, &st[i].peer);
	}
	free(st);
	return (uint32_t)n;
}

static uint32_t statmap_fill_listeners(struct statmap_listener *out, uint32_t cap, uint32_t *more)
{
	struct listener_stat *ls = malloc(cap * sizeof(*ls));
	size_t total = ls ? listener_stat_fill(ls, cap) : 0;
	size_t n = total < cap ? total : cap;
	*more += (uint32_t)(total - n);
	for (size_t i = 0; i < n; i++) {
		out[i] = (struct statmap_listener){
			.queued = (uint32_t)ls[i].queued,
			.offers = ls[i].offers,
			.backlog = ls[i].backlog,
			.shared = ls[i].shared,
		};
		statmap_addr_from(&out[i].addr, &ls[i].addr);
		/* The kernel socket behind the numbers: every process holding a
		 * copy (fork, SCM_RIGHTS) shows the same inode. */
		int fd;
		struct stat sb;
		if (ls[i].file && ffile_fds(&fdtab, ls[i].file, &fd, 1) > 0 && fstat(fd, &sb) == 0)
			out[i].inode = (uint64_t)sb.st_ino;
	}
	free(ls);
	return (uint32_t)n;
}

void statmap_serve(void)
{
	char drain[16];
	while (sys()->recv(sm_wake, drain, sizeof(drain), MSG_DONTWAIT) >= 0)
		;
	struct statmap_hdr *h = sm_hdr;
	if (!h || ferry_state() != FERRY_ON)
		return;
	uint64_t req = __atomic_load_n(&h->req_seq, __ATOMIC_ACQUIRE);
	if (req == __atomic_load_n(&h->reply_seq, __ATOMIC_RELAXED))
		return;
	__atomic_add_fetch(&h->gen, 1, __ATOMIC_ACQ_REL); /* odd: being written */
	uint32_t room = h->size - h->hdr_size;
	uint32_t more = 0;
	h->n_sessions = h->n_streams = h->n_listeners = 0;
	struct statmap_session *ses = statmap_sessions(h);
	ferry_lock();
	uint32_t ns = statmap_fill_sessions(ses, STATMAP_SESSIONS_MAX, &more);
	h->n_sessions = ns;
	room -= ns * (uint32_t)sizeof(*ses) + STATMAP_LISTENERS_MAX * (uint32_t)sizeof(struct statmap_listener);
	uint32_t nst = statmap_fill_streams(statmap_streams(h), room / (uint32_t)sizeof(struct statmap_stream), &more);
	h->n_streams = nst;
	h->n_listeners = statmap_fill_listeners(statmap_listeners(h), STATMAP_LISTENERS_MAX, &more);
	ferry_unlock();
	h->more = more;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	h->tables_realtime_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	__atomic_add_fetch(&h->gen, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&h->reply_seq, req, __ATOMIC_RELEASE);
}

void statmap_close(void)
{
	if (sm_path[0])
		unlink(sm_path);
	sm_path[0] = '\0';
}

void statmap_fork_child(void)
{
	if (!sm_hdr)
		return;
	/* The inherited endpoint (never run again here) still points at the
	 * counters: the same address, now private, with what they held. */
	struct statmap_hdr copy;
	memcpy(&copy, sm_hdr, sizeof(copy));
	void *p = mmap(sm_hdr, STATMAP_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p != MAP_FAILED)
		memcpy(p, &copy, sizeof(copy));
	sys()->close(sm_wake);
	sm_wake = -1;
	sm_hdr = NULL;
	sm_path[0] = '\0';
}
