/*
 * The one way down to libc: the real functions behind every name the
 * interposer (preload/) exports, resolved once. Every layer calls them
 * through sys(), never by name, because inside libferry.so a plain call to
 * close() or sendmmsg() binds at run time to preload's own wrapper and so
 * goes back up into the interposer. tests/test_layering.sh fails a build
 * where transport/, mgmt/ or compat/softib reference such a name directly.
 *
 * The table is the interposer's too (preload/ calls sys() as well), so
 * there is one table and one resolution: what a wrapper passes a call on
 * to is exactly what the transport calls.
 */
#ifndef FERRY_TRANSPORT_SYS_H
#define FERRY_TRANSPORT_SYS_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

/* Named as in libc, with libc's prototypes (sys.c's fallback table is
 * checked against them by the compiler). */
struct sys_fns {
	int (*socket)(int, int, int);
	int (*socketpair)(int, int, int, int[2]);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*shutdown)(int, int);
	int (*close)(int);
	int (*close_range)(unsigned, unsigned, int); /* NULL where libc lacks it */
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *); /* NULL where libc lacks it */
	int (*fcntl)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	pid_t (*fork)(void);
	int (*daemon)(int, int);
	int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			   const posix_spawnattr_t *, char *const[], char *const[]);
	int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			    const posix_spawnattr_t *, char *const[], char *const[]);
	int (*system)(const char *);
	int (*execve)(const char *, char *const[], char *const[]);
	int (*execvpe)(const char *, char *const[], char *const[]);
	FILE *(*popen)(const char *, const char *);
	FILE *(*fdopen)(int, const char *);
	int (*prctl)(int, ...);
	long (*syscall)(long, ...);
	int (*sigaction)(int, const struct sigaction *, struct sigaction *);
};

/* Written only by the resolution, and by a test that stands in for a libc
 * function after it (tests/test_nic_udp.c); everyone else reads sys(). */
extern struct sys_fns sys_table;
extern int sys_ready;

/* Resolves every pointer once: safe from any thread and from a constructor,
 * and a no-op when dlsym, running for it on this thread, calls back in. */
void sys_resolve(void);

/*
 * The real functions. Each is dlsym(RTLD_NEXT)'s answer: from libferry.so
 * that is libc's, never preload's wrapper; from a program that links the
 * transport itself (unit tests, ferry-doctor, ferry-bench) it is the first
 * definition after the program's own, libc's too. Where RTLD_NEXT finds
 * nothing (a static link) it is what the name binds to in this program.
 * Never NULL after the first call (but see close_range and epoll_pwait2),
 * except while dlsym itself calls back into the interposer during the
 * resolution: then only read, write, close and fcntl are set, to raw
 * system calls.
 */
static inline const struct sys_fns *sys(void)
{
	if (__builtin_expect(!__atomic_load_n(&sys_ready, __ATOMIC_ACQUIRE), 0))
		sys_resolve();
	return &sys_table;
}

/*
 * Where ferry keeps descriptors of its own that outlive a call: at or above
 * half the open-file limit (at most 65536), never at a number the
 * application would get next, as the kernel alone would give it. -1 when
 * the limit is too small to spare any (under 256).
 */
int sys_fd_floor(void);
/* The floor for an open-file limit of limit. */
int sys_fd_floor_of(int limit);
/* RLIMIT_NOFILE's soft limit (INT_MAX for more), or -1 when it cannot be
 * read or is too small to spare descriptors (under 256). */
int sys_fd_limit(void);
/* Moves fd up to the floor (close-on-exec) and returns the new number, or
 * fd itself when it cannot move. */
int sys_fd_hide(int fd);

#endif
