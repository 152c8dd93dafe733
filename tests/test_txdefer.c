/* txdefer: datagrams staged between begin and end leave at the outermost
 * end, in order and intact; outside a begin nothing is staged; a datagram
 * that cannot be staged lets the staged ones go first; a failed send is
 * counted by weight; quiesce sends the caller's own and waits for other
 * threads' before it returns (for one fd, only for theirs to it); close
 * leaves an fd open until another thread's datagram for it has gone; a fork child sends nothing its parent staged. */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/txdefer.h"

struct rx {
	int fd;
	struct sockaddr_in addr;
};

static struct rx rx_open(void)
{
	struct rx r = {.fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0)};
	cr_assert(r.fd >= 0);
	r.addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert(bind(r.fd, (struct sockaddr *)&r.addr, sizeof(r.addr)) == 0);
	socklen_t len = sizeof(r.addr);
	cr_assert(getsockname(r.fd, (struct sockaddr *)&r.addr, &len) == 0);
	return r;
}

static int tx_open(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	cr_assert(fd >= 0);
	return fd;
}

static bool add_text(int fd, const struct rx *to, const char *text)
{
	struct iovec v[2] = {{(void *)text, 1}, {(void *)(text + 1), strlen(text) - 1}};
	return txdefer_add(fd, (const struct sockaddr *)&to->addr, sizeof(to->addr), v, 2,
			   strlen(text), NULL, 0);
}

/* The next datagram on r, "" when none is waiting. */
static const char *next_text(const struct rx *r)
{
	static char buf[4096];
	ssize_t n = recv(r->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	if (n < 0) {
		cr_assert(errno == EAGAIN || errno == EWOULDBLOCK);
		n = 0;
	}
	buf[n] = '\0';
	return buf;
}

Test(txdefer, nothing_is_staged_outside_a_begin)
{
	struct rx r = rx_open();
	int fd = tx_open();
	cr_assert_not(add_text(fd, &r, "plain"));
	cr_assert_str_empty(next_text(&r));
	close(fd);
	close(r.fd);
}

Test(txdefer, staged_datagrams_leave_at_the_outermost_end_in_order)
{
	struct rx a = rx_open(), b = rx_open();
	int fd = tx_open();
	txdefer_begin();
	txdefer_begin();
	cr_assert(add_text(fd, &a, "a1"));
	cr_assert(add_text(fd, &b, "b1"));
	cr_assert(add_text(fd, &a, "a2"));
	txdefer_end();
	cr_assert_str_empty(next_text(&a), "sent before the outermost end");
	cr_assert_str_empty(next_text(&b));
	txdefer_end();
	cr_assert_str_eq(next_text(&a), "a1");
	cr_assert_str_eq(next_text(&a), "a2");
	cr_assert_str_eq(next_text(&b), "b1");
	cr_assert_str_empty(next_text(&a));
	close(fd);
	close(a.fd);
	close(b.fd);
}

Test(txdefer, a_connected_socket_needs_no_address)
{
	struct rx r = rx_open();
	int fd = tx_open();
	cr_assert(connect(fd, (struct sockaddr *)&r.addr, sizeof(r.addr)) == 0);
	struct iovec v = {(void *)"hello", 5};
	txdefer_begin();
	cr_assert(txdefer_add(fd, NULL, 0, &v, 1, 5, NULL, 0));
	txdefer_end();
	cr_assert_str_eq(next_text(&r), "hello");
	close(fd);
	close(r.fd);
}

Test(txdefer, what_cannot_be_staged_lets_the_staged_go_first)
{
	struct rx r = rx_open();
	int fd = tx_open();
	static char big[TXDEFER_BYTES + 2];
	memset(big, 'x', sizeof(big) - 1);
	txdefer_begin();
	cr_assert(add_text(fd, &r, "small"));
	cr_assert_not(add_text(fd, &r, big), "a datagram over TXDEFER_BYTES was staged");
	/* The caller sends the big one itself, after the staged one left. */
	cr_assert_str_eq(next_text(&r), "small");
	for (unsigned i = 0; i < TXDEFER_MAX; i++)
		cr_assert(add_text(fd, &r, "q"));
	cr_assert_not(add_text(fd, &r, "over"), "more than TXDEFER_MAX were staged");
	for (unsigned i = 0; i < TXDEFER_MAX; i++)
		cr_assert_str_eq(next_text(&r), "q");
	txdefer_end();
	cr_assert_str_empty(next_text(&r));
	close(fd);
	close(r.fd);
}

Test(txdefer, a_failed_send_is_counted_by_its_weight)
{
	int p[2];
	cr_assert(pipe(p) == 0); /* not a socket: sendmsg fails with ENOTSOCK */
	uint64_t failures = 0;
	struct iovec v = {(void *)"x", 1};
	txdefer_begin();
	cr_assert(txdefer_add(p[1], NULL, 0, &v, 1, 1, &failures, 3));
	cr_assert(txdefer_add(p[1], NULL, 0, &v, 1, 1, &failures, 2));
	cr_assert_eq(failures, 0);
	txdefer_end();
	cr_assert_eq(failures, 5);
	close(p[0]);
	close(p[1]);
}

struct stager {
	struct rx *to;
	int fd;
	int staged; /* atomic */
	int go;     /* atomic */
};

static void *stager_main(void *arg)
{
	struct stager *s = arg;
	txdefer_begin();
	cr_assert(add_text(s->fd, s->to, "late"));
	__atomic_store_n(&s->staged, 1, __ATOMIC_RELEASE);
	/* Holds it until quiesce has had every chance to return early. */
	while (!__atomic_load_n(&s->go, __ATOMIC_ACQUIRE))
		usleep(1000);
	txdefer_end();
	return NULL;
}

static void *release_later(void *arg)
{
	struct stager *s = arg;
	usleep(50000);
	__atomic_store_n(&s->go, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(txdefer, quiesce_waits_for_other_threads_datagrams)
{
	struct rx r = rx_open();
	struct stager s = {.to = &r, .fd = tx_open()};
	pthread_t t, rel;
	cr_assert(pthread_create(&t, NULL, stager_main, &s) == 0);
	while (!__atomic_load_n(&s.staged, __ATOMIC_ACQUIRE))
		usleep(1000);
	cr_assert(pthread_create(&rel, NULL, release_later, &s) == 0);
	txdefer_quiesce();
	/* Had it returned before the other thread sent, closing the fd now
	 * could have let the datagram go to whatever reused its number. */
	cr_assert_str_eq(next_text(&r), "late");
	pthread_join(t, NULL);
	pthread_join(rel, NULL);
	close(s.fd);
	close(r.fd);
}

Test(txdefer, quiesce_of_one_fd_waits_only_for_datagrams_to_it)
{
	struct rx r = rx_open();
	struct stager s = {.to = &r, .fd = tx_open()};
	int other = tx_open();
	pthread_t t, rel;
	cr_assert(pthread_create(&t, NULL, stager_main, &s) == 0);
	while (!__atomic_load_n(&s.staged, __ATOMIC_ACQUIRE))
		usleep(1000);
	/* The stager holds its datagram until told: waiting for it here would
	 * time out (false) after a second. */
	cr_assert(txdefer_quiesce_fd(other), "waited for a datagram to another fd");
	cr_assert_str_empty(next_text(&r));
	cr_assert(pthread_create(&rel, NULL, release_later, &s) == 0);
	cr_assert(txdefer_quiesce_fd(s.fd));
	cr_assert_str_eq(next_text(&r), "late");
	pthread_join(t, NULL);
	pthread_join(rel, NULL);
	close(other);
	close(s.fd);
	close(r.fd);
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

Test(txdefer, close_leaves_an_fd_open_until_its_last_datagram_has_gone)
{
	struct rx r = rx_open();
	struct stager s = {.to = &r, .fd = tx_open()};
	int idle = tx_open();
	txdefer_close(idle);
	cr_assert_not(fd_open(idle), "nothing was staged for it, yet it stayed open");
	pthread_t t;
	cr_assert(pthread_create(&t, NULL, stager_main, &s) == 0);
	while (!__atomic_load_n(&s.staged, __ATOMIC_ACQUIRE))
		usleep(1000);
	txdefer_close(s.fd); /* returns at once: the stager holds its datagram until told */
	cr_assert(fd_open(s.fd), "closed under the other thread's staged datagram");
	cr_assert_str_empty(next_text(&r));
	__atomic_store_n(&s.go, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	cr_assert_str_eq(next_text(&r), "late");
	cr_assert_not(fd_open(s.fd), "the sender did not close it after its send");
	close(r.fd);
}

Test(txdefer, quiesce_sends_the_callers_own_at_once)
{
	struct rx r = rx_open();
	int fd = tx_open();
	txdefer_begin();
	cr_assert(add_text(fd, &r, "mine"));
	txdefer_quiesce();
	cr_assert_str_eq(next_text(&r), "mine");
	txdefer_end();
	cr_assert_str_empty(next_text(&r), "sent twice");
	close(fd);
	close(r.fd);
}

Test(txdefer, a_fork_child_sends_nothing_its_parent_staged)
{
	struct rx r = rx_open();
	int fd = tx_open();
	txdefer_begin();
	cr_assert(add_text(fd, &r, "once"));
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		txdefer_fork_child();
		txdefer_begin();
		txdefer_end();
		txdefer_quiesce(); /* would spin for the parent's staging if it counted */
		/* Not exit: memcheck would report the test runner's memory, which
		 * the child still holds, as leaked. */
		raise(SIGKILL);
	}
	int st;
	cr_assert(waitpid(pid, &st, 0) == pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cr_assert_str_empty(next_text(&r), "the child sent the parent's datagram");
	txdefer_end();
	cr_assert_str_eq(next_text(&r), "once");
	cr_assert_str_empty(next_text(&r));
	close(fd);
	close(r.fd);
}
