#!/bin/sh
# Echo servers in the process models servers use (tests/integration/procserve.c),
# preloaded, each checked byte for byte from 1 B to 1 MB by preloaded clients:
# fork per connection (the child serves what the parent accepted), a parent
# that keeps a connection its child held, inetd-style exec of cat, cat
# started by posix_spawn with the connection as its stdin and stdout, a listener
# carried across exec, systemd-style socket activation, prefork workers
# whose master exited, and workers that listen on a socket another process
# bound. The counters must show ferry carried every connection
# to the process that served it, with no fallback. Usage: process.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need ss od cmp pkill
need_ferry

procserve=$builddir/tests/integration/procserve
tcpcat=$builddir/tests/integration/tcpcat
[ -x "$procserve" ] && [ -x "$tcpcat" ] || skip "procserve or tcpcat not built"
# tcpcat writes all it reads before it reads the echo: past both directions
# windows (256 KiB each) it would wait on itself, under ferry as under a
# kernel whose buffers are smaller than the transfer.
sizes="1 1000 65536 100000 400000"
nsizes=$(echo $sizes | wc -w)

# echo_check NAME PORT: every size goes there and comes back intact.
echo_check() {
	for size in $sizes; do
		head -c "$size" /dev/urandom >"$work/in"
		tcpcat_echo "$1: $size bytes" "$2" "cli$1"
	done
	log "$1: $nsizes echoes of 1 B to 400 KB, byte for byte"
}

# stop NAME: ends the server processes of a mode (workers and children too).
stop() {
	pkill -TERM -f "procserve $1 $2" 2>/dev/null
	_i=0
	while pgrep -f "procserve $1 $2" >/dev/null && [ $_i -lt 50 ]; do sleep 0.1; _i=$((_i + 1)); done
	pkill -KILL -f "procserve $1 $2" 2>/dev/null
	sleep 0.2
}

for mode in fork keep exec spawn; do
	port=$(free_port)
	if [ $mode = exec ] || [ $mode = spawn ]; then
		bgf "srv$mode" "$procserve" $mode "$port" cat
	else
		bgf "srv$mode" "$procserve" "$mode" "$port"
	fi
	wait_listen "$port"
	echo_check "$mode" "$port"
	stop "$mode" "$port"
	check_transport "srv$mode"
	counter_eq "$mode: server fallbacks" "$(stat_sum fallbacks "srv$mode")" 0
	counter_eq "$mode: client fallbacks" "$(stat_sum fallbacks "cli$mode")" 0
	counter_ge "$mode: server streams_accepted" "$(stat_sum streams_accepted "srv$mode")" "$nsizes"
	if [ $mode = keep ]; then
		counter_eq "$mode: streams taken over" "$(stat_sum streams_taken_over "srv$mode")" 0
	else
		# Each connection was served by the process that took it over.
		counter_ge "$mode: streams taken over" "$(stat_sum streams_taken_over "srv$mode")" "$nsizes"
	fi
done

# A listener carried across exec (the launcher listens under ferry).
port=$(free_port)
bgf srvexecl "$procserve" activate "$port" "$procserve" serve3 "$port"
# Not the port: it listens from before the exec, and a client that comes
# before the new program first looked at the listener goes through the
# kernel (seen under loss in CI: one kernel accept).
wait_line srvexecl ready "$last_pid"
echo_check execl "$port"
stop serve3 "$port"
counter_eq "listener across exec: server fallbacks" \
	$(($(stat_sum fallbacks srvexecl) + $(stat_sum kernel_accepts srvexecl))) 0
counter_ge "listener across exec: streams_accepted" "$(stat_sum streams_accepted srvexecl)" "$nsizes"

# Socket activation: the launcher is plain (as systemd), the server preloaded.
port=$(free_port)
bg srvact "$procserve" activate "$port" "$ferry_run" --transport "$transport" \
	--stats "$work/stats-srvact-%p.json" "$procserve" serve3 "$port"
# The port listens from the plain launcher on; ferry answers on it from the
# server's first accept, which "ready" follows (a client sooner goes
# through the kernel, as it should).
wait_line srvact ready "$last_pid"
echo_check act "$port"
stop serve3 "$port"
counter_eq "socket activation: server fallbacks" \
	$(($(stat_sum fallbacks srvact) + $(stat_sum kernel_accepts srvact))) 0
counter_ge "socket activation: streams_accepted" "$(stat_sum streams_accepted srvact)" "$nsizes"

# Prefork workers serve on after their master exits.
port=$(free_port)
bgf srvpre "$procserve" prefork "$port"
master=$last_pid
wait_listen "$port"
wait_exit "$master" 10 || fail "the prefork master failed"
echo_check pre "$port"
stop prefork "$port"
counter_eq "prefork: fallbacks" $(($(stat_sum fallbacks srvpre) + $(stat_sum kernel_accepts srvpre))) 0
counter_ge "prefork: workers' streams_accepted" "$(stat_sum streams_accepted srvpre)" "$nsizes"
# A connection passed to a worker over a unix socket (SCM_RIGHTS), the
# acceptor closing its copy: the worker takes it over and echoes.
port=$(free_port)
bgf srvpass "$procserve" passconn "$port"
wait_listen "$port"
echo_check passconn "$port"
stop passconn "$port"
counter_eq "passed connection: fallbacks" "$(stat_sum fallbacks srvpass)" 0
counter_ge "passed connection: sockets_passed" "$(stat_sum sockets_passed srvpass)" "$nsizes"
counter_ge "passed connection: sockets_received" "$(stat_sum sockets_received srvpass)" "$nsizes"
counter_ge "passed connection: streams taken over" "$(stat_sum streams_taken_over srvpass)" "$nsizes"

# A listener passed over a unix socket; the process that listened exits.
port=$(free_port)
bgf srvpassl "$procserve" passlisten "$port"
master=$last_pid
wait_listen "$port"
wait_exit "$master" 10 || fail "the process that passed its listener failed"
echo_check passlisten "$port"
stop passlisten "$port"
counter_eq "passed listener: fallbacks" \
	$(($(stat_sum fallbacks srvpassl) + $(stat_sum kernel_accepts srvpassl))) 0
counter_eq "passed listener: sockets_received" "$(stat_sum sockets_received srvpassl)" 1
counter_ge "passed listener: streams_accepted" "$(stat_sum streams_accepted srvpassl)" "$nsizes"

# A child that confines itself with seccomp (through prctl, or the system
# call as libseccomp does: sandboxsys) before it uses the connection
# it inherited (sshd's pre-authentication child) reaches it through a relay
# in its parent, or in itself once the connection is its own (the end comes
# when it exits); a child that only reads its copy's addresses and sets an
# option leaves the connection with its parent, which echoes.
for mode in sandbox sandboxsys sandboxself peek; do
	port=$(free_port)
	bgf "srv$mode" "$procserve" "$mode" "$port"
	wait_listen "$port"
	echo_check "$mode" "$port"
	stop "$mode" "$port"
	counter_eq "$mode: client fallbacks" "$(stat_sum fallbacks "cli$mode")" 0
	counter_ge "$mode: server streams_accepted" "$(stat_sum streams_accepted "srv$mode")" "$nsizes"
	[ $mode = sandboxself ] ||
		counter_eq "$mode: streams taken over" "$(stat_sum streams_taken_over "srv$mode")" 0
done

# A child that drops privileges before it uses the connection it inherited
# (sshd's, inetd's services): root only. softib's fabric is per user, so a
# child of another user cannot reach the peer there (a known limit).
if [ "$(id -u)" = 0 ] && [ "$transport" != softib ]; then
	chmod 1777 "$work" # nobody writes its counters there
	port=$(free_port)
	bgf srvdropuid "$procserve" dropuid "$port"
	wait_listen "$port"
	echo_check dropuid "$port"
	stop dropuid "$port"
	counter_eq "dropuid: client fallbacks" "$(stat_sum fallbacks clidropuid)" 0
	counter_ge "dropuid: streams taken over" "$(stat_sum streams_taken_over srvdropuid)" "$nsizes"
else
	log "dropuid: skipped (needs root, and a transport other than softib)"
fi

# A socket bound in one process and listened on in two others, passed over
# a unix socket (node's cluster without round robin) or inherited through
# fork: the workers answer on it with ferry, no client going to the kernel.
for mode in passbound bindfork; do
	port=$(free_port)
	bgf "srv$mode" "$procserve" "$mode" "$port"
	wait_line "srv$mode" ready "$last_pid"
	echo_check "$mode" "$port"
	stop "$mode" "$port"
	counter_eq "$mode: client fallbacks" "$(stat_sum fallbacks "cli$mode")" 0
	counter_eq "$mode: kernel accepts" "$(stat_sum kernel_accepts "srv$mode")" 0
	counter_ge "$mode: workers' streams_accepted" "$(stat_sum streams_accepted "srv$mode")" \
		"$nsizes"
done

# A connection passed to a program without ferry: that program's read
# fails at once (not connected), and the client gets an error, not a hang.
port=$(free_port)
bgf srvpassk "$procserve" passconn "$port" env -u LD_PRELOAD "$procserve" recv3 0
wait_listen "$port"
printf 'x' >"$work/in"
if timeout 60 "$ferry_run" --transport "$transport" "$tcpcat" 127.0.0.1 "$port" \
	<"$work/in" >"$work/out" 2>"$work/cli.err"; then
	[ -s "$work/out" ] && fail "a program without ferry echoed a passed connection"
fi
stop passconn "$port"
grep -q "read: Transport endpoint is not connected" "$work/srvpassk.log" ||
	fail "the program without ferry did not read ENOTCONN: $(tail -3 "$work/srvpassk.log")"
log "passed to a program without ferry: it reads ENOTCONN, the client ends ($(cat "$work/cli.err"))"
echo "PASS: process models over ferry ($transport)"
