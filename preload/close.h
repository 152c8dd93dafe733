/*
 * Closing descriptors, by whichever entry the application takes: libc's
 * close and close_range, or syscall(3) with SYS_close or SYS_close_range
 * (libuv, and so node, closes every descriptor that way). A number leaves
 * ferry's table before the kernel frees it, and its file is let go after.
 */
#ifndef FERRY_PRELOAD_CLOSE_H
#define FERRY_PRELOAD_CLOSE_H

/* close(2) with the kernel's close made by kernel_close. */
int fd_close(int fd, int (*kernel_close)(int fd));

/* close_range(2) with the kernel's made by kernel_close_range. */
int fd_close_range(unsigned first, unsigned last, int flags,
		   int (*kernel_close_range)(unsigned first, unsigned last, int flags));

#endif
