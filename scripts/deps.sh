#!/bin/sh
# Installs everything ferry builds, tests and benchmarks with (Debian 12, as root).
# libclang-rt-14-dev holds the sanitizer and libFuzzer runtimes make fuzz links:
# clang only recommends it, and recommendations are not installed here.
# debhelper and lintian build and check the Debian package (scripts/package.sh);
# groff-base, man-db and mandoc lint the man pages; systemd brings
# systemd-analyze, which checks ferry(7)'s drop-in (it need not be running).
# nodejs and socat run tests/integration/node.sh (node closes with syscall()),
# haproxy tests/integration/haproxy.sh (its listener passed on reload).
set -e
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
	build-essential autoconf automake libtool pkg-config \
	libibverbs-dev librdmacm-dev ibverbs-utils libcap-dev uthash-dev libcriterion-dev \
	redis-server redis-tools memcached libmemcached-tools \
	nginx-light wrk curl postgresql postgresql-contrib openssh-server openssh-client xinetd \
	strace valgrind hyperfine iproute2 procps python3 nodejs socat haproxy \
	clang libfuzzer-14-dev libclang-rt-14-dev \
	debhelper lintian groff-base man-db mandoc systemd
