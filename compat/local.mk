# compat: build fragment, included from Makefile.am
# softib: the software verbs device (shared memory), behind transport/verbs_seam.h.
libferry_core_la_SOURCES += compat/softib/softib.h compat/softib/softib_int.h
libferry_core_la_SOURCES += compat/softib/softib_device.c compat/softib/softib_fabric.c
libferry_core_la_SOURCES += compat/softib/softib_cq.c compat/softib/softib_qp.c
# ferry-doctor: what this machine offers the datapaths (ferry-run --check execs it).
bin_PROGRAMS += ferry-doctor
ferry_doctor_SOURCES = compat/doctor.c preload/config.c preload/config.h
ferry_doctor_LDADD = libferry_core.la
