# doc: build fragment, included from Makefile.am
# The man pages, made from doc/*.in with the configured paths and version
# (edit_paths), so ferry(7) names the library where this build installs it.
man_MANS = doc/ferry.7 doc/ferry-run.1 doc/ferry-doctor.1 doc/ferry-stat.1
CLEANFILES += $(man_MANS)
EXTRA_DIST += doc/ferry.7.in doc/ferry-run.1.in doc/ferry-doctor.1.in doc/ferry-stat.1.in
man_edit = $(AM_V_GEN)$(MKDIR_P) doc && $(edit_paths) $(srcdir)/$@.in > $@.tmp && mv $@.tmp $@
doc/ferry.7: $(srcdir)/doc/ferry.7.in Makefile
	$(man_edit)
doc/ferry-run.1: $(srcdir)/doc/ferry-run.1.in Makefile
	$(man_edit)
doc/ferry-doctor.1: $(srcdir)/doc/ferry-doctor.1.in Makefile
	$(man_edit)
doc/ferry-stat.1: $(srcdir)/doc/ferry-stat.1.in Makefile
	$(man_edit)
