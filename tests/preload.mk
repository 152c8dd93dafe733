# tests/preload.mk
# tests/sockets: the same socket scenarios under the kernel and under ferry (check.sh).
check_PROGRAMS += tests/sockets/sockcheck
tests_sockets_sockcheck_SOURCES = tests/sockets/harness.c tests/sockets/harness.h \
	tests/sockets/scen_stream.c tests/sockets/scen_options.c tests/sockets/scen_ready.c \
	tests/sockets/scen_fortify.c
tests_sockets_sockcheck_LDADD = $(PTHREAD_LIBS)
TESTS += tests/sockets/check.sh
EXTRA_DIST += tests/sockets/check.sh tests/integration/lib.sh
