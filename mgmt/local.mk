# mgmt/: management thread and the per-process nexus, part of libferry_core.
libferry_core_la_SOURCES += mgmt/mgmt.h mgmt/nexus.h mgmt/mgmt_internal.h
libferry_core_la_SOURCES += mgmt/mgmt.c
libferry_core_la_SOURCES += mgmt/mgmt_session.c
libferry_core_la_SOURCES += mgmt/mgmt_wire.c mgmt/mgmt_wire.h
libferry_core_la_SOURCES += mgmt/mgmt_net.c mgmt/mgmt_net.h
libferry_core_la_SOURCES += mgmt/mgmt_proc.c mgmt/mgmt_proc.h
libferry_core_la_SOURCES += mgmt/nexus.c
