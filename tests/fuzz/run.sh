#!/bin/sh
# Runs one libFuzzer target for a bounded time over its seed corpus and
# fails on anything it reports: a crash, a leak, a sanitizer report, an
# input that runs longer than 10 s (a hang), or more than 2 GB.
# usage: run.sh <target binary> <seed corpus dir> <seconds>
# New inputs it finds go to <binary>.corpus in the build tree (kept for the
# next run); a failing input is saved as <binary>-crash-<sha1> (or leak-,
# timeout-, oom-): copy it into the seed corpus once fixed.
set -u
bin=$1 seeds=$2 secs=$3
name=${bin##*/}
mkdir -p "$bin.corpus"
UBSAN_OPTIONS=print_stacktrace=1 "$bin" -max_total_time="$secs" -timeout=10 \
	-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$bin-" \
	"$bin.corpus" "$seeds" >"$bin.log" 2>&1
rc=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$bin.log")
if [ $rc -ne 0 ]; then
	echo "fuzz $name: FAILED (exit $rc); the end of $bin.log:"
	tail -60 "$bin.log"
	exit 1
fi
echo "fuzz $name: ok, ${runs:-?} inputs in ${secs} s, corpus $(ls "$bin.corpus" | wc -l) + $(ls "$seeds" | wc -l) seeds"
