/* copy_bytes: memcpy for ferry's copies of payload (a stream's bytes into a
 * message buffer, the receive ring, the application's buffer; softib's
 * "DMA"). */
#ifndef FERRY_TRANSPORT_COPY_H
#define FERRY_TRANSPORT_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * glibc copies a few KB and more with rep movsb, and rep movsb slows to a
 * tenth when the destination is 1 to 31 bytes past the source modulo the
 * 4 KB page (measured on this project's AMD EPYC VMs, glibc 2.36: 4 KB took
 * 2.2 us instead of 0.2; Intel parts have the same trap, which glibc avoids
 * only on some of them). ferry's copies land at arbitrary offsets (a
 * stream's sequence number decides where in the ring), so some runs of a
 * bulk transfer hit it on every packet. Pieces below glibc's rep movsb
 * threshold (2,112 bytes at least) go through its vector loop instead,
 * which has no such trap.
 */
#define COPY_NEAR_DISTANCE 64u
#define COPY_PIECE 2048u

static inline void copy_bytes(void *dst, const void *src, size_t len)
{
	uintptr_t ahead = ((uintptr_t)dst - (uintptr_t)src) & 4095u;
	if (len <= COPY_PIECE || ahead == 0 || ahead >= COPY_NEAR_DISTANCE) {
		memcpy(dst, src, len);
		return;
	}
	uint8_t *d = dst;
	const uint8_t *s = src;
	while (len > COPY_PIECE) {
		memcpy(d, s, COPY_PIECE);
		d += COPY_PIECE;
		s += COPY_PIECE;
		len -= COPY_PIECE;
	}
	memcpy(d, s, len);
}

#endif
