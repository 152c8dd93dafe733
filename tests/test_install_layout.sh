#!/bin/sh
# make install DESTDIR=...: libferry.so in $(libdir)/ferry with no .la
# anywhere, ferry-run and ferry-doctor in $(bindir), the four man pages, an
# installed ferry-run that preloads the installed library and says so; make
# uninstall then leaves no file behind.
set -u
build=${FERRY_TEST_BUILDDIR:-.}
dest=$(mktemp -d "${TMPDIR:-/tmp}/ferry-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# A make of its own: under make check, the parent's MAKEFLAGS would add
# directory lines to what it prints and ask for a jobserver it cannot reach.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$build" "$@"; }
# The directories as make expands them (the Makefile holds ${prefix} forms).
dirs=$(printf 'print-dirs:\n\t@echo $(bindir) $(pkglibdir) $(mandir)\n' |
	mk -f Makefile -f - print-dirs) || exit 99
set -- $dirs
bindir=$1 pkglibdir=$2 mandir=$3
mk install DESTDIR="$dest" >"$dest.log" 2>&1 ||
	{ cat "$dest.log"; rm -f "$dest.log"; echo "FAIL: make install"; exit 1; }
rm -f "$dest.log"

find "$dest" ! -type d | sed "s|^$dest||" | sort >"$dest/list"
for f in "$pkglibdir/libferry.so" "$bindir/ferry-run" "$bindir/ferry-doctor" \
	"$mandir/man1/ferry-run.1" "$mandir/man1/ferry-doctor.1" "$mandir/man1/ferry-stat.1" \
	"$mandir/man7/ferry.7"; do
	grep -qx "$f" "$dest/list" || fail "$f not installed"
done
grep '\.la$' "$dest/list" && fail "a libtool archive was installed"
grep 'libferry' "$dest/list" | grep -v "^$pkglibdir/" && fail "libferry outside $pkglibdir"
tab=$(printf '\t')
said=$("$dest$bindir/ferry-run" --print-lib)
[ "$said" = "$pkglibdir/libferry.so${tab}installed" ] ||
	fail "the installed ferry-run --print-lib says '$said'"

mk uninstall DESTDIR="$dest" >/dev/null 2>&1 ||
	fail "make uninstall"
left=$(find "$dest" ! -type d ! -name list)
[ -z "$left" ] || fail "make uninstall left $left"
[ $failed = 0 ] && echo "PASS: $(wc -l <"$dest/list") files installed, none left after uninstall"
exit $failed
