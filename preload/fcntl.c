/* fcntl and dup: the file flags a socket keeps without the kernel, and
 * the fd table following every duplicate the kernel makes. */
#include "autoconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>

#include "preload/export.h"
#include "preload/fasync.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/reentry.h"
#include "preload/sock_internal.h"
#include "preload/stdfile.h"
#include "transport/log.h"
#include "transport/sys.h"

enum dup_kind { DUP_DUP, DUP_DUP2, DUP_DUP3, DUP_FCNTL };
struct dup_call {
	enum dup_kind kind;
	int oldfd, newfd, flags; /* newfd and flags: dup2, dup3 */
	int cmd;                 /* DUP_FCNTL: F_DUPFD or F_DUPFD_CLOEXEC, arg in flags */
};

static int dup_kernel(const struct dup_call *d)
{
	const struct sys_fns *c = sys();
	switch (d->kind) {
	case DUP_DUP:
		return c->dup(d->oldfd);
	case DUP_DUP2:
		return c->dup2(d->oldfd, d->newfd);
	case DUP_DUP3:
		return c->dup3(d->oldfd, d->newfd, d->flags);
	case DUP_FCNTL:
		break;
	}
	return c->fcntl(d->oldfd, d->cmd, (long)d->flags);
}

/*
 * A duplication, with the table following the kernel (the new number names
 * f, or nothing of ferry's when f is NULL). Under sock_ph_lock, so sock_local
 * never swaps a socket's only number onto another placeholder while a
 * second number to the old one appears.
 */
static int dup_guarded(struct ffile *f, const struct dup_call *d)
{
	pthread_mutex_lock(&sock_ph_lock);
	int rc = dup_kernel(d);
	int saved = errno;
	int newfd = d->kind == DUP_DUP2 || d->kind == DUP_DUP3 ? d->newfd : rc;
	struct ffile *stale = NULL;
	if (rc >= 0 && newfd != d->oldfd) {
		stale = fdtable_remove(&fdtab, newfd);
		if (f && fdtable_install(&fdtab, newfd, f) != 0)
			log_warn("fd %d is past the fd table; the duplicate is the kernel's", newfd);
		/* The new number's FD_CLOEXEC is not the first one's. */
		if (f && f->kind == FFILE_SOCK)
			((struct fsock *)f->priv)->cloexec_unknown = true;
	}
	pthread_mutex_unlock(&sock_ph_lock);
	if (stale)
		ffile_put(&fdtab, stale);
	if (rc >= 0 && f && newfd <= 2)
		stdfile_take_std(newfd);
	errno = saved;
	return rc;
}

/* O_ASYNC's owner and signal, as the placeholder took them (fasync.h). */
static void fcntl_owner(struct ffile *f, int cmd, long arg)
{
	struct ffile_owner o;
	fasync_owner_get(f, &o);
	if (cmd == F_SETSIG) {
		o.sig = (int)arg;
	} else if (cmd == F_SETOWN) {
		o.type = arg < 0 ? F_OWNER_PGRP : F_OWNER_PID;
		o.pid = (pid_t)(arg < 0 ? -arg : arg);
	} else {
		const struct f_owner_ex *ex = (const struct f_owner_ex *)arg;
		o.type = ex->type;
		o.pid = ex->pid;
	}
	fasync_owner_set(f, &o);
}

static int fcntl_impl(int fd, int cmd, long arg)
{
	const struct sys_fns *c = sys();
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return c->fcntl(fd, cmd, arg);
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (!f)
		return c->fcntl(fd, cmd, arg);
	int rc;
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		rc = dup_guarded(f, &(struct dup_call){.kind = DUP_FCNTL, .oldfd = fd, .cmd = cmd,
							.flags = (int)arg});
		break;
	case F_GETFL:
		/* A socket's status is O_RDWR plus what F_SETFL set: kept here,
		 * so the common get-then-set costs no system call. */
		if (f->kind == FFILE_SOCK) {
			rc = __atomic_load_n(&f->status, __ATOMIC_RELAXED);
			break;
		}
		rc = c->fcntl(fd, cmd);
		break;
	case F_SETFL:
		if (f->kind == FFILE_SOCK) {
			int keep = O_APPEND | O_ASYNC | O_DIRECT | O_NOATIME | O_NONBLOCK;
			if (arg & O_ASYNC)
				fasync_set(f, fd, true); /* the number, for si_fd */
			__atomic_store_n(&f->status, O_RDWR | ((int)arg & keep), __ATOMIC_RELAXED);
			/* A stream's placeholder is never used by the kernel; others
			 * (a socket that may still fall back, a listener) keep the
			 * kernel in step, a listener always non-blocking there. */
			struct fsock *sk = f->priv;
			if (__atomic_load_n(&sk->state, __ATOMIC_RELAXED) == FSOCK_STREAM) {
				rc = 0;
				break;
			}
			/* A pooled placeholder's flags wait in the status until the
			 * kernel owns it (sock_kernel_own); O_ASYNC and O_DIRECT are
			 * the kernel's to set up or refuse. */
			__atomic_thread_fence(__ATOMIC_SEQ_CST); /* pairs with sock_let_go's */
			if (sock_pooled_clean(sk) && !(arg & (O_ASYNC | O_DIRECT))) {
				rc = 0;
				break;
			}
			sock_kernel_own(f, fd);
		} else {
			ffile_set_nonblock(f, (arg & O_NONBLOCK) != 0);
		}
		rc = c->fcntl(fd, cmd, f->hybrid ? arg | O_NONBLOCK : arg);
		break;
	case F_SETFD:
		if (f->kind == FFILE_SOCK)
			((struct fsock *)f->priv)->cloexec_unknown = true;
		rc = c->fcntl(fd, cmd, arg);
		break;
	case F_GETFD:
	case F_GETOWN:
	case F_GETOWN_EX:
	case F_GETSIG:
	case F_GETLEASE:
	case F_GETLK:
	case F_OFD_GETLK:
		rc = c->fcntl(fd, cmd, arg);
		break;
	case F_SETOWN:
	case F_SETOWN_EX:
	case F_SETSIG:
		sock_kernel_own(f, fd); /* state in the kernel's file, as below */
		rc = c->fcntl(fd, cmd, arg);
		if (rc == 0)
			fcntl_owner(f, cmd, arg);
		break;
	default:
		/* Whatever else sets up state in the kernel's file. */
		sock_kernel_own(f, fd);
		rc = c->fcntl(fd, cmd, arg);
	}
	int saved = errno;
	ffile_put(&fdtab, f);
	errno = saved;
	return rc;
}

FERRY_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_impl(fd, cmd, arg);
}

FERRY_EXPORT int dup(int fd)
{
	const struct sys_fns *c = sys();
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return c->dup(fd);
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (!f)
		return c->dup(fd);
	int nfd = dup_guarded(f, &(struct dup_call){.kind = DUP_DUP, .oldfd = fd});
	int saved = errno;
	ffile_put(&fdtab, f);
	errno = saved;
	return nfd;
}

static int dup3_impl(int oldfd, int newfd, int flags, bool is_dup2)
{
	const struct sys_fns *c = sys();
	if ((!fdtable_maybe(&fdtab, oldfd) && !fdtable_maybe(&fdtab, newfd)) || ferry_internal())
		return is_dup2 ? c->dup2(oldfd, newfd) : c->dup3(oldfd, newfd, flags);
	struct ffile *f = fdtable_get(&fdtab, oldfd);
	int rc = dup_guarded(f, &(struct dup_call){.kind = is_dup2 ? DUP_DUP2 : DUP_DUP3,
						   .oldfd = oldfd, .newfd = newfd, .flags = flags});
	int saved = errno;
	if (f)
		ffile_put(&fdtab, f);
	errno = saved;
	return rc;
}

FERRY_EXPORT int dup2(int oldfd, int newfd)
{
	return dup3_impl(oldfd, newfd, 0, true);
}

FERRY_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	return dup3_impl(oldfd, newfd, flags, false);
}
