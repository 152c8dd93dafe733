/*
 * An eligible TCP socket as ferry sees it. The placeholder is the real
 * kernel TCP socket the application created: a listener keeps listening on
 * it (plain clients still connect), a connect that falls back uses it, and
 * options the kernel can answer (TCP_NODELAY, SO_REUSEADDR, buffer sizes,
 * timeouts) are set on it so getsockopt answers exactly as the kernel would.
 *
 * state, stream and lis are guarded by the endpoint lock (ferry_lock).
 */
#ifndef FERRY_PRELOAD_SOCK_H
#define FERRY_PRELOAD_SOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>

struct ffile;
struct stream;
struct listener;

enum fsock_state {
	FSOCK_NEW,        /* created or bound */
	FSOCK_CONNECTING, /* rendezvous under way (non-blocking connect) */
	FSOCK_STREAM,     /* has a stream (maybe still opening) */
	FSOCK_LISTEN,
	FSOCK_FAILED,     /* connect failed: so_error says why */
	FSOCK_REMOTE,     /* a fork child's copy of a stream its parent runs (handover.h) */
};

/* Options kept in the fsock (sockopt.c's table). */
#define SOCK_KEPT_OPTS 9

struct fsock {
	struct ffile *file;
	int domain;
	enum fsock_state state;
	struct stream *stream;
	struct listener *lis;
	int so_error;
	bool kernel_gone; /* handed to the kernel: callers look the fd up again */
	bool bound;       /* the application bound it (else connect binds it) */
	int rdv_fd;       /* UDP socket holding the rendezvous port of a bind to port 0, or -1 */
	bool linger0;     /* SO_LINGER on with a zero timeout: close resets */
	bool nb_connect;  /* EINPROGRESS was returned: the next connect says 0 once */
	/* The pooled kernel socket behind the numbers (see phpool.h): its
	 * hidden fd, or -1 when the placeholder is the application's own. */
	int ph_fd;
	bool ph_bound;  /* from the bound pool (behind a client stream) */
	bool cloexec;   /* FD_CLOEXEC of the one number, unless cloexec_unknown */
	bool cloexec_unknown;
	uint64_t rcvtimeo_ns, sndtimeo_ns; /* 0: none */
	/* TCP options set on a stream, kept here instead of on the
	 * placeholder (no system call per option): bit i of opt_set says
	 * opt_val[i] holds sock_opt_table[i]'s value. */
	uint16_t opt_set;
	int opt_val[SOCK_KEPT_OPTS];
	/* Held across one whole send, waits included, so two threads' sends
	 * never interleave inside a record (a small send is never torn). */
	pthread_mutex_t send_lock;
	struct sockaddr_storage dst;
	socklen_t dst_len;
	/* A non-blocking connect's local address, chosen before the rendezvous
	 * (sock_local) for the stream it opens once that is done. */
	struct sockaddr_storage src;
	socklen_t src_len;
	/* A listener's rendezvous socket as mgmt holds it (-1: none); in a
	 * fork child whose ferry has not taken the listener up yet
	 * (lis_inherited), a duplicate of the parent's, owned here. */
	int lis_rdv;
	int lis_backlog;
	bool lis_inherited; /* inherited through fork: no local listener yet */
	bool lis_shared;    /* another process may hold it (fork) */
	bool lis_dormant;   /* mgmt does not read its rendezvous socket */
	/* Made to listen here on a socket another process made (listen on
	 * a received one): its other holders answer on the same rendezvous
	 * port, so it is bound with SO_REUSEPORT. */
	bool lis_reuse;
	int lis_waiters;    /* atomic: threads blocked in accept on it */
	/* FSOCK_REMOTE: which process runs the stream, and the stream there. */
	pid_t remote_pid;
	uint32_t remote_sid, remote_peer_sid;
	uint64_t remote_token;
	/* Inherited through fork: where the stream's peer answers handshakes,
	 * as the parent knew it then (len 0: not known). */
	struct sockaddr_storage remote_mgmt;
	socklen_t remote_mgmt_len;
	/* Inherited through fork: the stream's addresses, so a child that only
	 * asks for them (CGI's REMOTE_ADDR, sshd's SSH_CONNECTION) does not
	 * take the connection from its parent (len 0: not known). */
	struct sockaddr_storage remote_peer, remote_local;
	socklen_t remote_peer_len, remote_local_len;
};

/* The ferry file behind fd if it is a socket (or a dead inherited one),
 * referenced; NULL otherwise. */
struct ffile *sock_get(int fd);
/* The ferry socket behind a socket call on fd, referenced, or NULL when
 * the kernel alone answers (not ferry's, ferry's own call, not a socket). A
 * stream another process runs is taken over first (handover.h). */
struct ffile *sock_file(int fd);
/* As sock_file, for a call that only reads or sets an option or an address:
 * a stream another process runs stays there (FSOCK_REMOTE). */
struct ffile *sock_peek(int fd);
/* Drops f and returns rc as the libc edge does (-1 with errno). */
int sock_done(struct ffile *f, int rc);

/*
 * Waits until f's mask meets want (or a hangup), the deadline passes
 * (-EAGAIN), or a signal (-EINTR). kfd >= 0 is a kernel fd to watch too
 * for kevents; returns 1 when it fired, 0 when f is ready. EPOLLERR counts
 * only if want has it: a stream's error comes with EPOLLIN and EPOLLOUT
 * anyway, and a notice on its error queue alone (MSG_ZEROCOPY) ends no
 * read or write, as in the kernel.
 */
int sock_wait(struct ffile *f, uint32_t want, uint64_t deadline, int kfd, short kevents);

/* f is about to be polled or added to an epoll set: a listener or stream
 * inherited from another process is taken up here first. No lock held. */
void sock_interest(struct ffile *f);

/* Deadline for a blocking call under SO_RCVTIMEO / SO_SNDTIMEO. */
uint64_t sock_deadline(uint64_t timeo_ns);

/* The fallback of a connect that could not use ferry, off any lock: a
 * real connect on the placeholder, and the fd becomes the kernel's. */
void sock_fallback_async(struct ffile *f);

/* The kernel is about to keep state of f's socket (an option, an address,
 * a connection, file flags): a pooled placeholder is the socket's own from
 * now on, with the file flags ferry kept brought in step. */
void sock_kernel_own(struct ffile *f, int fd);

/* Another process may hold the kernel sockets behind every live ferry
 * socket from now on (a child started by posix_spawn, system, popen): none
 * of them serves a later socket. */
void sock_share_all(void);
/* msg passes descriptors (SCM_RIGHTS): the ferry sockets among them are
 * another process's too from now on. */
void sock_passed(const struct msghdr *msg);

/* A ferry socket for fd, which came from another program (exec, socket
 * activation): its state is the caller's to set. NULL when it cannot be. */
struct fsock *sock_adopt_inherited(int fd, int domain, bool nonblock);

/* MGMT_LISTEN_* flags for a listening placeholder: the rendezvous socket
 * shares the port as the listener does. */
unsigned sock_listen_flags(int fd, int family);

/* Clients a shared listener's process sent elsewhere: a fresh rendezvous
 * each, then OPEN again (stream_take_redirect). No lock held. */
void sock_redirects_run(void);

/* What sk's options ask of its stream go to it (sockopt.c): keepalive, user
 * timeout, SO_RCVLOWAT, SO_OOBINLINE; under the endpoint lock. */
void sock_apply_opts(struct fsock *sk);
/* SO_ZEROCOPY: a send with MSG_ZEROCOPY is answered on the error queue. */
bool sock_zerocopy(const struct fsock *sk);

/* Raises SIGPIPE for an EPIPE, as the kernel does, unless suppressed. */
void sock_sigpipe(int flags);

#endif
