/* Datagrams sent after the endpoint lock is let go: see txdefer.h. */
#include "autoconfig.h"

#include "transport/txdefer.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "transport/clock.h"
#include "transport/cpu_relax.h"
#include "transport/log.h"
#include "transport/sys.h"

struct txdefer_dgram {
	int fd;
	socklen_t tolen;
	uint32_t len;
	uint32_t weight;
	uint64_t *failures;
	struct sockaddr_storage to;
	uint8_t data[TXDEFER_BYTES];
};

struct txdefer_queue {
	struct txdefer_queue *next, *prev; /* every thread's, under txdefer_reg_lock */
	int staged; /* atomic: datagrams wait here (other threads' quiesce reads it) */
	unsigned n;
	struct txdefer_dgram d[TXDEFER_MAX];
};

/* Looks at other threads' staging before txdefer_quiesce yields the CPU. */
#define TXDEFER_QUIESCE_SPINS 1024

static __thread int txdefer_depth __attribute__((tls_model("initial-exec")));
static __thread struct txdefer_queue *txdefer_q __attribute__((tls_model("initial-exec")));
/* Each thread marks its own queue rather than a shared count, whose cache
 * line would bounce between the threads at every send. */
static pthread_mutex_t txdefer_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct txdefer_queue *txdefer_reg;
static pthread_key_t txdefer_key;
/* fds txdefer_close left open for other threads' staged datagrams, under
 * txdefer_reg_lock; txdefer_graves counts them (atomic). */
#define TXDEFER_GRAVES 64
static int txdefer_grave[TXDEFER_GRAVES];
static unsigned txdefer_graves;
static pthread_once_t txdefer_once = PTHREAD_ONCE_INIT;
static bool txdefer_key_ok;

static void txdefer_queue_free(void *p)
{
	struct txdefer_queue *q = p;
	/* Other keys' destructors (the waiter's) may still quiesce. */
	txdefer_q = NULL;
	/* A thread cancelled inside its flush leaves nothing to wait for. */
	__atomic_store_n(&q->staged, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&txdefer_reg_lock);
	if (q->prev)
		q->prev->next = q->next;
	else
		txdefer_reg = q->next;
	if (q->next)
		q->next->prev = q->prev;
	pthread_mutex_unlock(&txdefer_reg_lock);
	free(q);
}

static void txdefer_key_make(void)
{
	txdefer_key_ok = pthread_key_create(&txdefer_key, txdefer_queue_free) == 0;
}

static struct txdefer_queue *txdefer_queue(void)
{
	if (txdefer_q)
		return txdefer_q;
	pthread_once(&txdefer_once, txdefer_key_make);
	if (!txdefer_key_ok)
		return NULL;
	struct txdefer_queue *q = malloc(sizeof(*q));
	if (!q)
		return NULL;
	q->n = 0;
	q->staged = 0;
	if (pthread_setspecific(txdefer_key, q) != 0) {
		free(q);
		return NULL;
	}
	pthread_mutex_lock(&txdefer_reg_lock);
	q->prev = NULL;
	q->next = txdefer_reg;
	if (txdefer_reg)
		txdefer_reg->prev = q;
	txdefer_reg = q;
	pthread_mutex_unlock(&txdefer_reg_lock);
	txdefer_q = q;
	return q;
}

static void txdefer_fail(struct txdefer_dgram *d)
{
	if (d->failures)
		__atomic_add_fetch(d->failures, d->weight, __ATOMIC_RELAXED);
}

static void txdefer_reap(bool wait);

/* Sends the thread's staged datagrams, runs of one fd in one system call. */
static void txdefer_send_staged(struct txdefer_queue *q)
{
	struct mmsghdr m[TXDEFER_MAX];
	struct iovec v[TXDEFER_MAX];
	unsigned i = 0;
	while (i < q->n) {
		unsigned run = 0;
		while (i + run < q->n && q->d[i + run].fd == q->d[i].fd) {
			struct txdefer_dgram *d = &q->d[i + run];
			v[run] = (struct iovec){.iov_base = d->data, .iov_len = d->len};
			m[run].msg_hdr = (struct msghdr){.msg_name = d->tolen ? &d->to : NULL,
							 .msg_namelen = d->tolen,
							 .msg_iov = &v[run],
							 .msg_iovlen = 1};
			run++;
		}
		int r;
		if (run == 1)
			r = sys()->sendmsg(q->d[i].fd, &m[0].msg_hdr, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0
				    ? 1
				    : -1;
		else
			r = sys()->sendmmsg(q->d[i].fd, m, run, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			/* Lost as on a wire: go-back-N sends it again. */
			txdefer_fail(&q->d[i]);
			i++;
			continue;
		}
		i += (unsigned)r;
	}
	__atomic_store_n(&q->n, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&q->staged, 0, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&txdefer_graves, __ATOMIC_SEQ_CST))
		txdefer_reap(false);
}

void txdefer_flush(void)
{
	struct txdefer_queue *q = txdefer_q;
	if (q && q->n)
		txdefer_send_staged(q);
}

void txdefer_begin(void)
{
	txdefer_depth++;
}

void txdefer_end(void)
{
	if (--txdefer_depth == 0)
		txdefer_flush();
}

bool txdefer_add(int fd, const struct sockaddr *to, socklen_t tolen, const struct iovec *iov,
		 size_t iovcnt, size_t len, uint64_t *failures, uint32_t weight)
{
	if (txdefer_depth <= 0)
		return false;
	struct txdefer_queue *q = len > TXDEFER_BYTES || tolen > sizeof(struct sockaddr_storage)
					  ? NULL
					  : txdefer_queue();
	if (!q || q->n == TXDEFER_MAX) {
		/* The caller sends this one now: what is staged leaves first, so
		 * the order on the wire holds. */
		txdefer_flush();
		return false;
	}
	struct txdefer_dgram *d = &q->d[q->n];
	size_t off = 0;
	for (size_t i = 0; i < iovcnt && off < len; i++) {
		size_t k = iov[i].iov_len < len - off ? iov[i].iov_len : len - off;
		memcpy(d->data + off, iov[i].iov_base, k);
		off += k;
	}
	__atomic_store_n(&d->fd, fd, __ATOMIC_RELAXED);
	d->len = (uint32_t)off;
	d->weight = weight;
	d->failures = failures;
	d->tolen = to ? tolen : 0;
	if (d->tolen)
		memcpy(&d->to, to, tolen);
	unsigned n = q->n;
	__atomic_store_n(&q->n, n + 1, __ATOMIC_RELEASE);
	if (n == 0)
		__atomic_store_n(&q->staged, 1, __ATOMIC_SEQ_CST);
	return true;
}

/* Whether q may hold a datagram for fd (any, for fd -1). Its owner cannot
 * stage another for fd meanwhile: staging happens under the endpoint lock,
 * which the caller holds or which no longer reaches fd. Entries read while
 * the owner sends and empties q only make the answer err towards yes. */
static bool txdefer_holds(struct txdefer_queue *q, int fd)
{
	if (!__atomic_load_n(&q->staged, __ATOMIC_SEQ_CST))
		return false;
	if (fd < 0)
		return true;
	unsigned n = __atomic_load_n(&q->n, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < n && i < TXDEFER_MAX; i++)
		if (__atomic_load_n(&q->d[i].fd, __ATOMIC_RELAXED) == fd)
			return true;
	return false;
}

/* Waits until q holds nothing for fd, spinning first; false after 1 s. */
static bool txdefer_wait_sent(struct txdefer_queue *q, int fd)
{
	for (int i = 0; i < TXDEFER_QUIESCE_SPINS; i++) {
		if (!txdefer_holds(q, fd))
			return true;
		cpu_relax();
	}
	uint64_t end = clock_now_ns() + 1000000000ull;
	while (txdefer_holds(q, fd)) {
		if (clock_now_ns() > end)
			return false;
		sched_yield();
	}
	return true;
}

bool txdefer_quiesce_fd(int fd)
{
	txdefer_flush();
	/* Another thread's datagrams leave right after it lets its lock go: a
	 * few microseconds (spun out: a yield per look cost a fork-per-
	 * connection server's management thread 20 us a closed session), or
	 * its time off the CPU. One that never sends them is stuck for good;
	 * its datagrams are then dropped with the fd. */
	bool ok = true;
	pthread_mutex_lock(&txdefer_reg_lock);
	for (struct txdefer_queue *q = txdefer_reg; q; q = q->next) {
		if (q != txdefer_q && !txdefer_wait_sent(q, fd)) {
			log_warn("txdefer: a thread kept datagrams unsent for 1 s; closing anyway");
			ok = false;
			break;
		}
	}
	pthread_mutex_unlock(&txdefer_reg_lock);
	return ok;
}

bool txdefer_quiesce(void)
{
	bool ok = txdefer_quiesce_fd(-1);
	txdefer_reap(true);
	return ok;
}

/* Whether another thread's queue may hold a datagram for fd; under
 * txdefer_reg_lock. */
static bool txdefer_held_elsewhere(int fd)
{
	for (struct txdefer_queue *q = txdefer_reg; q; q = q->next)
		if (q != txdefer_q && txdefer_holds(q, fd))
			return true;
	return false;
}

/* Closes the fds left open whose datagrams have gone. A thread that just
 * sent its own does not wait for the list (wait false): whoever holds it
 * reaps, or the next to send. */
static void txdefer_reap(bool wait)
{
	if (wait)
		pthread_mutex_lock(&txdefer_reg_lock);
	else if (pthread_mutex_trylock(&txdefer_reg_lock) != 0)
		return;
	unsigned k = 0;
	for (unsigned i = 0; i < txdefer_graves; i++) {
		int fd = txdefer_grave[i];
		if (txdefer_held_elsewhere(fd))
			txdefer_grave[k++] = fd;
		else
			sys()->close(fd);
	}
	__atomic_store_n(&txdefer_graves, k, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&txdefer_reg_lock);
}

void txdefer_close(int fd)
{
	txdefer_flush();
	pthread_mutex_lock(&txdefer_reg_lock);
	if (!txdefer_held_elsewhere(fd)) {
		pthread_mutex_unlock(&txdefer_reg_lock);
		sys()->close(fd);
		return;
	}
	if (txdefer_graves < TXDEFER_GRAVES) {
		/* The number stays taken until the last datagram for it has
		 * gone, so none can reach a socket that reuses it. The holder
		 * closes it after its send, unless that send raced this: then
		 * the next thread's send does. */
		txdefer_grave[txdefer_graves] = fd;
		__atomic_store_n(&txdefer_graves, txdefer_graves + 1, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&txdefer_reg_lock);
		return;
	}
	pthread_mutex_unlock(&txdefer_reg_lock);
	txdefer_quiesce_fd(fd);
	sys()->close(fd);
}

void txdefer_fork_child(void)
{
	/* The parent's other threads are not here: their queues stay listed
	 * (as memory still in use, which a leak checker would otherwise
	 * report), with nothing in them for anyone to wait on. */
	pthread_mutex_init(&txdefer_reg_lock, NULL);
	for (struct txdefer_queue *q = txdefer_reg; q; q = q->next) {
		q->n = 0;
		q->staged = 0;
	}
	/* Nothing here sends on the fds the parent left open for its threads. */
	for (unsigned i = 0; i < txdefer_graves; i++)
		sys()->close(txdefer_grave[i]);
	txdefer_graves = 0;
	txdefer_depth = 0;
}
