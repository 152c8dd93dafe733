/* Descriptors over a unix socket: see scm.h. */
#include "autoconfig.h"

#include "preload/scm.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "transport/sys.h"

union scm_ctl {
	struct cmsghdr h;
	char buf[CMSG_SPACE(SCM_MAX_FDS * sizeof(int))];
};

ssize_t scm_send(int sock, const void *buf, size_t len, const int *fds, unsigned nfds)
{
	union scm_ctl ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec v = {(void *)buf, len};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
	if (nfds > SCM_MAX_FDS)
		nfds = SCM_MAX_FDS;
	if (nfds) {
		m.msg_control = ctl.buf;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	return sys()->sendmsg(sock, &m, MSG_NOSIGNAL);
}

ssize_t scm_recv(int sock, void *buf, size_t len, int *fds, unsigned max)
{
	union scm_ctl ctl;
	struct iovec v = {buf, len};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	for (unsigned i = 0; i < max; i++)
		fds[i] = -1;
	ssize_t n = sys()->recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		unsigned k = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			unsigned slot = 0;
			while (slot < max && fds[slot] >= 0)
				slot++;
			if (slot < max)
				fds[slot] = fd;
			else
				sys()->close(fd); /* more than asked for: not ours to keep */
		}
	}
	return n;
}
