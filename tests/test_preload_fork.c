/* A listener inherited through fork is served by whichever process
 * accepts on it (lshare.h); a holder that never accepts strands nothing. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/listener.h"
#include "preload_proc_util.h"
#include "transport/procinfo.h"
#include "transport/rpc.h"
#include "transport/stats.h"

/* One test at a time, as test_preload_start (LeakSanitizer and criterion's
 * parallel runner). */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

/* In a child: accepts one connection on lis (blocking, or through epoll),
 * answers "hi" with "ok", and exits 0 only if ferry carried it. */
static void child_serve(int lis, bool use_epoll)
{
	alarm(10); /* a hang fails the test instead of blocking it */
	if (use_epoll) {
		int ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLIN};
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lis, &ev) != 0 ||
		    epoll_wait(ep, &ev, 1, 10000) != 1)
			_exit(2);
	}
	int c = accept(lis, NULL, NULL);
	char b[2];
	if (c < 0 || read(c, b, 2) != 2 || memcmp(b, "hi", 2) != 0 || write(c, "ok", 2) != 2)
		_exit(3);
	struct ferry_stats *st = ferry_stats();
	bool carried = st && st->streams_accepted == 1 && st->kernel_accepts == 0;
	char e;
	if (read(c, &e, 1) != 0) /* the client's close */
		_exit(4);
	close(c);
	_exit(carried ? 0 : 5);
}

static void client_exchange(const struct sockaddr_in *a)
{
	int cli = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(cli, (const struct sockaddr *)a, sizeof(*a)), 0, "connect: %s",
		     strerror(errno));
	cr_assert_eq(write(cli, "hi", 2), 2);
	char b[2];
	cr_assert_eq(read(cli, b, 2), 2);
	cr_assert_eq(memcmp(b, "ok", 2), 0);
	close(cli);
}

static void inherited_listener_served_by_child(bool use_epoll)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	cr_assert_eq(ferry_state(), FERRY_ON);
	uint64_t accepted = ferry_stats()->streams_accepted;
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		child_serve(lis, use_epoll);
	/* The parent holds the listener and never accepts (nginx's master):
	 * the connection must reach the child, not wait in our queue. */
	client_exchange(&a);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	cr_assert_eq(ferry_stats()->streams_accepted, accepted, "nothing landed in the parent");
	cr_assert_eq(ferry_stats()->streams_connected, 1, "the client rode ferry");
	close(lis);
}

Test(fork, an_inherited_listener_is_served_by_the_child_that_accepts, .timeout = 30)
{
	inherited_listener_served_by_child(false);
}

Test(fork, an_inherited_listener_in_a_childs_epoll_set_is_served_there, .timeout = 30)
{
	inherited_listener_served_by_child(true);
}

Test(fork, a_parent_that_accepts_again_after_a_fork_is_served, .timeout = 30)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(0); /* a child that never uses the listener */
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	/* The parent went dormant at the fork; its accept wakes it. */
	int cli = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	cr_assert_geq(cli, 0);
	int rc = connect(cli, (struct sockaddr *)&a, sizeof(a));
	cr_assert(rc == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
	int srv = accept(lis, NULL, NULL);
	cr_assert_geq(srv, 0, "accept: %s", strerror(errno));
	cr_assert_eq(ferry_stats()->kernel_accepts, 0, "ferry carried it");
	close(srv);
	close(cli);
	close(lis);
}

/* The client of a_stream_accepted_then_forked_is_served_by_the_child, in a
 * process of its own: "early", then (once told) "later", then it expects
 * the echo and the server's FIN. */
static void echo_client(const struct sockaddr_in *a, int go, int lis)
{
	alarm(10);
	close(lis); /* the parent's: exit() below runs LeakSanitizer in its build */
	int cli = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cli, (const struct sockaddr *)a, sizeof(*a)) != 0 || write(cli, "early", 5) != 5)
		_exit(2);
	char c;
	if (read(go, &c, 1) != 1 || write(cli, "later", 5) != 5)
		_exit(3);
	char b[64];
	size_t got = 0;
	for (;;) {
		ssize_t n = read(cli, b + got, sizeof(b) - got);
		if (n < 0)
			_exit(4);
		if (n == 0)
			break;
		got += (size_t)n;
	}
	bool ok = got == 15 && memcmp(b, "echo:earlylater", 15) == 0;
	struct ferry_stats *st = ferry_stats();
	ok &= st && st->streams_connected == 1;
	exit(ok ? 0 : 5);
}

/* A loopback listener, a pipe that paces the client, and the client in a
 * process of its own: client(listener's address, the pipe's read end, lis). */
static int listener_with_client(int go[2], pid_t *client,
				void (*fn)(const struct sockaddr_in *a, int go, int lis))
{
	env_udp();
	signal(SIGPIPE, SIG_IGN);
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	cr_assert_eq(pipe(go), 0);
	*client = fork();
	cr_assert_geq(*client, 0);
	if (*client == 0)
		fn(&a, go[0], lis);
	return lis;
}

/* Says "hi", expects "ok". */
static void hi_ok_client(const struct sockaddr_in *a, int go, int lis)
{
	(void)go;
	alarm(10);
	close(lis);
	int cli = socket(AF_INET, SOCK_STREAM, 0);
	char b[2];
	if (connect(cli, (const struct sockaddr *)a, sizeof(*a)) != 0 || write(cli, "hi", 2) != 2 ||
	    read(cli, b, 2) != 2 || memcmp(b, "ok", 2) != 0)
		_exit(3);
	exit(0);
}

/* postgres's shape: accept, fork, the child serves, the parent closes its
 * copy at once; bytes that came before the fork wait unread in the parent
 * and must reach the child. */
Test(fork, a_stream_accepted_then_forked_is_served_by_the_child, .timeout = 30)
{
	int go[2];
	pid_t client;
	int lis = listener_with_client(go, &client, echo_client);
	int srv = accept(lis, NULL, NULL);
	cr_assert_geq(srv, 0);
	usleep(20000); /* "early" arrives here, before the fork */
	pid_t server = fork();
	cr_assert_geq(server, 0);
	if (server == 0) {
		alarm(10);
		close(lis);
		char b[64];
		size_t got = 0;
		while (got < 10) {
			ssize_t n = read(srv, b + got, sizeof(b) - got);
			if (n <= 0)
				_exit(2);
			got += (size_t)n;
		}
		if (memcmp(b, "earlylater", 10) != 0 || write(srv, "echo:", 5) != 5 ||
		    write(srv, b, got) != (ssize_t)got)
			_exit(3);
		struct ferry_stats *st = ferry_stats();
		bool carried = st && st->bytes_tx >= 15 && st->kernel_accepts == 0;
		close(srv);
		exit(carried ? 0 : 4); /* exit, not _exit: the FIN goes at exit */
	}
	close(srv); /* at once: no FIN while the child holds it */
	cr_assert_eq(write(go[1], "g", 1), 1);
	int status;
	cr_assert_eq(waitpid(server, &status, 0), server);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server status %d", status);
	cr_assert_eq(waitpid(client, &status, 0), client);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client status %d", status);
	close(lis);
}

/* A fork child lets go of its copies of the parent's datapath and control
 * sockets: one kept would hold the loopback port the parent gives up when
 * it widens (udp_bind.h), and take the datagrams meant for the parent. */
Test(fork, a_child_holds_no_copy_of_the_parents_ferry_sockets, .timeout = 30)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	cr_assert(ferry_up());
	int nic_fd = rpc_notify_fd(ferry.rpc);
	cr_assert_geq(nic_fd, 0);
	cr_assert_neq(fcntl(nic_fd, F_GETFD), -1);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0)
		_exit(fcntl(nic_fd, F_GETFD) == -1 && errno == EBADF ? 0 : 2);
	int status;
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	cr_assert_neq(fcntl(nic_fd, F_GETFD), -1, "the parent's stays");
	close(lis);
}

/* A fork child is in its parent's namespaces: the inodes the parent read
 * from /proc/self/ns are the child's, read again only once it unshares,
 * and then the new ones. Exit codes say which step failed. */
Test(fork, a_child_reads_no_namespace_until_it_unshares, .timeout = 30)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	cr_assert(ferry_up());
	uint64_t net = procinfo_ns_inode("net"), pidns = procinfo_ns_inode("pid");
	cr_assert(net != 0 && pidns != 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		uint64_t reads = procinfo_ns_reads();
		if (procinfo_ns_inode("net") != net || procinfo_ns_inode("pid") != pidns)
			_exit(2);
		if (procinfo_ns_reads() != reads)
			_exit(3);
		if (unshare(CLONE_NEWNET) != 0)
			_exit(errno == EPERM ? 10 : 4);
		struct stat st;
		if (stat("/proc/self/ns/net", &st) != 0 || (uint64_t)st.st_ino == net)
			_exit(5);
		_exit(procinfo_ns_inode("net") == (uint64_t)st.st_ino ? 0 : 6);
	}
	int status;
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert(WIFEXITED(status), "child status %d", status);
	close(lis);
	if (WEXITSTATUS(status) == 10)
		cr_skip_test("unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN; the inherited part passed");
	cr_assert_eq(WEXITSTATUS(status), 0, "the child failed at step %d", WEXITSTATUS(status));
}

/* The child asks for the stream while the parent's close of its copy is
 * under way: the file's last reference is gone, its release (which keeps
 * the stream for the child) not yet run. Held here for 200 ms, as a
 * preempted postmaster under load held it: the child must still be handed
 * the stream, not told it is reset. */
Test(fork, a_stream_asked_for_while_the_parent_closes_its_copy_is_handed_over, .timeout = 30)
{
	int go[2];
	pid_t client;
	int lis = listener_with_client(go, &client, hi_ok_client);
	int srv = accept(lis, NULL, NULL);
	cr_assert_geq(srv, 0);
	pid_t server = fork();
	cr_assert_geq(server, 0);
	if (server == 0) {
		alarm(10);
		close(lis);
		char c, b[2];
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		ssize_t n = read(srv, b, 2);
		if (n != 2 || memcmp(b, "hi", 2) != 0)
			_exit(n < 0 && errno == ECONNRESET ? 3 : 4);
		exit(write(srv, "ok", 2) == 2 ? 0 : 5); /* exit: "ok" goes at exit */
	}
	struct ffile *f = fdtable_get(&fdtab, srv);
	cr_assert_not_null(f);
	int refs = __atomic_exchange_n(&f->refs, 0, __ATOMIC_ACQ_REL);
	cr_assert_eq(write(go[1], "g", 1), 1);
	usleep(200000);
	__atomic_store_n(&f->refs, refs - 1, __ATOMIC_RELEASE);
	close(srv);
	int status;
	cr_assert_eq(waitpid(server, &status, 0), server);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "server status %d (3: the stream read as reset)", status);
	cr_assert_eq(waitpid(client, &status, 0), client);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client status %d", status);
	close(lis);
}

/* Context switches so far of this process's thread named name, or -1. */
static long thread_switches(const char *name)
{
	int tid = thread_tid_named(name);
	if (tid < 0)
		return -1;
	char path[64], line[128];
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	FILE *f = fopen(path, "r");
	long total = -1, v;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
		    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
			total = (total < 0 ? 0 : total) + v;
	if (f)
		fclose(f);
	return total;
}

/* While the peer has yet to answer MOVE (stopped here for 200 ms), the
 * owner's handover thread sleeps until a packet or the answer comes; it
 * looked every 20 us before, about 10,000 times in such a wait, where a
 * sleeper wakes once a millisecond at most (for the peer's last bytes,
 * which no answer marks). The stream then moves as usual. */
Test(fork, the_owner_waits_for_the_peers_answer_to_move_asleep, .timeout = 30)
{
	int go[2];
	pid_t client;
	int lis = listener_with_client(go, &client, hi_ok_client);
	int srv = accept(lis, NULL, NULL);
	cr_assert_geq(srv, 0);
	usleep(20000); /* "hi" arrives before the stop */
	cr_assert_eq(kill(client, SIGSTOP), 0);
	pid_t server = fork();
	cr_assert_geq(server, 0);
	if (server == 0) {
		alarm(10);
		close(lis);
		char b[2];
		ssize_t n = read(srv, b, 2);
		if (n != 2 || memcmp(b, "hi", 2) != 0)
			_exit(3);
		exit(write(srv, "ok", 2) == 2 ? 0 : 4);
	}
	close(srv);
	usleep(20000); /* the child asked: the owner's MOVE waits for the peer */
	long before = thread_switches("ferry-handover");
	cr_assert_geq(before, 0, "no handover thread");
	usleep(200000);
	long during = thread_switches("ferry-handover") - before;
	cr_assert_eq(kill(client, SIGCONT), 0);
	int status;
	cr_assert_eq(waitpid(server, &status, 0), server);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server status %d", status);
	cr_assert_eq(waitpid(client, &status, 0), client);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client status %d", status);
	cr_assert_lt(during, 1000, "the handover thread woke %ld times in 200 ms", during);
	close(lis);
}

/* The owner is gone (SIGKILL) before the child used its copy: the child
 * reads a reset, never hangs. */
Test(fork, a_stream_whose_owner_died_reads_as_reset_in_the_child, .timeout = 30)
{
	env_udp();
	signal(SIGPIPE, SIG_IGN);
	/* The holder is the owner's child: reparented here once the owner dies. */
	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	int port[2], go[2];
	cr_assert_eq(pipe(port), 0);
	cr_assert_eq(pipe(go), 0);
	pid_t owner = fork();
	cr_assert_geq(owner, 0);
	if (owner == 0) {
		alarm(10);
		struct sockaddr_in a;
		int lis = loopback_listener(&a);
		if (write(port[1], &a, sizeof(a)) != sizeof(a))
			_exit(2);
		int srv = accept(lis, NULL, NULL);
		if (srv < 0)
			_exit(3);
		pid_t holder = fork();
		if (holder == 0) {
			char c;
			if (read(go[0], &c, 1) != 1)
				_exit(2);
			char b[4];
			ssize_t n = read(srv, b, sizeof(b));
			_exit(n == -1 && errno == ECONNRESET ? 0 : 3);
		}
		raise(SIGKILL);
	}
	struct sockaddr_in a;
	cr_assert_eq(read(port[0], &a, sizeof(a)), sizeof(a));
	int cli = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(cli, (struct sockaddr *)&a, sizeof(a)), 0);
	int status;
	cr_assert_eq(waitpid(owner, &status, 0), owner);
	cr_assert(WIFSIGNALED(status));
	cr_assert_eq(write(go[1], "g", 1), 1);
	pid_t holder = waitpid(-1, &status, 0);
	cr_assert_gt(holder, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder status %d", status);
	close(cli);
	prctl(PR_SET_CHILD_SUBREAPER, 0);
}

/* nginx's reload: the process a client's cached session leads to has let
 * go of the shared listener; the client is sent back to the rendezvous and
 * reaches the process that still accepts, instead of being refused. */
Test(fork, a_client_of_a_process_that_let_go_of_a_shared_listener_goes_elsewhere, .timeout = 30)
{
	env_udp();
	signal(SIGPIPE, SIG_IGN);
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	/* A first connection leaves a session from us to our own endpoint. */
	int first = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(first, (struct sockaddr *)&a, sizeof(a)), 0);
	int acc = accept(lis, NULL, NULL);
	cr_assert_geq(acc, 0);
	close(acc);
	close(first);
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(10);
		int ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLIN};
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lis, &ev) != 0 || write(ready[1], "r", 1) != 1)
			_exit(2);
		child_serve(lis, true);
	}
	char r;
	cr_assert_eq(read(ready[0], &r, 1), 1);
	close(lis); /* we let go; the child holds it and accepts */
	uint64_t refused = ferry_stats()->fallbacks;
	client_exchange(&a);
	cr_assert_eq(ferry_stats()->fallbacks, refused, "the connection rode ferry");
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}
