# bench: build fragment, included from Makefile.am
# udp_pingpong: bare busy-polled UDP ping-pong, the physical latency baseline.
noinst_PROGRAMS += bench/udp_pingpong
bench_udp_pingpong_SOURCES = bench/udp_pingpong.c bench/pin.h
# ferry-bench: the transport's latency / rate / bandwidth microbenchmarks.
noinst_PROGRAMS += bench/ferry-bench
bench_ferry_bench_SOURCES = bench/ferry-bench.c bench/pin.h preload/config.c preload/config.h
bench_ferry_bench_LDADD = libferry_core.la
# shm_pingpong: bare shared-memory ping-pong and memcpy bandwidth, the softib baseline.
noinst_PROGRAMS += bench/shm_pingpong
bench_shm_pingpong_SOURCES = bench/shm_pingpong.c bench/pin.h
# notice: how long a blocked reader takes to learn its server was SIGKILLed.
noinst_PROGRAMS += bench/notice
bench_notice_SOURCES = bench/notice.c
# forkconn: a fork-per-connection echo server and a client that connects
# again and again (bench/forkconn.sh).
noinst_PROGRAMS += bench/forkconn
bench_forkconn_SOURCES = bench/forkconn.c
