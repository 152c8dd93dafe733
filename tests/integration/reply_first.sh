#!/bin/sh
# A blocking receive that finds nothing sends what its thread queued (the
# reply just written) before it polls the nic for packets: the reply must
# not wait behind a system call that finds nothing. A blocking echo server
# in python answers 300 ping-pongs under strace; on its main thread, a
# packet sent right after an empty poll is a reply that was held up. With
# spinning off, every reply used to be (checked against the code before);
# now a few are, when the thread was descheduled between the two.
# Usage: reply_first.sh [TRANSPORT] (udp: softib's poll is no system call)
. "$(dirname "$0")/lib.sh"
need python3 strace
need_ferry
[ "$transport" = udp ] || skip "the nic's polls are system calls only on udp"

port=$(free_port)
export FERRY_SPIN_US=0
cat >"$work/echo.py" <<EOF
import socket
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", $port))
l.listen(1)
c, _ = l.accept()
while True:
    d = c.recv(64)
    if not d:
        break
    c.sendall(d)
EOF
cat >"$work/ping.py" <<EOF
import socket
s = socket.create_connection(("127.0.0.1", $port))
for i in range(300):
    m = bytes([i % 251]) * 64
    s.sendall(m)
    got = b""
    while len(got) < 64:
        d = s.recv(64 - len(got))
        if not d:
            raise SystemExit("the echo server closed early")
        got += d
    if got != m:
        raise SystemExit("echo %d differs" % i)
print("ok")
EOF
# -ff: a file per thread, so no call is split across lines by another's.
bg server strace -ff -qq -s 256 -e trace=sendmsg,sendmmsg,recvmsg,recvmmsg,execve -o "$work/echo.strace" \
	"$ferry_run" --transport "$transport" --stats "$work/stats-server-%p.json" python3 "$work/echo.py"
server=$last_pid
wait_listen "$port"
r=$(timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
	python3 "$work/ping.py") || fail "the ping-pong failed: $r"
expect_eq "300 echoes, every byte checked" "$r" ok
wait_exit "$server" 30 || fail "the echo server exited with an error"
check_transport server
counter_ge "server streams_accepted" "$(stat_sum streams_accepted server)" 1

# The python process's main thread: the one that exec'd a program with
# echo.py among its arguments (python3 itself, past any launcher shims).
# Python's own socket calls are recv and send (recvfrom, sendto); the
# msghdr calls are the nic's.
main=
for f in "$work"/echo.strace.*; do
	grep -q 'execve(.*echo\.py.* = 0$' "$f" && main=$f
done
[ -n "$main" ] || fail "no python3 in the trace"
set -- $(awk '
	/^(sendmsg|sendmmsg|recvmsg|recvmmsg)\(/ {
		send = $1 ~ /^send/
		if (send) { sent++; if (empty) late++ }
		empty = !send && / = -1 EAGAIN/
	}
	END { print sent + 0, late + 0 }' "$main")
sent=$1 late=$2
log "server main thread: $sent packets sent, $late of them right after an empty poll"
# Most replies leave from the main thread (the progress thread sends one
# whose thread was kept off the CPU for a tick); next to none after a poll.
expect_ge "packets the server's main thread sent" "$sent" 150
expect_le "packets sent right after an empty poll" "$late" $((sent / 4))
echo "PASS: a blocking receive sends its thread's reply before it polls ($transport)"
