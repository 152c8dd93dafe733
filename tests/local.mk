# tests: each area keeps its own fragment so owners do not collide.
# Every test binary is a criterion program; TESTS lists what `make check` runs.
TEST_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
TEST_LDADD = libferry_core.la $(CRITERION_LIBS)
AM_TESTS_ENVIRONMENT = FERRY_TEST_BUILDDIR=$(abs_top_builddir); export FERRY_TEST_BUILDDIR; \
	FERRY_TEST_TRANSPORT="$${FERRY_TEST_TRANSPORT:-udp softib}"; export FERRY_TEST_TRANSPORT; \
	FERRY_TEST_SRCDIR=$(abs_top_srcdir); export FERRY_TEST_SRCDIR;

if HAVE_CRITERION
include $(srcdir)/tests/transport.mk
include $(srcdir)/tests/softib.mk
include $(srcdir)/tests/preload.mk
else
check-local:
	@echo "make check: the tests need criterion, which configure did not find" \
		"(Debian: apt-get install libcriterion-dev, then configure again)"; exit 1
endif
