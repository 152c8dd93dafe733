# tests/softib.mk: softib conformance and nic_ib over softib (criterion).
check_PROGRAMS += tests/test_softib_verbs
TESTS += tests/test_softib_verbs
tests_test_softib_verbs_SOURCES = tests/test_softib_verbs.c tests/softib_fixture.h
tests_test_softib_verbs_CFLAGS = $(TEST_CFLAGS)
tests_test_softib_verbs_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/test_softib_nic
TESTS += tests/test_softib_nic
tests_test_softib_nic_SOURCES = tests/test_softib_nic.c tests/softib_fixture.h
tests_test_softib_nic_CFLAGS = $(TEST_CFLAGS)
tests_test_softib_nic_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/test_softib_crossproc
TESTS += tests/test_softib_crossproc
tests_test_softib_crossproc_SOURCES = tests/test_softib_crossproc.c tests/softib_fixture.h
tests_test_softib_crossproc_CFLAGS = $(TEST_CFLAGS)
tests_test_softib_crossproc_LDADD = $(TEST_LDADD)
