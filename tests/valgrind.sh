#!/bin/sh
# make check-valgrind runs each test through this: memcheck on the test and
# on every process it forks (criterion runs each test in a child of its own),
# failing when any of them reports an error. Criterion does not pass a
# child's error exit code on, so the reports themselves are the verdict.
# Only definite leaks count: a test that forks leaves criterion's runner
# state "possibly lost" in memcheck's eyes, which says nothing about ferry.
logs=$(mktemp -d "${TMPDIR:-/tmp}/ferry-valgrind.XXXXXX") || exit 99
valgrind -q --trace-children=yes --error-exitcode=9 --leak-check=full \
	--errors-for-leak-kinds=definite --show-possibly-lost=no --log-file="$logs/memcheck.%p" "$@"
rc=$?
for f in "$logs"/memcheck.*; do
	[ -s "$f" ] || continue
	cat "$f"
	[ $rc -eq 0 ] && rc=1
done
rm -rf "$logs"
exit $rc
