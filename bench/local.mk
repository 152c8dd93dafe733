# bench: build fragment, included from Makefile.am
# udp_pingpong: bare busy-polled UDP ping-pong, the physical latency baseline.
noinst_PROGRAMS += bench/udp_pingpong
bench_udp_pingpong_SOURCES = bench/udp_pingpong.c
