/* Closing descriptors: see close.h. */
#include "autoconfig.h"

#include "preload/close.h"

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/reentry.h"
#include "transport/sys.h"

/* The kernel's value (linux/close_range.h), for a libc too old to name it. */
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1u << 2)
#endif

int fd_close(int fd, int (*kernel_close)(int fd))
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return kernel_close(fd);
	/* Out of the table first: once the kernel frees the number another
	 * thread may get it for something else (and a connect swapping this
	 * number onto another placeholder, sock_local, sees it gone). */
	struct ffile *f = fdtable_remove(&fdtab, fd);
	int rc = kernel_close(fd);
	int saved = errno;
	if (f)
		ffile_put(&fdtab, f);
	errno = saved;
	return rc;
}

int fd_close_range(unsigned first, unsigned last, int flags,
		   int (*kernel_close_range)(unsigned first, unsigned last, int flags))
{
	if (ferry_internal() || (flags & CLOSE_RANGE_CLOEXEC) || first > last)
		return kernel_close_range(first, last, flags);
	size_t end = last < fdtab.size ? last + 1 : fdtab.size;
	struct ffile *batch[64];
	unsigned n = 0;
	for (size_t fd = first; fd < end; fd++) {
		if (!fdtable_maybe(&fdtab, (int)fd))
			continue;
		struct ffile *f = fdtable_remove(&fdtab, (int)fd);
		if (!f)
			continue;
		if (n == 64) {
			for (unsigned i = 0; i < n; i++)
				ffile_put(&fdtab, batch[i]);
			n = 0;
		}
		batch[n++] = f;
	}
	int rc = kernel_close_range(first, last, flags);
	int saved = errno;
	for (unsigned i = 0; i < n; i++)
		ffile_put(&fdtab, batch[i]);
	errno = saved;
	return rc;
}

FERRY_EXPORT int close(int fd)
{
	return fd_close(fd, sys()->close);
}

#ifdef HAVE_CLOSE_RANGE
FERRY_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	const struct sys_fns *c = sys();
	if (!c->close_range) {
		errno = ENOSYS;
		return -1;
	}
	return fd_close_range(first, last, flags, c->close_range);
}
#endif
