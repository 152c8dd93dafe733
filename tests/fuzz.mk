# make fuzz: a libFuzzer target for every decoder of untrusted bytes
# (tests/fuzz/fuzz_<decoder>.c), each run FUZZ_SECONDS over its seed corpus
# (tests/fuzz/corpus/<decoder>/); a crash, leak, sanitizer report or hang
# fails (tests/fuzz/run.sh). The targets are built by clang (configure's
# FUZZ_CC) from the sources each needs, whatever CC is: gcc's objects have
# neither the coverage libFuzzer steers by nor clang's sanitizers.
# `make -j2 fuzz` runs two at once. (-Wno-unknown-warning-option: the
# tree silences some gcc-only warnings by name.)
FUZZ_SECONDS = 30
FUZZ_CFLAGS = -std=gnu11 -g -O1 -fno-omit-frame-pointer $(WARN_CFLAGS) $(PTHREAD_CFLAGS) \
	-Wno-unknown-warning-option \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-I$(top_srcdir) -I$(top_builddir)
FUZZ_LIBS = $(IBVERBS_LIBS) $(CAP_LIBS) $(PTHREAD_LIBS) $(LIBS)
# Compiles the C files among the target's FUZZ_SRC (relative to srcdir) into it.
FUZZ_BUILD = $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ \
	`for s in $(FUZZ_SRC); do case $$s in *.c) echo $(srcdir)/$$s;; esac; done` $(FUZZ_LIBS)
FUZZ_RUN = $(SHELL) $(srcdir)/tests/fuzz/run.sh
# Any source or header of the tree may change what a target compiles.
FUZZ_DEPS = $(libferry_core_la_SOURCES) $(libferry_preload_la_SOURCES)

fuzz_pkthdr_SRC = tests/fuzz/fuzz_pkthdr.c transport/pkthdr.c
fuzz_mgmt_wire_SRC = tests/fuzz/fuzz_mgmt_wire.c mgmt/mgmt_wire.c
fuzz_rendezvous_SRC = tests/fuzz/fuzz_rendezvous.c $(libferry_core_la_SOURCES)
fuzz_softib_ring_SRC = tests/fuzz/fuzz_softib_ring.c $(SOFTIB_SOURCES) \
	transport/sys.c transport/verbs_seam.c
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

if HAVE_FUZZ
tests/fuzz/fuzz_pkthdr: FUZZ_SRC = $(fuzz_pkthdr_SRC)
tests/fuzz/fuzz_pkthdr: $(fuzz_pkthdr_SRC) $(FUZZ_DEPS)
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_BUILD)
tests/fuzz/fuzz_mgmt_wire: FUZZ_SRC = $(fuzz_mgmt_wire_SRC)
tests/fuzz/fuzz_mgmt_wire: $(fuzz_mgmt_wire_SRC) $(FUZZ_DEPS)
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_BUILD)
tests/fuzz/fuzz_rendezvous: FUZZ_SRC = $(fuzz_rendezvous_SRC)
tests/fuzz/fuzz_rendezvous: $(fuzz_rendezvous_SRC) $(FUZZ_DEPS)
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_BUILD)
tests/fuzz/fuzz_softib_ring: FUZZ_SRC = $(fuzz_softib_ring_SRC)
tests/fuzz/fuzz_softib_ring: $(fuzz_softib_ring_SRC) $(FUZZ_DEPS)
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_BUILD)
tests/fuzz/fuzz_stream_wire: FUZZ_SRC = $(fuzz_stream_wire_SRC)
tests/fuzz/fuzz_stream_wire: $(fuzz_stream_wire_SRC) $(FUZZ_DEPS)
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_BUILD)

fuzz-pkthdr: tests/fuzz/fuzz_pkthdr
	@$(FUZZ_RUN) tests/fuzz/fuzz_pkthdr $(srcdir)/tests/fuzz/corpus/pkthdr $(FUZZ_SECONDS)
fuzz-mgmt-wire: tests/fuzz/fuzz_mgmt_wire
	@$(FUZZ_RUN) tests/fuzz/fuzz_mgmt_wire $(srcdir)/tests/fuzz/corpus/mgmt_wire $(FUZZ_SECONDS)
fuzz-rendezvous: tests/fuzz/fuzz_rendezvous
	@$(FUZZ_RUN) tests/fuzz/fuzz_rendezvous $(srcdir)/tests/fuzz/corpus/rendezvous $(FUZZ_SECONDS)
fuzz-softib-ring: tests/fuzz/fuzz_softib_ring
	@$(FUZZ_RUN) tests/fuzz/fuzz_softib_ring $(srcdir)/tests/fuzz/corpus/softib_ring $(FUZZ_SECONDS)
fuzz-stream-wire: tests/fuzz/fuzz_stream_wire
	@$(FUZZ_RUN) tests/fuzz/fuzz_stream_wire $(srcdir)/tests/fuzz/corpus/stream_wire $(FUZZ_SECONDS)
FUZZ_RUNS = fuzz-pkthdr fuzz-mgmt-wire fuzz-rendezvous fuzz-stream-wire
# softib is built only with libibverbs.
if HAVE_VERBS
FUZZ_RUNS += fuzz-softib-ring
endif
fuzz: $(FUZZ_RUNS)
else
fuzz:
	@echo "make fuzz: off, $(FUZZ_WHY); configure again once it is there" >&2; exit 1
endif
.PHONY: fuzz fuzz-seeds clean-fuzz fuzz-pkthdr fuzz-mgmt-wire fuzz-rendezvous \
	fuzz-softib-ring fuzz-stream-wire
