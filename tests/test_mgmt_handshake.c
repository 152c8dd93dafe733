/* Session handshake over the management channel: two nexuses in one process over udp. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mgmt/mgmt_net.h"
#include "mgmt/mgmt_wire.h"
#include "test_mgmt_util.h"
#include "transport/pkthdr.h"

static struct nexus *server, *client;
static struct tmu_looper server_loop;
static uint16_t port;

static void setup(void)
{
	server = tmu_nexus(0, 0);
	client = tmu_nexus(0, 0);
	port = tmu_serve(server);
	tmu_loop_start(&server_loop, nexus_rpc(server));
}

static void teardown(void)
{
	tmu_loop_stop(&server_loop);
	nexus_destroy(client);
	nexus_destroy(server);
}

static int connect_port(uint16_t p, unsigned timeout_ms)
{
	struct sockaddr_in a = tmu_loopback(p);
	return mgmt_connect(nexus_mgmt(client), nexus_rpc(client), (struct sockaddr *)&a, sizeof(a),
			    timeout_ms);
}

/* A plain UDP socket on 127.0.0.1 with an ephemeral port, and a receive
 * timeout that only guards against a hang. */
static int raw_socket(uint16_t *bound)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = tmu_loopback(0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	socklen_t len = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &len);
	*bound = ntohs(a.sin_port);
	struct timeval tv = {.tv_sec = 20};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_to_port(int fd, const void *buf, size_t len, uint16_t p)
{
	struct sockaddr_in a = tmu_loopback(p);
	cr_assert_eq(sendto(fd, buf, len, 0, (struct sockaddr *)&a, sizeof(a)), (ssize_t)len);
}

/* Receives until a message of the type arrives (the server also pings). */
static void recv_type(int fd, enum mgmt_msg_type type, struct mgmt_msg *out)
{
	for (;;) {
		uint8_t buf[512];
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		cr_assert_gt(n, 0, "nothing received: %s", strerror(errno));
		cr_assert_eq(mgmt_wire_decode(buf, (size_t)n, out), 0);
		if (out->type == type)
			return;
	}
}

static uint64_t stat_of(struct nexus *nx, size_t offset)
{
	return __atomic_load_n((uint64_t *)(void *)((char *)nexus_stats(nx) + offset),
			       __ATOMIC_RELAXED);
}
#define STAT(nx, field) stat_of(nx, offsetof(struct ferry_stats, field))

TestSuite(mgmt_handshake, .init = setup, .fini = teardown, .timeout = 60);

Test(mgmt_handshake, connect_installs_a_working_session)
{
	int s = connect_port(port, 5000);
	cr_assert_geq(s, 0, "mgmt_connect: %s", strerror(-s));
	struct rpc *rpc = nexus_rpc(client);
	rpc_lock(rpc);
	cr_assert(rpc_session_is_up(rpc, s));
	rpc_unlock(rpc);
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 3000, &c), 0);
	cr_assert_eq(c.resp_size, 3000);
	cr_assert_eq(c.resp_first, 0x5a);
	cr_assert_eq(STAT(client, sessions), 1);
	cr_assert_eq(STAT(server, sessions), 1);
}

Test(mgmt_handshake, live_session_is_reused)
{
	int s1 = connect_port(port, 5000);
	cr_assert_geq(s1, 0);
	int s2 = connect_port(port, 5000);
	cr_assert_eq(s2, s1);
	cr_assert_eq(STAT(client, sessions), 1);
	cr_assert_eq(STAT(server, sessions), 1);
}

/* A handshake as the client's endpoint would start it, sent by hand. */
static struct mgmt_msg client_req(uint64_t token, uint64_t uuid, uint16_t session)
{
	struct mgmt_msg req = {.type = MGMT_CONNECT_REQ, .token = token, .uuid = uuid,
			       .session = session, .data_per_pkt = RPC_MIN_PKT_DATA};
	struct rpc *crpc = nexus_rpc(client);
	rpc_lock(crpc);
	rpc_local_route(crpc, &req.route);
	rpc_unlock(crpc);
	return req;
}

Test(mgmt_handshake, duplicate_connect_req_gets_the_same_session)
{
	uint16_t raw_port;
	int fd = raw_socket(&raw_port);
	struct mgmt_msg req = client_req(0x1122334455667788ull, 0xabcdef0123456789ull, 7);
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t len = mgmt_wire_encode(&req, buf);

	struct mgmt_msg r1, r2;
	send_to_port(fd, buf, len, port);
	recv_type(fd, MGMT_CONNECT_RESP, &r1);
	send_to_port(fd, buf, len, port);
	recv_type(fd, MGMT_CONNECT_RESP, &r2);
	close(fd);

	cr_assert_eq(r1.status, 0);
	cr_assert_eq(r1.token, req.token);
	cr_assert_eq(r2.token, req.token);
	cr_assert_eq(r2.session, r1.session);
	cr_assert_eq(r2.data_per_pkt, r1.data_per_pkt);
	cr_assert_eq(r1.data_per_pkt, RPC_MIN_PKT_DATA, "agreed payload is at most the client's");
	cr_assert_eq(r1.uuid, mgmt_uuid(nexus_mgmt(server)));
	cr_assert_eq(STAT(server, sessions), 1);
}

/* Prefork workers share a rendezvous socket and each may answer a retried
 * handshake (same token); the client's goodbye to the answer it did not
 * use reaches whichever worker reads the socket, and must end nothing but
 * the session of the process it names. */
Test(mgmt_handshake, a_goodbye_meant_for_another_process_leaves_the_session_up)
{
	uint16_t raw_port;
	int fd = raw_socket(&raw_port);
	struct mgmt_msg req = client_req(0x5566778899aabbccull, 0x1234567890abcdefull, 3);
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t len = mgmt_wire_encode(&req, buf);
	struct mgmt_msg r;
	send_to_port(fd, buf, len, port);
	recv_type(fd, MGMT_CONNECT_RESP, &r);
	cr_assert_eq(r.status, 0);
	cr_assert_eq(STAT(server, sessions), 1);

	uint64_t me = mgmt_uuid(nexus_mgmt(server));
	struct mgmt_msg bye = {.type = MGMT_DISCONNECT, .token = req.token, .uuid = req.uuid,
			       .to = me + 1};
	len = mgmt_wire_encode(&bye, buf);
	send_to_port(fd, buf, len, port);
	/* Then a message the server answers, so the goodbye was read by then. */
	send_to_port(fd, buf, mgmt_wire_encode(&req, buf), port);
	recv_type(fd, MGMT_CONNECT_RESP, &r);
	cr_assert_eq(STAT(server, sessions_closed), 0, "a goodbye to another process ended ours");

	bye.to = me;
	send_to_port(fd, buf, mgmt_wire_encode(&bye, buf), port);
	close(fd);
	while (STAT(server, sessions_closed) != 1) /* the suite timeout guards */
		usleep(1000);
}

/* A client of a fork-per-connection server is dialled by every new backend
 * (pgbench -C against postgres): thousands of closed sessions, each kept as
 * a tombstone. A request retried late for any of them is still ignored, and
 * a new one still answered. */
Test(mgmt_handshake, a_late_retry_for_any_of_many_closed_sessions_is_ignored)
{
	uint16_t raw_port;
	int fd = raw_socket(&raw_port);
	uint64_t me = mgmt_uuid(nexus_mgmt(server));
	const unsigned n = 2000;
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	struct mgmt_msg r;
	for (unsigned i = 0; i < n; i++) {
		struct mgmt_msg req = client_req(0x7000000000000000ull + i, 0x4242000000000000ull + i, 1);
		send_to_port(fd, buf, mgmt_wire_encode(&req, buf), port);
		recv_type(fd, MGMT_CONNECT_RESP, &r);
		cr_assert_eq(r.status, 0);
		struct mgmt_msg bye = {.type = MGMT_DISCONNECT, .token = req.token, .uuid = req.uuid,
				       .to = me};
		send_to_port(fd, buf, mgmt_wire_encode(&bye, buf), port);
	}
	while (STAT(server, sessions_closed) != n) /* the suite timeout guards */
		usleep(1000);
	for (unsigned i = 0; i < n; i += n / 4 - 1) {
		struct mgmt_msg late = client_req(0x7000000000000000ull + i, 0x4242000000000000ull + i, 1);
		send_to_port(fd, buf, mgmt_wire_encode(&late, buf), port);
	}
	/* Read in order after the late ones: once this is answered, they were judged. */
	struct mgmt_msg fresh = client_req(0x7100000000000000ull, 0x4343000000000000ull, 1);
	send_to_port(fd, buf, mgmt_wire_encode(&fresh, buf), port);
	recv_type(fd, MGMT_CONNECT_RESP, &r);
	close(fd);
	cr_assert_eq(r.token, fresh.token, "a late retry for a closed session was answered");
	cr_assert_eq(r.status, 0);
	cr_assert_eq(STAT(server, sessions), n + 1, "a late retry raised a closed session again");
}

/* A fork-per-connection server asks mgmt several things per connection
 * (its peer's address, a listener dormant or not, a session's end): each
 * is answered on the asking thread, never by waking the management thread,
 * so each still works while that thread is held (as at a fork). */
Test(mgmt_handshake, questions_that_wait_for_no_peer_are_answered_while_the_thread_is_held)
{
	int s = connect_port(port, 5000);
	cr_assert_geq(s, 0);
	struct mgmt *sm = nexus_mgmt(server), *cm = nexus_mgmt(client);
	struct sockaddr_in a = tmu_loopback(port);
	mgmt_hold(sm);
	mgmt_hold(cm);
	cr_assert_geq(mgmt_listen_fd_number(sm, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(mgmt_listen_dormant(sm, (struct sockaddr *)&a, sizeof(a), true), 0);
	cr_assert_eq(mgmt_listen_dormant(sm, (struct sockaddr *)&a, sizeof(a), false), 0);
	struct sockaddr_storage peer;
	socklen_t plen = 0;
	cr_assert_eq(mgmt_peer_addr(cm, nexus_rpc(client), s, &peer, &plen), 0);
	cr_assert_gt(plen, 0);
	mgmt_disconnect(cm, nexus_rpc(client), s);
	cr_assert_eq(STAT(client, sessions_closed), 1);
	mgmt_release(cm);
	mgmt_release(sm);
	/* The server hears the goodbye once its thread runs again. */
	while (STAT(server, sessions_closed) != 1) /* the suite timeout guards */
		usleep(1000);
	cr_assert_geq(connect_port(port, 5000), 0, "the listener answers after dormant and back");
}

/* Going dormant does not wake the management thread, which may still be
 * polling the rendezvous socket: what arrives there meanwhile waits for a
 * holder that accepts, as in a shared TCP accept queue. */
Test(mgmt_handshake, a_listener_gone_dormant_answers_no_one_until_it_wakes)
{
	struct mgmt *sm = nexus_mgmt(server);
	struct sockaddr_in a = tmu_loopback(port);
	cr_assert_eq(mgmt_listen_dormant(sm, (struct sockaddr *)&a, sizeof(a), true), 0);
	cr_assert_eq(connect_port(port, 300), -ETIMEDOUT, "a dormant listener answered");
	cr_assert_eq(mgmt_listen_dormant(sm, (struct sockaddr *)&a, sizeof(a), false), 0);
	cr_assert_geq(connect_port(port, 5000), 0, "the listener answers after it wakes");
}

/* A fork child that takes a connection over dials its peer at once, with
 * the address read from its copy of the parent's tables (frozen across the
 * fork), while the parent still stops the stream. */
Test(mgmt_handshake, a_fork_child_reads_the_peer_address_the_parent_had)
{
	int s = connect_port(port, 5000);
	cr_assert_geq(s, 0);
	struct mgmt *cm = nexus_mgmt(client);
	struct sockaddr_storage want;
	socklen_t wlen = 0;
	cr_assert_eq(mgmt_peer_addr(cm, nexus_rpc(client), s, &want, &wlen), 0);
	mgmt_hold(cm);
	mgmt_freeze(cm);
	pid_t pid = fork();
	if (pid == 0) {
		struct sockaddr_storage got;
		socklen_t glen = 0;
		int rc = mgmt_peer_addr_forked(cm, nexus_rpc(client), s, &got, &glen);
		int none = mgmt_peer_addr_forked(cm, nexus_rpc(client), s + 1, &got, &glen);
		_exit(rc == 0 && glen == wlen && memcmp(&got, &want, wlen) == 0 && none == -ENOENT
			      ? 0
			      : 1);
	}
	mgmt_thaw(cm);
	mgmt_release(cm);
	cr_assert_gt(pid, 0);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child read another address than the parent's");
}

/* A fork child's first handshake goes where its parent's did (postgres's
 * backend to its postmaster's client): the route's MTU the parent asked the
 * kernel about is the child's too, not asked again. */
Test(mgmt_handshake, a_fork_childs_handshake_asks_the_route_nothing_the_parent_knew)
{
	uint64_t asks = mgmt_net_mtu_asks();
	cr_assert_geq(connect_port(port, 5000), 0);
	cr_assert_gt(mgmt_net_mtu_asks(), asks, "the parent never asked: nothing to hand over");
	struct mgmt *cm = nexus_mgmt(client);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	mgmt_hold(cm);
	mgmt_freeze(cm);
	pid_t pid = fork();
	if (pid == 0) {
		mgmt_forked_child(cm);
		struct nexus *mine = tmu_nexus(0, 0);
		struct sockaddr_in a = tmu_loopback(port);
		uint64_t before = mgmt_net_mtu_asks();
		int64_t out[2];
		out[0] = mgmt_connect(nexus_mgmt(mine), nexus_rpc(mine), (struct sockaddr *)&a,
				      sizeof(a), 5000);
		out[1] = (int64_t)(mgmt_net_mtu_asks() - before);
		ssize_t w = write(p[1], out, sizeof(out));
		(void)w;
		raise(SIGKILL); /* no exit handler of the parent's runs here */
	}
	mgmt_thaw(cm);
	mgmt_release(cm);
	cr_assert_gt(pid, 0);
	int64_t got[2];
	cr_assert_eq(read(p[0], got, sizeof(got)), (ssize_t)sizeof(got));
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert_geq(got[0], 0, "the child's handshake failed: %s", strerror((int)-got[0]));
	cr_assert_eq(got[1], 0, "the child asked the route %lld time(s)", (long long)got[1]);
	close(p[0]);
	close(p[1]);
}

Test(mgmt_handshake, closed_port_is_refused_not_timed_out)
{
	uint16_t dead;
	close(raw_socket(&dead));
	/* The timeout is long: only the ICMP error can produce -ECONNREFUSED. */
	cr_assert_eq(connect_port(dead, 30000), -ECONNREFUSED);
	cr_assert_eq(STAT(client, sessions), 0);
}

Test(mgmt_handshake, silent_port_times_out_after_retries)
{
	uint16_t silent;
	int fd = raw_socket(&silent);
	cr_assert_eq(connect_port(silent, 300), -ETIMEDOUT);
	/* The requests did arrive, and were retried with one token. */
	unsigned n = 0;
	uint64_t token = 0;
	uint8_t buf[512];
	ssize_t len;
	while ((len = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		struct mgmt_msg m;
		cr_assert_eq(mgmt_wire_decode(buf, (size_t)len, &m), 0);
		cr_assert_eq(m.type, MGMT_CONNECT_REQ);
		if (n++ == 0)
			token = m.token;
		cr_assert_eq(m.token, token);
	}
	close(fd);
	cr_assert_geq(n, 2);
	cr_assert_eq(STAT(client, sessions), 0);
}

Test(mgmt_handshake, malformed_datagrams_are_dropped_and_counted)
{
	uint16_t raw_port;
	int fd = raw_socket(&raw_port);
	struct mgmt_msg ping = {.type = MGMT_PING, .uuid = 1};
	uint8_t good[MGMT_WIRE_MAX_SIZE];
	size_t glen = mgmt_wire_encode(&ping, good);

	uint8_t bad[MGMT_WIRE_MAX_SIZE + 64];
	unsigned sent = 0;
	send_to_port(fd, "x", 1, port); /* short */
	sent++;
	memcpy(bad, good, glen);
	bad[0] ^= 0xff; /* magic */
	send_to_port(fd, bad, glen, port);
	sent++;
	memcpy(bad, good, glen);
	bad[4] = MGMT_WIRE_VERSION + 1;
	send_to_port(fd, bad, glen, port);
	sent++;
	memcpy(bad, good, glen);
	bad[5] = 99; /* type */
	send_to_port(fd, bad, glen, port);
	sent++;
	memcpy(bad, good, glen);
	bad[glen] = 0; /* longer than its header says */
	send_to_port(fd, bad, glen + 1, port);
	sent++;
	struct mgmt_msg req = {.type = MGMT_CONNECT_REQ, .token = 5, .uuid = 6,
			       .data_per_pkt = RPC_MIN_PKT_DATA};
	size_t rlen = mgmt_wire_encode(&req, bad);
	bad[MGMT_WIRE_HDR_SIZE + 8 + 1] = NIC_ROUTE_BYTES + 1; /* route length */
	send_to_port(fd, bad, rlen, port);
	sent++;
	struct pkthdr dp = {.magic = PKTHDR_MAGIC}; /* a datapath packet */
	send_to_port(fd, &dp, sizeof(dp), port);
	sent++;
	close(fd);

	/* A real connect afterwards: it reaches the same socket after the
	 * junk, so once it succeeds every datagram above was judged. */
	cr_assert_geq(connect_port(port, 5000), 0);
	cr_assert_eq(STAT(server, mgmt_drops), sent);
	cr_assert_eq(STAT(server, sessions), 1);
}

Test(mgmt_handshake, taken_port_is_refused)
{
	uint16_t taken;
	int fd = raw_socket(&taken);
	struct sockaddr_in a = tmu_loopback(taken);
	cr_assert_eq(mgmt_listen(nexus_mgmt(client), nexus_rpc(client), (struct sockaddr *)&a,
				 sizeof(a)),
		     -EADDRINUSE);
	close(fd);
	a = tmu_loopback(port);
	cr_assert_eq(mgmt_listen(nexus_mgmt(server), nexus_rpc(server), (struct sockaddr *)&a,
				 sizeof(a)),
		     -EADDRINUSE);
}

Test(mgmt_handshake, disconnect_closes_both_sides)
{
	int s = connect_port(port, 5000);
	cr_assert_geq(s, 0);
	mgmt_disconnect(nexus_mgmt(client), nexus_rpc(client), s);
	struct rpc *rpc = nexus_rpc(client);
	rpc_lock(rpc);
	cr_assert_not(rpc_session_is_up(rpc, s));
	rpc_unlock(rpc);
	cr_assert_eq(STAT(client, sessions_closed), 1);
	/* The server hears DISCONNECT asynchronously; the suite timeout guards. */
	while (STAT(server, sessions_closed) != 1)
		usleep(1000);
	int s2 = connect_port(port, 5000);
	cr_assert_geq(s2, 0);
	cr_assert_eq(STAT(server, sessions), 2);
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s2, ECHO_REQ, 10, &c), 0);
}

Test(mgmt_handshake, unlisten_stops_answering)
{
	struct sockaddr_in a = tmu_loopback(port);
	cr_assert_eq(mgmt_unlisten(nexus_mgmt(server), (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(mgmt_listen_port(nexus_mgmt(server), (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(connect_port(port, 30000), -ECONNREFUSED);
}

/* SO_REUSEPORT listeners share the rendezvous port: with this endpoint's
 * own (one socket answers until the last lets go) and with another process's. */
Test(mgmt_handshake, reuseport_listeners_share_the_rendezvous_port)
{
	struct sockaddr_in any = tmu_loopback(0);
	uint16_t p;
	int fd = mgmt_rendezvous_socket((struct sockaddr *)&any, sizeof(any), &p);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = tmu_loopback(p);
	struct mgmt *m = nexus_mgmt(server);
	struct rpc *rpc = nexus_rpc(server);
	cr_assert_eq(mgmt_listen_fd(m, rpc, (struct sockaddr *)&a, sizeof(a), fd, 0), 0,
		     "on the reserved socket");
	cr_assert_eq(mgmt_listen_fd(m, rpc, (struct sockaddr *)&a, sizeof(a), -1,
				    MGMT_LISTEN_REUSEPORT),
		     -EADDRINUSE, "the first listener did not share its port");
	cr_assert_eq(mgmt_unlisten(m, (struct sockaddr *)&a, sizeof(a)), 0);

	cr_assert_eq(mgmt_listen_fd(m, rpc, (struct sockaddr *)&a, sizeof(a), -1,
				    MGMT_LISTEN_REUSEPORT), 0);
	cr_assert_eq(mgmt_listen_fd(m, rpc, (struct sockaddr *)&a, sizeof(a), -1,
				    MGMT_LISTEN_REUSEPORT), 0, "a second listener of this endpoint");
	cr_assert_eq(mgmt_listen_fd(m, rpc, (struct sockaddr *)&a, sizeof(a), -1, 0), -EADDRINUSE,
		     "a listener without SO_REUSEPORT");
	/* Another process's socket with SO_REUSEPORT joins the port. */
	int other = socket(AF_INET, SOCK_DGRAM, 0);
	setsockopt(other, SOL_SOCKET, SO_REUSEPORT, &(int){1}, sizeof(int));
	cr_assert_eq(bind(other, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
	close(other);
	cr_assert_eq(mgmt_unlisten(m, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_geq(connect_port(p, 5000), 0, "still answering for the other listener");
	cr_assert_eq(mgmt_unlisten(m, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(mgmt_listen_port(m, (struct sockaddr *)&a, sizeof(a)), 0, "gone with the last");
}

Test(mgmt_handshake, ferry_peers_are_connected_in_advance)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.transport = FERRY_TRANSPORT_UDP;
	cfg.log_level = FERRY_LOG_ERROR;
	cfg.connect_timeout_ms = 30000; /* slow runs (valgrind) must not time out */
	/* One good peer, one that is not there, one that does not parse. */
	uint16_t dead;
	close(raw_socket(&dead));
	snprintf(cfg.peers, sizeof(cfg.peers), "127.0.0.1:%u, 127.0.0.1:%u,nonsense", port, dead);
	char msg[256];
	int err;
	struct nexus *nx = nexus_create(&cfg, &err, msg, sizeof(msg));
	cr_assert_not_null(nx, "%s", msg);
	while (STAT(nx, sessions) != 1) /* asynchronous; the suite timeout guards */
		usleep(1000);
	struct sockaddr_in a = tmu_loopback(port);
	int s = mgmt_connect(nexus_mgmt(nx), nexus_rpc(nx), (struct sockaddr *)&a, sizeof(a), 5000);
	cr_assert_geq(s, 0);
	cr_assert_eq(STAT(nx, sessions), 1, "the pre-connected session is the one used");
	cr_assert_eq(STAT(server, sessions), 1);
	nexus_destroy(nx);
}

Test(mgmt_handshake, session_reset_by_the_endpoint_is_closed_on_both_sides)
{
	int s = connect_port(port, 5000);
	cr_assert_geq(s, 0);
	struct rpc *rpc = nexus_rpc(client);
	rpc_lock(rpc);
	rpc_session_reset(rpc, s, -ECONNRESET);
	rpc_unlock(rpc);
	/* mgmt's next sweep notices and tells the server; the suite timeout guards. */
	while (STAT(server, sessions_closed) != 1)
		usleep(1000);
	cr_assert_eq(STAT(client, sessions_closed), 1);
	int s2 = connect_port(port, 5000);
	cr_assert_geq(s2, 0);
	cr_assert_eq(STAT(client, sessions), 2);
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s2, ECHO_REQ, 10, &c), 0);
}

Test(mgmt_handshake, other_datapath_is_refused)
{
	uint16_t raw_port;
	int fd = raw_socket(&raw_port);
	struct mgmt_msg req = {.type = MGMT_CONNECT_REQ, .token = 77, .uuid = 78, .session = 1,
			       .data_per_pkt = RPC_MIN_PKT_DATA};
	req.route.kind = FERRY_TRANSPORT_IB;
	req.route.len = 4;
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t len = mgmt_wire_encode(&req, buf);
	send_to_port(fd, buf, len, port);
	struct mgmt_msg r;
	recv_type(fd, MGMT_CONNECT_RESP, &r);
	close(fd);
	cr_assert_eq(r.status, EPROTONOSUPPORT);
	cr_assert_eq(r.token, 77);
	cr_assert_eq(STAT(server, sessions), 0);
}

static int connect_another(uint16_t p)
{
	struct sockaddr_in a = tmu_loopback(p);
	return mgmt_connect_flags(nexus_mgmt(client), nexus_rpc(client), (struct sockaddr *)&a,
				  sizeof(a), 5000, MGMT_CONNECT_ANOTHER);
}

/* A shared listener's holders answer its rendezvous in turn: a look for
 * another finds whichever answers now, and one that finds a process the
 * client has a session to already gets that session back, the new one
 * closed on both sides. */
Test(mgmt_handshake, a_look_for_another_process_finds_the_one_answering_now)
{
	int s1 = connect_port(port, 5000);
	cr_assert_geq(s1, 0);
	cr_assert_eq(connect_another(port), s1, "the same process answered");
	cr_assert_eq(STAT(client, sessions), 1);
	/* The server made a session for the second handshake; the client's
	 * goodbye closes it. */
	while (STAT(server, sessions_closed) != 1)
		usleep(1000);
	cr_assert_eq(STAT(server, sessions), 2);

	/* Another process takes the rendezvous port over. */
	struct nexus *other = tmu_nexus(0, 0);
	struct sockaddr_in a = tmu_loopback(port);
	cr_assert_eq(mgmt_unlisten(nexus_mgmt(server), (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(mgmt_listen(nexus_mgmt(other), nexus_rpc(other), (struct sockaddr *)&a, sizeof(a)),
		     0);
	int s2 = connect_another(port);
	cr_assert_geq(s2, 0, "%s", strerror(-s2));
	cr_expect_neq(s2, s1, "a session to the other process");
	cr_expect_eq(connect_another(port), s2);
	struct rpc *rpc = nexus_rpc(client);
	rpc_lock(rpc);
	cr_expect(rpc_session_is_up(rpc, s1), "the first stays for its streams");
	cr_expect(rpc_session_is_up(rpc, s2));
	rpc_unlock(rpc);
	cr_expect_eq(STAT(client, sessions), 2);
	int s3 = connect_port(port, 5000);
	cr_expect(s3 == s1 || s3 == s2, "a plain connect takes a live one (%d)", s3);
	cr_expect_eq(STAT(client, sessions), 2);
	nexus_destroy(other);
}
