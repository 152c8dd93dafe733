/* O_ASYNC for ferry files: see fasync.h. */
#include "autoconfig.h"

#include "preload/fasync.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

void fasync_owner_set(struct ffile *f, const struct ffile_owner *o)
{
	pthread_mutex_lock(&f->wlock);
	f->owner = *o;
	pthread_mutex_unlock(&f->wlock);
}

void fasync_owner_get(struct ffile *f, struct ffile_owner *o)
{
	pthread_mutex_lock(&f->wlock);
	*o = f->owner;
	pthread_mutex_unlock(&f->wlock);
}

void fasync_set(struct ffile *f, int fd, bool on)
{
	if (on) {
		struct ffile_owner o;
		fasync_owner_get(f, &o);
		o.fd = fd;
		fasync_owner_set(f, &o);
	}
	int st = __atomic_load_n(&f->status, __ATOMIC_RELAXED);
	__atomic_store_n(&f->status, on ? st | O_ASYNC : st & ~O_ASYNC, __ATOMIC_RELAXED);
}

/* kill(2) for the owner: a process, a process group or a thread. */
static void fasync_kill(const struct ffile_owner *o, int sig)
{
	if (o->type == F_OWNER_TID)
		syscall(SYS_tgkill, getpid(), o->pid, sig);
	else
		kill(o->type == F_OWNER_PGRP ? -o->pid : o->pid, sig);
}

void fasync_urgent(struct ffile *f)
{
	struct ffile_owner o;
	fasync_owner_get(f, &o);
	if (o.pid > 0)
		fasync_kill(&o, SIGURG);
}

/* Only a thread that signals its own thread group's leader, or itself,
 * may claim a POLL_ code (the kernel's rule for rt_sigqueueinfo); other
 * sends go as SI_QUEUE, with the band and the number in place all the
 * same. */
void fasync_signal(struct ffile *f, uint32_t events)
{
	struct ffile_owner o;
	fasync_owner_get(f, &o);
	if (o.pid <= 0)
		return;
	/* sk_send_sigurg's own wake-up, before the bytes' */
	if ((events & EPOLLPRI) && events != EPOLLPRI)
		fasync_signal(f, EPOLLPRI);
	if (o.sig == 0 || o.type == F_OWNER_PGRP) {
		fasync_kill(&o, o.sig ? o.sig : SIGIO);
		return;
	}
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = o.sig;
	if (events == EPOLLPRI) {
		si.si_code = POLL_PRI;
		si.si_band = POLLPRI | POLLRDBAND;
	} else if (events & (EPOLLIN | EPOLLRDHUP)) {
		si.si_code = POLL_IN;
		si.si_band = POLLIN | POLLRDNORM;
	} else if (events & EPOLLOUT) {
		si.si_code = POLL_OUT;
		si.si_band = POLLOUT | POLLWRNORM | POLLWRBAND;
	} else if (events & EPOLLERR) {
		si.si_code = POLL_ERR;
		si.si_band = POLLERR;
	} else {
		si.si_code = POLL_HUP;
		si.si_band = POLLHUP;
	}
	si.si_fd = o.fd;
	pid_t self = getpid();
	for (int tries = 0; tries < 2; tries++) {
		long rc = o.type == F_OWNER_TID
				  ? syscall(SYS_rt_tgsigqueueinfo, self, o.pid, o.sig, &si)
				  : syscall(SYS_rt_sigqueueinfo, o.pid, o.sig, &si);
		if (rc == 0 || errno != EPERM || si.si_code == SI_QUEUE)
			return;
		si.si_code = SI_QUEUE;
	}
}
