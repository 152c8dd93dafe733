#!/bin/sh
# Builds ferry and runs the whole test suite (make check), then the same
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh
jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # build dir, configure flags...
	dir=$1; shift
	mkdir -p "$dir"
	(cd "$dir" && "$top/configure" -q "$@" && make -s -j"$jobs" &&
	 make -s -j"$jobs" check) || {
		for log in "$dir"/tests/*.log; do
			grep -q '^FAIL\|^ERROR' "${log%.log}.trs" 2>/dev/null && { echo "=== $log"; tail -60 "$log"; }
		done
		exit 1
	}
}

run_suite build/plain
run_suite build/sanitizers --enable-sanitizers
echo "all test suites passed"
