#!/bin/sh
# The man pages render without a warning (groff -ww, man --warnings as
# lintian runs it, mandoc -Tlint when installed), ferry(7) has an entry for
# every FERRY_* name the parsers accept and none they do not, and ferry-run(1)
# and ferry-doctor(1) describe every option their --help lists.
set -u
build=${FERRY_TEST_BUILDDIR:-.}
src=${FERRY_TEST_SRCDIR:-..}
pages="ferry.7 ferry-run.1 ferry-doctor.1 ferry-stat.1"
command -v groff >/dev/null || { echo "SKIP: no groff (groff-base)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# Warnings go to stderr while the exit status stays 0: any output fails.
quiet() { # what, command...
	_what=$1; shift
	"$@" >/dev/null 2>"$tmp/err" || fail "$_what: exit status $?"
	[ -s "$tmp/err" ] && { fail "$_what:"; cat "$tmp/err"; }
}
for p in $pages; do
	page=$build/doc/$p
	[ -f "$page" ] || { fail "$page not built"; continue; }
	quiet "groff -ww $p" groff -ww -man -Tutf8 -z "$page"
	command -v man >/dev/null &&
		quiet "man --warnings $p" env LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$page"
	command -v mandoc >/dev/null && quiet "mandoc -Tlint $p" mandoc -Tlint -W warning "$page"
done

# FERRY_* names: accepted by transport/config.c and preload/config.c, against
# the .TP entries of ferry(7) (the word after .B/.BR on the line that follows).
sed -n 's/.*strcmp(name, "\(FERRY_[A-Z0-9_]*\)").*/\1/p' \
	"$src/transport/config.c" "$src/preload/config.c" | sort -u >"$tmp/parsed"
[ "$(wc -l <"$tmp/parsed")" -ge 20 ] || fail "found only $(wc -l <"$tmp/parsed") names in the parsers"
awk 'tp && /^\.BR? FERRY_/ {print $2} {tp = /^\.TP/}' "$build/doc/ferry.7" | sort -u >"$tmp/documented"
# Read by ferry-run, set by ferry itself, or the test suite's: not the parsers'.
printf '%s\n' FERRY_INHERIT FERRY_LIB >>"$tmp/parsed"
sort -u -o "$tmp/parsed" "$tmp/parsed"
for v in $(comm -23 "$tmp/parsed" "$tmp/documented"); do fail "ferry(7) has no entry for $v"; done
for v in $(comm -13 "$tmp/parsed" "$tmp/documented"); do fail "ferry(7) documents $v, which nothing reads"; done

# Options: each --help line's option, against the page's .TP entries.
options() { # page: the options of its .TP lines, roff escapes removed
	awk 'tp {print} {tp = /^\.TP/}' "$1" | sed -e 's/\\-/-/g' -e 's/\\f[BIR]//g' |
		grep -o -- '--*[a-z][a-z-]*' | sort -u
}
helped() { # command...: the options its --help starts a line with
	"$@" --help | sed -n 's/^ *-h, \(--help\).*/-h\n\1/p; t; s/^ *\(--*[a-z][a-z-]*\).*/\1/p' | sort -u
}
check_options() { # page, command...
	_page=$1; shift
	options "$_page" >"$tmp/opt.page"
	helped "$@" >"$tmp/opt.help"
	[ -s "$tmp/opt.help" ] || fail "$* --help lists no options"
	for o in $(comm -23 "$tmp/opt.help" "$tmp/opt.page"); do fail "${_page##*/} has no entry for $o"; done
}
check_options "$build/doc/ferry-run.1" "$build/ferry-run"
check_options "$build/doc/ferry-doctor.1" "$build/ferry-doctor"
[ $failed = 0 ] && echo "PASS: $pages"
exit $failed
