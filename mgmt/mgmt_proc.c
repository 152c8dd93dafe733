/* Peer processes on this host: identity and pidfd (see mgmt_proc.h). */
#include "autoconfig.h"

#include "mgmt/mgmt_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transport/procinfo.h"
#include "transport/sys.h"

/* The whole of a small /proc file, NUL-terminated; length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = sys()->read(fd, buf, cap - 1);
	int err = errno;
	sys()->close(fd);
	if (n < 0)
		return -err;
	buf[n] = '\0';
	return n;
}

/* FNV-1a: a stable mix, not a secret (a peer may claim any key; it only
 * decides whether we try its pid, which we then check). */
static uint64_t mix(uint64_t h, const void *data, size_t len)
{
	const unsigned char *b = data;
	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* The boot's id, read once: the same for every process this one forks. */
static pthread_once_t mgmt_boot_once = PTHREAD_ONCE_INIT;
static char mgmt_boot[64];
static bool mgmt_boot_ok;

static void mgmt_boot_read(void)
{
	mgmt_boot_ok = read_small("/proc/sys/kernel/random/boot_id", mgmt_boot, sizeof(mgmt_boot)) > 0;
}

static bool mgmt_boot_id(char *out, size_t cap)
{
	pthread_once(&mgmt_boot_once, mgmt_boot_read);
	if (!mgmt_boot_ok)
		return false;
	snprintf(out, cap, "%s", mgmt_boot);
	return true;
}

void mgmt_proc_self(struct mgmt_proc *out)
{
	char boot[64];
	uint64_t pidns = procinfo_ns_inode("pid"), netns = procinfo_ns_inode("net");
	out->pid = (uint32_t)getpid();
	out->start = procinfo_start_time(0);
	out->host = 0;
	if (!mgmt_boot_id(boot, sizeof(boot)) || !pidns || !netns || !out->start)
		return;
	uint64_t h = mix(0xcbf29ce484222325ull, boot, strlen(boot));
	h = mix(h, &pidns, sizeof(pidns));
	h = mix(h, &netns, sizeof(netns));
	out->host = h ? h : 1;
}

int mgmt_proc_watch(const struct mgmt_proc *self, const struct mgmt_proc *peer)
{
	if (!self->host || peer->host != self->host || peer->pid == self->pid || !peer->pid)
		return -EREMOTE;
#ifdef SYS_pidfd_open
	int fd = (int)sys()->syscall(SYS_pidfd_open, (pid_t)peer->pid, 0);
	if (fd < 0)
		return -errno;
	/* Read after the pidfd is held: if the pid still names the process
	 * that spoke, the pidfd is of that process and not of a later one
	 * given the same number. */
	if (procinfo_start_time((pid_t)peer->pid) != peer->start) {
		sys()->close(fd);
		return -ESRCH;
	}
	/* Kept for the session's life: above the application's numbers (one
	 * made while it closed a range took a number it had just freed). */
	return sys_fd_hide(fd);
#else
	return -ENOSYS;
#endif
}
