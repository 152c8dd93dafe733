# mgmt/: management thread and the per-process nexus, part of libferry_core.
libferry_core_la_SOURCES += mgmt/mgmt.h mgmt/nexus.h
