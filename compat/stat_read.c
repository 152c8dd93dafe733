/* ferry-stat: finding the processes and reading their files (stat_read.h). */
#include "autoconfig.h"

#include "compat/stat_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "transport/procinfo.h"

/* A file being read: its mapping and what was asked of it. */
struct stat_open {
	struct statmap_hdr *map;
	uint64_t asked; /* the req_seq we raised */
};

static bool stat_layout_ok(const struct statmap_hdr *h, unsigned uid, long pid)
{
	return __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == STATMAP_MAGIC &&
	       h->version == STATMAP_VERSION && h->size == STATMAP_SIZE &&
	       h->hdr_size == sizeof(*h) && h->stats_size == sizeof(struct ferry_stats) &&
	       h->rec_sizes == STATMAP_REC_SIZES && h->uid == uid && h->pid == pid;
}

/* Sends the wake-up; false when nobody is bound there any more. */
static bool stat_wake(const struct statmap_hdr *h)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, STATMAP_WAKE_FMT, h->uid,
			 (int)h->pid);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return true;
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	char one = 1;
	ssize_t r = sendto(fd, &one, 1, MSG_DONTWAIT, (struct sockaddr *)&a, len);
	int err = errno;
	close(fd);
	return r == 1 || err != ECONNREFUSED;
}

/* Whether the file's process is gone: its pid is free, or a later process
 * has it, or (in our network namespace, where its socket would be) it no
 * longer answers: an exec'd image that never started ferry again. */
static bool stat_gone(const struct statmap_hdr *h, uint64_t our_net)
{
	if (kill(h->pid, 0) != 0 && errno == ESRCH)
		return true;
	uint64_t st = procinfo_start_time(h->pid);
	if (st && h->start_time && st != h->start_time)
		return true;
	return h->net_ns == our_net && our_net && !stat_wake(h);
}

static int stat_open_one(const char *name, unsigned uid, long pid, struct stat_open *o,
			 uint64_t our_net)
{
	char path[300];
	snprintf(path, sizeof(path), STATMAP_DIR "/%s", name);
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat sb;
	void *p = MAP_FAILED;
	/* Only a file its user made counts: /dev/shm is everyone's. */
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == uid &&
	    sb.st_size == STATMAP_SIZE)
		p = mmap(NULL, STATMAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -EINVAL;
	struct statmap_hdr *h = p;
	if (!stat_layout_ok(h, uid, pid)) {
		munmap(p, STATMAP_SIZE);
		return -EINVAL;
	}
	if (stat_gone(h, our_net)) {
		munmap(p, STATMAP_SIZE);
		unlink(path);
		return -ESRCH;
	}
	o->map = h;
	o->asked = __atomic_add_fetch(&h->req_seq, 1, __ATOMIC_ACQ_REL);
	stat_wake(h);
	return 0;
}

/* A consistent copy of header and tables (the seqlock in the header). */
static struct statmap_hdr *stat_copy(struct statmap_hdr *m)
{
	struct statmap_hdr *c = malloc(STATMAP_SIZE);
	if (!c)
		return NULL;
	for (int tries = 0; tries < 1000; tries++) {
		uint32_t g = __atomic_load_n(&m->gen, __ATOMIC_ACQUIRE);
		if (g & 1) {
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
			continue;
		}
		memcpy(c, m, sizeof(*c));
		size_t len = (size_t)c->n_sessions * sizeof(struct statmap_session) +
			     (size_t)c->n_streams * sizeof(struct statmap_stream) +
			     (size_t)c->n_listeners * sizeof(struct statmap_listener);
		if (len <= STATMAP_SIZE - sizeof(*c))
			memcpy(c + 1, m + 1, len);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (len <= STATMAP_SIZE - sizeof(*c) && __atomic_load_n(&m->gen, __ATOMIC_RELAXED) == g)
			return c;
	}
	/* Written over and over: the counters alone. */
	c->n_sessions = c->n_streams = c->n_listeners = 0;
	c->tables_realtime_ns = 0;
	return c;
}

static uint64_t stat_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits, bounded, until every process answered (or the time is up). */
static void stat_wait(struct stat_open *o, size_t n, unsigned wait_ms)
{
	uint64_t end = stat_now_ms() + wait_ms;
	for (;;) {
		bool all = true;
		for (size_t i = 0; i < n && all; i++)
			all = __atomic_load_n(&o[i].map->reply_seq, __ATOMIC_ACQUIRE) >= o[i].asked;
		if (all || stat_now_ms() >= end)
			return;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/* Which processes hold each listener's socket: /proc/PID/fd links read
 * "socket:[INODE]" (only those of processes the caller may look into). */
static void stat_find_holders(struct stat_view *v)
{
	DIR *proc = v->nholders ? opendir("/proc") : NULL;
	if (!proc)
		return;
	struct dirent *e;
	while ((e = readdir(proc)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		char dir[64];
		snprintf(dir, sizeof(dir), "/proc/%ld/fd", pid);
		DIR *fds = opendir(dir);
		if (!fds)
			continue;
		struct dirent *f;
		while ((f = readdir(fds)) != NULL) {
			char link[320], target[64];
			snprintf(link, sizeof(link), "%s/%s", dir, f->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			unsigned long long ino;
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (sscanf(target, "socket:[%llu]", &ino) != 1)
				continue;
			for (size_t i = 0; i < v->nholders; i++) {
				struct stat_holders *hd = &v->holders[i];
				if (hd->inode != ino)
					continue;
				bool seen = false;
				for (unsigned k = 0; k < hd->n; k++)
					seen |= hd->pid[k] == (pid_t)pid;
				if (!seen && hd->n < STAT_HOLDERS_MAX)
					hd->pid[hd->n++] = (pid_t)pid;
			}
		}
		closedir(fds);
	}
	closedir(proc);
}

static int stat_note_inodes(struct stat_view *v)
{
	size_t cap = 0;
	for (size_t i = 0; i < v->n; i++)
		cap += v->procs[i].h->n_listeners;
	v->holders = cap ? calloc(cap, sizeof(*v->holders)) : NULL;
	if (cap && !v->holders)
		return -ENOMEM;
	for (size_t i = 0; i < v->n; i++) {
		const struct statmap_listener *l = statmap_listeners(v->procs[i].h);
		for (uint32_t k = 0; k < v->procs[i].h->n_listeners; k++)
			if (l[k].inode && !stat_holders_of(v, l[k].inode))
				v->holders[v->nholders++].inode = l[k].inode;
	}
	stat_find_holders(v);
	return 0;
}

int stat_read(pid_t only, unsigned wait_ms, struct stat_view *v)
{
	memset(v, 0, sizeof(*v));
	DIR *d = opendir(STATMAP_DIR);
	if (!d)
		return 0; /* no /dev/shm: no ferry process could have written one */
	unsigned me = (unsigned)getuid();
	uint64_t our_net = procinfo_ns_inode("net");
	struct stat_open *o = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		unsigned uid;
		long pid;
		int used = 0;
		if (sscanf(e->d_name, STATMAP_PREFIX "%u.%ld%n", &uid, &pid, &used) != 2 ||
		    e->d_name[used] || (me != 0 && uid != me) || (only && pid != only))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			struct stat_open *no = realloc(o, cap * sizeof(*o));
			if (!no) {
				rc = -ENOMEM;
				break;
			}
			o = no;
		}
		if (stat_open_one(e->d_name, uid, pid, &o[n], our_net) == 0)
			n++;
	}
	closedir(d);
	if (rc == 0 && n)
		stat_wait(o, n, wait_ms);
	v->procs = n ? calloc(n, sizeof(*v->procs)) : NULL;
	if (n && !v->procs)
		rc = -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct statmap_hdr *c = rc == 0 ? stat_copy(o[i].map) : NULL;
		bool answered = __atomic_load_n(&o[i].map->reply_seq, __ATOMIC_ACQUIRE) >= o[i].asked;
		munmap(o[i].map, STATMAP_SIZE);
		if (!c) {
			rc = rc ? rc : -ENOMEM;
			continue;
		}
		struct stat_proc *p = &v->procs[v->n++];
		p->h = c;
		p->tables = answered ? STAT_TABLES_CURRENT
			    : c->tables_realtime_ns ? STAT_TABLES_OLD : STAT_TABLES_NONE;
	}
	free(o);
	if (rc == 0)
		rc = stat_note_inodes(v);
	return rc;
}

const struct stat_holders *stat_holders_of(const struct stat_view *v, uint64_t inode)
{
	for (size_t i = 0; i < v->nholders; i++)
		if (v->holders[i].inode == inode)
			return &v->holders[i];
	return NULL;
}

void stat_view_free(struct stat_view *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->procs[i].h);
	free(v->procs);
	free(v->holders);
	memset(v, 0, sizeof(*v));
}
