# tests/install.mk: what users get from make install and the man pages.
# The man pages render without warnings and cover every variable and option.
TESTS += tests/test_man_pages.sh
# make install DESTDIR=: where each file lands, no .la, a clean uninstall.
TESTS += tests/test_install_layout.sh
# ferry(7)'s systemd drop-in runs a redis-server over ferry.
TESTS += tests/integration/systemd.sh
EXTRA_DIST += tests/test_man_pages.sh tests/test_install_layout.sh tests/integration/systemd.sh
