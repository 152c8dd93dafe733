/*
 * unshare and setns. A process that moves to other namespaces, or gives its
 * later children another pid namespace, forgets the namespace inodes it
 * read (procinfo.h): they name its host in its management identity and its
 * stats file, and each fork child would otherwise take its parent's.
 */
#include "autoconfig.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "preload/export.h"
#include "transport/procinfo.h"
#include "transport/sys.h"

FERRY_EXPORT int unshare(int flags)
{
	procinfo_unsharing(flags);
	return (int)sys()->syscall(SYS_unshare, flags);
}

FERRY_EXPORT int setns(int fd, int nstype)
{
	procinfo_ns_changed();
	return (int)sys()->syscall(SYS_setns, fd, nstype);
}
