/*
 * A process about to confine itself (sshd's privilege-separated child:
 * RLIMIT_NOFILE 1, then a seccomp filter that lets it only read, write and
 * poll) can run no datapath after it: it could open no socket, and its
 * filter would kill it at ferry's first socket(), sendmsg or thread. So at
 * the first sign -- RLIMIT_NOFILE lowered under what ferry needs, or a
 * seccomp filter through prctl or the seccomp(2) system call (libseccomp's
 * way) -- every ferry connection it
 * holds becomes one end of a unix socket pair, the other end relayed by the
 * process that runs the stream (relay.h), and ferry steps out of the
 * process: its descriptors are the kernel's from then on.
 */
#include "autoconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/reentry.h"
#include "preload/sandbox.h"
#include "preload/sock.h"
#include "transport/log.h"
#include "transport/sys.h"

struct sandbox_files {
	struct ffile **v;
	size_t n, cap;
};

static void sandbox_collect(struct ffile *f, void *arg)
{
	struct sandbox_files *l = arg;
	const struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk || (sk->state != FSOCK_REMOTE && sk->state != FSOCK_STREAM))
		return;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i] == f)
			return; /* a second number of it */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		struct ffile **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	ffile_get(f);
	l->v[l->n++] = f;
}

/* f's numbers become the confined end of a relay; false if it cannot be. */
static bool sandbox_relay(struct ffile *f)
{
	const struct sys_fns *c = sys();
	int pair[2];
	if (c->socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		return false;
	int rc = handover_relay(f, pair[1], pair[0]);
	c->close(pair[1]);
	if (rc != 0) {
		c->close(pair[0]);
		ferry_log(FERRY_LOG_WARN,
			  "a connection cannot be relayed into this process's seccomp sandbox (%s): "
			  "it reads as reset there",
			  strerror(-rc));
		return false;
	}
	const struct fsock *sk = f->priv;
	if (ffile_nonblock(f))
		c->fcntl(pair[0], F_SETFL, O_NONBLOCK);
	int fds[16];
	unsigned n = ffile_fds(&fdtab, f, fds, 16);
	for (unsigned i = 0; i < n; i++) {
		/* Out of the table first: from here on the number is the kernel's. */
		struct ffile *old = fdtable_remove(&fdtab, fds[i]);
		c->dup3(pair[0], fds[i], sk->cloexec ? O_CLOEXEC : 0);
		if (old)
			ffile_put(&fdtab, old);
	}
	c->close(pair[0]);
	return true;
}

/* Every ferry connection of this process goes through a relay, and ferry
 * stays out of the process from now on. */
static void sandbox_enter(void)
{
	if (!fdtab.slots)
		return;
	struct sandbox_files l = {0};
	fdtable_each(&fdtab, sandbox_collect, &l);
	for (size_t i = 0; i < l.n; i++) {
		if (!sandbox_relay(l.v[i]))
			l.v[i]->kind = FFILE_DEAD;
		ffile_put(&fdtab, l.v[i]);
	}
	free(l.v);
	/* New sockets plain, and no drain at exit: this thread may not make
	 * ferry's system calls any more. ferry's own threads, if it runs, are
	 * not under the filter and go on (they pump the relays of its own
	 * streams). */
	__atomic_store_n(&ferry.state, FERRY_OFF, __ATOMIC_RELEASE);
}

void sandbox_enter_once(void)
{
	if (ferry_internal())
		return;
	ferry_internal_enter();
	sandbox_enter();
	ferry_internal_leave();
}

/* Fewer descriptors than this and ferry could not start or take a
 * connection over (sockets, epoll, eventfds, its threads' own). */
#define SANDBOX_NOFILE_MIN 64

static void sandbox_limit(int resource, const struct rlimit *rl)
{
	if (resource == RLIMIT_NOFILE && rl && rl->rlim_cur < SANDBOX_NOFILE_MIN)
		sandbox_enter_once();
}

/* These pass on as system calls, not through sys(): a sanitizer's runtime
 * calls them at its own start, before anything could be resolved. */
FERRY_EXPORT int setrlimit(__rlimit_resource_t resource, const struct rlimit *rl)
{
	sandbox_limit((int)resource, rl);
	return (int)syscall(SYS_prlimit64, 0, (int)resource, rl, NULL);
}

/* The same call on 64-bit hosts, where struct rlimit64 is struct rlimit. */
_Static_assert(sizeof(struct rlimit64) == sizeof(struct rlimit), "rlimit64 is rlimit");

FERRY_EXPORT int setrlimit64(__rlimit_resource_t resource, const struct rlimit64 *rl)
{
	return setrlimit(resource, (const struct rlimit *)rl);
}

FERRY_EXPORT int prlimit(pid_t pid, __rlimit_resource_t resource, const struct rlimit *rl,
			 struct rlimit *old)
{
	if (pid == 0 || pid == getpid())
		sandbox_limit((int)resource, rl);
	return (int)syscall(SYS_prlimit64, pid, (int)resource, rl, old);
}

FERRY_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t resource, const struct rlimit64 *rl,
			   struct rlimit64 *old)
{
	return prlimit(pid, resource, (const struct rlimit *)rl, (struct rlimit *)old);
}

FERRY_EXPORT int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long),
		      a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_SECCOMP)
		sandbox_enter_once();
	return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}
