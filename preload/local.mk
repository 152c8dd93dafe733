# preload: build fragment, included from Makefile.am
# libferry.so: the interposer. Only the interposed libc names are exported
# (-fvisibility=hidden plus the version script); LD_PRELOAD=.libs/libferry.so
# in the build tree. Installed in $(pkglibdir) ($(libdir)/ferry), not
# $(libdir): it is preloaded by path, never linked against or found by
# ld.so's search, so it has no business on the library path.
pkglib_LTLIBRARIES += libferry.la
# The interposer's objects, compiled once: into libferry.so, and into the
# preload unit tests (tests/preload.mk), which interpose themselves.
noinst_LTLIBRARIES += libferry_preload.la
libferry_preload_la_SOURCES = \
	preload/reentry.c preload/reentry.h preload/export.h \
	preload/fdtable.c preload/fdtable.h \
	preload/wait.c preload/wait.h \
	preload/epoll.c preload/epoll.h \
	preload/poll.c \
	preload/rxbuf.c preload/rxbuf.h \
	preload/stream.c preload/stream.h preload/stream_internal.h \
	preload/stream_data.c preload/stream_open.c preload/stream_move.c \
	preload/stream_wire.c preload/stream_wire.h preload/listener.c preload/listener.h \
	preload/peercache.c preload/peercache.h \
	preload/socket.c preload/sock.h preload/sock_internal.h \
	preload/sock_connect.c preload/sock_listen.c preload/sockopt.c preload/fcntl.c \
	preload/sockaddr.c preload/sockaddr.h preload/localaddr.c preload/localaddr.h \
	preload/io.c \
	preload/progress.c preload/progress.h \
	preload/exit.c \
	preload/fork.c \
	preload/namespace.c \
	preload/signal.c preload/signal.h \
	preload/ferry.c preload/ferry.h
libferry_preload_la_SOURCES += preload/phpool.c preload/phpool.h
libferry_preload_la_SOURCES += preload/spawn.c
libferry_preload_la_SOURCES += preload/lshare.c preload/lshare.h
libferry_preload_la_SOURCES += preload/handover.c preload/handover.h
libferry_preload_la_SOURCES += preload/relay.c preload/relay.h preload/sandbox.c preload/sandbox.h
libferry_preload_la_SOURCES += preload/syscall.c preload/close.c preload/close.h
libferry_preload_la_SOURCES += preload/stdfile.c preload/stdfile.h
libferry_preload_la_SOURCES += preload/fasync.c preload/fasync.h
libferry_preload_la_SOURCES += preload/scm.c preload/scm.h
libferry_preload_la_SOURCES += preload/inherit.c preload/inherit.h preload/passfd.c preload/passfd.h
libferry_preload_la_SOURCES += preload/stream_end.c preload/stream_timeout.c \
	preload/stream_urgent.c preload/stream_zerocopy.c
libferry_preload_la_SOURCES += preload/statmap.c preload/statmap.h preload/statmap_layout.h
# The interposer's settings; also compiled into ferry-doctor and ferry-bench,
# whose single check of FERRY_* names must know the interposer's too.
libferry_preload_la_SOURCES += preload/config.c preload/config.h
libferry_preload_la_SOURCES += compat/glibc_entry.c
libferry_preload_la_CFLAGS = $(AM_CFLAGS) -fPIC
libferry_la_SOURCES =
nodist_EXTRA_libferry_la_SOURCES = dummy.c
libferry_la_LIBADD = libferry_preload.la libferry_core.la $(PTHREAD_LIBS)
libferry_la_LDFLAGS = $(AM_LDFLAGS) -avoid-version -module -shared \
	-Wl,--version-script=$(builddir)/preload/libferry.map -Wl,-z,nodelete
EXTRA_libferry_la_DEPENDENCIES = preload/libferry.map
# No libferry.la beside it: a .la is for linking with libtool, and nothing
# links with a preload module (Debian drops .la files too). Without the .la,
# libtool's uninstall no longer knows the .so, so uninstall names it.
install-exec-hook:
	rm -f $(DESTDIR)$(pkglibdir)/libferry.la
uninstall-hook:
	rm -f $(DESTDIR)$(pkglibdir)/libferry.so
EXTRA_DIST += preload/libferry.map.in
# ferry-run (tests/sockets owner): one generated script for the build tree and the install.
bin_SCRIPTS += ferry-run
CLEANFILES += ferry-run
EXTRA_DIST += preload/ferry-run.in
ferry-run: $(srcdir)/preload/ferry-run.in Makefile ferry-doctor$(EXEEXT)
	$(AM_V_GEN)san=; if test -n "$(SAN_LDFLAGS)"; then san="`$(CC) -print-file-name=libasan.so` `$(CC) -print-file-name=libubsan.so`"; fi; \
	names=`ASAN_OPTIONS=detect_leaks=0 ./ferry-doctor$(EXEEXT) --transports | cut -f1 | tr '\n' ' '`; \
	$(edit_paths) -e "s|@san_preload[@]|$$san|g" -e "s|@transport_names[@]|$$names|g" \
		$(srcdir)/preload/ferry-run.in > $@.tmp && \
	chmod +x $@.tmp && mv $@.tmp $@
