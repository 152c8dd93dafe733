/*
 * The management thread: a typed command queue with an eventfd wake-up and
 * an explicit stop (memcached's thread.c), and a poll() loop over the
 * control sockets, the listeners' rendezvous sockets and the queue. The
 * session work it drives is in mgmt_session.c.
 */
#include "autoconfig.h"

#include "mgmt/mgmt.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "mgmt/mgmt_internal.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/rpc.h"
#include "transport/sys.h"
#include "transport/udp_bind.h"

/* Datagrams taken from one socket per wake-up, so one busy socket cannot
 * starve the rest. */
#define RX_BUDGET 64

enum cmd_type {
	CMD_LISTEN,
	CMD_UNLISTEN,
	CMD_LISTEN_PORT,
	CMD_LISTEN_FD,
	CMD_LISTEN_DORMANT,
	CMD_PEER_ADDR,
	CMD_CONNECT,
	CMD_DISCONNECT,
	CMD_FORGET,
};

struct cmd {
	struct cmd *next;
	struct mgmt *m;
	enum cmd_type type;
	struct rpc *rpc;
	struct mgmt_addr addr;
	int session;
	unsigned timeout_ms;
	mgmt_connect_fn fn;
	void *ctx;
	int fd;         /* CMD_LISTEN: a bound UDP socket to use, or -1 */
	unsigned flags; /* CMD_LISTEN: MGMT_LISTEN_*; CMD_LISTEN_DORMANT: 1 = dormant */
	bool sync; /* on the caller's stack; the caller waits for done */
	bool cancelled; /* a connect still queued when its rpc was forgotten */
	bool done;
	bool repoll; /* set by cmd_run: the thread must build its poll set again */
	int result;
};

/* ---- completions ---- */

void mgmt_waiter_done(struct mgmt *m, struct waiter *w, int result)
{
	if (w->sync) {
		w->fn(w->ctx, result);
		free(w);
		return;
	}
	w->result = result;
	w->next = NULL;
	*m->completions_tail = w;
	m->completions_tail = &w->next;
}

static void completions_run(struct mgmt *m)
{
	while (m->completions) {
		struct waiter *w = m->completions;
		m->completions = w->next;
		if (!m->completions)
			m->completions_tail = &m->completions;
		w->fn(w->ctx, w->result);
		free(w);
	}
}

/* ---- sockets ---- */

static void sock_drain(struct mgmt *m, int fd, struct listener *l, short revents, uint64_t now)
{
	if (revents & POLLERR) {
		struct mgmt_addr dest;
		int err;
		while (mgmt_net_read_error(fd, &dest, &err) > 0)
			mgmt_on_icmp_error(m, &dest, err);
		/* The ICMP error also sits in SO_ERROR; clear it or poll keeps
		 * reporting POLLERR. */
		int soerr;
		socklen_t sl = sizeof(soerr);
		sys()->getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
	}
	if (!(revents & POLLIN))
		return;
	/* A shared listener's rendezvous socket is read by every holder: one
	 * datagram a turn, so a burst of connections is spread over those that
	 * are awake instead of going to the first to wake. */
	int budget = l ? 1 : RX_BUDGET;
	for (int i = 0; i < budget; i++) {
		uint8_t buf[512];
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		ssize_t n = sys()->recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&ss, &sl);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			continue; /* EINTR, or an ICMP error reported once here */
		}
		mgmt_on_datagram(m, fd, l, buf, (size_t)n, (struct sockaddr *)&ss, sl, now);
	}
}

/* ---- commands ---- */

static struct listener *listener_find(struct mgmt *m, const struct mgmt_addr *a)
{
	for (struct listener *l = m->listeners; l; l = l->next)
		if (mgmt_addr_equal(&l->asked, a) || mgmt_addr_equal(&l->bound, a))
			return l;
	return NULL;
}

static void widen_ctl(struct mgmt *m, int *fd, int family)
{
	if (*fd < 0)
		return;
	int wide = mgmt_net_widen(*fd, family, MGMT_NET_RECVERR);
	if (wide < 0) {
		log_warn("mgmt: cannot listen beyond loopback (%s): peers on other hosts cannot "
			 "reach this process",
			 strerror(-wide));
		return;
	}
	sys()->close(*fd);
	*fd = wide;
}

void mgmt_reach(struct mgmt *m, struct rpc *rpc, const struct mgmt_addr *addr)
{
	if (m->wide || udp_addr_is_loopback((const struct sockaddr *)&addr->ss))
		return;
	m->wide = true;
	widen_ctl(m, &m->ctl4, AF_INET);
	widen_ctl(m, &m->ctl6, AF_INET6);
	struct rpc *ctl = __atomic_load_n(&m->ctl_rpc, __ATOMIC_ACQUIRE);
	struct rpc *rpcs[2] = {rpc, ctl != rpc ? ctl : NULL};
	for (int i = 0; i < 2; i++) {
		if (!rpcs[i])
			continue;
		rpc_lock(rpcs[i]);
		nic_widen(rpc_nic(rpcs[i]));
		rpc_unlock(rpcs[i]);
	}
	log_debug("mgmt: control sockets and datapath now on the wildcard");
	if (m->widen_fn)
		m->widen_fn(m->widen_ctx);
}

static int cmd_listen(struct mgmt *m, struct cmd *c)
{
	/* Port 0 asks for a fresh port each time. A named port we already
	 * answer on is taken, unless both TCP listeners share it through
	 * SO_REUSEPORT: then one rendezvous socket answers for both. */
	struct listener *l = mgmt_addr_port(&c->addr) ? listener_find(m, &c->addr) : NULL;
	if (l) {
		if (c->fd >= 0)
			sys()->close(c->fd);
		if (!(c->flags & MGMT_LISTEN_REUSEPORT) || !l->reuseport || l->rpc != c->rpc)
			return -EADDRINUSE;
		l->users++;
		return 0;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		if (c->fd >= 0)
			sys()->close(c->fd);
		return -ENOMEM;
	}
	/* Handshakes to it are answered from the control sockets. */
	mgmt_reach(m, c->rpc, &c->addr);
	l->fd = c->fd >= 0 ? c->fd
			   : mgmt_net_socket(mgmt_addr_family(&c->addr), &c->addr,
					     ((c->flags & MGMT_LISTEN_REUSEPORT) ? MGMT_NET_REUSEPORT : 0) |
						     ((c->flags & MGMT_LISTEN_V6ONLY) ? MGMT_NET_V6ONLY : 0));
	if (l->fd < 0) {
		int err = l->fd;
		free(l);
		return err;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (sys()->getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    mgmt_addr_set(&l->bound, (struct sockaddr *)&ss, sl) < 0)
		l->bound = c->addr;
	l->asked = c->addr;
	l->rpc = c->rpc;
	l->reuseport = c->flags & MGMT_LISTEN_REUSEPORT;
	l->users = 1;
	l->next = m->listeners;
	m->listeners = l;
	m->nlisteners++;
	return 0;
}

static void listener_close(struct mgmt *m, struct listener **lp)
{
	struct listener *l = *lp;
	*lp = l->next;
	sys()->close(l->fd);
	free(l);
	m->nlisteners--;
}

static int cmd_unlisten(struct mgmt *m, struct cmd *c)
{
	for (struct listener **lp = &m->listeners; *lp; lp = &(*lp)->next) {
		struct listener *l = *lp;
		if (mgmt_addr_equal(&l->asked, &c->addr) || mgmt_addr_equal(&l->bound, &c->addr)) {
			if (--l->users == 0)
				listener_close(m, lp);
			return 0;
		}
	}
	return -ENOENT;
}

static void cmd_finish(struct mgmt *m, struct cmd *c)
{
	if (c->sync) {
		pthread_mutex_lock(&m->mu);
		c->done = true;
		pthread_cond_broadcast(&m->cv);
		pthread_mutex_unlock(&m->mu);
	} else {
		c->fn(c->ctx, c->result); /* only connects are queued without waiting */
		free(c);
	}
}

static void sync_connect_done(void *ctx, int result)
{
	struct cmd *c = ctx;
	c->result = result;
	cmd_finish(c->m, c);
}

/* A connect queued before its rpc is forgotten ends as one already under
 * way does (mgmt_sess_forget): started after the forget, it would outlive
 * the endpoint that asked for it. */
static void queue_cancel_connects(struct mgmt *m, struct rpc *rpc)
{
	pthread_mutex_lock(&m->mu);
	for (struct cmd *q = m->queue; q; q = q->next)
		if (q->type == CMD_CONNECT && q->rpc == rpc)
			q->cancelled = true;
	pthread_mutex_unlock(&m->mu);
}

/* Runs c on the management thread. Returns true when c is finished (result
 * set); a connect finishes later through its waiter, and c must not be
 * touched after cmd_run returns false (it may be gone). */
static bool cmd_run(struct mgmt *m, struct cmd *c, uint64_t now)
{
	struct listener *l;
	switch (c->type) {
	case CMD_LISTEN:
		c->result = cmd_listen(m, c);
		return true;
	case CMD_UNLISTEN:
		c->result = cmd_unlisten(m, c);
		return true;
	case CMD_LISTEN_PORT:
		l = listener_find(m, &c->addr);
		c->result = l ? mgmt_addr_port(&l->bound) : 0;
		return true;
	case CMD_LISTEN_FD:
		l = listener_find(m, &c->addr);
		c->result = l ? l->fd : -ENOENT;
		return true;
	case CMD_PEER_ADDR:
		c->result = mgmt_sess_peer_addr(m, c->rpc, c->session, &c->addr);
		return true;
	case CMD_LISTEN_DORMANT:
		/* A socket going dormant stays in the set until the thread next
		 * builds it, and is not read meanwhile (mgmt_main); one waking
		 * up needs a new set only if the last one left it out. A
		 * postmaster that forks and then waits in select again toggles
		 * twice per connection, and so wakes no one. */
		l = listener_find(m, &c->addr);
		if (l) {
			l->dormant = c->flags != 0;
			c->repoll = !l->dormant && !l->polled;
		}
		c->result = l ? 0 : -ENOENT;
		return true;
	case CMD_DISCONNECT:
		mgmt_sess_disconnect(m, c->rpc, c->session, now);
		c->result = 0;
		c->repoll = true;
		return true;
	case CMD_FORGET:
		queue_cancel_connects(m, c->rpc);
		for (struct listener **lp = &m->listeners; *lp;) {
			if ((*lp)->rpc == c->rpc)
				listener_close(m, lp);
			else
				lp = &(*lp)->next;
		}
		mgmt_sess_forget(m, c->rpc, now);
		c->result = 0;
		c->repoll = true;
		return true;
	case CMD_CONNECT:
		break;
	}
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w) {
		c->result = -ENOMEM;
		return true;
	}
	w->fn = c->sync ? sync_connect_done : c->fn;
	w->ctx = c->sync ? (void *)c : c->ctx;
	w->sync = c->sync;
	w->deadline_ns = now + (uint64_t)c->timeout_ms * MGMT_MS;
	bool async = !c->sync;
	struct mgmt_addr addr = c->addr;
	struct rpc *rpc = c->rpc;
	unsigned flags = c->flags;
	if (async)
		free(c);
	mgmt_connect_start(m, rpc, &addr, flags, w, now);
	return false;
}

/* Set on the management thread: a blocking call from there would wait on itself. */
static __thread struct mgmt *mgmt_self;

/* Takes the queue; returns false when asked to stop. */
static bool commands(struct mgmt *m)
{
	uint64_t v;
	while (sys()->read(m->evfd, &v, sizeof(v)) > 0) {
	}
	pthread_mutex_lock(&m->mu);
	struct cmd *c = m->queue;
	m->queue = NULL;
	m->queue_tail = &m->queue;
	bool stop = m->stop;
	pthread_mutex_unlock(&m->mu);
	while (c) {
		struct cmd *next = c->next;
		if (stop || c->cancelled) {
			c->result = -ECANCELED;
			cmd_finish(m, c);
		} else if (cmd_run(m, c, clock_now_ns())) {
			cmd_finish(m, c);
		}
		c = next;
	}
	return !stop;
}

/* ---- the thread ---- */

static void shutdown_all(struct mgmt *m)
{
	mgmt_sess_shutdown(m);
	completions_run(m);
	while (m->listeners)
		listener_close(m, &m->listeners);
	free(m->pfd);
	free(m->pfd_owner);
}

/* Fills m->pfd with every socket (*nsock of them), then the watched peers'
 * pidfds; returns the count (0 on -ENOMEM). */
static nfds_t poll_set(struct mgmt *m, nfds_t *nsock)
{
	size_t want = 3 + m->nlisteners + m->npidfds;
	if (want > m->pfd_cap) {
		struct pollfd *pfd = realloc(m->pfd, want * sizeof(*pfd));
		if (pfd)
			m->pfd = pfd;
		struct listener **own = realloc(m->pfd_owner, want * sizeof(*own));
		if (own)
			m->pfd_owner = own;
		if (!pfd || !own)
			return 0;
		m->pfd_cap = want;
	}
	nfds_t n = 0;
	int fixed[3] = {m->evfd, m->ctl4, m->ctl6};
	for (int i = 0; i < 3; i++) {
		if (fixed[i] < 0)
			continue;
		m->pfd[n] = (struct pollfd){.fd = fixed[i], .events = POLLIN};
		m->pfd_owner[n++] = NULL;
	}
	for (struct listener *l = m->listeners; l; l = l->next) {
		l->polled = !l->dormant;
		if (l->dormant)
			continue;
		m->pfd[n] = (struct pollfd){.fd = l->fd, .events = POLLIN};
		m->pfd_owner[n++] = l;
	}
	*nsock = n;
	return n + mgmt_peer_pidfds(m, m->pfd + n);
}

/* Sleeps in poll without the state lock, and takes it again. */
static int poll_unlocked(struct mgmt *m, struct pollfd *pfd, nfds_t n, int timeout)
{
	pthread_mutex_unlock(&m->state);
	thread_pause_sleep_begin(&m->pause);
	int ready = sys()->poll(pfd, n, timeout);
	thread_pause_sleep_end(&m->pause);
	pthread_mutex_lock(&m->state);
	return ready;
}

static void *mgmt_main(void *arg)
{
	struct mgmt *m = arg;
	mgmt_self = m;
	sys()->prctl(PR_SET_NAME, "ferry-mgmt");
	for (;;) {
		thread_pause_point(&m->pause);
		pthread_mutex_lock(&m->state);
		if (!commands(m))
			break;
		int timeout = mgmt_timers(m, clock_now_ns());
		completions_run(m);
		nfds_t nsock = 0;
		nfds_t n = poll_set(m, &nsock);
		if (n == 0) {
			struct pollfd ev = {.fd = m->evfd, .events = POLLIN};
			poll_unlocked(m, &ev, 1, timeout < 10 ? timeout : 10);
			pthread_mutex_unlock(&m->state);
			continue;
		}
		unsigned gen = m->poll_gen;
		int ready = poll_unlocked(m, m->pfd, n, timeout);
		/* A caller's command closed or added what was polled: the set
		 * is rebuilt and polled again (nothing read is lost). */
		if (ready > 0 && gen == m->poll_gen) {
			uint64_t now = clock_now_ns();
			for (nfds_t i = 1; i < nsock; i++)
				if (m->pfd[i].revents &&
				    !(m->pfd_owner[i] && m->pfd_owner[i]->dormant))
					sock_drain(m, m->pfd[i].fd, m->pfd_owner[i],
						   m->pfd[i].revents, now);
			/* After the sockets: a dying peer's goodbye, if it said one, is in. */
			for (nfds_t i = nsock; i < n; i++)
				if (m->pfd[i].revents)
					mgmt_on_peer_exit(m, m->pfd[i].fd, now);
			completions_run(m);
		}
		pthread_mutex_unlock(&m->state);
	}
	thread_pause_running(&m->pause, false);
	shutdown_all(m);
	m->down = true;
	pthread_mutex_unlock(&m->state);
	return NULL;
}

/* ---- the API ---- */

/* Queues c and, if it is sync, waits for it. Returns c's result for sync
 * commands, 0 for queued async ones, -ESHUTDOWN once stopping. */
static int submit(struct mgmt *m, struct cmd *c)
{
	pthread_mutex_lock(&m->mu);
	if (m->stop) {
		pthread_mutex_unlock(&m->mu);
		return -ESHUTDOWN;
	}
	c->next = NULL;
	*m->queue_tail = c;
	m->queue_tail = &c->next;
	uint64_t one = 1;
	ssize_t wr = sys()->write(m->evfd, &one, sizeof(one));
	(void)wr; /* only fails when the counter is already huge: still readable */
	if (!c->sync) {
		pthread_mutex_unlock(&m->mu);
		return 0;
	}
	while (!c->done)
		pthread_cond_wait(&m->cv, &m->mu);
	pthread_mutex_unlock(&m->mu);
	return c->result;
}

void mgmt_hold(struct mgmt *m)
{
	thread_pause_hold(&m->pause);
}

void mgmt_release(struct mgmt *m)
{
	thread_pause_release(&m->pause);
}


/* Commands run on the caller's thread, under the state lock (the management
 * thread, asking from a connect callback, holds it), except a connect and
 * those that open or close a listener's socket: a socket closed while the
 * thread polls it stays bound until that poll returns, and a port given up
 * must be free when mgmt_unlisten returns. */
static int run_sync(struct mgmt *m, struct cmd *c)
{
	if (mgmt_self == m) {
		cmd_run(m, c, clock_now_ns());
		return c->result;
	}
	if (c->type == CMD_LISTEN || c->type == CMD_UNLISTEN) {
		c->sync = true;
		return submit(m, c);
	}
	pthread_mutex_lock(&m->state);
	if (m->down) {
		pthread_mutex_unlock(&m->state);
		return -ESHUTDOWN;
	}
	cmd_run(m, c, clock_now_ns());
	if (c->repoll) {
		m->poll_gen++;
		uint64_t one = 1;
		ssize_t wr = sys()->write(m->evfd, &one, sizeof(one));
		(void)wr; /* only fails when the counter is already huge: still readable */
	}
	pthread_mutex_unlock(&m->state);
	return c->result;
}

/* What the parent knew of the route's MTU (path_data_max), for the fork
 * child's next mgmt: its first handshake goes where the parent's client
 * is, an address the parent has just asked about (postgres's backend
 * answering its postmaster's client). Written and read by the child's
 * one thread, before its ferry starts. */
static struct mgmt_mtu mtu_inherited;

struct mgmt *mgmt_create(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			 char *msg, size_t msglen)
{
	struct mgmt *m = calloc(1, sizeof(*m));
	if (!m) {
		*err = -ENOMEM;
		snprintf(msg, msglen, "mgmt: out of memory");
		return NULL;
	}
	m->cfg = cfg;
	m->stats = stats;
	m->uuid = mgmt_net_random64();
	mgmt_proc_self(&m->self);
	m->mtu = mtu_inherited;
	m->queue_tail = &m->queue;
	m->completions_tail = &m->completions;
	m->tombs_tail = &m->tombs_oldest;
	m->ctl4 = m->ctl6 = m->evfd = -1;
	pthread_mutex_init(&m->state, NULL);
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	thread_pause_init(&m->pause);
	const char *what = "eventfd";
	m->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int rc = m->evfd < 0 ? -errno : 0;
	if (!rc) {
		what = "the IPv4 control socket";
		m->ctl4 = mgmt_net_socket(AF_INET, NULL, MGMT_NET_RECVERR | MGMT_NET_LOOPBACK);
		if (m->ctl4 < 0) {
			m->wide = true;
			m->ctl4 = mgmt_net_socket(AF_INET, NULL, MGMT_NET_RECVERR);
		}
		rc = m->ctl4 < 0 ? m->ctl4 : 0;
	}
	if (!rc) {
		/* A host without IPv6 still works for IPv4 peers. */
		m->ctl6 = mgmt_net_socket(AF_INET6, NULL,
					  MGMT_NET_RECVERR | (m->wide ? 0 : MGMT_NET_LOOPBACK));
		if (m->ctl6 < 0)
			m->ctl6 = -1;
		what = "the management thread";
		/* Signals are the application's: they must land on its threads. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		thread_pause_running(&m->pause, true);
		rc = -pthread_create(&m->thread, NULL, mgmt_main, m);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rc)
			thread_pause_running(&m->pause, false);
	}
	if (rc) {
		*err = rc;
		snprintf(msg, msglen, "mgmt: cannot create %s: %s", what, strerror(-rc));
		if (m->ctl6 >= 0)
			sys()->close(m->ctl6);
		if (m->ctl4 >= 0)
			sys()->close(m->ctl4);
		if (m->evfd >= 0)
			sys()->close(m->evfd);
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
		pthread_mutex_destroy(&m->state);
		free(m);
		return NULL;
	}
	return m;
}

void mgmt_destroy(struct mgmt *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = true;
	uint64_t one = 1;
	ssize_t wr = sys()->write(m->evfd, &one, sizeof(one));
	(void)wr;
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->thread, NULL);
	sys()->close(m->ctl4);
	if (m->ctl6 >= 0)
		sys()->close(m->ctl6);
	sys()->close(m->evfd);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	pthread_mutex_destroy(&m->state);
	free(m);
}

void mgmt_set_widen_handler(struct mgmt *m, mgmt_widen_fn fn, void *ctx)
{
	m->widen_ctx = ctx;
	m->widen_fn = fn;
}

void mgmt_freeze(struct mgmt *m)
{
	pthread_mutex_lock(&m->state);
}

void mgmt_thaw(struct mgmt *m)
{
	pthread_mutex_unlock(&m->state);
}

int mgmt_peer_addr_forked(struct mgmt *m, struct rpc *rpc, int session,
			  struct sockaddr_storage *out, socklen_t *len)
{
	struct mgmt_addr a;
	int rc = mgmt_sess_peer_addr(m, rpc, session, &a);
	if (rc == 0) {
		memcpy(out, &a.ss, a.len);
		*len = a.len;
	}
	return rc;
}

void mgmt_forked_child(struct mgmt *m)
{
	mtu_inherited = m->mtu;
	if (m->ctl4 >= 0)
		sys()->close(m->ctl4);
	if (m->ctl6 >= 0)
		sys()->close(m->ctl6);
	m->ctl4 = m->ctl6 = -1;
}

uint64_t mgmt_uuid(const struct mgmt *m)
{
	return m->uuid;
}

static int cmd_init(struct mgmt *m, struct cmd *c, enum cmd_type type, struct rpc *rpc,
		    const struct sockaddr *addr, socklen_t len)
{
	memset(c, 0, sizeof(*c));
	c->m = m;
	c->type = type;
	c->rpc = rpc;
	c->fd = -1;
	return addr ? mgmt_addr_set(&c->addr, addr, len) : 0;
}

int mgmt_listen(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len)
{
	return mgmt_listen_fd(m, rpc, addr, len, -1, 0);
}

int mgmt_listen_fd(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		   int udp_fd, unsigned flags)
{
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_LISTEN, rpc, addr, len);
	if (rc) {
		if (udp_fd >= 0)
			sys()->close(udp_fd);
		return rc;
	}
	c.fd = udp_fd;
	c.flags = flags;
	return run_sync(m, &c);
}

int mgmt_rendezvous_socket(const struct sockaddr *addr, socklen_t len, uint16_t *port)
{
	struct mgmt_addr a;
	int rc = mgmt_addr_set(&a, addr, len);
	if (rc)
		return rc;
	mgmt_addr_set_port(&a, 0);
	int fd = mgmt_net_socket(mgmt_addr_family(&a), &a, 0);
	if (fd < 0)
		return fd;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct mgmt_addr bound;
	if (sys()->getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    mgmt_addr_set(&bound, (struct sockaddr *)&ss, sl) < 0) {
		rc = -errno;
		sys()->close(fd);
		return rc ? rc : -EINVAL;
	}
	*port = mgmt_addr_port(&bound);
	return fd;
}

int mgmt_unlisten(struct mgmt *m, const struct sockaddr *addr, socklen_t len)
{
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_UNLISTEN, NULL, addr, len);
	return rc ? rc : run_sync(m, &c);
}

uint16_t mgmt_listen_port(struct mgmt *m, const struct sockaddr *addr, socklen_t len)
{
	struct cmd c;
	if (cmd_init(m, &c, CMD_LISTEN_PORT, NULL, addr, len))
		return 0;
	int rc = run_sync(m, &c);
	return rc > 0 ? (uint16_t)rc : 0;
}

int mgmt_listen_fd_number(struct mgmt *m, const struct sockaddr *addr, socklen_t len)
{
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_LISTEN_FD, NULL, addr, len);
	return rc ? rc : run_sync(m, &c);
}

/* A pointer the thread reads, not a command: the state lock would wait for
 * the thread just started by mgmt_create to reach its first poll (a fork
 * child starting its ferry waited 148 us for it, measured under pgbench -C). */
int mgmt_answer_on_control(struct mgmt *m, struct rpc *rpc)
{
	__atomic_store_n(&m->ctl_rpc, rpc, __ATOMIC_RELEASE);
	return 0;
}

int mgmt_peer_addr(struct mgmt *m, struct rpc *rpc, int session, struct sockaddr_storage *out,
		   socklen_t *len)
{
	struct cmd c;
	cmd_init(m, &c, CMD_PEER_ADDR, rpc, NULL, 0);
	c.session = session;
	int rc = run_sync(m, &c);
	if (rc == 0) {
		memcpy(out, &c.addr.ss, c.addr.len);
		*len = c.addr.len;
	}
	return rc;
}

int mgmt_listen_dormant(struct mgmt *m, const struct sockaddr *addr, socklen_t len, bool dormant)
{
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_LISTEN_DORMANT, NULL, addr, len);
	if (rc)
		return rc;
	c.flags = dormant;
	return run_sync(m, &c);
}

int mgmt_connect(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		 unsigned timeout_ms)
{
	return mgmt_connect_flags(m, rpc, addr, len, timeout_ms, 0);
}

int mgmt_connect_flags(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		       unsigned timeout_ms, unsigned flags)
{
	if (mgmt_self == m)
		return -EDEADLK;
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_CONNECT, rpc, addr, len);
	if (rc)
		return rc;
	c.flags = flags;
	c.timeout_ms = timeout_ms;
	c.sync = true;
	return submit(m, &c);
}

int mgmt_connect_async(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr,
		       socklen_t len, unsigned timeout_ms, mgmt_connect_fn done, void *ctx)
{
	return mgmt_connect_async_flags(m, rpc, addr, len, timeout_ms, 0, done, ctx);
}

int mgmt_connect_async_flags(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr,
			     socklen_t len, unsigned timeout_ms, unsigned flags,
			     mgmt_connect_fn done, void *ctx)
{
	struct cmd *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	int rc = cmd_init(m, c, CMD_CONNECT, rpc, addr, len);
	if (!rc) {
		c->flags = flags;
		c->timeout_ms = timeout_ms;
		c->fn = done;
		c->ctx = ctx;
		rc = submit(m, c);
	}
	if (rc)
		free(c);
	return rc;
}

void mgmt_disconnect(struct mgmt *m, struct rpc *rpc, int session)
{
	struct cmd c;
	cmd_init(m, &c, CMD_DISCONNECT, rpc, NULL, 0);
	c.session = session;
	run_sync(m, &c);
}

void mgmt_forget_rpc(struct mgmt *m, struct rpc *rpc)
{
	struct cmd c;
	cmd_init(m, &c, CMD_FORGET, rpc, NULL, 0);
	run_sync(m, &c);
}

