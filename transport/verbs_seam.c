/* The libibverbs instance of the verbs seam: thin wrappers, because several
 * of these names are macros or inline shims in verbs.h. */
#include "autoconfig.h"

#include "transport/verbs_seam.h"

static struct ibv_device **real_get_device_list(const struct ferry_config *cfg, int *num)
{
	(void)cfg;
	return ibv_get_device_list(num);
}

static const char *real_get_device_name(struct ibv_device *dev)
{
	return ibv_get_device_name(dev);
}

static int real_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

static int real_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry)
{
	return ibv_query_gid_ex(ctx, port, index, entry, 0);
}

static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr(pd, addr, len, access);
}

const struct verbs_api verbs_api_ibverbs = {
	.name = "libibverbs",
	.kind = FERRY_TRANSPORT_IB,
	.switched_fabric = true,
	.pins_memory = true,
	.ud_max_msg = 0,
	.get_device_list = real_get_device_list,
	.free_device_list = ibv_free_device_list,
	.get_device_name = real_get_device_name,
	.open_device = ibv_open_device,
	.close_device = ibv_close_device,
	.query_device = ibv_query_device,
	.query_port = real_query_port,
	.query_gid_ex = real_query_gid_ex,
	.alloc_pd = ibv_alloc_pd,
	.dealloc_pd = ibv_dealloc_pd,
	.reg_mr = real_reg_mr,
	.dereg_mr = ibv_dereg_mr,
	.create_comp_channel = ibv_create_comp_channel,
	.destroy_comp_channel = ibv_destroy_comp_channel,
	.create_cq = ibv_create_cq,
	.destroy_cq = ibv_destroy_cq,
	.get_cq_event = ibv_get_cq_event,
	.ack_cq_events = ibv_ack_cq_events,
	.create_qp = ibv_create_qp,
	.modify_qp = ibv_modify_qp,
	.query_qp = ibv_query_qp,
	.destroy_qp = ibv_destroy_qp,
	.create_ah = ibv_create_ah,
	.destroy_ah = ibv_destroy_ah,
};
