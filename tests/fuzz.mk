# make fuzz: a libFuzzer target for every decoder of untrusted bytes
# (tests/fuzz/fuzz_<decoder>.c), each run FUZZ_SECONDS over its seed corpus
# (tests/fuzz/corpus/<decoder>/); a crash, leak, sanitizer report or hang
# fails (tests/fuzz/run.sh). The targets are built by clang (configure's
# FUZZ_CC) from the sources each needs, whatever CC is: gcc's objects have
# neither the coverage libFuzzer steers by nor clang's sanitizers.
# `make -j2 fuzz` runs two at once; each can run alone too (see below).
# -Wno-unknown-warning-option: the tree silences gcc-only warnings by name.
FUZZ_SECONDS = 30
FUZZ_CFLAGS = -std=gnu11 -g -O1 -fno-omit-frame-pointer $(WARN_CFLAGS) $(PTHREAD_CFLAGS) \
	-Wno-unknown-warning-option \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-I$(top_srcdir) -I$(top_builddir)
FUZZ_LIBS = $(CAP_LIBS) $(PTHREAD_LIBS) $(LIBS)
# Any source or header of the tree may change what a target compiles.
FUZZ_DEPS = $(libferry_core_la_SOURCES) $(libferry_preload_la_SOURCES)

fuzz_pkthdr_SRC = tests/fuzz/fuzz_pkthdr.c transport/pkthdr.c
fuzz_mgmt_wire_SRC = tests/fuzz/fuzz_mgmt_wire.c mgmt/mgmt_wire.c
fuzz_rendezvous_SRC = tests/fuzz/fuzz_rendezvous.c $(libferry_core_la_SOURCES)
fuzz_softib_ring_SRC = tests/fuzz/fuzz_softib_ring.c $(SOFTIB_SOURCES) \
	transport/sys.c transport/verbs_seam.c transport/procinfo.c transport/mark.c transport/txdefer.c transport/log.c
fuzz_stream_wire_SRC = tests/fuzz/fuzz_stream_wire.c tests/rpc_pair.c \
	$(libferry_preload_la_SOURCES) $(libferry_core_la_SOURCES)

FUZZ_TARGETS = tests/fuzz/fuzz_pkthdr tests/fuzz/fuzz_mgmt_wire tests/fuzz/fuzz_rendezvous \
	tests/fuzz/fuzz_softib_ring tests/fuzz/fuzz_stream_wire
EXTRA_DIST += tests/fuzz/run.sh tests/fuzz/corpus $(FUZZ_TARGETS:=.c)
CLEANFILES += $(FUZZ_TARGETS)
clean-local: clean-fuzz
clean-fuzz:
	-rm -rf tests/fuzz/*.corpus tests/fuzz/*.log tests/fuzz/*-crash-* tests/fuzz/*-leak-* \
		tests/fuzz/*-timeout-* tests/fuzz/*-oom-*

# The seed corpora come from ferry's own encoders: `make fuzz-seeds` writes
# them into the source tree. Built by make check so it keeps compiling.
check_PROGRAMS += tests/fuzz/fuzz_seeds
tests_fuzz_fuzz_seeds_SOURCES = tests/fuzz/fuzz_seeds.c
tests_fuzz_fuzz_seeds_LDADD = libferry_preload.la libferry_core.la
fuzz-seeds: tests/fuzz/fuzz_seeds
	tests/fuzz/fuzz_seeds $(srcdir)/tests/fuzz/corpus

FUZZ_BUILT = tests/fuzz/fuzz_pkthdr tests/fuzz/fuzz_mgmt_wire tests/fuzz/fuzz_rendezvous \
	tests/fuzz/fuzz_stream_wire
# softib is built only with libibverbs.
if HAVE_VERBS
FUZZ_BUILT += tests/fuzz/fuzz_softib_ring
endif
FUZZ_RUNS = $(FUZZ_BUILT:=.run)
if HAVE_FUZZ
# Each target from the C files of its own <name>_SRC.
$(FUZZ_TARGETS): $(FUZZ_DEPS) $(FUZZ_TARGETS:=.c) tests/rpc_pair.c
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ \
		`for s in $($(@F)_SRC); do case $$s in *.c) echo $(srcdir)/$$s;; esac; done` \
		$(FUZZ_LIBS)
# make tests/fuzz/fuzz_<decoder>.run runs one, over tests/fuzz/corpus/<decoder>/.
$(FUZZ_RUNS): $(FUZZ_BUILT)
	@t=`basename $@ .run`; \
	$(SHELL) $(srcdir)/tests/fuzz/run.sh tests/fuzz/$$t \
		$(srcdir)/tests/fuzz/corpus/`echo $$t | sed 's/^fuzz_//'` $(FUZZ_SECONDS)
fuzz: $(FUZZ_RUNS)
else
fuzz:
	@echo "make fuzz: off, $(FUZZ_WHY); configure again once it is there" >&2; exit 1
endif
.PHONY: fuzz fuzz-seeds clean-fuzz $(FUZZ_RUNS)
