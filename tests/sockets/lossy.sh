#!/bin/sh
# Socket semantics under loss: the scenarios whose answers do not depend on
# the order packets arrive in, run as check.sh runs them (the kernel, then
# ferry, identical output), with FERRY_FAULT dropping, duplicating and
# reordering 5% of the packets each end receives, for three random seeds
# (logged: FERRY_FAULT=...,seed=N check.sh TRANSPORT SCENARIO runs one
# again). Loss once reset connections where a server forks as it accepts
# (the backend asked for the stream before the client had its OPEN
# answered), replies and closes at once, or closes and exits at once (the
# reply or the FIN rode in an answer that only a live server sends again).
# Urgent data is left out: the kernel too shows an urgent mark before the
# bytes ahead of it when they come out of order. Usage: lossy.sh [TRANSPORT]
. "$(dirname "$0")/../integration/lib.sh"
need_ferry
counting || skip "FERRY_FAULT is ferry's; the kernel has nothing to compare here"

scenarios="accept_burst concurrent_accept close_after_small_sends close_after_send blocking_echo
duplex_bulk shutdown_wr fork_child_close threads exit_without_close exit_open tiny_writes
concurrent_senders blocking_large_write reset_seen close_unread eof_wakes_reader"
for round in 1 2 3; do
	seed=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
	fault="drop=0.05,dup=0.05,reorder=0.05,seed=$seed"
	log "round $round: $fault"
	# shellcheck disable=SC2086 # one argument per scenario
	FERRY_FAULT=$fault sh "$srcdir/tests/sockets/check.sh" "$transport" $scenarios \
		>"$work/round$round.out" 2>&1 ||
		{ cat "$work/round$round.out"; fail "socket scenarios differ under $fault"; }
	tail -1 "$work/round$round.out"
done
echo "PASS: socket scenarios through 5% drop, duplication and reordering, as the kernel answers them ($transport)"
