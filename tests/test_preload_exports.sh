#!/bin/sh
# libferry.so exports exactly the names in preload/libferry.map (made by
# configure from libferry.map.in, in the build tree): the
# interposed libc calls, nothing of ferry's own.
set -eu
build=${FERRY_TEST_BUILDDIR:-.}
lib=$build/.libs/libferry.so
test -f "$lib" || { echo "no $lib: build libferry.la first"; exit 99; }
tmp=${TMPDIR:-/tmp}/ferry-exports.$$
trap 'rm -f "$tmp".*' EXIT
sed -e 's|/\*.*\*/||' -e '/^[[:space:]]*\*/d' -e '/^\/\*/d' "$build/preload/libferry.map" |
	awk '/global:/ {on = 1; next} /local:/ {on = 0} on' |
	tr ';' '\n' | tr -d ' \t' | grep -v '^$' | sort -u > "$tmp.map"
nm -D --defined-only "$lib" | awk '$2 ~ /^[TWiV]$/ {print $3}' | sed 's/@.*//' | sort -u > "$tmp.nm"
if ! diff -u "$tmp.map" "$tmp.nm"; then
	echo "FAIL: exported symbols (+) differ from preload/libferry.map (-)"
	exit 1
fi
echo "ok: $(wc -l < "$tmp.nm") symbols, all in the map"
