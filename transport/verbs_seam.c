/* The libibverbs instance of the verbs seam. libibverbs is opened only when
 * a device list finds a verbs device: linked in, it and the netlink libraries
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

/* The library's entry points the seam's own wrappers call: verbs.h reaches
 * these through macros and inline shims, and the device list opens it. */
static int (*lib_query_port)(struct ibv_context *ctx, uint8_t port,
			     struct _compat_ibv_port_attr *attr);
static int (*lib_query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
			       struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
static struct ibv_mr *(*lib_reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len,
					   uint64_t iova, unsigned int access);
static struct ibv_device **(*lib_get_device_list)(int *num);

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
	/* Where each goes: a field of the seam itself, when the library's
	 * signature is the seam's, or one of the wrappers' pointers above. */
	static const struct {
		const char *name;
		size_t off; /* in verbs_api_ibverbs, or SIZE_MAX: see ptr */
		void *ptr;
	} syms[] = {
#define API(field, name) {name, offsetof(struct verbs_api, field), NULL}
#define OWN(var, name) {name, SIZE_MAX, &var}
		API(free_device_list, "ibv_free_device_list"),
		API(get_device_name, "ibv_get_device_name"),
		API(open_device, "ibv_open_device"),
		API(close_device, "ibv_close_device"),
		API(query_device, "ibv_query_device"),
		OWN(lib_query_port, "ibv_query_port"),
		OWN(lib_query_gid_ex, "_ibv_query_gid_ex"),
		API(alloc_pd, "ibv_alloc_pd"),
		API(dealloc_pd, "ibv_dealloc_pd"),
		OWN(lib_reg_mr_iova2, "ibv_reg_mr_iova2"),
		API(dereg_mr, "ibv_dereg_mr"),
		API(create_comp_channel, "ibv_create_comp_channel"),
		API(destroy_comp_channel, "ibv_destroy_comp_channel"),
		API(create_cq, "ibv_create_cq"),
		API(destroy_cq, "ibv_destroy_cq"),
		API(get_cq_event, "ibv_get_cq_event"),
		API(ack_cq_events, "ibv_ack_cq_events"),
		API(create_qp, "ibv_create_qp"),
		API(modify_qp, "ibv_modify_qp"),
		API(query_qp, "ibv_query_qp"),
		API(destroy_qp, "ibv_destroy_qp"),
		API(create_ah, "ibv_create_ah"),
		API(destroy_ah, "ibv_destroy_ah"),
#undef API
#undef OWN
	};
	void *list_fn = dlsym(h, "ibv_get_device_list");
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]) && list_fn; i++) {
		void *fn = dlsym(h, syms[i].name);
		if (!fn) {
			snprintf(lib_error, sizeof(lib_error),
				 "%s has no %s (rdma-core older than ferry needs): the ib datapath "
				 "cannot use it", lib_soname, syms[i].name);
			dlclose(h);
			return;
		}
		void *dst = syms[i].ptr ? syms[i].ptr : (char *)&verbs_api_ibverbs + syms[i].off;
		memcpy(dst, &fn, sizeof(fn));
	}
	if (!list_fn) {
		snprintf(lib_error, sizeof(lib_error), "%s has no ibv_get_device_list", lib_soname);
		dlclose(h);
		return;
	}
	memcpy(&lib_get_device_list, &list_fn, sizeof(list_fn));
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
	return lib_get_device_list(num);
}

/* As verbs.h's ___ibv_query_port: the extended call where the provider has
 * one, the library's otherwise. */
static int real_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
	memset(attr, 0, sizeof(*attr));
	if (vctx)
		return vctx->query_port(ctx, port, attr, sizeof(*attr));
	return lib_query_port(ctx, port, (struct _compat_ibv_port_attr *)attr);
}

static int real_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry)
{
	return lib_query_gid_ex(ctx, port, index, entry, 0, sizeof(*entry));
}

/* As verbs.h's ibv_reg_mr with an access not known at compile time. */
static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return lib_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, (unsigned int)access);
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

/* The calls whose signature is the library's are filled in as it opens. */
struct verbs_api verbs_api_ibverbs = {
	.name = "libibverbs",
	.kind = FERRY_TRANSPORT_IB,
	.switched_fabric = true,
	.pins_memory = true,
	.ud_max_msg = 0,
	.get_device_list = real_get_device_list,
	.query_port = real_query_port,
	.query_gid_ex = real_query_gid_ex,
	.reg_mr = real_reg_mr,
	.unavailable = real_unavailable,
};
