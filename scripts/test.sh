#!/bin/sh
# Builds ferry and runs the whole test suite (make check), the fuzz targets
# (make fuzz), the unit and protocol tests again under valgrind, then the
# whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer, then
# make distcheck (its tarball build runs the quick tests only), then builds
# the Debian package from a release tarball and checks it (scripts/package.sh).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh
jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # build dir, check target, configure flags...
	dir=$1; target=$2; shift 2
	mkdir -p "$dir"
	[ -f "$dir/Makefile" ] || (cd "$dir" && "$top/configure" -q "$@")
	(cd "$dir" && make -s -j"$jobs" && make -s -j"$jobs" $target) || {
		for trs in $(find "$dir/tests" -name '*.trs'); do
			grep -q '^:test-result: \(FAIL\|ERROR\)' "$trs" &&
				{ echo "=== ${trs%.trs}.log"; tail -60 "${trs%.trs}.log"; }
		done
		exit 1
	}
}

run_suite build/plain check --enable-werror
# Every decoder of untrusted bytes under libFuzzer, FUZZ_SECONDS each (two at once).
run_suite build/plain fuzz
run_suite build/plain check-valgrind
run_suite build/sanitizers check --enable-sanitizers --enable-werror
run_suite build/plain distcheck-quick
sh scripts/package.sh build/plain
echo "all test suites passed"
