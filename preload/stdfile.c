/* stdio on ferry sockets: see stdfile.h. */
#include "autoconfig.h"

#include "preload/stdfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/sock.h"
#include "transport/sys.h"

static int stdfile_fd(void *cookie)
{
	return (int)(intptr_t)cookie;
}

static ssize_t stdfile_read(void *cookie, char *buf, size_t len)
{
	return read(stdfile_fd(cookie), buf, len);
}

/* glibc counts a short write of a cookie as an error: all of it, then, as
 * its own file write loops. */
static ssize_t stdfile_write(void *cookie, const char *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(stdfile_fd(cookie), buf + done, len - done);
		if (n <= 0) /* 0 for a non-empty write is no progress: stop */
			return done ? (ssize_t)done : -1;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static int stdfile_seek(void *cookie, off64_t *off, int whence)
{
	(void)cookie;
	(void)off;
	(void)whence;
	errno = ESPIPE; /* as lseek on a socket */
	return -1;
}

static int stdfile_close(void *cookie)
{
	return close(stdfile_fd(cookie));
}

static bool stdfile_is_ferry_socket(int fd)
{
	struct ffile *f = sock_peek(fd);
	bool yes = f && f->kind == FFILE_SOCK;
	if (f)
		ffile_put(&fdtab, f);
	return yes;
}

/* Set once a FILE of ours exists: exit flushes them before ferry ends its
 * streams. */
static bool stdfile_made;

static FILE *stdfile_open(int fd, const char *mode)
{
	cookie_io_functions_t io = {
		.read = stdfile_read, .write = stdfile_write, .seek = stdfile_seek, .close = stdfile_close};
	FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
	if (f) {
		f->_fileno = fd;
		__atomic_store_n(&stdfile_made, true, __ATOMIC_RELAXED);
	}
	return f;
}

FERRY_EXPORT FILE *fdopen(int fd, const char *mode)
{
	if (!stdfile_is_ferry_socket(fd))
		return sys()->fdopen(fd, mode);
	if (!mode || !strchr("rwa", mode[0])) {
		errno = EINVAL;
		return NULL;
	}
	if (strchr(mode, 'e') && fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
		return NULL;
	return stdfile_open(fd, mode);
}

/* The standard streams made here. */
static FILE *stdfile_std[3];

void stdfile_take_std(int fd)
{
	if (fd < 0 || fd > 2 || !stdfile_is_ferry_socket(fd))
		return;
	FILE **std = fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
	FILE *old = *std;
	if (!old || old == stdfile_std[fd] || old->_fileno != fd)
		return;
	/* Bytes glibc already holds for the old one belong where they were
	 * headed; such a stream is left as it is. */
	if (old->_IO_read_ptr != old->_IO_read_end || old->_IO_write_ptr != old->_IO_write_base)
		return;
	FILE *f = stdfile_open(fd, fd == 0 ? "r" : "w");
	if (!f)
		return;
	if (fd == 2)
		setvbuf(f, NULL, _IONBF, 0); /* stderr as glibc makes it */
	stdfile_std[fd] = f;
	*std = f;
}

void stdfile_flush(void)
{
	if (__atomic_load_n(&stdfile_made, __ATOMIC_RELAXED))
		fflush(NULL);
}
