#!/bin/sh
# One way down to libc: no object of the layers below the interposer
# (transport/, mgmt/, compat/softib, all in the libferry_core archive)
# references a name that libferry.so exports (preload/libferry.map), except
# transport/sys.o, whose table is how they reach libc. Inside libferry.so
# such a reference binds at run time to preload's own wrapper, so a direct
# close() or sendmmsg() down there goes back up into the interposer.
set -eu
build=${FERRY_TEST_BUILDDIR:-.}
src=${FERRY_TEST_SRCDIR:-${srcdir:-.}}
lib=$build/.libs/libferry_core.a
map=$build/preload/libferry.map
test -f "$lib" || { echo "no $lib: build libferry_core.la first"; exit 99; }
test -f "$map" || { echo "no $map: run configure first"; exit 99; }
command -v nm > /dev/null || { echo "no nm (binutils): skipped"; exit 77; }
tmp=${TMPDIR:-/tmp}/ferry-layering.$$
trap 'rm -f "$tmp".*' EXIT
sed -e 's|/\*.*\*/||' -e '/^[[:space:]]*\*/d' -e '/^\/\*/d' "$map" |
	awk '/global:/ {on = 1; next} /local:/ {on = 0} on' |
	tr ';' '\n' | tr -d ' \t' | grep -v '^$' | sort -u > "$tmp.map"
test -s "$tmp.map" || { echo "FAIL: no exported names read from $map"; exit 1; }
# nm -A: "archive:member: U name" for each undefined name of each member.
nm -A -u "$lib" | awk '{n = split($1, p, ":"); print p[n - 1], $NF}' |
	sed 's/@.*//' | sort -u > "$tmp.und"
test -s "$tmp.und" || { echo "FAIL: nm -u read nothing from $lib"; exit 1; }
awk 'NR == FNR {exported[$1] = 1; next}
	$1 !~ /(^|-)sys\.o$/ && ($2 in exported) {print}' "$tmp.map" "$tmp.und" > "$tmp.bad"
if test -s "$tmp.bad"; then
	while read -r obj sym; do
		base=${obj#libferry_core_la-}
		source=$(cd "$src" && ls transport/"${base%.o}".c mgmt/"${base%.o}".c \
			compat/softib/"${base%.o}".c 2>/dev/null | head -n 1)
		echo "FAIL: $obj (${source:-?}) calls $sym directly: call sys()->$sym (transport/sys.h)"
	done < "$tmp.bad"
	echo "FAIL: $(wc -l < "$tmp.bad") direct reference(s) to interposed names below preload/"
	exit 1
fi
echo "ok: $(awk '{print $1}' "$tmp.und" | sort -u | wc -l) objects, none names one of" \
	"the $(wc -l < "$tmp.map") interposed functions but transport/sys.o"
