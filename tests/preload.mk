# tests/preload.mk
# tests/sockets: the same socket scenarios under the kernel and under ferry (check.sh).
check_PROGRAMS += tests/sockets/sockcheck
tests_sockets_sockcheck_SOURCES = tests/sockets/harness.c tests/sockets/harness.h \
	tests/sockets/scen_stream.c tests/sockets/scen_options.c tests/sockets/scen_ready.c \
	tests/sockets/scen_fortify.c tests/sockets/scen_misc.c tests/sockets/scen_flow.c
tests_sockets_sockcheck_LDADD = $(PTHREAD_LIBS)
tests_sockets_sockcheck_SOURCES += tests/sockets/scen_handover.c
tests_sockets_sockcheck_SOURCES += tests/sockets/scen_liveness.c tests/sockets/scen_bind.c \
	tests/sockets/scen_signals.c tests/sockets/scen_urgent.c \
	tests/sockets/scen_errqueue.c tests/sockets/scen_lowat.c
TESTS += tests/sockets/check.sh tests/sockets/lossy.sh
EXTRA_DIST += tests/sockets/check.sh tests/sockets/lossy.sh tests/integration/lib.sh
# tests/integration: real servers and clients preloaded (transport: FERRY_TEST_TRANSPORT, default udp).
check_PROGRAMS += tests/integration/tcpcat tests/integration/connhold tests/integration/procserve
check_PROGRAMS += tests/integration/stdioline
tests_integration_stdioline_SOURCES = tests/integration/stdioline.c
tests_integration_procserve_SOURCES = tests/integration/procserve.c
tests_integration_tcpcat_SOURCES = tests/integration/tcpcat.c
tests_integration_connhold_SOURCES = tests/integration/connhold.c
# A hostile peer: OPENs claiming addresses its connect never named.
check_PROGRAMS += tests/integration/forge_open
tests_integration_forge_open_SOURCES = tests/integration/forge_open.c preload/stream_wire.c \
	preload/config.c
tests_integration_forge_open_LDADD = libferry_core.la
FERRY_INTEGRATION_TESTS = tests/integration/ferry_run.sh tests/integration/redis.sh tests/integration/memcached.sh \
	tests/integration/mixed.sh tests/integration/kill.sh tests/integration/idle.sh \
	tests/integration/process.sh tests/integration/nginx.sh tests/integration/postgres.sh \
	tests/integration/nginx_reload.sh tests/integration/fault.sh tests/integration/stat.sh \
	tests/integration/ports.sh tests/integration/reply_first.sh tests/integration/sshd.sh \
	tests/integration/xinetd.sh tests/integration/node.sh tests/integration/lossy_apps.sh \
	tests/integration/haproxy.sh
TESTS += $(FERRY_INTEGRATION_TESTS)
EXTRA_DIST += $(FERRY_INTEGRATION_TESTS) tests/integration/node_servers.js
# The same tests over other datapaths: make check-transport FERRY_TEST_TRANSPORT='udp softib'
check-transport:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS='tests/sockets/check.sh $(FERRY_INTEGRATION_TESTS)' \
		FERRY_TEST_TRANSPORT='$(FERRY_TEST_TRANSPORT)'
# preload/ unit tests (criterion): the interposer's sources compiled in, so
# the test binary interposes itself; files are driven by hand (FFILE_TEST).
PRELOAD_TEST_SOURCES = tests/preload_test_util.h tests/preload_proc_util.h
# Every object of the interposer, referenced or not (its constructor, the
# entry points a test reaches only through libc), as in libferry.so.
WHOLE_LIBFERRY_PRELOAD = $(AM_LDFLAGS) -Wl,--whole-archive,.libs/libferry_preload.a,--no-whole-archive
check_PROGRAMS += tests/test_preload_fdtable
TESTS += tests/test_preload_fdtable
tests_test_preload_fdtable_SOURCES = tests/test_preload_fdtable.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_fdtable_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_fdtable_LDADD = $(TEST_LDADD)
tests_test_preload_fdtable_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_fdtable_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_epoll
TESTS += tests/test_preload_epoll
tests_test_preload_epoll_SOURCES = tests/test_preload_epoll.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_epoll_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_epoll_LDADD = $(TEST_LDADD)
tests_test_preload_epoll_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_epoll_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_rxbuf
TESTS += tests/test_preload_rxbuf
tests_test_preload_rxbuf_SOURCES = tests/test_preload_rxbuf.c preload/rxbuf.c preload/rxbuf.h
tests_test_preload_rxbuf_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_rxbuf_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/test_preload_rxbuf_keep
TESTS += tests/test_preload_rxbuf_keep
tests_test_preload_rxbuf_keep_SOURCES = tests/test_preload_rxbuf_keep.c preload/rxbuf.c preload/rxbuf.h
tests_test_preload_rxbuf_keep_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_rxbuf_keep_LDADD = $(TEST_LDADD)
# libferry.so exports only the interposed names (nm -D against the map).
TESTS += tests/test_preload_exports.sh
EXTRA_DIST += tests/test_preload_exports.sh
check_PROGRAMS += tests/test_preload_start
TESTS += tests/test_preload_start
tests_test_preload_start_SOURCES = tests/test_preload_start.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_start_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_start_LDADD = $(TEST_LDADD)
tests_test_preload_start_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_start_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_stream
TESTS += tests/test_preload_stream
tests_test_preload_stream_SOURCES = tests/test_preload_stream.c tests/rpc_pair.c tests/rpc_pair.h \
	$(PRELOAD_TEST_SOURCES)
tests_test_preload_stream_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_stream_LDADD = $(TEST_LDADD)
tests_test_preload_stream_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_stream_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_phpool
TESTS += tests/test_preload_phpool
tests_test_preload_phpool_SOURCES = tests/test_preload_phpool.c preload/phpool.c preload/phpool.h \
	preload/reentry.c preload/reentry.h
tests_test_preload_phpool_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_phpool_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/test_preload_peercache
TESTS += tests/test_preload_peercache
tests_test_preload_peercache_SOURCES = tests/test_preload_peercache.c preload/peercache.c \
	preload/peercache.h preload/sockaddr.c preload/sockaddr.h
tests_test_preload_peercache_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_peercache_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/test_preload_sharing
TESTS += tests/test_preload_sharing
tests_test_preload_sharing_SOURCES = tests/test_preload_sharing.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_sharing_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_sharing_LDADD = $(TEST_LDADD)
tests_test_preload_sharing_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_sharing_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_close
TESTS += tests/test_preload_close
tests_test_preload_close_SOURCES = tests/test_preload_close.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_close_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_close_LDADD = $(TEST_LDADD)
tests_test_preload_close_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_close_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_stdfile
TESTS += tests/test_preload_stdfile
tests_test_preload_stdfile_SOURCES = tests/test_preload_stdfile.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_stdfile_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_stdfile_LDADD = $(TEST_LDADD)
tests_test_preload_stdfile_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_stdfile_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_epoll_handover
TESTS += tests/test_preload_epoll_handover
tests_test_preload_epoll_handover_SOURCES = tests/test_preload_epoll_handover.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_epoll_handover_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_epoll_handover_LDADD = $(TEST_LDADD)
tests_test_preload_epoll_handover_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_epoll_handover_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_phpool_limit
TESTS += tests/test_preload_phpool_limit
tests_test_preload_phpool_limit_SOURCES = tests/test_preload_phpool_limit.c preload/phpool.c preload/phpool.h \
	preload/reentry.c preload/reentry.h
tests_test_preload_phpool_limit_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_phpool_limit_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/test_preload_placeholder
TESTS += tests/test_preload_placeholder
tests_test_preload_placeholder_SOURCES = tests/test_preload_placeholder.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_placeholder_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_placeholder_LDADD = $(TEST_LDADD)
tests_test_preload_placeholder_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_placeholder_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_wait_busy
TESTS += tests/test_preload_wait_busy
tests_test_preload_wait_busy_SOURCES = tests/test_preload_wait_busy.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_wait_busy_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_wait_busy_LDADD = $(TEST_LDADD)
tests_test_preload_wait_busy_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_wait_busy_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_wait_wake
TESTS += tests/test_preload_wait_wake
tests_test_preload_wait_wake_SOURCES = tests/test_preload_wait_wake.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_wait_wake_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_wait_wake_LDADD = $(TEST_LDADD)
tests_test_preload_wait_wake_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_wait_wake_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_epoll_nic
TESTS += tests/test_preload_epoll_nic
tests_test_preload_epoll_nic_SOURCES = tests/test_preload_epoll_nic.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_epoll_nic_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_epoll_nic_LDADD = $(TEST_LDADD)
tests_test_preload_epoll_nic_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_epoll_nic_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_fork
TESTS += tests/test_preload_fork
tests_test_preload_fork_SOURCES = tests/test_preload_fork.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_fork_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_fork_LDADD = $(TEST_LDADD)
tests_test_preload_fork_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_fork_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_epoll_scale
TESTS += tests/test_preload_epoll_scale
tests_test_preload_epoll_scale_SOURCES = tests/test_preload_epoll_scale.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_epoll_scale_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_epoll_scale_LDADD = $(TEST_LDADD)
tests_test_preload_epoll_scale_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_epoll_scale_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_exit
TESTS += tests/test_preload_exit
tests_test_preload_exit_SOURCES = tests/test_preload_exit.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_exit_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_exit_LDADD = $(TEST_LDADD)
tests_test_preload_exit_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_exit_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_idle_loss
TESTS += tests/test_preload_idle_loss
tests_test_preload_idle_loss_SOURCES = tests/test_preload_idle_loss.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_idle_loss_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_idle_loss_LDADD = $(TEST_LDADD)
tests_test_preload_idle_loss_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_idle_loss_DEPENDENCIES = libferry_preload.la
check_PROGRAMS += tests/test_preload_wait_spin
TESTS += tests/test_preload_wait_spin
tests_test_preload_wait_spin_SOURCES = tests/test_preload_wait_spin.c $(PRELOAD_TEST_SOURCES)
tests_test_preload_wait_spin_CFLAGS = $(TEST_CFLAGS)
tests_test_preload_wait_spin_LDADD = $(TEST_LDADD)
tests_test_preload_wait_spin_LDFLAGS = $(WHOLE_LIBFERRY_PRELOAD)
EXTRA_tests_test_preload_wait_spin_DEPENDENCIES = libferry_preload.la
