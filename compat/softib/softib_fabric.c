/* softib's shared memory: the fabric directory, QP rings, delivery, reclaim. */
#include "autoconfig.h"

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

#include "compat/softib/softib_int.h"
#include "transport/copy.h"
#include "transport/mark.h"
#include "transport/procinfo.h"
#include "transport/sys.h"
#include "transport/txdefer.h"

int sib_dir_path(char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "/dev/shm/ferry-softib-%u", (unsigned)getuid());
	return n > 0 && (size_t)n < cap ? 0 : ENAMETOOLONG;
}

/* The 0700 directory of this user's fabrics; refuses one another user made. */
static int sib_dir_ensure(char *dir, size_t cap)
{
	int rc = sib_dir_path(dir, cap);
	if (rc)
		return rc;
	if (mkdir(dir, 0700) && errno != EEXIST)
		return errno;
	struct stat st;
	if (lstat(dir, &st))
		return errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
		return EPERM;
	return 0;
}

int sib_shm_lock_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	int rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return rc;
}

/* A holder that died mid-section left nothing half-published: every
 * section publishes with its last store, so the state is consistent. */
void sib_shm_lock(pthread_mutex_t *m)
{
	if (pthread_mutex_lock(m) == EOWNERDEAD)
		pthread_mutex_consistent(m);
}

void sib_shm_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
}

uint64_t sib_pidns(void)
{
	return procinfo_ns_inode("pid");
}

static bool sib_pid_alive(pid_t pid, uint64_t start)
{
	if (pid <= 0)
		return false;
	if (kill(pid, 0) && errno == ESRCH)
		return false;
	uint64_t now = procinfo_start_time(pid);
	return now == 0 || start == 0 || now == start;
}

static void sib_fabric_init_shm(struct sib_fabric_shm *s, const char *name)
{
	s->version = SIB_VERSION;
	s->max_qps = SIB_MAX_QPS;
	s->next_gen = 1;
	sib_shm_lock_init(&s->lock);
	/* GIDs, RoCE style: link-local and an IPv4-mapped 127/8 address, each as
	 * v1 and v2 entries; the low bytes come from the fabric name, so a route
	 * from another fabric does not resolve here. */
	uint32_t h = 2166136261u;
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	h ^= (uint32_t)getuid() * 2654435761u;
	uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x00, 0x5e, 0xff, 0xfe};
	ll[13] = (uint8_t)(h >> 16);
	ll[14] = (uint8_t)(h >> 8);
	ll[15] = (uint8_t)h;
	uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127};
	v4[13] = (uint8_t)(h >> 16);
	v4[14] = (uint8_t)(h >> 8);
	v4[15] = (uint8_t)(h | 1u);
	memcpy(s->gid[0], ll, 16);
	memcpy(s->gid[1], ll, 16);
	memcpy(s->gid[2], v4, 16);
	memcpy(s->gid[3], v4, 16);
	__atomic_store_n(&s->magic, SIB_MAGIC_FABRIC, __ATOMIC_RELEASE);
}

/*
 * Whether this open (or QP creation) reclaims. A reclaim looks at every
 * live QP's process and ring and at every file of the directory: eight
 * system calls and more per QP of the host. Each fork-per-connection child
 * opened the device and made a QP, so it paid that twice over for every
 * process on softib (pgbench -S -C over softib: 180 us of each backend's
 * start with a dozen live QPs). At most one open a second reclaims now, or
 * one that finds the directory full; softib_reclaim still does at once.
 */
#define SIB_RECLAIM_EVERY_NS 1000000000ull

static bool sib_reclaim_due(const struct sib_fabric *fab)
{
	/* When the last reclaim ran is the mtime of a mark beside the
	 * fabric: the fabric's own layout stays as every softib knows it. */
	char mark[sizeof(fab->dir) + sizeof(fab->name) + 16];
	snprintf(mark, sizeof(mark), "%s/.reclaimed.%s", fab->dir, fab->name);
	if (mark_fresh(mark, (unsigned)getuid(), SIB_RECLAIM_EVERY_NS))
		return false;
	mark_touch(mark);
	return true;
}

int sib_fabric_open(struct sib_fabric *fab, const char *name)
{
	memset(fab, 0, sizeof(*fab));
	fab->fd = -1;
	if (!name || !*name)
		name = "default";
	if (strlen(name) >= sizeof(fab->name) || strchr(name, '/'))
		return EINVAL;
	strcpy(fab->name, name);
	int rc = sib_dir_ensure(fab->dir, sizeof(fab->dir));
	if (rc)
		return rc;
	char path[256];
	snprintf(path, sizeof(path), "%s/%s.fabric", fab->dir, name);
	size_t len = sizeof(struct sib_fabric_shm);
	bool creator = true;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		creator = false;
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0)
		return errno;
	if (creator && ftruncate(fd, (off_t)len)) {
		rc = errno;
		sys()->close(fd);
		unlink(path);
		return rc;
	}
	/* An opener may race the creator's ftruncate: wait for size and magic. */
	struct sib_fabric_shm *s = MAP_FAILED;
	for (int tries = 0; tries < 2000; tries++) {
		struct stat st;
		if (fstat(fd, &st) == 0 && (size_t)st.st_size >= len) {
			if (st.st_uid != getuid()) {
				sys()->close(fd);
				return EPERM;
			}
			if (s == MAP_FAILED)
				s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (s == MAP_FAILED) {
				rc = errno;
				sys()->close(fd);
				return rc;
			}
			if (creator)
				sib_fabric_init_shm(s, name);
			if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == SIB_MAGIC_FABRIC)
				break;
		}
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	if (s == MAP_FAILED || s->magic != SIB_MAGIC_FABRIC || s->version != SIB_VERSION ||
	    s->max_qps != SIB_MAX_QPS) {
		if (s != MAP_FAILED)
			munmap(s, len);
		sys()->close(fd);
		return EPROTO; /* stale or foreign file: the caller says to remove it */
	}
	fab->fd = fd;
	fab->shm = s;
	if (sib_reclaim_due(fab))
		sib_fabric_reclaim(fab);
	return 0;
}

void sib_fabric_close(struct sib_fabric *fab)
{
	if (fab->shm)
		munmap(fab->shm, sizeof(*fab->shm));
	if (fab->fd >= 0)
		sys()->close(fab->fd);
	fab->shm = NULL;
	fab->fd = -1;
}

static void sib_qp_path(const struct sib_fabric *fab, uint32_t qpn, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s.qp.%06x", fab->dir, fab->name, qpn);
}

static struct sib_dir_entry *sib_dir_entry(struct sib_fabric *fab, uint32_t qpn)
{
	return &fab->shm->dir[qpn & (SIB_MAX_QPS - 1)];
}

bool sib_fabric_qp_live(struct sib_fabric *fab, uint32_t qpn)
{
	struct sib_dir_entry *e = sib_dir_entry(fab, qpn);
	return __atomic_load_n(&e->live, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&e->qpn, __ATOMIC_RELAXED) == qpn;
}

/* Whether fd's ring is held by its owner's lease: 1 held, 0 not held, -1 a
 * ring that does not say it has one (made by an earlier softib). */
static int sib_ring_fd_leased(int fd)
{
	struct sib_qp_shm hdr;
	if (pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) || hdr.magic != SIB_MAGIC_QP ||
	    !hdr.leased)
		return -1;
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	if (sys()->fcntl(fd, F_OFD_GETLK, &lk))
		return -1;
	return lk.l_type != F_UNLCK;
}

/* Whether qpn's owner still holds the lease on its ring (see above). */
static int sib_ring_leased(const struct sib_fabric *fab, uint32_t qpn)
{
	char path[256];
	sib_qp_path(fab, qpn, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	int held = sib_ring_fd_leased(fd);
	sys()->close(fd);
	return held;
}

/* Tells senders that still map the ring behind fd to drop it. */
static void sib_ring_mark_dead(int fd)
{
	void *m = mmap(NULL, SIB_RING_OFFSET, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return;
	struct sib_qp_shm *q = m;
	__atomic_store_n(&q->rx_ready, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&q->dead, 1, __ATOMIC_RELEASE);
	munmap(m, SIB_RING_OFFSET);
}

/* Marks a QP's ring dead and unlinks it. */
static void sib_ring_retire(struct sib_fabric *fab, uint32_t qpn)
{
	char path[256];
	sib_qp_path(fab, qpn, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		sib_ring_mark_dead(fd);
		sys()->close(fd);
	}
	unlink(path);
}

/* Channel sockets are named ch.<pidns>.<pid>.<n>; those of dead processes
 * of our pid namespace go. */
static unsigned sib_reclaim_sockets(struct sib_fabric *fab)
{
	unsigned n = 0;
	DIR *d = opendir(fab->dir);
	if (!d)
		return 0;
	struct dirent *de;
	unsigned long long ns = sib_pidns();
	while ((de = readdir(d))) {
		int pid;
		unsigned long long their_ns;
		if (sscanf(de->d_name, "ch.%llu.%d.", &their_ns, &pid) != 2 || their_ns != ns)
			continue;
		if (kill(pid, 0) && errno == ESRCH) {
			char path[sizeof(fab->dir) + sizeof(de->d_name) + 2];
			snprintf(path, sizeof(path), "%s/%s", fab->dir, de->d_name);
			n += unlink(path) == 0;
		}
	}
	closedir(d);
	return n;
}

/*
 * Rings of every fabric in the directory whose lease nobody holds belong to
 * dead (or exec'd) processes: they go, even on fabrics nobody opens again
 * (tests that make one fabric per process would otherwise fill /dev/shm).
 * Their directory slots are freed by the next reclaim of their fabric.
 */
static void sib_sweep_rings(const struct sib_fabric *fab)
{
	DIR *d = opendir(fab->dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		char path[sizeof(fab->dir) + sizeof(de->d_name) + 2];
		int pid;
		snprintf(path, sizeof(path), "%s/%s", fab->dir, de->d_name);
		if (sscanf(de->d_name, ".new.%d.", &pid) == 1) {
			if (kill(pid, 0) && errno == ESRCH)
				unlink(path); /* a creation cut short */
			continue;
		}
		if (de->d_name[0] == '.' || !strstr(de->d_name, ".qp."))
			continue;
		int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (sib_ring_fd_leased(fd) == 0) {
			sib_ring_mark_dead(fd);
			unlink(path);
		}
		sys()->close(fd);
	}
	closedir(d);
}

unsigned sib_fabric_reclaim(struct sib_fabric *fab)
{
	unsigned n = 0;
	struct sib_fabric_shm *s = fab->shm;
	uint64_t ns = sib_pidns();
	sib_shm_lock(&s->lock);
	for (unsigned i = 0; i < SIB_MAX_QPS; i++) {
		struct sib_dir_entry *e = &s->dir[i];
		/* A QP of another pid namespace (a container sharing /dev/shm) is
		 * left alone: its pid cannot be checked from here. */
		if (!e->live || e->pidns != ns ||
		    (sib_pid_alive(e->pid, e->start_time) && sib_ring_leased(fab, e->qpn) != 0))
			continue;
		__atomic_store_n(&e->live, 0, __ATOMIC_RELEASE);
		sib_ring_retire(fab, e->qpn);
		n++;
	}
	sib_shm_unlock(&s->lock);
	sib_reclaim_sockets(fab);
	sib_sweep_rings(fab);
	return n;
}

/* A ring: header, slots, the posted receives as senders see them, the area. */
static size_t sib_ring_rxq_off(uint32_t nslots)
{
	return SIB_RING_OFFSET + (size_t)nslots * SIB_SLOT_SIZE;
}

static size_t sib_ring_area_off(uint32_t nslots)
{
	return (sib_ring_rxq_off(nslots) + (size_t)nslots * sizeof(struct sib_rxq_ent) + 4095u) &
	       ~(size_t)4095u;
}

size_t sib_ring_len(uint32_t nslots, size_t area)
{
	return sib_ring_area_off(nslots) + area;
}

void sib_ring_init(struct sib_qp *qp, void *m, uint32_t nslots, size_t area)
{
	struct sib_qp_shm *q = m;
	q->qpn = qp->qp.qp_num;
	q->nslots = nslots;
	q->leased = 1;
	q->rxq_off = sib_ring_rxq_off(nslots);
	q->area_off = sib_ring_area_off(nslots);
	q->area_len = area;
	sib_shm_lock_init(&q->lock);
	__atomic_store_n(&q->magic, SIB_MAGIC_QP, __ATOMIC_RELEASE);
	qp->shm = q;
	qp->shm_len = sib_ring_len(nslots, area);
	qp->nslots = nslots;
	qp->rxq = (struct sib_rxq_ent *)(void *)((uint8_t *)m + q->rxq_off);
	qp->area = area ? (uint8_t *)m + q->area_off : NULL;
	qp->area_len = area;
}

/* A free directory slot, under the directory lock; SIB_MAX_QPS if none. */
static unsigned sib_free_slot(const struct sib_fabric_shm *s)
{
	uint32_t start = s->next_gen;
	for (unsigned i = 0; i < SIB_MAX_QPS; i++) {
		/* Rotate the starting slot so QPNs are not reused at once. */
		unsigned k = (start + i) & (SIB_MAX_QPS - 1);
		if (!s->dir[k].live)
			return k;
	}
	return SIB_MAX_QPS;
}

int sib_fabric_qp_create(struct sib_context *c, struct sib_qp *qp, uint32_t nslots)
{
	struct sib_fabric *fab = &c->fab;
	struct sib_fabric_shm *s = fab->shm;
	if (sib_reclaim_due(fab))
		sib_fabric_reclaim(fab);
	sib_shm_lock(&s->lock);
	unsigned slot = sib_free_slot(s);
	if (slot == SIB_MAX_QPS) {
		/* Full: the dead's slots are freed now, however recent the
		 * last look. */
		sib_shm_unlock(&s->lock);
		sib_fabric_reclaim(fab);
		sib_shm_lock(&s->lock);
		slot = sib_free_slot(s);
	}
	if (slot == SIB_MAX_QPS) {
		sib_shm_unlock(&s->lock);
		return ENOSPC;
	}
	uint32_t gen = s->next_gen++ & 0x3fffu;
	uint32_t qpn = (gen << SIB_QPN_SLOT_BITS) | slot;
	if (qpn < 2) /* QPN 0 and 1 are the special SMI and GSI QPs */
		qpn |= 1u << SIB_QPN_SLOT_BITS;
	char path[256], tmp[256];
	sib_qp_path(fab, qpn, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s/.new.%d.%06x", fab->dir, (int)getpid(), qpn);
	size_t len = sib_ring_len(nslots, c->next_area);
	unlink(tmp);
	/* Built aside and renamed into place with its lease already held, so a
	 * sweep (sib_sweep_rings) never sees an unleased ring of a live QP. The
	 * lease is an open-file-description write lock on a close-on-exec fd:
	 * the kernel drops it when the owner dies or execs. */
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int rc = 0;
	void *m = MAP_FAILED;
	if (fd < 0 || sys()->fcntl(fd, F_OFD_SETLK, &lk) || ftruncate(fd, (off_t)len) ||
	    (m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		rc = errno ? errno : EIO;
		if (fd >= 0) {
			sys()->close(fd);
			unlink(tmp);
		}
		sib_shm_unlock(&s->lock);
		return rc;
	}
	qp->qp.qp_num = qpn;
	sib_ring_init(qp, m, nslots, c->next_area);
	if (rename(tmp, path)) {
		rc = errno;
		munmap(m, len);
		sys()->close(fd);
		unlink(tmp);
		sib_shm_unlock(&s->lock);
		return rc;
	}
	struct sib_dir_entry *e = &s->dir[slot];
	e->qpn = qpn;
	e->pid = getpid();
	e->start_time = procinfo_start_time(0); /* ours, read once per process */
	e->pidns = sib_pidns();
	__atomic_store_n(&e->live, 1, __ATOMIC_RELEASE);
	sib_shm_unlock(&s->lock);
	c->next_area = 0; /* for one QP */
	qp->ring_fd = fd;
	snprintf(qp->shm_path, sizeof(qp->shm_path), "%s", path);
	return 0;
}

void sib_fabric_qp_destroy(struct sib_context *c, struct sib_qp *qp)
{
	struct sib_fabric_shm *s = c->fab.shm;
	sib_shm_lock(&qp->shm->lock);
	__atomic_store_n(&qp->shm->rx_ready, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&qp->shm->dead, 1, __ATOMIC_RELEASE);
	sib_shm_unlock(&qp->shm->lock);
	sib_shm_lock(&s->lock);
	struct sib_dir_entry *e = sib_dir_entry(&c->fab, qp->qp.qp_num);
	if (e->qpn == qp->qp.qp_num)
		__atomic_store_n(&e->live, 0, __ATOMIC_RELEASE);
	sib_shm_unlock(&s->lock);
	unlink(qp->shm_path);
	munmap(qp->shm, qp->shm_len);
	sys()->close(qp->ring_fd);
	qp->shm = NULL;
	qp->ring_fd = -1;
}

/* The mapping of qpn's ring (and its length), opened on first use; NULL if
 * it is gone. */
static struct sib_peer_map *sib_peer_ring(struct sib_context *c, uint32_t qpn)
{
	struct sib_peer_map *pm;
	HASH_FIND(hh, c->peers, &qpn, sizeof(qpn), pm);
	if (pm && !__atomic_load_n(&pm->shm->dead, __ATOMIC_ACQUIRE))
		return pm;
	if (pm) {
		HASH_DEL(c->peers, pm);
		pm->next_dead = c->dead_maps;
		c->dead_maps = pm;
	}
	char path[256];
	sib_qp_path(&c->fab, qpn, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	struct stat st;
	void *m = MAP_FAILED;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size > SIB_RING_OFFSET)
		m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	sys()->close(fd);
	if (m == MAP_FAILED)
		return NULL;
	struct sib_qp_shm *q = m;
	/* Bound what the file claims by what it holds, once: the number of
	 * slots kept is the one checked, whatever the file says later. */
	uint32_t nslots = __atomic_load_n(&q->nslots, __ATOMIC_RELAXED);
	if (__atomic_load_n(&q->magic, __ATOMIC_ACQUIRE) != SIB_MAGIC_QP || q->qpn != qpn ||
	    nslots == 0 || (nslots & (nslots - 1)) ||
	    SIB_RING_OFFSET + (size_t)nslots * SIB_SLOT_SIZE > (size_t)st.st_size) {
		munmap(m, (size_t)st.st_size);
		return NULL;
	}
	pm = calloc(1, sizeof(*pm));
	if (!pm) {
		munmap(m, (size_t)st.st_size);
		return NULL;
	}
	pm->qpn = qpn;
	pm->nslots = nslots;
	pm->shm = q;
	pm->len = (size_t)st.st_size;
	HASH_ADD(hh, c->peers, qpn, sizeof(pm->qpn), pm);
	return pm;
}

void sib_peer_maps_free(struct sib_context *c)
{
	struct sib_peer_map *pm, *tmp;
	HASH_ITER(hh, c->peers, pm, tmp)
	{
		HASH_DEL(c->peers, pm);
		munmap(pm->shm, pm->len);
		free(pm);
	}
	while ((pm = c->dead_maps)) {
		c->dead_maps = pm->next_dead;
		munmap(pm->shm, pm->len);
		free(pm);
	}
}

static void sib_wake(struct sib_context *c, struct sib_qp_shm *q)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path, q->wake_path, sizeof(a.sun_path));
	a.sun_path[sizeof(a.sun_path) - 1] = '\0';
	uint64_t cookie = q->wake_cookie;
	/* After the endpoint lock, if the caller holds one (txdefer.h). */
	struct iovec v = {.iov_base = &cookie, .iov_len = sizeof(cookie)};
	if (txdefer_add(c->wake_sock, (struct sockaddr *)&a, sizeof(a), &v, 1, sizeof(cookie), NULL, 0))
		return;
	/* A full socket already holds a wake-up; a gone one has no reader. */
	(void)sys()->sendto(c->wake_sock, &cookie, sizeof(cookie), MSG_DONTWAIT, (struct sockaddr *)&a,
		     sizeof(a));
}

/* Wakes q's receiver if it is armed. Pairs with the fence in
 * sib_req_notify_cq: either we see the arm or the receiver's poll after
 * arming sees the packets published before. */
static void sib_wake_if_armed(struct sib_context *c, struct sib_qp_shm *q)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&q->armed, __ATOMIC_RELAXED) &&
	    __atomic_exchange_n(&q->armed, 0, __ATOMIC_ACQ_REL))
		sib_wake(c, q);
}

void sib_wire_release(struct sib_context *c, struct sib_wire *w)
{
	struct sib_qp_shm *q = w->q;
	if (!q)
		return;
	w->q = NULL;
	sib_shm_unlock(&q->lock);
	sib_wake_if_armed(c, q);
}

/* Locks dst_qpn's ring for w, keeping the lock held from an earlier packet
 * to the same QP; NULL when the QP is gone. */
static struct sib_qp_shm *sib_wire_hold(struct sib_context *c, struct sib_qp *src,
					struct sib_wire *w, uint32_t dst_qpn)
{
	if (w->q && w->qpn == dst_qpn)
		return w->q;
	sib_wire_release(c, w);
	struct sib_qp_shm *q = src->last_ring;
	if (!q || src->last_qpn != dst_qpn || __atomic_load_n(&q->dead, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&c->lock);
		struct sib_peer_map *pm = sib_peer_ring(c, dst_qpn);
		pthread_mutex_unlock(&c->lock);
		if (!pm)
			return NULL;
		q = pm->shm;
		src->last_ring = q;
		src->last_ring_len = pm->len;
		src->last_ring_nslots = pm->nslots;
		src->last_qpn = dst_qpn;
	}
	sib_shm_lock(&q->lock);
	w->q = q;
	w->len = src->last_ring_len;
	w->nslots = src->last_ring_nslots;
	w->qpn = dst_qpn;
	w->woke = false;
	return q;
}

void sib_wire_put(struct sib_context *c, struct sib_qp *src, struct sib_wire *w,
		  uint32_t dst_qpn, uint32_t qkey, const uint8_t *sgid, const uint8_t *dgid,
		  const struct ibv_sge *sge, int num_sge, uint32_t len)
{
	/* Like a wire: a packet nobody can take is lost without a trace here. */
	if (!sib_fabric_qp_live(&c->fab, dst_qpn))
		return;
	struct sib_qp_shm *q = sib_wire_hold(c, src, w, dst_qpn);
	if (!q)
		return;
	if (!__atomic_load_n(&q->rx_ready, __ATOMIC_ACQUIRE)) {
		q->drop_state++;
		return;
	}
	if (q->qkey != qkey) {
		q->drop_qkey++;
		return;
	}
	/* Granted and head only grow (a reset moves both to tail under this
	 * lock), so a stale view of them errs towards "no room": look again
	 * only then, and drop if there really is none. */
	uint64_t tail = q->tail;
	const uint32_t nslots = w->nslots;
	if (q->snd_granted <= tail || tail - q->snd_head >= nslots) {
		q->snd_granted = __atomic_load_n(&q->granted, __ATOMIC_ACQUIRE);
		q->snd_head = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
		if (q->snd_granted <= tail || tail - q->snd_head >= nslots) {
			q->drop_no_recv++;
			return;
		}
	}
	/* The receive this packet will complete: in the area, and big enough,
	 * it takes GRH and payload now (bounded by our mapping, not by what the
	 * ring says, read once) and its entry becomes the completion; otherwise
	 * the packet waits in its slot for ibv_poll_cq. */
	uint8_t *dst = NULL;
	struct sib_rxq_ent *e = NULL;
	uint64_t rxq_off = __atomic_load_n(&q->rxq_off, __ATOMIC_RELAXED);
	uint64_t rxq_end = rxq_off + (uint64_t)nslots * sizeof(struct sib_rxq_ent);
	if (rxq_off % _Alignof(struct sib_rxq_ent) == 0 && rxq_end > rxq_off && rxq_end <= w->len) {
		e = (struct sib_rxq_ent *)(void *)((uint8_t *)q + rxq_off) + (tail & (nslots - 1));
		uint64_t off = __atomic_load_n(&e->off, __ATOMIC_RELAXED);
		uint64_t room = __atomic_load_n(&e->len, __ATOMIC_RELAXED);
		if (off >= rxq_end && off < w->len && room <= w->len - off &&
		    room >= SIB_GRH + (uint64_t)len)
			dst = (uint8_t *)q + off;
	}
	if (dst) {
		sib_build_grh(dst, len, sgid, dgid);
		dst += SIB_GRH;
		e->len = len | SIB_RXQ_DIRECT;
		e->src_qpn = src->qp.qp_num;
		q->rx_direct++;
	} else {
		struct sib_slot *slot = (struct sib_slot *)(void *)(
			(uint8_t *)q + SIB_RING_OFFSET + (size_t)(tail & (nslots - 1)) * SIB_SLOT_SIZE);
		slot->len = len;
		slot->src_qpn = src->qp.qp_num;
		memcpy(slot->sgid, sgid, 16);
		memcpy(slot->dgid, dgid, 16);
		if (e)
			e->len = 0;
		dst = slot->data;
	}
	uint32_t off = 0;
	for (int i = 0; i < num_sge; i++) {
		copy_bytes(dst + off, (const void *)(uintptr_t)sge[i].addr, sge[i].length);
		off += sge[i].length;
	}
	/* Publishing is the last store, so a sender dying above leaves nothing. */
	q->rx_pkts++;
	__atomic_store_n(&q->tail, tail + 1, __ATOMIC_RELEASE);
	/* A NIC raises the event at the first completion, not after the whole
	 * post list: a sleeping receiver starts on the first big packet while
	 * the rest of a long list (a 1 MB message is 16 copies of 64 KiB) is
	 * still being written. Small packets leave it to release (the fence
	 * costs more than their copies); release also catches a later arm. */
	if (!w->woke && len >= SIB_MTU) {
		w->woke = true;
		sib_wake_if_armed(c, q);
	}
}

int sib_fabric_remove(const char *name)
{
	struct sib_fabric fab;
	int rc = sib_fabric_open(&fab, name);
	if (rc)
		return rc;
	sib_fabric_reclaim(&fab); /* the open may have left it to a later one */
	sib_shm_lock(&fab.shm->lock);
	for (unsigned i = 0; i < SIB_MAX_QPS; i++)
		if (fab.shm->dir[i].live) {
			sib_shm_unlock(&fab.shm->lock);
			sib_fabric_close(&fab);
			return EBUSY;
		}
	/* Still under the lock: nobody can add a QP before the name is gone. */
	char path[256];
	snprintf(path, sizeof(path), "%s/%s.fabric", fab.dir, fab.name);
	unlink(path);
	snprintf(path, sizeof(path), "%s/.reclaimed.%s", fab.dir, fab.name);
	unlink(path);
	sib_shm_unlock(&fab.shm->lock);
	/* Rings left by processes that died with their QPs reclaimed above are
	 * already unlinked; any left over by a crash during creation go too. */
	DIR *d = opendir(fab.dir);
	if (d) {
		size_t n = strlen(fab.name);
		struct dirent *de;
		while ((de = readdir(d)))
			if (!strncmp(de->d_name, fab.name, n) && !strncmp(de->d_name + n, ".qp.", 4)) {
				char p2[sizeof(fab.dir) + sizeof(de->d_name) + 2];
				snprintf(p2, sizeof(p2), "%s/%s", fab.dir, de->d_name);
				unlink(p2);
			}
		closedir(d);
	}
	sib_fabric_close(&fab);
	return 0;
}
