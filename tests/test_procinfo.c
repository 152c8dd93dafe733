/* A process's own identity is read once, and a fork child's is its own:
 * its start time and pid, not the cached ones of the parent it forked
 * from; the host key (boot id, namespaces) is the parent's. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mgmt/mgmt_proc.h"
#include "transport/procinfo.h"

Test(procinfo, own_start_time_is_the_one_proc_gives)
{
	uint64_t first = procinfo_start_time(0);
	cr_assert_neq(first, 0);
	cr_assert_eq(procinfo_start_time(0), first);
	cr_assert_eq(procinfo_start_time(getpid()), first);
}

Test(procinfo, a_fork_child_reads_its_own_identity)
{
	struct mgmt_proc parent;
	mgmt_proc_self(&parent); /* fills the caches before the fork */
	cr_assert_neq(parent.host, 0);
	int p[2];
	cr_assert(pipe(p) == 0);
	/* The child must start in a later clock tick than the parent for the
	 * start times to differ: wait a tick (USER_HZ is 100). */
	usleep(30000);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct mgmt_proc child;
		mgmt_proc_self(&child);
		struct mgmt_proc out[2];
		memset(out, 0, sizeof(out)); /* padding too: it goes through a pipe */
		out[0].host = child.host;
		out[0].pid = child.pid;
		out[0].start = child.start;
		out[1].start = procinfo_start_time(getpid());
		ssize_t w = write(p[1], out, sizeof(out));
		(void)w;
		raise(SIGKILL); /* not exit: see test_txdefer's fork case */
	}
	struct mgmt_proc got[2];
	cr_assert(read(p[0], got, sizeof(got)) == (ssize_t)sizeof(got));
	int st;
	cr_assert(waitpid(pid, &st, 0) == pid);
	cr_assert_eq(got[0].pid, (uint32_t)pid);
	cr_assert_eq(got[0].start, got[1].start, "the child kept a start time that is not its own");
	cr_assert_neq(got[0].start, parent.start, "the child reported its parent's start time");
	cr_assert_eq(got[0].host, parent.host, "one host, one key");
	close(p[0]);
	close(p[1]);
}

/* Each namespace is read from /proc once per process; a child the parent's
 * answers were handed to (procinfo_forked) reads none, one whose process
 * changed namespaces before the fork reads again. */
Test(procinfo, namespaces_are_read_once_and_handed_to_a_fork_child)
{
	uint64_t net = procinfo_ns_inode("net");
	cr_assert_neq(net, 0);
	uint64_t reads = procinfo_ns_reads();
	cr_assert_eq(procinfo_ns_inode("net"), net);
	cr_assert_eq(procinfo_ns_reads(), reads, "read again");
	for (int changed = 0; changed < 2; changed++) {
		if (changed)
			procinfo_ns_changed(); /* as unshare would before moving */
		pid_t parent = getpid();
		pid_t pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0) {
			procinfo_forked(parent);
			uint64_t before = procinfo_ns_reads();
			uint64_t got = procinfo_ns_inode("net");
			uint64_t made = procinfo_ns_reads() - before;
			_exit(got != net ? 9 : (int)made);
		}
		int st;
		cr_assert(waitpid(pid, &st, 0) == pid);
		cr_assert(WIFEXITED(st));
		cr_assert_eq(WEXITSTATUS(st), changed ? 1 : 0,
			     "child read %d time(s) (the process %s namespaces)", WEXITSTATUS(st),
			     changed ? "changed" : "kept its");
	}
}
