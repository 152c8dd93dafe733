# tests of transport/ (criterion). One binary per module behaviour.
check_PROGRAMS += tests/test_pkthdr_codec
TESTS += tests/test_pkthdr_codec
tests_test_pkthdr_codec_SOURCES = tests/test_pkthdr_codec.c
tests_test_pkthdr_codec_CFLAGS = $(TEST_CFLAGS)
tests_test_pkthdr_codec_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/test_nic_test
TESTS += tests/test_nic_test
tests_test_nic_test_SOURCES = tests/test_nic_test.c
tests_test_nic_test_CFLAGS = $(TEST_CFLAGS)
tests_test_nic_test_LDADD = $(TEST_LDADD)
