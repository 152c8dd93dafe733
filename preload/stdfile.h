/*
 * stdio on ferry sockets. glibc's FILE reads, writes and closes through its
 * own internal calls, never the interposed read, write and close: a FILE on
 * a ferry socket read the kernel's placeholder (fgets found no line where
 * the kernel gives the peer's), its writes went nowhere, and its fclose
 * never ended the connection. So such a FILE is made with fopencookie, its
 * reads, writes and close ferry's, numbered as the socket for fileno:
 * - fdopen on a ferry socket makes one;
 * - a standard stream whose number becomes a ferry socket (an inetd-style
 *   service exec'd with the connection as 0 and 1, or a child that dup2s it
 *   there) is replaced by one, unless glibc holds bytes of the old one.
 * Buffering is glibc's for a socket either way: full, BUFSIZ (stderr none).
 */
#ifndef FERRY_PRELOAD_STDFILE_H
#define FERRY_PRELOAD_STDFILE_H

/* fd (0, 1 or 2) now names a ferry socket: its standard stream becomes
 * ferry's. Nothing for other numbers or sockets. */
void stdfile_take_std(int fd);

/* exit: flushes every stream, before ferry ends its streams (glibc's own
 * flush comes after the exit handlers), once a FILE of ours exists. */
void stdfile_flush(void);

#endif
