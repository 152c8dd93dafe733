# preload: build fragment, included from Makefile.am
# ferry-run (tests/sockets owner): one generated script for the build tree and the install.
bin_SCRIPTS += ferry-run
CLEANFILES += ferry-run
EXTRA_DIST += preload/ferry-run.in
ferry-run: $(srcdir)/preload/ferry-run.in Makefile
	$(AM_V_GEN)san=; if test -n "$(SAN_LDFLAGS)"; then san="`$(CC) -print-file-name=libasan.so` `$(CC) -print-file-name=libubsan.so`"; fi; \
	$(SED) -e 's|@abs_top_builddir[@]|$(abs_top_builddir)|g' -e 's|@libdir[@]|$(libdir)|g' \
		-e 's|@bindir[@]|$(bindir)|g' -e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' \
		-e "s|@san_preload[@]|$$san|g" $(srcdir)/preload/ferry-run.in > $@.tmp && \
	chmod +x $@.tmp && mv $@.tmp $@
