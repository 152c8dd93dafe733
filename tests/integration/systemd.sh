#!/bin/sh
# The systemd drop-in of ferry(7) (SYSTEMD SERVICES), taken from the built
# page: systemd-analyze verify accepts it on a unit, its LD_PRELOAD is where
# make install puts the library, and a redis-server started with its
# Environment= assignments, as systemd would pass them, is a ferry server
# whose counters land in the file its %%p names. systemd need not be running.
# Usage: systemd.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli ss
counting || skip "the drop-in is ferry's own: nothing to run in kernel mode"
need_ferry
page=$builddir/doc/ferry.7
[ -f "$page" ] || fail "$page not built"

# The lines between the page's markers, roff escapes undone.
mkdir -p "$work/units/ferry-example.service.d"
dropin=$work/units/ferry-example.service.d/ferry.conf
sed -n '/^\.\\" example-begin/,/^\.\\" example-end/{/^\.\\"/d;p;}' "$page" |
	sed -e 's/\\-/-/g' -e 's/\\e/\\/g' >"$dropin"
grep -q '^\[Service\]$' "$dropin" || fail "no drop-in between the markers of ferry(7)"
# Quoted or escaped values would need systemd's own splitting, not ours.
grep -q '["\\]' "$dropin" && fail "the drop-in quotes or escapes: teach this test systemd's splitting"

# Its library is the installed one: what an installed ferry-run preloads.
mkdir -p "$work/bin"
cp "$ferry_run" "$work/bin/ferry-run"
installed=$("$work/bin/ferry-run" --print-lib | cut -f1)
named=$(sed -n 's/^Environment=.*LD_PRELOAD=\([^ ]*\).*/\1/p' "$dropin")
expect_eq "the drop-in's LD_PRELOAD" "$named" "$installed"

port=$(free_port)
if command -v systemd-analyze >/dev/null; then
	printf '[Unit]\nDescription=ferry example\n[Service]\nExecStart=%s --port %s\n' \
		"$(command -v redis-server)" "$port" >"$work/units/ferry-example.service"
	# It warns on stderr, exit status 0, about what it ignores.
	SYSTEMD_UNIT_PATH="$work/units:" systemd-analyze verify ferry-example.service \
		>"$work/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$work/verify.log")"
	grep -F "$work" "$work/verify.log" && fail "systemd-analyze verify warns about the drop-in"
	log "systemd-analyze verify: accepted"
else
	log "no systemd-analyze: the drop-in's syntax is not checked"
fi

# Environment= assignments as systemd passes them: words split on blanks,
# %% a literal %. This build's library and the test's port and directory
# stand in for the installed ones.
# A sanitizer build's library wants the sanitizer runtimes loaded first, as
# ferry-run gives them (LD_PRELOAD also takes ':' between names).
san=$(sed -n "s/^san_preload='\(.*\)'$/\1/p" "$ferry_run" | tr ' ' ':')
assignments=$(sed -n 's/^Environment=//p' "$dropin" | tr ' ' '\n' | sed -e 's/%%/%/g' \
	-e "s|^LD_PRELOAD=.*|LD_PRELOAD=${san:+$san:}$lib|" -e "s|^FERRY_PORTS=.*|FERRY_PORTS=$port|" \
	-e "s|^FERRY_STATS=.*/|FERRY_STATS=$work/|")
echo "$assignments" | grep -q '^FERRY_STATS=.*%p' || fail "the drop-in's FERRY_STATS has no %%p"
# shellcheck disable=SC2086 # one word per assignment
ping_redis "$port" env FERRY_TRANSPORT="$transport" ASAN_OPTIONS=detect_leaks=0 $assignments
stats=$(echo "$assignments" | sed -n 's/^FERRY_STATS=//p' | sed "s/%p/$server/")
[ -f "$stats" ] || fail "no counters at $stats: $(ls "$work")"
mv "$stats" "$work/stats-server.json"
check_transport server
counter_ge "streams_accepted (server)" "$(stat_sum streams_accepted server)" 1
echo "PASS: systemd drop-in ($transport)"
