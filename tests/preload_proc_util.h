/* Helpers for tests that run the interposer in their own process (their
 * socket calls are ferry's): the udp datapath, a loopback listener, counts
 * of descriptors and threads, a thread by name, a socket's kernel identity, and descriptors
 * passed over a unix socket. */
#ifndef FERRY_TEST_PRELOAD_PROC_UTIL_H
#define FERRY_TEST_PRELOAD_PROC_UTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

static inline void env_udp(void)
{
	setenv("FERRY_TRANSPORT", "udp", 1);
	setenv("FERRY_LOG", "error", 1);
}

/* A listener on 127.0.0.1 and a port of the kernel's choice, in *a. */
static inline int loopback_listener(struct sockaddr_in *a)
{
	int lis = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(lis, 0);
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(bind(lis, (struct sockaddr *)a, sizeof(*a)), 0, "bind: %s", strerror(errno));
	cr_assert_eq(listen(lis, 8), 0);
	socklen_t al = sizeof(*a);
	cr_assert_eq(getsockname(lis, (struct sockaddr *)a, &al), 0);
	return lis;
}

/* A connection to lis (listening at *a): the connecting end in *c, the
 * accepted one in *srv. */
static inline void loopback_connection(int lis, const struct sockaddr_in *a, int *c, int *srv)
{
	*c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(*c, 0);
	cr_assert_eq(connect(*c, (const struct sockaddr *)a, sizeof(*a)), 0, "connect: %s",
		     strerror(errno));
	*srv = accept(lis, NULL, NULL);
	cr_assert_geq(*srv, 0, "accept: %s", strerror(errno));
}

/* Entries of a /proc directory (descriptors, threads), its own fd not
 * counted. */
static inline int proc_entries(const char *dir)
{
	DIR *d = opendir(dir);
	cr_assert_not_null(d, "%s", dir);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The thread of this process called name (top -H, ps -L), or -1. */
static inline int thread_tid_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	cr_assert_not_null(d);
	int tid = -1;
	for (struct dirent *e; tid < 0 && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		if (strcmp(comm, name) == 0)
			tid = atoi(e->d_name);
	}
	closedir(d);
	return tid;
}

/* Open descriptors, the one counting them not counted. */
static inline int count_fds(void)
{
	return proc_entries("/proc/self/fd") - 1;
}

/* Which kernel socket fd is (the same for every number of one socket). */
static inline ino_t sock_ino(int fd)
{
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	return st.st_ino;
}

/* Sends fd over the unix socket via with one byte (SCM_RIGHTS). */
static inline void pass_fd(int via, int fd)
{
	char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
	memset(ctl, 0, sizeof(ctl));
	struct iovec io = {.iov_base = &byte, .iov_len = 1};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl,
			   .msg_controllen = sizeof(ctl)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(fd));
	cr_assert_eq(sendmsg(via, &m, 0), 1, "sendmsg: %s", strerror(errno));
}

/* The descriptor one such message brought. */
static inline int recv_fd(int via)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec io = {.iov_base = &byte, .iov_len = 1};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl,
			   .msg_controllen = sizeof(ctl)};
	cr_assert_eq(recvmsg(via, &m, 0), 1, "recvmsg: %s", strerror(errno));
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	cr_assert(h && h->cmsg_type == SCM_RIGHTS);
	int fd;
	memcpy(&fd, CMSG_DATA(h), sizeof(fd));
	return fd;
}

#endif
