# tests: each area keeps its own fragment so owners do not collide.
# Every test binary is a criterion program; TESTS lists what `make check` runs.
TEST_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
TEST_LDADD = libferry_core.la $(CRITERION_LIBS)
AM_TESTS_ENVIRONMENT = FERRY_TEST_BUILDDIR=$(abs_top_builddir); export FERRY_TEST_BUILDDIR; \
	FERRY_TEST_TRANSPORT="$${FERRY_TEST_TRANSPORT:-$(FERRY_TEST_TRANSPORTS)}"; export FERRY_TEST_TRANSPORT; \
	FERRY_TEST_SRCDIR=$(abs_top_srcdir); export FERRY_TEST_SRCDIR;

# The datapaths integration tests run over: every one this build has.
if HAVE_VERBS
FERRY_TEST_TRANSPORTS = udp softib
else
FERRY_TEST_TRANSPORTS = udp
endif

include $(srcdir)/tests/install.mk

if HAVE_CRITERION
include $(srcdir)/tests/transport.mk
if HAVE_VERBS
include $(srcdir)/tests/softib.mk
endif
include $(srcdir)/tests/preload.mk
else
check-local:
	@echo "make check: the tests need criterion, which configure did not find" \
		"(Debian: apt-get install libcriterion-dev, then configure again)"; exit 1
endif
