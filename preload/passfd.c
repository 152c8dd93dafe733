/* Ferry sockets passed over a unix socket (SCM_RIGHTS): see passfd.h. */
#include "autoconfig.h"

#include "preload/passfd.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/inherit.h"
#include "preload/lshare.h"
#include "preload/reentry.h"
#include "preload/scm.h"
#include "preload/sock.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"

#define PASSFD_MAGIC 0x66657270u /* "ferp" */
/* How long a receiver waits for the sender's answer. */
#define PASSFD_ASK_MS 2000

struct passfd_answer {
	uint32_t magic;
	uint32_t size; /* sizeof(struct passfd_answer): both ends one build */
	struct inherit_desc d; /* d.rdv, if any, travels as SCM_RIGHTS */
};

/* A socket this process passed, described under its inode's name. */
struct pass {
	struct pass *next;
	ino_t ino;
	int lfd;      /* the abstract name the receiver asks */
	struct inherit_desc d;
	int rdv;      /* a listener's rendezvous socket (a duplicate), or -1 */
	uint64_t expires_ns;
};

static pthread_mutex_t pf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pass *pf_passes;

static socklen_t pf_name(ino_t ino, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	/* The inode alone: a receiver may run as another user than the sender
	 * (a privileged dispatcher and its workers). */
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ferry-pass.%llu",
			 (unsigned long long)ino);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void pf_free(struct pass *p)
{
	sys()->close(p->lfd);
	if (p->rdv >= 0)
		sys()->close(p->rdv);
	free(p);
}

/* The name for ino, made or renewed (pf_lock held). */
static struct pass *pf_publish(ino_t ino, const struct inherit_desc *d)
{
	uint64_t expires = clock_now_ns() + (uint64_t)PASSFD_TTL_S * 1000000000ull;
	for (struct pass *p = pf_passes; p; p = p->next) {
		if (p->ino == ino) {
			p->expires_ns = expires;
			return p;
		}
	}
	const struct sys_fns *c = sys();
	struct pass *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->ino = ino;
	p->d = *d;
	p->rdv = -1;
	p->expires_ns = expires;
	p->lfd = c->socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_un a;
	socklen_t alen = pf_name(ino, &a);
	if (p->lfd < 0 || c->bind(p->lfd, (struct sockaddr *)&a, alen) != 0 ||
	    c->listen(p->lfd, 16) != 0) {
		/* EADDRINUSE: another holder describes this socket already. */
		if (p->lfd >= 0)
			c->close(p->lfd);
		free(p);
		return NULL;
	}
	if (d->kind == 'L') {
		p->rdv = c->fcntl(d->rdv, F_DUPFD_CLOEXEC, 0);
		if (p->rdv < 0) {
			c->close(p->lfd);
			free(p);
			return NULL;
		}
	}
	p->next = pf_passes;
	pf_passes = p;
	return p;
}

bool passfd_sent(struct ffile *f, int fd)
{
	struct inherit_desc d;
	struct stat st;
	if (!inherit_describe(f, true, &d) || fstat(fd, &st) != 0)
		return false;
	if (handover_serve() != 0)
		return false;
	pthread_mutex_lock(&pf_lock);
	struct pass *p = pf_publish(st.st_ino, &d);
	pthread_mutex_unlock(&pf_lock);
	if (!p) {
		/* Someone else's description may stand; ours could not. */
		return false;
	}
	if (d.kind == 'L')
		lshare_passed(f);
	handover_poke();
	stats_inc(ferry_stats()->sockets_passed);
	return true;
}

bool passfd_keeps(uint32_t sid, uint64_t token)
{
	bool keeps = false;
	pthread_mutex_lock(&pf_lock);
	for (struct pass *p = pf_passes; p && !keeps; p = p->next)
		keeps = p->d.kind == 'S' && p->d.pid == (int)getpid() && p->d.sid == sid &&
			p->d.token == token;
	pthread_mutex_unlock(&pf_lock);
	return keeps;
}

void passfd_forget(uint32_t sid, uint64_t token)
{
	pthread_mutex_lock(&pf_lock);
	for (struct pass **pp = &pf_passes; *pp;) {
		struct pass *p = *pp;
		if (p->d.kind == 'S' && p->d.sid == sid && p->d.token == token) {
			*pp = p->next;
			pf_free(p);
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&pf_lock);
}

int passfd_poll(struct pollfd *pfd, int max, int *timeout_ms)
{
	int n = 0;
	uint64_t now = clock_now_ns(), next = 0;
	pthread_mutex_lock(&pf_lock);
	for (struct pass *p = pf_passes; p; p = p->next) {
		if (n < max)
			pfd[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
		if (!next || p->expires_ns < next)
			next = p->expires_ns;
	}
	pthread_mutex_unlock(&pf_lock);
	*timeout_ms = -1;
	if (next)
		*timeout_ms = next > now ? (int)((next - now) / 1000000u) + 1 : 0;
	return n;
}

static void pf_answer(const struct pass *p, int cfd)
{
	struct passfd_answer ans = {.magic = PASSFD_MAGIC, .size = sizeof(ans), .d = p->d};
	ssize_t r = scm_send(cfd, &ans, sizeof(ans), &p->rdv, p->rdv >= 0 ? 1 : 0);
	(void)r; /* a receiver that went away asks again or not at all */
}

void passfd_serve(const struct pollfd *pfd, int n)
{
	uint64_t now = clock_now_ns();
	pthread_mutex_lock(&pf_lock);
	for (int i = 0; i < n; i++) {
		if (!(pfd[i].revents & POLLIN))
			continue;
		for (struct pass *p = pf_passes; p; p = p->next) {
			if (p->lfd != pfd[i].fd)
				continue;
			int cfd;
			while ((cfd = sys()->accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
				pf_answer(p, cfd);
				sys()->close(cfd);
			}
			break;
		}
	}
	for (struct pass **pp = &pf_passes; *pp;) {
		struct pass *p = *pp;
		if (p->expires_ns <= now) {
			*pp = p->next;
			pf_free(p);
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&pf_lock);
}

void passfd_fork_child(void)
{
	pthread_mutex_init(&pf_lock, NULL);
	while (pf_passes) {
		struct pass *p = pf_passes;
		pf_passes = p->next;
		pf_free(p);
	}
}

/* --- the receiver --- */

/* Asks who describes the socket behind fd; true with *d filled (d->rdv
 * this process's) when a ferry process does. */
static bool pf_ask(int fd, struct inherit_desc *d)
{
	const struct sys_fns *c = sys();
	struct stat st;
	int proto = 0;
	socklen_t plen = sizeof(proto);
	if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
	    c->getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &plen) != 0 ||
	    proto != IPPROTO_TCP)
		return false;
	/* Non-blocking: a sender too busy to take the question (its queue
	 * full) leaves the socket the kernel's rather than hold this call. */
	int s = c->socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return false;
	struct sockaddr_un a;
	socklen_t alen = pf_name(st.st_ino, &a);
	bool ok = false;
	if (c->connect(s, (struct sockaddr *)&a, alen) == 0) {
		struct passfd_answer ans;
		struct pollfd p = {.fd = s, .events = POLLIN};
		ssize_t r = -1;
		int rdv = -1;
		if (c->poll(&p, 1, PASSFD_ASK_MS) == 1)
			r = scm_recv(s, &ans, sizeof(ans), &rdv, 1);
		ok = r == (ssize_t)sizeof(ans) && ans.magic == PASSFD_MAGIC &&
		     ans.size == sizeof(ans) && (ans.d.kind == 'S' || (ans.d.kind == 'L' && rdv >= 0));
		if (ok) {
			*d = ans.d;
			d->rdv = ans.d.kind == 'L' ? rdv : -1;
		} else if (rdv >= 0) {
			c->close(rdv);
		}
	}
	c->close(s);
	return ok;
}

struct pf_own {
	ino_t ino;
	struct ffile *found; /* a reference */
};

static void pf_own_file(struct ffile *f, void *arg)
{
	struct pf_own *o = arg;
	struct stat st;
	if (o->found || f->kind != FFILE_SOCK || !f->nfds || fstat(f->fds[0], &st) != 0 ||
	    st.st_ino != o->ino)
		return;
	ffile_get(f);
	o->found = f;
}

/* A socket this process holds already (passed to itself): the new number
 * joins its file, as a dup's would. */
static bool pf_join_own(int fd)
{
	struct stat st;
	if (!fdtab.slots || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
		return false;
	struct pf_own o = {.ino = st.st_ino};
	fdtable_each(&fdtab, pf_own_file, &o);
	if (!o.found)
		return false;
	int rc = fdtable_install(&fdtab, fd, o.found);
	ffile_put(&fdtab, o.found);
	return rc == 0;
}

void passfd_each(const struct msghdr *msg, void (*fn)(int fd, void *arg), void *arg)
{
	if (!msg || !msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR((struct msghdr *)msg); cm;
	     cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			fn(fd, arg);
		}
	}
}

/* The kernel just gave fd to this process, so whatever ferry's table says
 * the number is was closed without ferry's seeing it (a close by a raw
 * system call instruction): forgotten, as close would have. */
static void pf_forget_stale(int fd)
{
	if (!fdtable_maybe(&fdtab, fd))
		return;
	struct ffile *stale = fdtable_remove(&fdtab, fd);
	if (!stale)
		return;
	log_debug("fd %d arrived (SCM_RIGHTS) at a number ferry still held: that descriptor was "
		  "closed without close(), and is forgotten",
		  fd);
	ffile_put(&fdtab, stale);
}

static void pf_received(int fd, void *arg)
{
	(void)arg;
	struct inherit_desc d;
	pf_forget_stale(fd);
	if (pf_join_own(fd) || !pf_ask(fd, &d))
		return;
	/* A ferry socket: this process needs a ferry of its own. */
	if (!ferry_up()) {
		if (d.rdv >= 0)
			sys()->close(d.rdv);
		log_info("fd %d, a connection another process's ferry carried, arrived "
			 "(SCM_RIGHTS) but ferry is not running here: it stays the kernel's, not "
			 "connected",
			 fd);
		return;
	}
	if (inherit_take(fd, &d))
		stats_inc(ferry_stats()->sockets_received);
}

void passfd_received(const struct msghdr *msg)
{
	if (ferry_internal() || ferry_state() == FERRY_OFF)
		return;
	passfd_each(msg, pf_received, NULL);
}
