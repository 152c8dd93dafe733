/* copy_bytes: memcpy for ferry's copies of payload (a stream's bytes into a
 * message buffer, the receive ring, the application's buffer; softib's
 * "DMA"). */
#ifndef FERRY_TRANSPORT_COPY_H
#define FERRY_TRANSPORT_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * glibc 2.36 copies more than 2,112 bytes with rep movsb on this project's
 * machines (AMD EPYC with FSRM), and there rep movsb runs at a tenth of its
 * speed when the destination is 1 to 31 bytes past the source modulo 4 KB
 * (4 KB took 2.2 us instead of 0.2). ferry's copies land at arbitrary
 * offsets (a stream's sequence number decides where in the ring), so some
 * runs of a bulk transfer hit it on most copies. At such distances the
 * copy goes in pieces of 2 KB, which glibc copies with its vector loop, as
 * fast as the best case.
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
