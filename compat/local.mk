# compat: build fragment, included from Makefile.am
# softib: the software verbs device (shared memory), behind transport/verbs_seam.h.
SOFTIB_SOURCES = compat/softib/softib.h compat/softib/softib_int.h \
	compat/softib/softib_device.c compat/softib/softib_fabric.c \
	compat/softib/softib_cq.c compat/softib/softib_qp.c
if HAVE_VERBS
libferry_core_la_SOURCES += $(SOFTIB_SOURCES)
endif
EXTRA_DIST += $(SOFTIB_SOURCES)
# ferry-doctor: what this machine offers the datapaths (ferry-run --check execs it).
bin_PROGRAMS += ferry-doctor
ferry_doctor_SOURCES = compat/doctor.c compat/doctor.h preload/config.c preload/config.h
if HAVE_VERBS
ferry_doctor_SOURCES += compat/doctor_verbs.c
else
ferry_doctor_SOURCES += compat/doctor_noverbs.c
endif
EXTRA_DIST += compat/doctor_verbs.c compat/doctor_noverbs.c
ferry_doctor_LDADD = libferry_core.la
# ferry-stat: the ferry processes of this host, live (preload/statmap_layout.h).
bin_PROGRAMS += ferry-stat
ferry_stat_SOURCES = compat/stat.c compat/stat_read.c compat/stat_read.h \
	compat/stat_show.c compat/stat_show.h preload/statmap_layout.h
ferry_stat_LDADD = libferry_core.la
