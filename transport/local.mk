# transport/: the RPC transport and its datapaths, linked into every binary
# through the libferry_core convenience library (with mgmt/).
noinst_LTLIBRARIES += libferry_core.la
libferry_core_la_CFLAGS = $(AM_CFLAGS) -fPIC
libferry_core_la_LIBADD = $(CAP_LIBS) $(PTHREAD_LIBS)
libferry_core_la_SOURCES = \
	transport/clock.h \
	transport/sys.c transport/sys.h \
	transport/config.c transport/config.h \
	transport/log.c transport/log.h \
	transport/stats.c transport/stats.h \
	transport/pkthdr.c transport/pkthdr.h \
	transport/msgbuf.c transport/msgbuf.h
libferry_core_la_SOURCES += transport/nic.h transport/rpc.h transport/timing_wheel.h transport/timely.h
libferry_core_la_SOURCES += transport/nic_test.c transport/nic_test.h
libferry_core_la_SOURCES += transport/timing_wheel.c transport/timely.c
libferry_core_la_SOURCES += transport/pool.c transport/pool.h transport/fault.c transport/fault.h
libferry_core_la_SOURCES += transport/rpc.c transport/rpc_internal.h transport/rpc_tx.c
libferry_core_la_SOURCES += transport/rpc_client.c transport/rpc_server.c transport/session.c
libferry_core_la_SOURCES += transport/nic_udp.c transport/nic_udp.h transport/nic_udp_internal.h transport/nic_udp_gso.c \
	transport/udp_bind.c transport/udp_bind.h
libferry_core_la_SOURCES += transport/procinfo.c transport/procinfo.h
libferry_core_la_SOURCES += transport/mark.c transport/mark.h
libferry_core_la_SOURCES += transport/txdefer.c transport/txdefer.h
libferry_core_la_SOURCES += transport/nic.c
# The verbs datapaths (ib, softib) need libibverbs; without it they refuse
# clearly (configure says so).
if HAVE_VERBS
libferry_core_la_SOURCES += transport/nic_verbs.c transport/nic_ib.c transport/nic_ib_open.c \
	transport/nic_ib_internal.h transport/verbs_seam.c transport/verbs_seam.h
else
libferry_core_la_SOURCES += transport/nic_noverbs.c
endif
EXTRA_DIST += transport/nic_verbs.c transport/nic_noverbs.c transport/nic_ib.c transport/nic_ib_open.c \
	transport/nic_ib_internal.h transport/verbs_seam.c transport/verbs_seam.h
libferry_core_la_SOURCES += transport/thread_pause.c transport/thread_pause.h transport/cpu_relax.h transport/copy.h
