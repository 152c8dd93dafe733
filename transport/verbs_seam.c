/* The libibverbs instance of the verbs seam. libibverbs is opened only when
 * a device list is first asked for: linked in, it and the netlink libraries
 * it pulls (libnl-3, libnl-route-3) were loaded, relocated and run at the
 * start and exit of every ferry process, 250 us of each exec on the udp
 * datapath, which never calls them. */
#include "autoconfig.h"

#include "transport/verbs_seam.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The library's own entry points, by the names verbs.h's macros and inline
 * shims call (ibv_reg_mr, ibv_query_gid_ex and ibv_query_port are not). */
static struct {
	struct ibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr);
	int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
			    struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
	int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *ch, int comp_vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			struct ibv_qp_init_attr *init);
	int (*destroy_qp)(struct ibv_qp *qp);
	struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
	int (*destroy_ah)(struct ibv_ah *ah);
} lib;

static const char *lib_soname = "libibverbs.so.1";
static const char *sysfs_verbs_dir = "/sys/class/infiniband_verbs";
static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;
static int lib_state; /* 0: not tried, 1: loaded, -1: cannot be (lib_error says why) */
static char lib_error[256];

static void lib_load(void)
{
	void *h = dlopen(lib_soname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(lib_error, sizeof(lib_error), "%s cannot be loaded (%s); the ib datapath "
			 "needs it (Debian: apt-get install libibverbs1 ibverbs-providers)",
			 lib_soname, e ? e : "unknown error");
		return;
	}
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
#define SYM(field, name) {name, offsetof(__typeof__(lib), field)}
		SYM(get_device_list, "ibv_get_device_list"),
		SYM(free_device_list, "ibv_free_device_list"),
		SYM(get_device_name, "ibv_get_device_name"),
		SYM(open_device, "ibv_open_device"),
		SYM(close_device, "ibv_close_device"),
		SYM(query_device, "ibv_query_device"),
		SYM(query_port, "ibv_query_port"),
		SYM(query_gid_ex, "_ibv_query_gid_ex"),
		SYM(alloc_pd, "ibv_alloc_pd"),
		SYM(dealloc_pd, "ibv_dealloc_pd"),
		SYM(reg_mr_iova2, "ibv_reg_mr_iova2"),
		SYM(dereg_mr, "ibv_dereg_mr"),
		SYM(create_comp_channel, "ibv_create_comp_channel"),
		SYM(destroy_comp_channel, "ibv_destroy_comp_channel"),
		SYM(create_cq, "ibv_create_cq"),
		SYM(destroy_cq, "ibv_destroy_cq"),
		SYM(get_cq_event, "ibv_get_cq_event"),
		SYM(ack_cq_events, "ibv_ack_cq_events"),
		SYM(create_qp, "ibv_create_qp"),
		SYM(modify_qp, "ibv_modify_qp"),
		SYM(query_qp, "ibv_query_qp"),
		SYM(destroy_qp, "ibv_destroy_qp"),
		SYM(create_ah, "ibv_create_ah"),
		SYM(destroy_ah, "ibv_destroy_ah"),
#undef SYM
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *fn = dlsym(h, syms[i].name);
		if (!fn) {
			snprintf(lib_error, sizeof(lib_error),
				 "%s has no %s (rdma-core older than ferry needs): the ib datapath "
				 "cannot use it", lib_soname, syms[i].name);
			dlclose(h);
			return;
		}
		memcpy((char *)&lib + syms[i].off, &fn, sizeof(fn));
	}
	lib_state = 1;
}

static bool lib_ready(void)
{
	pthread_mutex_lock(&lib_mu);
	if (lib_state == 0) {
		lib_state = -1;
		lib_load();
	}
	bool ok = lib_state == 1;
	pthread_mutex_unlock(&lib_mu);
	return ok;
}

static bool kernel_has_verbs_device(void);

/* Without a device there is nothing to load the library for: the device
 * list says "none", as the library would. */
static const char *real_unavailable(void)
{
	return !kernel_has_verbs_device() || lib_ready() ? NULL : lib_error;
}

void verbs_ibverbs_test_paths(const char *soname, const char *sysfs_dir)
{
	pthread_mutex_lock(&lib_mu);
	lib_soname = soname;
	sysfs_verbs_dir = sysfs_dir;
	lib_state = 0;
	lib_error[0] = '\0';
	pthread_mutex_unlock(&lib_mu);
}

/* Whether the kernel shows a verbs device, where libibverbs looks for
 * them: none (most hosts, and FERRY_TRANSPORT=auto asks on each) needs no
 * library to say so. */
static bool kernel_has_verbs_device(void)
{
	DIR *d = opendir(sysfs_verbs_dir);
	if (!d)
		return false;
	bool any = false;
	struct dirent *e;
	while (!any && (e = readdir(d)) != NULL)
		any = e->d_name[0] != '.';
	closedir(d);
	return any;
}

/* Every other call below has a device from this list behind it, so only
 * this one looks whether the library is there. */
static struct ibv_device **real_get_device_list(const struct ferry_config *cfg, int *num)
{
	(void)cfg;
	if (!kernel_has_verbs_device()) {
		*num = 0;
		errno = 0;
		return NULL;
	}
	if (!lib_ready()) {
		*num = 0;
		errno = ELIBACC;
		return NULL;
	}
	return lib.get_device_list(num);
}

static void real_free_device_list(struct ibv_device **list)
{
	lib.free_device_list(list);
}

static const char *real_get_device_name(struct ibv_device *dev)
{
	return lib.get_device_name(dev);
}

static struct ibv_context *real_open_device(struct ibv_device *dev)
{
	return lib.open_device(dev);
}

static int real_close_device(struct ibv_context *ctx)
{
	return lib.close_device(ctx);
}

static int real_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return lib.query_device(ctx, attr);
}

/* As verbs.h's ___ibv_query_port: the extended call where the provider has
 * one, the library's otherwise. */
static int real_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
	memset(attr, 0, sizeof(*attr));
	if (vctx)
		return vctx->query_port(ctx, port, attr, sizeof(*attr));
	return lib.query_port(ctx, port, (struct _compat_ibv_port_attr *)attr);
}

static int real_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry)
{
	return lib.query_gid_ex(ctx, port, index, entry, 0, sizeof(*entry));
}

static struct ibv_pd *real_alloc_pd(struct ibv_context *ctx)
{
	return lib.alloc_pd(ctx);
}

static int real_dealloc_pd(struct ibv_pd *pd)
{
	return lib.dealloc_pd(pd);
}

/* As verbs.h's ibv_reg_mr with an access not known at compile time. */
static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return lib.reg_mr_iova2(pd, addr, len, (uintptr_t)addr, (unsigned int)access);
}

static int real_dereg_mr(struct ibv_mr *mr)
{
	return lib.dereg_mr(mr);
}

static struct ibv_comp_channel *real_create_comp_channel(struct ibv_context *ctx)
{
	return lib.create_comp_channel(ctx);
}

static int real_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	return lib.destroy_comp_channel(ch);
}

static struct ibv_cq *real_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				     struct ibv_comp_channel *ch, int comp_vector)
{
	return lib.create_cq(ctx, cqe, cq_context, ch, comp_vector);
}

static int real_destroy_cq(struct ibv_cq *cq)
{
	return lib.destroy_cq(cq);
}

static int real_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	return lib.get_cq_event(ch, cq, cq_context);
}

static void real_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	lib.ack_cq_events(cq, n);
}

static struct ibv_qp *real_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return lib.create_qp(pd, attr);
}

static int real_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return lib.modify_qp(qp, attr, mask);
}

static int real_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			 struct ibv_qp_init_attr *init)
{
	return lib.query_qp(qp, attr, mask, init);
}

static int real_destroy_qp(struct ibv_qp *qp)
{
	return lib.destroy_qp(qp);
}

static struct ibv_ah *real_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	return lib.create_ah(pd, attr);
}

static int real_destroy_ah(struct ibv_ah *ah)
{
	return lib.destroy_ah(ah);
}

const char *verbs_wc_status_name(enum ibv_wc_status st)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
	};
	if ((size_t)st < sizeof(names) / sizeof(names[0]) && names[st])
		return names[st];
	return "unknown";
}

const struct verbs_api verbs_api_ibverbs = {
	.name = "libibverbs",
	.kind = FERRY_TRANSPORT_IB,
	.switched_fabric = true,
	.pins_memory = true,
	.ud_max_msg = 0,
	.get_device_list = real_get_device_list,
	.free_device_list = real_free_device_list,
	.get_device_name = real_get_device_name,
	.open_device = real_open_device,
	.close_device = real_close_device,
	.query_device = real_query_device,
	.query_port = real_query_port,
	.query_gid_ex = real_query_gid_ex,
	.alloc_pd = real_alloc_pd,
	.dealloc_pd = real_dealloc_pd,
	.reg_mr = real_reg_mr,
	.dereg_mr = real_dereg_mr,
	.create_comp_channel = real_create_comp_channel,
	.destroy_comp_channel = real_destroy_comp_channel,
	.create_cq = real_create_cq,
	.destroy_cq = real_destroy_cq,
	.get_cq_event = real_get_cq_event,
	.ack_cq_events = real_ack_cq_events,
	.create_qp = real_create_qp,
	.modify_qp = real_modify_qp,
	.query_qp = real_query_qp,
	.destroy_qp = real_destroy_qp,
	.create_ah = real_create_ah,
	.destroy_ah = real_destroy_ah,
	.unavailable = real_unavailable,
};
