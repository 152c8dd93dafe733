/* softib conformance: what a real UD verbs device does, checked through the
 * public libibverbs types and the inline datapath calls. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compat/softib/softib_int.h"
#include "tests/softib_fixture.h"
#include "transport/config.h"
#include "transport/verbs_seam.h"

#define QKEY 0x1234u
#define BUF 8192u

static const struct verbs_api *V = &verbs_api_softib;

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem;
};

static char fabric[128];
static struct end A, B;
static struct ibv_ah *ah_to_b; /* from A's PD */

static void open_ctx(struct end *e)
{
	int n;
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	snprintf(cfg.softib_fabric, sizeof(cfg.softib_fabric), "%s", fabric);
	struct ibv_device **list = V->get_device_list(&cfg, &n);
	cr_assert_not_null(list);
	cr_assert_eq(n, 1);
	e->ctx = V->open_device(list[0]);
	V->free_device_list(list);
	cr_assert_not_null(e->ctx, "open_device: %s", strerror(errno));
	e->pd = V->alloc_pd(e->ctx);
	e->ch = V->create_comp_channel(e->ctx);
	e->scq = V->create_cq(e->ctx, 64, NULL, NULL, 0);
	e->rcq = V->create_cq(e->ctx, 64, e, e->ch, 0);
	cr_assert(e->pd && e->ch && e->scq && e->rcq);
	e->mem = aligned_alloc(4096, BUF);
	memset(e->mem, 0, BUF);
	e->mr = V->reg_mr(e->pd, e->mem, BUF, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(e->mr);
}

static struct ibv_qp *make_qp(struct end *e, uint32_t inline_data)
{
	struct ibv_qp_init_attr qa = {.send_cq = e->scq, .recv_cq = e->rcq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
					      .max_recv_sge = 2, .max_inline_data = inline_data}};
	return V->create_qp(e->pd, &qa);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qkey = QKEY};
	return V->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
}

static int to_rtr(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	return V->modify_qp(qp, &a, IBV_QP_STATE);
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .sq_psn = 0};
	return V->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static void bring_up(struct ibv_qp *qp)
{
	cr_assert_eq(to_init(qp), 0);
	cr_assert_eq(to_rtr(qp), 0);
	cr_assert_eq(to_rts(qp), 0);
}

static struct ibv_ah *make_ah(struct end *e, int gid_index)
{
	struct ibv_gid_entry g;
	cr_assert_eq(V->query_gid_ex(e->ctx, 1, (uint32_t)gid_index, &g), 0);
	struct ibv_ah_attr a = {.port_num = 1, .is_global = 1,
				.grh = {.dgid = g.gid, .sgid_index = (uint8_t)gid_index,
					.hop_limit = 64}};
	return V->create_ah(e->pd, &a);
}

static void setup(void)
{
	softib_test_fabric(fabric, sizeof(fabric), "verbs");
	open_ctx(&A);
	open_ctx(&B);
	A.qp = make_qp(&A, 64);
	B.qp = make_qp(&B, 64);
	cr_assert(A.qp && B.qp);
	ah_to_b = make_ah(&A, 3);
	cr_assert_not_null(ah_to_b);
}

/* Expects, not asserts: after a failed test the rest still goes, so the
 * fabric can be removed and leaves nothing in /dev/shm. */
static void close_end(struct end *e)
{
	if (e->qp)
		cr_expect_eq(V->destroy_qp(e->qp), 0);
	if (e->mr)
		V->dereg_mr(e->mr);
	if (e->scq)
		cr_expect_eq(V->destroy_cq(e->scq), 0);
	if (e->rcq)
		cr_expect_eq(V->destroy_cq(e->rcq), 0);
	if (e->ch)
		cr_expect_eq(V->destroy_comp_channel(e->ch), 0);
	if (e->pd)
		cr_expect_eq(V->dealloc_pd(e->pd), 0);
	if (e->ctx)
		V->close_device(e->ctx);
	free(e->mem);
	memset(e, 0, sizeof(*e));
}

static void teardown(void)
{
	if (ah_to_b)
		V->destroy_ah(ah_to_b);
	ah_to_b = NULL;
	close_end(&A);
	close_end(&B);
	softib_test_fabric_remove(fabric);
}

static int post_recv(struct end *e, size_t off, uint32_t len, uint32_t lkey, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)(e->mem + off), .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(e->qp, &wr, &bad);
}

static int send_to(struct end *from, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, size_t off,
		   uint32_t len, uint32_t lkey, int flags, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)(from->mem + off), .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = (unsigned)flags,
				 .wr.ud = {.ah = ah, .remote_qpn = qpn, .remote_qkey = qkey}},
			   *bad;
	return ibv_post_send(from->qp, &wr, &bad);
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 1, wc);
}

TestSuite(softib, .init = setup, .fini = teardown, .timeout = 20);

Test(softib, device_port_and_gid_table_look_like_roce)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	cr_assert_eq(V->query_device(A.ctx, &da), 0);
	cr_assert_eq(da.phys_port_cnt, 1);
	cr_assert_eq(V->query_port(A.ctx, 1, &pa), 0);
	cr_assert_eq(pa.state, IBV_PORT_ACTIVE);
	cr_assert_eq(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
	cr_assert_eq(pa.active_mtu, IBV_MTU_4096);
	cr_assert_neq(V->query_port(A.ctx, 2, &pa), 0);
	struct ibv_gid_entry g;
	cr_assert_eq(V->query_gid_ex(A.ctx, 1, 3, &g), 0);
	cr_assert_eq(g.gid_type, IBV_GID_TYPE_ROCE_V2);
	cr_assert_eq(g.gid.raw[10], 0xff, "index 3 is IPv4-mapped");
	cr_assert_neq(V->query_gid_ex(A.ctx, 1, (uint32_t)pa.gid_tbl_len, &g), 0);
}

Test(softib, state_machine_enforces_order_and_attributes)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), EINVAL, "RESET->RTR skips INIT");
	/* RESET->INIT needs pkey index, port and qkey. */
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 2, .qkey = 1};
	cr_assert_eq(V->modify_qp(A.qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
		     EINVAL, "port 2 does not exist");
	/* An attribute the transition does not take is refused. */
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 1};
	cr_assert_eq(V->modify_qp(A.qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
					  IBV_QP_SQ_PSN),
		     EINVAL);
	cr_assert_eq(A.qp->state, IBV_QPS_RESET);
	/* Nothing may be posted in RESET; receives may in INIT, sends only in RTS. */
	cr_assert_eq(post_recv(&A, 0, 256, A.mr->lkey, 1), EINVAL);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 1), EINVAL);
	cr_assert_eq(to_init(A.qp), 0);
	cr_assert_eq(post_recv(&A, 0, 256, A.mr->lkey, 1), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 1), EINVAL);
	cr_assert_eq(to_rts(A.qp), EINVAL, "INIT->RTS skips RTR");
	cr_assert_eq(to_rtr(A.qp), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 1), EINVAL);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), EINVAL, "RTR->RTS needs the SQ PSN");
	cr_assert_eq(to_rts(A.qp), 0);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), EINVAL, "no way back from RTS to INIT");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .cur_qp_state = IBV_QPS_RTR};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL,
		     "cur_qp_state must match");
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	cr_assert_eq(V->query_qp(A.qp, &q, IBV_QP_STATE, &qi), 0);
	cr_assert_eq(q.qp_state, IBV_QPS_RTS);
	cr_assert_eq(q.qkey, QKEY);

	/* ERR flushes the posted receive with a flush error. */
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_ERR};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(A.rcq, &wc), 1);
	cr_assert_eq(wc.wr_id, 1);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	/* And back through RESET to RTS. */
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), 0);
	bring_up(A.qp);
}

Test(softib, packet_for_qp_without_posted_receive_is_dropped)
{
	bring_up(A.qp);
	bring_up(B.qp);
	strcpy((char *)A.mem, "first");
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 6, A.mr->lkey,
			     IBV_SEND_SIGNALED, 7),
		     0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "the sender cannot tell");
	cr_assert_eq(poll_one(B.rcq, &wc), 0);
	struct softib_qp_counters k;
	softib_qp_counters(B.qp, &k);
	cr_assert_eq(k.drop_no_recv, 1);
	/* Posting a receive afterwards does not bring it back. */
	cr_assert_eq(post_recv(&B, 0, 1024, B.mr->lkey, 9), 0);
	cr_assert_eq(poll_one(B.rcq, &wc), 0);
	strcpy((char *)A.mem, "second");
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 7, A.mr->lkey, 0, 8), 0);
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_str_eq((char *)B.mem + 40, "second");
}

Test(softib, grh_lands_in_front_of_the_payload)
{
	bring_up(A.qp);
	bring_up(B.qp);
	for (unsigned i = 0; i < 100; i++)
		A.mem[i] = (uint8_t)(i * 7 + 1);
	memset(B.mem, 0xee, 1024);
	/* Two receive SGEs, split inside the GRH: placement still counts from
	 * the first byte of the first SGE. */
	struct ibv_sge s[2] = {{.addr = (uintptr_t)B.mem, .length = 24, .lkey = B.mr->lkey},
			       {.addr = (uintptr_t)(B.mem + 24), .length = 1000, .lkey = B.mr->lkey}};
	struct ibv_recv_wr rw = {.wr_id = 42, .sg_list = s, .num_sge = 2}, *rbad;
	cr_assert_eq(ibv_post_recv(B.qp, &rw, &rbad), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 100, A.mr->lkey, 0, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_eq(wc.wr_id, 42);
	cr_assert_eq(wc.byte_len, 140, "byte_len counts the GRH");
	cr_assert(wc.wc_flags & IBV_WC_GRH);
	cr_assert_eq(wc.src_qp, A.qp->qp_num);
	cr_assert_eq(wc.qp_num, B.qp->qp_num);
	cr_assert_eq(B.mem[0] >> 4, 6, "IPv6-format GRH");
	struct ibv_gid_entry g;
	V->query_gid_ex(A.ctx, 1, 3, &g);
	cr_assert_arr_eq(B.mem + 8, g.gid.raw, 16, "source GID");
	cr_assert_arr_eq(B.mem + 24, g.gid.raw, 16, "destination GID");
	cr_assert_arr_eq(B.mem + 40, A.mem, 100);
	cr_assert_eq(B.mem[140], 0xee, "nothing written past the packet");
}

Test(softib, receive_too_small_completes_with_length_error)
{
	bring_up(A.qp);
	bring_up(B.qp);
	cr_assert_eq(post_recv(&B, 0, 40 + 50, B.mr->lkey, 5), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 51, A.mr->lkey, 0, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_LEN_ERR);
}

Test(softib, bad_lkey_on_send_is_a_protection_error_and_stops_the_send_queue)
{
	bring_up(A.qp);
	bring_up(B.qp);
	cr_assert_eq(post_recv(&B, 0, 1024, B.mr->lkey, 1), 0);
	/* Unsignalled, yet the error completes, as on hardware. */
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 100, A.mr->lkey ^ 0x5a5a00u, 0, 11),
		     0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_PROT_ERR);
	cr_assert_eq(wc.wr_id, 11);
	/* Out of the region, with the right key, is the same error. */
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	V->query_qp(A.qp, &q, IBV_QP_STATE, &qi);
	cr_assert_eq(q.qp_state, IBV_QPS_SQE);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 100, A.mr->lkey, 0, 12), 0);
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR, "SQE flushes later sends");
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), 0, "SQE->RTS recovers");
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, BUF - 50, 100, A.mr->lkey, 0, 13), 0);
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_PROT_ERR, "SGE runs past the MR");
	cr_assert_eq(poll_one(B.rcq, &wc), 0, "nothing reached the receiver");
	/* Inline data is copied at post time: no lkey involved. */
	cr_assert_eq(V->modify_qp(A.qp, &a, IBV_QP_STATE), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 60, 0xdead, IBV_SEND_INLINE, 14),
		     0);
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
}

Test(softib, bad_lkey_on_receive_is_a_protection_error)
{
	bring_up(A.qp);
	bring_up(B.qp);
	cr_assert_eq(post_recv(&B, 0, 1024, A.mr->lkey, 3), 0, "A's key is not B's");
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 10, A.mr->lkey, 0, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_PROT_ERR);
}

/* Keys are unique across the contexts of a device: A's key never works at B.
 * (Once, both contexts' first MRs could share a key, one time in 256.) */
Test(softib, keys_of_two_contexts_on_one_fabric_never_coincide)
{
	enum { N = 1024 };
	static struct ibv_mr *ma[N], *mb[N];
	for (int i = 0; i < N; i++) {
		ma[i] = V->reg_mr(A.pd, A.mem, 64, IBV_ACCESS_LOCAL_WRITE);
		mb[i] = V->reg_mr(B.pd, B.mem, 64, IBV_ACCESS_LOCAL_WRITE);
		cr_assert(ma[i] && mb[i]);
	}
	for (int i = 0; i < N; i++)
		cr_assert_neq(ma[i]->lkey, mb[i]->lkey, "MR %d: both contexts made key 0x%x", i,
			      ma[i]->lkey);
	cr_assert_neq(A.mr->lkey, B.mr->lkey);
	for (int i = 0; i < N; i++) {
		V->dereg_mr(ma[i]);
		V->dereg_mr(mb[i]);
	}
}

Test(softib, receives_in_the_qp_area_are_written_by_the_sender)
{
	cr_assert_eq(softib_set_rx_area(B.ctx, 3 * 4096), 0);
	struct ibv_qp *d = make_qp(&B, 0);
	cr_assert_not_null(d);
	size_t len = 0;
	uint8_t *area = softib_qp_rx_area(d, &len);
	cr_assert(area && len == 3 * 4096);
	cr_assert_null(softib_qp_rx_area(B.qp, NULL), "the area was for one QP");
	struct ibv_mr *mr = V->reg_mr(B.pd, area, len, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(mr);
	bring_up(A.qp);
	bring_up(d);
	memset(area, 0xee, len);
	memset(B.mem, 0xee, 2048);
	struct ibv_sge s[3] = {{(uintptr_t)area, 1024, mr->lkey},
			       {(uintptr_t)B.mem, 1024, B.mr->lkey},
			       {(uintptr_t)area + 4096, 50, mr->lkey}};
	for (int i = 0; i < 3; i++) {
		struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &s[i], .num_sge = 1}, *bad;
		cr_assert_eq(ibv_post_recv(d, &wr, &bad), 0);
	}
	for (unsigned i = 0; i < 100; i++)
		A.mem[i] = (uint8_t)(i * 7 + 1);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(send_to(&A, ah_to_b, d->qp_num, QKEY, 0, 100, A.mr->lkey, 0, 1), 0);
	struct softib_qp_counters k;
	softib_qp_counters(d, &k);
	cr_assert_eq(k.rx_pkts, 3);
	cr_assert_eq(k.rx_direct, 1, "only the first: one outside the area, one too small");
	cr_assert_arr_eq(area + 40, A.mem, 100, "in place before any poll");
	struct ibv_wc wc[3];
	cr_assert_eq(ibv_poll_cq(B.rcq, 3, wc), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(wc[i].wr_id, (uint64_t)i);
	cr_assert_eq(wc[0].status, IBV_WC_SUCCESS);
	cr_assert_eq(wc[0].byte_len, 140);
	cr_assert_eq(area[0] >> 4, 6, "a GRH in front");
	struct ibv_gid_entry g;
	V->query_gid_ex(A.ctx, 1, 3, &g);
	cr_assert_arr_eq(area + 8, g.gid.raw, 16);
	cr_assert_eq(area[140], 0xee, "nothing past the packet");
	cr_assert_eq(wc[1].status, IBV_WC_SUCCESS);
	cr_assert_arr_eq(B.mem + 40, A.mem, 100, "staged and copied at poll");
	cr_assert_eq(wc[2].status, IBV_WC_LOC_LEN_ERR);
	cr_assert_eq(V->destroy_qp(d), 0);
	V->dereg_mr(mr);
}

Test(softib, a_ud_message_may_exceed_the_mtu_up_to_64k)
{
	struct ibv_port_attr pa;
	cr_assert_eq(V->query_port(A.ctx, 1, &pa), 0);
	cr_assert_eq(pa.active_mtu, IBV_MTU_4096);
	cr_assert_eq(pa.max_msg_sz, 65536u, "softib's departure from hardware");
	bring_up(A.qp);
	bring_up(B.qp);
	for (unsigned i = 0; i < 6000; i++)
		A.mem[i] = (uint8_t)(i * 31 + 3);
	cr_assert_eq(post_recv(&B, 0, 40 + 6000, B.mr->lkey, 1), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 6000, A.mr->lkey, 0, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_eq(wc.byte_len, 6040);
	cr_assert_arr_eq(B.mem + 40, A.mem, 6000);
	/* Over 64 KiB is a local length error, as over the MTU is on hardware. */
	uint8_t *big = malloc(65537);
	struct ibv_mr *mr = V->reg_mr(A.pd, big, 65537, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge s = {(uintptr_t)big, 65537, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .wr.ud = {.ah = ah_to_b, .remote_qpn = B.qp->qp_num,
					   .remote_qkey = QKEY}},
			   *bad;
	cr_assert_eq(ibv_post_send(A.qp, &wr, &bad), 0);
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_LEN_ERR);
	V->dereg_mr(mr);
	free(big);
}

Test(softib, inline_limit_is_enforced_at_post_time)
{
	bring_up(A.qp);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 65, A.mr->lkey, IBV_SEND_INLINE, 1),
		     EINVAL);
	struct ibv_qp_init_attr qa = {.send_cq = A.scq, .recv_cq = A.rcq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8,
					      .max_inline_data = 100000}};
	errno = 0;
	cr_assert_null(V->create_qp(A.pd, &qa));
	cr_assert_eq(errno, EINVAL);
}

Test(softib, qkey_mismatch_is_dropped_by_the_receiver)
{
	bring_up(A.qp);
	bring_up(B.qp);
	cr_assert_eq(post_recv(&B, 0, 1024, B.mr->lkey, 1), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY + 1, 0, 10, A.mr->lkey, 0, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 0);
	struct softib_qp_counters k;
	softib_qp_counters(B.qp, &k);
	cr_assert_eq(k.drop_qkey, 1);
	/* A QKey with the high bit set means "the sending QP's own". */
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, 0x80000000u, 0, 10, A.mr->lkey, 0, 2), 0);
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
}

Test(softib, address_handles_to_nowhere)
{
	struct ibv_ah_attr a = {.port_num = 1, .is_global = 1, .grh = {.sgid_index = 3}};
	memset(a.grh.dgid.raw, 0x42, 16);
	errno = 0;
	cr_assert_null(V->create_ah(A.pd, &a), "a GID off this fabric does not resolve");
	cr_assert_eq(errno, EHOSTUNREACH);
	a.is_global = 0;
	cr_assert_null(V->create_ah(A.pd, &a), "RoCE needs a GRH");
	/* A QPN nobody owns: the send completes, the packet is lost. */
	bring_up(A.qp);
	cr_assert_eq(send_to(&A, ah_to_b, 0xabcdef, QKEY, 0, 10, A.mr->lkey, IBV_SEND_SIGNALED, 3), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	/* An AH of another PD is a local QP operation error. */
	struct ibv_ah *foreign = make_ah(&B, 3);
	cr_assert_eq(send_to(&A, foreign, B.qp->qp_num, QKEY, 0, 10, A.mr->lkey, 0, 4), 0);
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_QP_OP_ERR);
	V->destroy_ah(foreign);
}

Test(softib, unsignalled_sends_fill_the_send_queue_until_a_signalled_one_is_polled)
{
	bring_up(A.qp);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey,
				     i == 7 ? IBV_SEND_SIGNALED : 0, (uint64_t)i),
			     0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 8), ENOMEM);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(A.scq, &wc), 1);
	cr_assert_eq(wc.wr_id, 7);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 8), 0);
}

Test(softib, completion_channel_wakes_only_when_armed)
{
	bring_up(A.qp);
	bring_up(B.qp);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(post_recv(&B, (size_t)i * 1024, 1024, B.mr->lkey, (uint64_t)i), 0);
	struct pollfd p = {.fd = B.ch->fd, .events = POLLIN};
	/* Not armed: a packet arrives silently. */
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 1), 0);
	cr_assert_eq(poll(&p, 1, 0), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	/* Armed: the next packet makes the fd readable, once. */
	cr_assert_eq(ibv_req_notify_cq(B.rcq, 0), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 2), 0);
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 3), 0);
	cr_assert_eq(poll(&p, 1, 5000), 1);
	struct ibv_cq *cq;
	void *cq_ctx;
	cr_assert_eq(V->get_cq_event(B.ch, &cq, &cq_ctx), 0);
	cr_assert_eq(cq, B.rcq);
	cr_assert_eq(cq_ctx, &B);
	V->ack_cq_events(cq, 1);
	cr_assert_eq(poll(&p, 1, 0), 0, "one event per arm");
	cr_assert_eq(ibv_poll_cq(B.rcq, 4, (struct ibv_wc[4]){0}), 2);
}

Test(softib, completion_channel_wakes_another_process)
{
	bring_up(A.qp);
	bring_up(B.qp);
	cr_assert_eq(post_recv(&B, 0, 1024, B.mr->lkey, 1), 0);
	cr_assert_eq(ibv_req_notify_cq(B.rcq, 0), 0);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	pid_t pid = softib_test_fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		/* The child uses A's (inherited) QP: a different process sends. */
		_exit(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 8, A.mr->lkey, 0, 1) ? 1 : 0);
	}
	struct pollfd p = {.fd = B.ch->fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 0), 0);
	cr_assert_eq(write(go[1], "x", 1), 1);
	cr_assert_eq(poll(&p, 1, 10000), 1, "woken by the other process");
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	close(go[0]);
	close(go[1]);
}

/* Forks a process that opens a context on fabric_name (NULL: this test's),
 * makes a QP and waits to be killed with it still up; *qpn gets its QPN. */
static pid_t spawn_qp_owner(const char *fabric_name, uint32_t *qpn)
{
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t pid = softib_test_fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (fabric_name)
			strcpy(fabric, fabric_name); /* open_ctx uses the fabric named here */
		struct end C = {0};
		open_ctx(&C);
		C.qp = make_qp(&C, 0);
		uint32_t n = C.qp ? C.qp->qp_num : 0;
		if (write(pfd[1], &n, sizeof(n)) != sizeof(n))
			_exit(1);
		pause();
		_exit(0);
	}
	*qpn = 0;
	cr_assert_eq(read(pfd[0], qpn, sizeof(*qpn)), (ssize_t)sizeof(*qpn));
	close(pfd[0]);
	close(pfd[1]);
	cr_assert_neq(*qpn, 0);
	return pid;
}

Test(softib, queues_of_a_crashed_process_are_reclaimed)
{
	uint32_t qpn;
	pid_t pid = spawn_qp_owner(NULL, &qpn);
	cr_assert(softib_qpn_live(A.ctx, qpn));
	cr_assert_eq(softib_reclaim(A.ctx), 0, "a live process keeps its queues");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_eq(softib_reclaim(A.ctx), 1);
	cr_assert_not(softib_qpn_live(A.ctx, qpn));
	char dir[64], path[512];
	softib_fabric_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/%s.qp.%06x", dir, fabric, qpn);
	struct stat st;
	cr_assert_neq(stat(path, &st), 0, "its ring is gone");
	/* Sending there now is a packet into the void, not a crash. */
	bring_up(A.qp);
	cr_assert_eq(send_to(&A, ah_to_b, qpn, QKEY, 0, 8, A.mr->lkey, IBV_SEND_SIGNALED, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(A.scq, &wc), 1);
}

Test(softib, rings_of_dead_processes_on_other_fabrics_are_swept)
{
	char other[128];
	softib_test_fabric(other, sizeof(other), "other");
	uint32_t qpn;
	pid_t pid = spawn_qp_owner(other, &qpn);
	char dir[64], path[512];
	softib_fabric_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/%s.qp.%06x", dir, other, qpn);
	struct stat st;
	softib_reclaim(A.ctx);
	cr_assert_eq(stat(path, &st), 0, "a live owner's ring stays");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	softib_reclaim(A.ctx); /* on our fabric; sweeps every fabric's rings */
	cr_assert_neq(stat(path, &st), 0, "the dead owner's ring is gone");
	cr_assert_eq(softib_fabric_remove(other), 0, "its directory slot is reclaimed too");
}

/* Reclaim looks at every process and file on the fabric: an open does it
 * only when the last was a second ago or more (the mark's mtime). */
Test(softib, an_open_reclaims_at_most_once_a_second)
{
	uint32_t qpn;
	pid_t pid = spawn_qp_owner(NULL, &qpn);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	char dir[64], mark[512];
	softib_fabric_dir(dir, sizeof(dir));
	snprintf(mark, sizeof(mark), "%s/.reclaimed.%s", dir, fabric);
	int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(futimens(fd, NULL), 0); /* a reclaim just ran */
	close(fd);
	struct end C = {0}, D = {0};
	open_ctx(&C);
	C.qp = make_qp(&C, 0);
	cr_assert(softib_qpn_live(A.ctx, qpn), "an open and a QP reclaimed within the second");
	struct timespec then[2];
	cr_assert_eq(clock_gettime(CLOCK_REALTIME, &then[0]), 0);
	then[0].tv_sec -= 2;
	then[1] = then[0];
	cr_assert_eq(utimensat(AT_FDCWD, mark, then, 0), 0);
	open_ctx(&D);
	cr_assert_not(softib_qpn_live(A.ctx, qpn), "an open two seconds after the last did not reclaim");
	close_end(&C);
	close_end(&D);
}

Test(softib, queues_of_a_process_that_execs_are_reclaimed)
{
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t pid = softib_test_fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct end C = {0};
		open_ctx(&C);
		C.qp = make_qp(&C, 0);
		uint32_t qpn = C.qp ? C.qp->qp_num : 0;
		if (write(pfd[1], &qpn, sizeof(qpn)) != sizeof(qpn))
			_exit(1);
		/* A new program in the same process knows nothing of that QP. */
		execl("/bin/sleep", "sleep", "30", (char *)NULL);
		_exit(1);
	}
	uint32_t qpn = 0;
	cr_assert_eq(read(pfd[0], &qpn, sizeof(qpn)), (ssize_t)sizeof(qpn));
	cr_assert_neq(qpn, 0);
	char path[64], comm[32] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	for (int tries = 0; tries < 5000 && strncmp(comm, "sleep", 5); tries++) {
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = '\0';
			fclose(f);
		}
		usleep(1000);
	}
	cr_assert_str_eq(comm, "sleep\n", "the child exec'd");
	/* exec names the new program before the old image's close-on-exec
	 * descriptors (the lease) are released: ask again until they are. */
	unsigned reclaimed = 0;
	for (int tries = 0; tries < 5000 && !reclaimed; tries++) {
		reclaimed = softib_reclaim(A.ctx);
		if (!reclaimed)
			usleep(1000);
	}
	cr_assert_eq(reclaimed, 1, "same pid, but its QP is gone with the old image");
	cr_assert_not(softib_qpn_live(A.ctx, qpn));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(pfd[0]);
	close(pfd[1]);
}

Test(softib, a_sender_that_dies_holding_a_ring_lock_does_not_wedge_the_ring)
{
	bring_up(A.qp);
	bring_up(B.qp);
	cr_assert_eq(post_recv(&B, 0, 1024, B.mr->lkey, 1), 0);
	struct sib_qp_shm *ring = ((struct sib_qp *)B.qp)->shm;
	pid_t pid = softib_test_fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* What a sender killed in the middle of a copy leaves behind. */
		pthread_mutex_lock(&ring->lock);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	strcpy((char *)A.mem, "after");
	cr_assert_eq(send_to(&A, ah_to_b, B.qp->qp_num, QKEY, 0, 6, A.mr->lkey, 0, 1), 0);
	struct ibv_wc wc;
	cr_assert_eq(poll_one(B.rcq, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_str_eq((char *)B.mem + 40, "after");
}

Test(softib, create_qp_checks_type_caps_and_cqs)
{
	struct ibv_qp_init_attr qa = {.send_cq = A.scq, .recv_cq = A.rcq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8}};
	errno = 0;
	cr_assert_null(V->create_qp(A.pd, &qa));
	cr_assert_eq(errno, EOPNOTSUPP, "UD only");
	qa.qp_type = IBV_QPT_UD;
	qa.cap.max_send_wr = 1u << 20;
	errno = 0;
	cr_assert_null(V->create_qp(A.pd, &qa));
	cr_assert_eq(errno, EINVAL, "over max_qp_wr");
	qa.cap.max_send_wr = 8;
	qa.cap.max_send_sge = 64;
	cr_assert_null(V->create_qp(A.pd, &qa), "over max_sge");
	qa.cap.max_send_sge = 1;
	qa.recv_cq = B.rcq;
	cr_assert_null(V->create_qp(A.pd, &qa), "a CQ of another context");
	qa.recv_cq = A.rcq;
	struct ibv_qp *qp = V->create_qp(A.pd, &qa);
	cr_assert_not_null(qp);
	cr_assert_eq(qp->state, IBV_QPS_RESET);
	cr_assert_neq(qp->qp_num, A.qp->qp_num);
	cr_assert_geq(qp->qp_num, 2, "QPN 0 and 1 are special");
	cr_assert_eq(V->destroy_qp(qp), 0);
}

Test(softib, fabric_directory_is_private)
{
	char dir[64];
	cr_assert_eq(softib_fabric_dir(dir, sizeof(dir)), 0);
	struct stat st;
	cr_assert_eq(stat(dir, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.fabric", dir, fabric);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
}

Test(softib, busy_objects_refuse_destruction)
{
	cr_assert_eq(V->destroy_cq(A.rcq), EBUSY, "a QP still receives into it");
	cr_assert_eq(V->destroy_comp_channel(A.ch), EBUSY, "a CQ still uses it");
	cr_assert_eq(V->dealloc_pd(A.pd), EBUSY, "QP and MR still in it");
}
