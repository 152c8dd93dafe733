#!/usr/bin/env python3
"""What each end of a TCP connection says of its addresses (trust tests).

  addrprobe.py server ADDR:PORT...   listen on each; for every
      connection print and answer "accepted LOCAL from PEER" (addresses only)
  addrprobe.py client BIND HOST PORT bind to BIND:0 first ("-": no bind),
      connect, print "connect ok local=IP" or "connect ERRNO", then the
      server's answer
  addrprobe.py redis BIND HOST PORT  the same, then PING: prints redis's
      first reply line (+PONG, or -DENIED in protected mode)
  addrprobe.py hold ADDR:PORT        accept connections and keep them, silent
  addrprobe.py keepalive HOST PORT   connect with SO_KEEPALIVE (idle 1 s, 2
      probes 1 s apart), print "ready", then block in recv and print how it
      ended ("recv ETIMEDOUT", "recv eof", ...)
  addrprobe.py usertimeout HOST PORT FILE  connect with TCP_USER_TIMEOUT
      1500 ms, print "ready", wait for FILE to exist, send 64 KiB, then
      block in recv and print how it ended
"""
import os
import time
import errno
import select
import signal
import socket
import sys


def family(host):
    return socket.AF_INET6 if ':' in host else socket.AF_INET


def serve(specs):
    # A normal exit on SIGTERM, so exit handlers (ferry's counters) run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listeners = []
    for spec in specs:
        a, port = spec.rsplit(":", 1)
        s = socket.socket(family(a), socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((a, int(port)))
        s.listen(16)
        listeners.append(s)
    print("listening", flush=True)
    while True:
        ready, _, _ = select.select(listeners, [], [])
        for s in ready:
            c, peer = s.accept()
            line = "accepted %s from %s" % (c.getsockname()[0], peer[0])
            print(line, flush=True)
            try:
                c.sendall((line + "\n").encode())
            except OSError:
                pass
            c.close()


def connect(bind, host, port):
    s = socket.socket(family(host), socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        if bind != "-":
            s.bind((bind, 0))
        s.connect((host, port))
    except OSError as e:
        print("connect", errno.errorcode.get(e.errno, str(e.errno)), flush=True)
        sys.exit(0)
    print("connect ok local=%s" % s.getsockname()[0], flush=True)
    return s


def hold(spec):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    a, port = spec.rsplit(":", 1)
    s = socket.socket(family(a), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a, int(port)))
    s.listen(16)
    print("listening", flush=True)
    kept = []
    while True:
        kept.append(s.accept()[0])


def wait_end(s):
    s.settimeout(None)
    try:
        data = s.recv(1)
        print("recv", "eof" if not data else "data", flush=True)
    except OSError as e:
        print("recv", errno.errorcode.get(e.errno, str(e.errno)), flush=True)


def timed(mode, host, port, flag):
    s = connect("-", host, port)
    if mode == "keepalive":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 2)
    else:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 1500)
    print("ready", flush=True)
    if mode == "usertimeout":
        while not os.path.exists(flag):
            time.sleep(0.05)
        s.sendall(b"x" * 65536)
    wait_end(s)


def main():
    mode = sys.argv[1]
    if mode == "server":
        serve(sys.argv[2:])
    if mode == "hold":
        hold(sys.argv[2])
    if mode in ("keepalive", "usertimeout"):
        timed(mode, sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "")
        return
    s = connect(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    if mode == "redis":
        s.sendall(b"PING\r\n")
    reply = s.makefile().readline().strip()
    print(reply.split(" ")[0] if mode == "redis" else reply, flush=True)


main()
