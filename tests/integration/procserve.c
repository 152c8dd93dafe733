/*
 * procserve MODE PORT [CMD...]: an echo server on 127.0.0.1:PORT in one of
 * the process models servers use, for tests/integration/process.sh.
 *   fork      accept, fork; the child echoes until EOF and exits, the parent
 *             closes its copy at once (postgres, sshd);
 *   dropuid   as fork, the child first becoming nobody (setgid and setuid
 *             65534), as a server that drops privileges per connection;
 *   sandbox   as fork, the child first confining itself with a seccomp
 *             filter that kills it at socket(), sendmsg, recvmsg, epoll or
 *             clone (sshd's pre-authentication child);
 *   sandboxsys as sandbox, the filter loaded with the seccomp(2) system
 *             call, as libseccomp loads it;
 *   sandboxself as fork, the child confining itself only after it echoed
 *             a first read (the connection its own by then);
 *   peek      accept, fork a child that reads the connection's addresses
 *             and sets an option on its copy, then exits; the parent checks
 *             the child saw the peer it sees, and echoes (a CGI's
 *             REMOTE_ADDR, sshd's SSH_CONNECTION);
 *   keep      accept, fork a child that closes its copy and exits, and echo
 *             in the parent (a parent that keeps a connection a child held);
 *   exec      accept, fork; the child makes the connection its stdin and
 *             stdout and execs CMD (inetd);
 *   spawn     accept, posix_spawn CMD with the connection as its stdin and
 *             stdout (file actions), and close it (Rust's Command, Python's
 *             subprocess where it spawns);
 *   prefork   listen, fork two workers that accept and echo, then exit the
 *             master: its workers serve on (a master that exits);
 *   activate  listen, make the listener fd 3 with LISTEN_FDS=1 and exec CMD
 *             in this process (systemd socket activation);
 *   serve3    accept on fd 3 and echo, one connection at a time (CMD above);
 *   passconn  fork a worker first, then listen and accept; each connection
 *             goes to the worker over a unix socket (SCM_RIGHTS) and the
 *             acceptor closes its copy; the worker echoes (with CMD, the
 *             worker execs CMD with the unix socket as fd 3 instead);
 *   passlisten fork a worker first, then listen and pass the listener to it
 *             (SCM_RIGHTS); the worker accepts and echoes, and the process
 *             that listened exits (haproxy's reload);
 *   recv3     take descriptors from the unix socket on fd 3 and echo each
 *             (passconn's CMD; PORT is not used);
 *   passbound fork two workers first, then bind (no listen) and pass the
 *             bound socket to each (SCM_RIGHTS); each listens on it,
 *             accepts and echoes (node's cluster without round robin);
 *   bindfork  bind, fork two workers that each listen on their copy,
 *             accept and echo; the parent closes its copy and waits.
 * Echoing stops at the peer's EOF; the server then closes. Runs until
 * killed. Writes "ready" to stdout once listening.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int bound_on(int port)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("procserve: bind");
		exit(1);
	}
	return l;
}

static int listen_on(int port)
{
	int l = bound_on(port);
	if (listen(l, 128) != 0) {
		perror("procserve: listen");
		exit(1);
	}
	return l;
}

/* Echoes until EOF; exit status 0 only if every byte went back. */
static int echo(int c)
{
	char buf[65536];
	ssize_t n;
	while ((n = read(c, buf, sizeof(buf))) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(c, buf + off, (size_t)(n - off));
			if (w <= 0) {
				perror("procserve: write");
				return 2;
			}
			off += w;
		}
	}
	if (n < 0) {
		perror("procserve: read");
		return 3;
	}
	return 0;
}

static int send_fd(int via, int fd)
{
	char byte = 'f';
	struct iovec v = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(via, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int via)
{
	char byte;
	struct iovec v = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	ssize_t n;
	while ((n = recvmsg(via, &m, 0)) < 0 && errno == EINTR)
		;
	struct cmsghdr *cm = n == 1 ? CMSG_FIRSTHDR(&m) : NULL;
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/* Echoes every connection that comes over via, then waits to be killed
 * like every other mode: exiting on its own when the sender goes (the test
 * stops both at once) raced the SIGTERM handler's exit, and the counters
 * were lost now and then. */
static void echo_received(int via)
{
	int c;
	while ((c = recv_fd(via)) >= 0) {
		echo(c);
		close(c);
	}
	for (;;)
		pause();
}

/* Killed by the test: exit normally, so ferry writes its counters. */
static void on_term(int sig)
{
	(void)sig;
	exit(0);
}

static void ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

static int accept_retry(int l)
{
	int c;
	while ((c = accept(l, NULL, NULL)) < 0)
		if (errno != EINTR && errno != ECONNABORTED)
			return -1;
	return c;
}

/* A worker's life: accepts on l and echoes each connection, until killed. */
static _Noreturn void accept_and_echo(int l)
{
	for (;;) {
		int c = accept_retry(l);
		if (c < 0)
			_exit(1);
		echo(c);
		close(c);
	}
}

/* A worker: listens on l, says so on via, then accepts and echoes. */
static void listen_and_echo(int l, int via)
{
	if (listen(l, 128) != 0 || write(via, "k", 1) != 1)
		_exit(1);
	accept_and_echo(l);
}

/* passbound and bindfork: two workers listen on a socket this process only
 * bound; ready once both listen. */
static int listen_in_workers(bool pass, int port)
{
	int pair[2][2];
	int l = pass ? -1 : bound_on(port);
	for (int i = 0; i < 2; i++) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair[i]) != 0)
			return 1;
		pid_t w = fork();
		if (w < 0)
			return 1;
		if (w == 0) {
			close(pair[i][0]);
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			listen_and_echo(pass ? recv_fd(pair[i][1]) : l, pair[i][1]);
		}
		close(pair[i][1]);
	}
	if (pass) {
		l = bound_on(port);
		for (int i = 0; i < 2; i++)
			if (send_fd(pair[i][0], l) != 0)
				return 1;
	}
	close(l);
	for (int i = 0; i < 2; i++) {
		char k;
		if (read(pair[i][0], &k, 1) != 1)
			return 1;
	}
	ready();
	for (;;)
		pause();
}

/* sandbox's filter: death at the calls a ferry datapath would need. */
static int confine(bool by_syscall)
{
	static const int banned[] = {SYS_socket,     SYS_socketpair, SYS_sendmsg,	  SYS_recvmsg,
				     SYS_sendmmsg,   SYS_recvmmsg,   SYS_epoll_wait, SYS_epoll_pwait,
				     SYS_epoll_ctl,  SYS_clone,	     SYS_clone3,	  SYS_connect};
	enum { N = sizeof(banned) / sizeof(banned[0]) };
	struct sock_filter f[2 + 2 * N + 1];
	unsigned k = 0;
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
	for (unsigned i = 0; i < N; i++) {
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)banned[i],
						      0, 1);
		f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	}
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = {.len = (unsigned short)k, .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	if (by_syscall)
		return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* peek's child: the connection's addresses as its parent sees them, and an
 * option set; exit status 0 when they agree. */
static int peek_child(int c, const struct sockaddr_storage *peer, socklen_t peer_len)
{
	struct sockaddr_storage a, l;
	socklen_t alen = sizeof(a), llen = sizeof(l);
	int one = 1, type = 0;
	socklen_t tl = sizeof(type);
	if (getpeername(c, (struct sockaddr *)&a, &alen) != 0 || alen != peer_len ||
	    memcmp(&a, peer, alen) != 0 || getsockname(c, (struct sockaddr *)&l, &llen) != 0 ||
	    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
	    getsockopt(c, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM)
		return 1;
	return 0;
}

/* posix_spawn's child: CMD with c as its stdin and stdout, put there by
 * the spawn's file actions (no fork, so no ferry code runs in between).
 * c is close-on-exec first, as Python's sockets are: only the dup2'd
 * numbers reach CMD. */
static int spawn_handler(int l, int c, char **cmd)
{
	if (fcntl(c, F_SETFD, FD_CLOEXEC) != 0)
		return -1;
	posix_spawn_file_actions_t fa;
	if (posix_spawn_file_actions_init(&fa) != 0)
		return -1;
	posix_spawn_file_actions_adddup2(&fa, c, 0);
	posix_spawn_file_actions_adddup2(&fa, c, 1);
	posix_spawn_file_actions_addclose(&fa, c);
	posix_spawn_file_actions_addclose(&fa, l);
	pid_t pid;
	int rc = posix_spawnp(&pid, cmd[0], &fa, NULL, cmd, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		fprintf(stderr, "procserve: posix_spawnp %s: %s\n", cmd[0], strerror(rc));
	return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: procserve MODE PORT [CMD...]\n");
		return 2;
	}
	const char *mode = argv[1];
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_term);
	if (!strcmp(mode, "serve3")) {
		/* An activated listener answers ferry's clients from its first
		 * accept (lshare.h): "ready" once one has looked, or a client
		 * the test starts at once would go through the kernel. */
		int fl = fcntl(3, F_GETFL);
		if (fl < 0 || fcntl(3, F_SETFL, fl | O_NONBLOCK) != 0)
			return 1;
		int early = accept(3, NULL, NULL);
		if (fcntl(3, F_SETFL, fl) != 0)
			return 1;
		ready();
		if (early >= 0) {
			echo(early);
			close(early);
		}
		for (;;) {
			int c = accept_retry(3);
			if (c < 0)
				return 1;
			echo(c);
			close(c);
		}
	}
	if (!strcmp(mode, "recv3")) {
		ready();
		echo_received(3);
	}
	if (strcmp(mode, "peek") != 0)
		signal(SIGCHLD, SIG_IGN); /* no zombies: children are not waited for */
	if (!strcmp(mode, "passbound") || !strcmp(mode, "bindfork"))
		return listen_in_workers(!strcmp(mode, "passbound"), atoi(argv[2]));
	if (!strcmp(mode, "passconn") || !strcmp(mode, "passlisten")) {
		/* The worker exists before any ferry socket: what it serves can
		 * only have come over the unix socket. */
		int pair[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
			return 1;
		pid_t worker = fork();
		if (worker < 0)
			return 1;
		if (worker == 0) {
			close(pair[0]);
			if (!strcmp(mode, "passlisten")) {
				int l = recv_fd(pair[1]);
				if (l < 0 || write(pair[1], "k", 1) != 1)
					_exit(1);
				accept_and_echo(l);
			}
			/* A passed connection's worker goes with the server the test
			 * kills, across its exec too, or it would outlive the test
			 * (a passed listener's outlives its passer on purpose). */
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			if (argc > 3) {
				if (dup2(pair[1], 3) != 3)
					_exit(126);
				execvp(argv[3], argv + 3);
				_exit(127);
			}
			echo_received(pair[1]);
		}
		close(pair[1]);
		int l = listen_on(atoi(argv[2]));
		if (!strcmp(mode, "passlisten")) {
			char k;
			if (send_fd(pair[0], l) != 0 || read(pair[0], &k, 1) != 1)
				return 1;
			close(l);
			ready();
			exit(0);
		}
		ready();
		for (;;) {
			int c = accept_retry(l);
			if (c < 0 || send_fd(pair[0], c) != 0)
				return 1;
			close(c);
		}
	}
	int l = listen_on(atoi(argv[2]));
	if (!strcmp(mode, "activate")) {
		if (argc < 4 || dup2(l, 3) != 3)
			return 2;
		if (l != 3)
			close(l);
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_PID", pid, 1);
		execvp(argv[3], argv + 3);
		perror("procserve: exec");
		return 127;
	}
	if (!strcmp(mode, "prefork")) {
		for (int i = 0; i < 2; i++) {
			if (fork() == 0)
				accept_and_echo(l);
		}
		ready();
		exit(0);
	}
	ready();
	for (;;) {
		int c = accept_retry(l);
		if (c < 0)
			return 1;
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof(peer);
		if (getpeername(c, (struct sockaddr *)&peer, &peer_len) != 0)
			return 1;
		if (!strcmp(mode, "spawn")) {
			if (spawn_handler(l, c, argv + 3) != 0)
				return 1;
			close(c);
			continue;
		}
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (!strcmp(mode, "keep")) {
			if (pid == 0) {
				close(c);
				close(l);
				exit(0);
			}
			echo(c);
			close(c);
			continue;
		}
		if (!strcmp(mode, "peek")) {
			if (pid == 0)
				exit(peek_child(c, &peer, peer_len));
			int st;
			if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				fprintf(stderr, "procserve: the child saw another peer, or failed\n");
				close(c);
				continue;
			}
			echo(c);
			close(c);
			continue;
		}
		if (pid == 0) {
			close(l);
			if (!strcmp(mode, "dropuid") && (setgid(65534) != 0 || setuid(65534) != 0))
				_exit(125);
			if (!strncmp(mode, "sandbox", 7) && strcmp(mode, "sandboxself") &&
			    confine(!strcmp(mode, "sandboxsys")) != 0)
				_exit(124);
			if (!strcmp(mode, "sandboxself")) {
				char buf[4096];
				ssize_t n = read(c, buf, sizeof(buf));
				if (n > 0 && write(c, buf, (size_t)n) != n)
					_exit(123);
				if (n <= 0 || confine(false) != 0)
					_exit(n == 0 ? 0 : 124);
			}
			if (!strcmp(mode, "exec")) {
				if (dup2(c, 0) != 0 || dup2(c, 1) != 1)
					_exit(126);
				close(c);
				execvp(argv[3], argv + 3);
				_exit(127);
			}
			int rc = echo(c);
			close(c);
			exit(rc); /* exit, not _exit: buffered bytes and the FIN go at exit */
		}
		close(c);
	}
}
