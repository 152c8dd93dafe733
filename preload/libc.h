/*
 * The real libc functions behind every interposed name, resolved once with
 * dlsym(RTLD_NEXT), and the per-thread flag that sends ferry's own calls
 * straight to them.
 */
#ifndef FERRY_PRELOAD_LIBC_H
#define FERRY_PRELOAD_LIBC_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

struct libc_fns {
	int (*socket)(int, int, int);
	int (*socketpair)(int, int, int, int[2]);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*shutdown)(int, int);
	int (*close)(int);
	int (*close_range)(unsigned, unsigned, int);
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
			    const sigset_t *);
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
};

extern struct libc_fns libc_real;
extern int libc_ready;

/* Resolves every pointer once; safe from any thread and from a constructor. */
void libc_resolve(void);

/* The real functions. Never NULL after the first call, except while dlsym
 * itself calls back into us: then the missing ones are NULL and callers use
 * the raw system call (see libc.c). */
static inline const struct libc_fns *libc(void)
{
	if (__builtin_expect(!__atomic_load_n(&libc_ready, __ATOMIC_ACQUIRE), 0))
		libc_resolve();
	return &libc_real;
}

/*
 * Depth of ferry-internal code on this thread: while it is non-zero every
 * interposed call goes straight to libc, so the transport's own sockets,
 * eventfds and polls never loop back into the interposer.
 */
extern __thread int ferry_internal_depth __attribute__((tls_model("initial-exec")));

static inline bool ferry_internal(void)
{
	return ferry_internal_depth != 0;
}
static inline void ferry_internal_enter(void)
{
	ferry_internal_depth++;
}
static inline void ferry_internal_leave(void)
{
	ferry_internal_depth--;
}

#endif
