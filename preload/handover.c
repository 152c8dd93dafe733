/* Streams that follow their descriptor into a fork child: see handover.h. */
#include "autoconfig.h"

#include "preload/handover.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "mgmt/mgmt_net.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/passfd.h"
#include "preload/reentry.h"
#include "preload/relay.h"
#include "preload/scm.h"
#include "preload/sock.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/rpc.h"
#include "transport/stats.h"
#include "transport/sys.h"
#include "transport/thread_pause.h"

/* How long the owner waits for the peer to stop and the bytes to settle,
 * and the new owner for the whole exchange. */
#define HO_MOVE_NS (3000ull * 1000000ull)
#define HO_FETCH_MS 5000
/* How long the new owner may take to reach the peer: a known ferry peer,
 * so no fallback to decide quickly (FERRY_CONNECT_TIMEOUT_MS is for that),
 * only a stream lost if it gives up; well inside the peer's wait for it
 * (STREAM_MOVE_TIMEOUT_NS, 5 s). */
#define HO_ATTACH_CONNECT_MS 3000u

struct ho_req {
	uint32_t magic;
	uint32_t sid, peer_sid;
	uint32_t kind; /* HO_TAKE or HO_RELAY */
	uint64_t token;
};

enum {
	HO_TAKE = 0,  /* hand the stream over */
	HO_RELAY = 1, /* keep it, and relay it through the socket passed along (relay.h) */
};

struct ho_resp {
	int32_t status;
	uint32_t len; /* unread bytes after this */
	struct stream_snap snap;
};

/* A child forked while streams lived; it holds copies until it exits. */
struct ho_child {
	struct ho_child *next;
	int pidfd;
	uint32_t fork_no; /* stream_forks before its fork */
};

struct ho_orphan {
	struct ho_orphan *next;
	struct stream *s;   /* holds the reference the closed file had */
	uint64_t until_ns;  /* kept until then in any case (an offered one) */
};

/* Guards the lists; the thread and the fork path. Never held across a
 * call that takes the endpoint lock, or the other way round except in
 * handover_keep (endpoint lock, then this). */
static pthread_mutex_t ho_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ho_child *ho_children;
static struct ho_orphan *ho_orphans;
static int ho_lfd = -1;   /* the unix socket children ask on */
static int ho_wake = -1;  /* eventfd: the lists changed */
static bool ho_started;
static struct thread_pause ho_pause;
static pthread_mutex_t ho_adopt_lock = PTHREAD_MUTEX_INITIALIZER;

static socklen_t ho_addr(pid_t pid, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	/* Abstract: gone with the process, nothing to clean up. The pid alone
	 * names it: a child that dropped privileges (sshd's, inetd's services)
	 * must find its parent's, and the stream's token, not the name, is what
	 * only a holder knows. */
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ferry-handover.%d", (int)pid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static bool ho_child_alive(const struct ho_child *c)
{
	struct pollfd p = {.fd = c->pidfd, .events = POLLIN};
	return sys()->poll(&p, 1, 0) == 0;
}

/* Whether a child forked since fork_no may still hold a copy (ho_lock). */
static bool ho_held_since(uint32_t fork_no)
{
	for (struct ho_child *c = ho_children; c; c = c->next)
		if (c->fork_no >= fork_no && ho_child_alive(c))
			return true;
	return false;
}

/* Whether another process may still take s over (ho_lock held). */
static bool ho_wanted(const struct stream *s)
{
	return ho_held_since(s->born_fork) || passfd_keeps(s->sid, s->token) || relay_holds(s);
}

void handover_poke(void)
{
	if (!ho_started)
		return;
	uint64_t one = 1;
	ssize_t r = sys()->write(ho_wake, &one, sizeof(one));
	(void)r;
}

/* --- the owner --- */

static int ho_send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = sys()->send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int ho_recv_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = sys()->recv(fd, p, len, 0);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Until a packet comes, the peer's answer to MOVE is in (another thread's
 * pass may have taken it: stream_set_move_heard pokes ho_wake), or a
 * millisecond passes, for what no answer marks (the peer's last bytes).
 * Looking every 20 us instead cost the owner five passes and as many
 * context switches per handover. */
static void ho_move_sleep(void)
{
	ferry_lock();
	int armed = rpc_arm_notify(ferry.rpc);
	int nic_fd = rpc_notify_fd(ferry.rpc);
	ferry_unlock();
	if (armed == 1)
		return; /* packets are waiting: the caller's pass takes them */
	struct pollfd p[2] = {{.fd = ho_wake, .events = POLLIN},
			      {.fd = nic_fd, .events = POLLIN}};
	sys()->poll(p, armed == 0 && nic_fd >= 0 ? 2 : 1, 1);
	if (p[0].revents) {
		uint64_t v;
		ssize_t r = sys()->read(ho_wake, &v, sizeof(v));
		(void)r;
	}
}

/* Stops s at the peer and waits until every byte either way is in; then
 * fills the answer. The endpoint lock is taken in turns, so the process
 * goes on meanwhile. */
static int ho_move(struct stream *s, struct ho_resp *resp, uint8_t *bytes)
{
	uint64_t cookie;
	do
		cookie = mgmt_net_random64();
	while (cookie == 0);
	ferry_lock();
	int rc = stream_move_out(ferry.rpc, s, cookie);
	ferry_unlock();
	if (rc)
		return rc;
	uint64_t deadline = clock_now_ns() + HO_MOVE_NS;
	for (;;) {
		ferry_lock();
		stream_run_once(ferry.rpc);
		if (s->move_retry) {
			s->move_retry = false;
			rc = stream_move_out(ferry.rpc, s, cookie);
		} else if (s->move_refused || s->reset) {
			rc = -ECONNRESET;
		} else if (stream_move_ready(s)) {
			rc = 1;
		}
		if (rc == 1) {
			resp->len = (uint32_t)stream_snapshot(s, &resp->snap, bytes, STREAM_WINDOW_MAX);
			resp->snap.cookie = cookie;
		}
		ferry_unlock();
		if (rc)
			return rc < 0 ? rc : 0;
		if (clock_now_ns() > deadline)
			return -ETIMEDOUT;
		ho_move_sleep();
	}
}

/* The request, and the descriptors a relay's comes with (else -1): the
 * end to pump, and a duplicate of the asker's end. */
static int ho_recv_req(int fd, struct ho_req *req, int passed[2])
{
	ssize_t n = scm_recv(fd, req, sizeof(*req), passed, 2);
	if (n <= 0)
		return -1;
	if ((size_t)n < sizeof(*req) &&
	    ho_recv_all(fd, (uint8_t *)req + n, sizeof(*req) - (size_t)n) != 0)
		return -1;
	return req->magic == STREAM_SNAP_MAGIC &&
			       (req->kind == HO_TAKE || (req->kind == HO_RELAY && passed[0] >= 0))
		       ? 0
		       : -1;
}

/* A relay for the asker on cfd: its pidfd, when it passed its own end
 * too (another process), else -1. */
static int ho_asker_pidfd(int cfd, int their_end)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	if (their_end < 0 || sys()->getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
		return -1;
	return (int)syscall(SYS_pidfd_open, cr.pid, 0);
}

static void ho_serve(int cfd)
{
	struct ho_req req;
	struct ho_resp resp = {.status = -ECONNRESET};
	int passed[2] = {-1, -1};
	uint8_t *bytes = malloc(STREAM_WINDOW_MAX);
	if (!bytes || ho_recv_req(cfd, &req, passed) != 0) {
		for (int i = 0; i < 2; i++)
			if (passed[i] >= 0)
				sys()->close(passed[i]);
		free(bytes);
		return;
	}
	/* The stream stays alive meanwhile: its file is pinned here, or it is
	 * an orphan, which only this thread closes. A file whose last number
	 * was just closed cannot be pinned: its release (which makes the
	 * stream an orphan) is under way and needs the endpoint lock, so look
	 * again after a pause that lets it run. No count of tries bounds that
	 * wait: a preempted releaser took more than 1,000 yields (postgres
	 * under load), and the child's connection read as reset. */
	struct stream *s;
	struct ffile *f;
	int session;
	uint64_t deadline = clock_now_ns() + HO_MOVE_NS;
	for (;;) {
		ferry_lock();
		s = stream_find(req.sid, req.peer_sid, req.token);
		if (s && !stream_can_follow(s))
			s = NULL;
		f = s ? s->file : NULL;
		bool pinned = !f || ffile_tryget(f);
		session = s ? s->session : -1;
		ferry_unlock();
		if (pinned)
			break;
		if (clock_now_ns() > deadline) {
			s = NULL;
			f = NULL;
			break;
		}
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
	if (req.kind == HO_RELAY) {
		int pidfd = ho_asker_pidfd(cfd, passed[1]);
		int32_t status = !s			      ? -ECONNRESET
				 : passed[1] >= 0 && pidfd < 0 ? -ESRCH
							       : relay_add(s, f, passed[0], passed[1], pidfd);
		if (status != 0) {
			for (int i = 0; i < 2; i++)
				if (passed[i] >= 0)
					sys()->close(passed[i]);
			if (pidfd >= 0)
				sys()->close(pidfd);
			if (f)
				ffile_put(&fdtab, f);
		}
		ho_send_all(cfd, &status, sizeof(status));
		log_debug("handover: stream %u %s", req.sid, status == 0 ? "relayed" : "not relayed");
		free(bytes);
		return;
	}
	int rc = s ? 0 : -ECONNRESET;
	bool done = false; /* handed over read only: the peer is done with it */
	if (s) {
		struct sockaddr_storage peer_mgmt = {0};
		socklen_t peer_mgmt_len = 0;
		ferry_lock();
		done = stream_peer_done(s);
		ferry_unlock();
		if (!done) {
			ferry_internal_enter();
			rc = mgmt_peer_addr(ferry.mgmt, ferry.rpc, session, &peer_mgmt,
					    &peer_mgmt_len);
			ferry_internal_leave();
			if (rc == 0) {
				relay_drop(s);
				rc = ho_move(s, &resp, bytes);
			}
			if (rc != 0) {
				ferry_lock();
				done = stream_peer_done(s);
				ferry_unlock();
			}
		}
		if (done) {
			ferry_lock();
			resp.len = (uint32_t)stream_snapshot_done(s, &resp.snap, bytes,
								  STREAM_WINDOW_MAX);
			ferry_unlock();
			peer_mgmt_len = 0;
			rc = 0;
		}
		resp.snap.peer_mgmt = peer_mgmt;
		resp.snap.peer_mgmt_len = peer_mgmt_len;
	}
	resp.status = rc;
	if (rc != 0) {
		resp.len = 0;
		/* The new owner only learns that it failed; why is said here. */
		log_info("handover: stream %u not handed over: %s", req.sid,
			 !s ? "no such open stream here" : strerror(-rc));
	}
	bool sent = ho_send_all(cfd, &resp, sizeof(resp)) == 0 &&
		    ho_send_all(cfd, bytes, resp.len) == 0;
	if (s) {
		ferry_lock();
		if (rc == 0 && sent) {
			/* The child runs it now; our copy of the descriptor, if we
			 * still have one, says reset from here on. */
			struct fsock *sk = f ? f->priv : NULL;
			if (sk && sk->stream == s) {
				sk->stream = NULL;
				f->kind = FFILE_DEAD;
				ffile_notify(f, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP,
					     EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP);
			} else {
				pthread_mutex_lock(&ho_lock);
				for (struct ho_orphan **pp = &ho_orphans; *pp; pp = &(*pp)->next) {
					if ((*pp)->s == s) {
						struct ho_orphan *o = *pp;
						*pp = o->next;
						free(o);
						break;
					}
				}
				pthread_mutex_unlock(&ho_lock);
			}
			passfd_forget(s->sid, s->token);
			if (done)
				stream_release_done(ferry.rpc, s);
			stream_detach(s);
			stats_inc(ferry_stats()->streams_handed_over);
		} else {
			s->moving = false; /* the child failed: the stream stays ours */
			if (s->file)
				stream_set_file(s, s->file);
		}
		ferry_unlock();
		if (f)
			ffile_put(&fdtab, f);
		log_debug("handover: stream %u %s", req.sid, rc == 0 && sent ? "handed over" : "kept");
	}
	free(bytes);
}

/* Ends the orphans no child can use any more, as their close would have. */
static void ho_reap_orphans(void)
{
	for (;;) {
		struct stream *done = NULL;
		pthread_mutex_lock(&ho_lock);
		for (struct ho_orphan **pp = &ho_orphans; *pp; pp = &(*pp)->next) {
			if (!ho_wanted((*pp)->s) && clock_now_ns() >= (*pp)->until_ns) {
				struct ho_orphan *o = *pp;
				*pp = o->next;
				done = o->s;
				free(o);
				break;
			}
		}
		pthread_mutex_unlock(&ho_lock);
		if (!done)
			return;
		ferry_lock();
		stream_close(ferry.rpc, done);
		ferry_unlock();
	}
}

static void ho_reap_children(void)
{
	pthread_mutex_lock(&ho_lock);
	for (struct ho_child **pp = &ho_children; *pp;) {
		struct ho_child *c = *pp;
		if (ho_child_alive(c)) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		sys()->close(c->pidfd);
		free(c);
	}
	pthread_mutex_unlock(&ho_lock);
}

static void *ho_main(void *arg)
{
	(void)arg;
	ferry_internal_enter();
	sys()->prctl(PR_SET_NAME, "ferry-handover");
	/* Its waits for a stream to settle are pauses of tens of microseconds
	 * on a child's critical path: the default 50 us of slack more than
	 * doubled each (postgres' backends waited on it per connection). */
	sys()->prctl(PR_SET_TIMERSLACK, 1000UL);
	for (;;) {
		thread_pause_point(&ho_pause);
		/* Children's exits are seen through their pidfds; passed sockets'
		 * descriptions are asked for on names of their own. */
		struct pollfd p[128];
		nfds_t n = 0;
		p[n++] = (struct pollfd){.fd = ho_lfd, .events = POLLIN};
		p[n++] = (struct pollfd){.fd = ho_wake, .events = POLLIN};
		int pass_timeout;
		nfds_t npass = (nfds_t)passfd_poll(p + n, 48, &pass_timeout);
		n += npass;
		int relay_timeout;
		n += (nfds_t)relay_poll(p + n, 16, &relay_timeout);
		pthread_mutex_lock(&ho_lock);
		for (struct ho_child *c = ho_children; c && n < 128; c = c->next)
			p[n++] = (struct pollfd){.fd = c->pidfd, .events = POLLIN};
		bool orphans = ho_orphans != NULL;
		pthread_mutex_unlock(&ho_lock);
		int timeout = orphans || n == 128 ? 100 : -1;
		if (pass_timeout >= 0 && (timeout < 0 || pass_timeout < timeout))
			timeout = pass_timeout;
		if (relay_timeout >= 0 && (timeout < 0 || relay_timeout < timeout))
			timeout = relay_timeout;
		thread_pause_sleep_begin(&ho_pause);
		int r = sys()->poll(p, n, timeout);
		int poll_errno = errno;
		thread_pause_sleep_end(&ho_pause);
		if (r < 0 && poll_errno != EINTR)
			break;
		if (p[1].revents) {
			uint64_t v;
			ssize_t rd = sys()->read(ho_wake, &v, sizeof(v));
			(void)rd;
		}
		if (p[0].revents & POLLIN) {
			int cfd = sys()->accept4(ho_lfd, NULL, NULL, SOCK_CLOEXEC);
			if (cfd >= 0) {
				struct timeval tv = {.tv_sec = HO_FETCH_MS / 1000};
				sys()->setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
				sys()->setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
				ho_serve(cfd);
				sys()->close(cfd);
			}
		}
		passfd_serve(p + 2, (int)npass);
		relay_pump();
		ho_reap_children();
		ho_reap_orphans();
	}
	thread_pause_running(&ho_pause, false);
	return NULL;
}

/* The socket children ask on and the thread that answers, once. */
static int ho_start(void)
{
	if (ho_started)
		return 0;
	const struct sys_fns *c = sys();
	struct sockaddr_un a;
	socklen_t alen = ho_addr(getpid(), &a);
	int lfd = c->socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	if (c->bind(lfd, (struct sockaddr *)&a, alen) != 0 || c->listen(lfd, 64) != 0) {
		int err = -errno;
		c->close(lfd);
		return err;
	}
	int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wake < 0) {
		c->close(lfd);
		return -errno;
	}
	ho_lfd = lfd;
	ho_wake = wake;
	/* Before the thread that sends MOVEs; a no-op until ho_started. */
	stream_set_move_heard(handover_poke);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t;
	thread_pause_init(&ho_pause);
	thread_pause_running(&ho_pause, true);
	int rc = pthread_create(&t, NULL, ho_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		thread_pause_running(&ho_pause, false);
		c->close(lfd);
		c->close(wake);
		ho_lfd = ho_wake = -1;
		return -rc;
	}
	pthread_detach(t);
	ho_started = true;
	return 0;
}

int handover_serve(void)
{
	pthread_mutex_lock(&ho_lock);
	int rc = ho_start();
	pthread_mutex_unlock(&ho_lock);
	return rc;
}

void handover_fork_prepare(void)
{
	if (stream_count() == 0)
		return;
	int rc = handover_serve();
	if (rc)
		log_warn("handover: cannot serve children (%s): their copies of connections say "
			 "reset",
			 strerror(-rc));
}

void handover_hold(void)
{
	if (ho_started)
		thread_pause_hold(&ho_pause);
}

void handover_release(void)
{
	if (ho_started)
		thread_pause_release(&ho_pause);
}

void handover_fork_child_begin(void)
{
	pthread_mutex_init(&ho_lock, NULL);
	pthread_mutex_init(&ho_adopt_lock, NULL);
	relay_fork_child();
	/* The parent's children and orphans are the parent's business. */
	while (ho_children) {
		struct ho_child *c = ho_children;
		ho_children = c->next;
		sys()->close(c->pidfd);
		free(c);
	}
	while (ho_orphans) {
		struct ho_orphan *o = ho_orphans;
		ho_orphans = o->next;
		free(o);
	}
	if (ho_started) {
		sys()->close(ho_lfd);
		sys()->close(ho_wake);
	}
	ho_lfd = ho_wake = -1;
	ho_started = false;
}

void handover_fork_parent(pid_t child)
{
	if (!ho_started || stream_count() == 0)
		return;
	int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	if (pidfd < 0) {
		/* ESRCH: it is gone already, and holds nothing. */
		if (errno != ESRCH)
			log_warn("handover: cannot watch child %d (%s): connections it holds a copy "
				 "of may end while it runs",
				 (int)child, strerror(errno));
		return;
	}
	struct ho_child *c = calloc(1, sizeof(*c));
	if (!c) {
		sys()->close(pidfd);
		return;
	}
	pthread_mutex_lock(&ho_lock);
	c->pidfd = pidfd;
	c->fork_no = stream_forks - 1;
	c->next = ho_children;
	ho_children = c;
	pthread_mutex_unlock(&ho_lock);
	handover_poke();
}

void handover_fork_child(struct ffile *f, pid_t parent)
{
	struct fsock *sk = f->priv;
	if (sk && sk->state == FSOCK_REMOTE)
		return; /* a second number of the same file (the pass sees each) */
	struct stream *s = sk ? sk->stream : NULL;
	if (!s || sk->state != FSOCK_STREAM || !stream_can_follow(s)) {
		f->kind = FFILE_DEAD;
		return;
	}
	sk->state = FSOCK_REMOTE;
	sk->remote_pid = parent;
	sk->remote_sid = s->sid;
	sk->remote_peer_sid = s->peer_sid;
	sk->remote_token = s->token;
	sk->remote_peer = s->peer;
	sk->remote_peer_len = s->peer_len;
	sk->remote_local = s->local;
	sk->remote_local_len = s->local_len;
	if (mgmt_peer_addr_forked(ferry.mgmt, ferry.rpc, s->session, &sk->remote_mgmt,
				  &sk->remote_mgmt_len) != 0)
		sk->remote_mgmt_len = 0;
	sk->stream = NULL;
	__atomic_store_n(&f->mask, 0, __ATOMIC_RELEASE);
}

/* Keeps s (no file, its reference passed on) as an orphan until until_ns at
 * least, or as long as keep says, when no lock but the endpoint's is held. */
static bool ho_keep(struct stream *s, uint64_t until_ns, bool (*keep)(const struct stream *s))
{
	pthread_mutex_lock(&ho_lock);
	struct ho_orphan *o = ho_started && (!keep || keep(s)) ? calloc(1, sizeof(*o)) : NULL;
	if (o) {
		o->s = s;
		o->until_ns = until_ns;
		o->next = ho_orphans;
		ho_orphans = o;
	}
	pthread_mutex_unlock(&ho_lock);
	if (!o)
		return false;
	stream_orphan(s);
	handover_poke();
	return true;
}

bool handover_keep(struct stream *s)
{
	return ho_keep(s, 0, ho_wanted);
}

bool handover_keep_until(struct stream *s, uint64_t until_ns)
{
	return ho_keep(s, until_ns, NULL);
}

void handover_exit_wait(uint64_t max_ns)
{
	if (!ho_started)
		return;
	uint64_t end = clock_now_ns() + max_ns;
	for (;;) {
		uint64_t now = clock_now_ns();
		bool offered = false;
		pthread_mutex_lock(&ho_lock);
		for (struct ho_orphan *o = ho_orphans; o && !offered; o = o->next)
			offered = o->until_ns > now;
		pthread_mutex_unlock(&ho_lock);
		if (!offered || now >= end)
			return;
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
}

/* --- the new owner --- */

/* Asks the owner for the stream: the connected socket its answer comes on,
 * or -errno. Needs nothing of this process's ferry, so the owner stops the
 * stream while this one builds its endpoint. */
/* A connection to owner's handover thread, bounded both ways: the fd, or
 * -errno. */
static int ho_dial(pid_t owner)
{
	const struct sys_fns *c = sys();
	struct sockaddr_un a;
	socklen_t alen = ho_addr(owner, &a);
	int fd = c->socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct timeval tv = {.tv_sec = HO_FETCH_MS / 1000};
	c->setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	c->setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (c->connect(fd, (struct sockaddr *)&a, alen) != 0) {
		int rc = -errno;
		c->close(fd);
		return rc;
	}
	return fd;
}

static int ho_ask(const struct fsock *sk)
{
	struct ho_req req = {.magic = STREAM_SNAP_MAGIC,
			     .sid = sk->remote_sid,
			     .peer_sid = sk->remote_peer_sid,
			     .token = sk->remote_token};
	int fd = ho_dial(sk->remote_pid);
	if (fd >= 0 && ho_send_all(fd, &req, sizeof(req)) != 0) {
		sys()->close(fd);
		return -ECONNRESET;
	}
	return fd;
}

int handover_relay(struct ffile *f, int theirs, int mine)
{
	struct fsock *sk = f->priv;
	struct ho_req req = {.magic = STREAM_SNAP_MAGIC, .kind = HO_RELAY};
	pid_t owner;
	if (f->kind == FFILE_SOCK && sk->state == FSOCK_REMOTE) {
		owner = sk->remote_pid;
		req.sid = sk->remote_sid;
		req.peer_sid = sk->remote_peer_sid;
		req.token = sk->remote_token;
	} else if (f->kind == FFILE_SOCK && sk->state == FSOCK_STREAM) {
		/* Our own: this process's handover thread relays it. */
		int rc = handover_serve();
		if (rc)
			return rc;
		owner = getpid();
		ferry_lock();
		struct stream *s = sk->stream;
		if (s) {
			req.sid = s->sid;
			req.peer_sid = s->peer_sid;
			req.token = s->token;
		}
		ferry_unlock();
		if (!s)
			return -ENOTCONN;
	} else {
		return -ENOTCONN;
	}
	int fd = ho_dial(owner);
	if (fd < 0)
		return fd;
	/* Another process relays: it gets our end too, to see what we read
	 * (relay.h); ours relays to itself and sees our close instead. */
	int fds[2] = {theirs, mine};
	int32_t status = -ECONNRESET;
	if (scm_send(fd, &req, sizeof(req), fds, owner == getpid() ? 1 : 2) != (ssize_t)sizeof(req) ||
	    ho_recv_all(fd, &status, sizeof(status)) != 0)
		status = -ECONNRESET;
	sys()->close(fd);
	return status;
}

/* The owner's answer to ho_ask: the stream's state and unread bytes. */
static int ho_answer(int fd, struct ho_resp *resp, uint8_t *bytes)
{
	if (ho_recv_all(fd, resp, sizeof(*resp)) != 0)
		return -ECONNRESET;
	if (resp->status < 0)
		return resp->status;
	if (resp->len > STREAM_WINDOW_MAX || ho_recv_all(fd, bytes, resp->len) != 0)
		return -EPROTO;
	return 0;
}

/* Until the peer answered ATTACH (bounded): the application's first send
 * must find room, as on a kernel socket whose buffer is empty (postgres
 * treats EAGAIN on its first reply as an error). The answer comes as a
 * packet, which wakes this thread from its sleep on the nic, or through
 * the file's waiters when another thread took the packet: sleeping costs
 * one wake, where yielding in a loop kept a CPU from the peer that answers. */
static void ho_wait_attached(struct ffile *f, struct stream *s)
{
	uint64_t end = clock_now_ns() + HO_MOVE_NS;
	struct waiter *w = wait_self();
	for (;;) {
		ferry_lock();
		stream_run_once(ferry.rpc);
		bool done = !s->attaching;
		ferry_unlock();
		if (done || clock_now_ns() > end)
			return;
		struct wait_node node;
		if (w)
			wait_link(f, &node, w);
		ferry_lock();
		done = !s->attaching; /* answered before the link: no wake comes */
		ferry_unlock();
		if (!done) {
			struct pollfd room[2];
			struct timespec ts;
			wait_block(w, room, 0, wait_remaining(end, &ts), NULL);
		}
		if (w)
			wait_unlink(f, &node);
	}
}

static void ho_dialled(void *ctx, int result)
{
	(void)ctx;
	(void)result;
}

static unsigned ho_dial_ms(void)
{
	return ferry.cfg.connect_timeout_ms > HO_ATTACH_CONNECT_MS ? ferry.cfg.connect_timeout_ms
								   : HO_ATTACH_CONNECT_MS;
}

struct ho_early {
	const struct fsock *sk;
	bool dialled;
};

/* Starts the peer's handshake now if the fork left its address, so it runs
 * while the owner stops the stream: the connect after the owner's answer
 * joins it, or finds the session it made (mgmt shares a handshake in
 * progress, and a live session, per address). Called from this process's
 * ferry start when the adoption starts it (ferry_up_then): the handshake
 * then also overlaps the start of the progress thread. */
static void ho_dial_early(void *arg)
{
	struct ho_early *e = arg;
	if (e->dialled || !e->sk->remote_mgmt_len)
		return;
	e->dialled = true;
	ferry_internal_enter();
	mgmt_connect_async(ferry.mgmt, ferry.rpc, (const struct sockaddr *)&e->sk->remote_mgmt,
			   e->sk->remote_mgmt_len, ho_dial_ms(), ho_dialled, NULL);
	ferry_internal_leave();
}

void handover_adopt(struct ffile *f)
{
	struct fsock *sk = f->priv;
	pthread_mutex_lock(&ho_adopt_lock);
	if (f->kind != FFILE_SOCK || sk->state != FSOCK_REMOTE) {
		pthread_mutex_unlock(&ho_adopt_lock);
		return;
	}
	struct ho_resp resp;
	uint8_t *bytes = malloc(STREAM_WINDOW_MAX);
	int rc = bytes ? 0 : -ENOMEM;
	/* Asked first: the owner stops the stream (a round trip to the peer)
	 * while this process starts its ferry (a fork child's first socket
	 * call: 0.2-0.3 ms). A start that fails then loses the stream as a
	 * failed dial to the peer does: it reads as reset, here and there. */
	int fd = -1;
	if (rc == 0) {
		ferry_internal_enter();
		fd = ho_ask(sk);
		ferry_internal_leave();
		rc = fd < 0 ? fd : 0;
	}
	struct ho_early early = {.sk = sk};
	if (rc == 0 && !ferry_up_then(ho_dial_early, &early))
		rc = -ENOTCONN;
	unsigned dial_ms = ho_dial_ms();
	if (rc == 0) {
		ho_dial_early(&early); /* ferry was on already */
		ferry_internal_enter();
		rc = ho_answer(fd, &resp, bytes);
		ferry_internal_leave();
	}
	if (fd >= 0)
		sys()->close(fd);
	/* A peer done with the stream is not dialled: there is nobody to
	 * continue it with, only bytes and EOF to read. */
	bool done = rc == 0 && resp.snap.peer_done;
	int ses = rc;
	if (rc == 0 && !done) {
		ferry_internal_enter();
		ses = mgmt_connect(ferry.mgmt, ferry.rpc, (struct sockaddr *)&resp.snap.peer_mgmt,
				   resp.snap.peer_mgmt_len, dial_ms);
		ferry_internal_leave();
		/* A peer that took the move after its FIN and then exited
		 * (socat -u, an exit right after shutdown) cannot be dialled:
		 * all it sent is here, and that is what it leaves to read. */
		if (ses < 0 && resp.snap.rx_fin) {
			log_debug("handover: the peer of stream %u is gone after its FIN (%s)",
				  resp.snap.peer_sid, strerror(-ses));
			done = true;
			ses = 0;
		}
	}
	struct stream *s = NULL;
	if (ses >= 0) {
		ferry_lock();
		rc = done ? stream_restore_done(ferry.rpc, &resp.snap, bytes, resp.len, f, &s)
			  : stream_restore(ferry.rpc, ses, &resp.snap, bytes, resp.len, f, &s);
		if (rc == 0) {
			sk->stream = s;
			sk->state = FSOCK_STREAM;
			sock_apply_opts(sk);
			stream_set_file(s, f);
		}
		ferry_unlock();
	} else {
		rc = ses;
	}
	if (rc != 0) {
		/* A reset is the peer's doing, as the kernel's socket would read
		 * it too (a client that resets before the worker took it); any
		 * other failure is ferry's. */
		ferry_log(rc == -ECONNRESET ? FERRY_LOG_INFO : FERRY_LOG_WARN,
			  "a connection inherited from process %d cannot be taken over (%s): it "
			  "reads as reset here",
			  (int)sk->remote_pid, strerror(-rc));
		f->kind = FFILE_DEAD;
		__atomic_store_n(&f->mask, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP,
				 __ATOMIC_RELEASE);
	} else {
		if (!done)
			ho_wait_attached(f, s);
		stats_inc(ferry_stats()->streams_taken_over);
		log_debug("handover: took over a stream from process %d", (int)sk->remote_pid);
	}
	free(bytes);
	pthread_mutex_unlock(&ho_adopt_lock);
}
