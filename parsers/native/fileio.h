/* SPDX-License-Identifier: GPL-2.0 */
/* Reading the trace file: numbers in the file's byte order, and whole preads. */
#ifndef KMEMSCOPE_FILEIO_H
#define KMEMSCOPE_FILEIO_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* An unsigned number of `width` bytes at p; swap: the file's byte order is not ours. */
static inline uint64_t read_uint(const unsigned char *p, int width, bool swap)
{
	uint64_t v = 0;
	switch (width) {
	case 1: return p[0];
	case 2: { uint16_t x; memcpy(&x, p, 2); v = swap ? __builtin_bswap16(x) : x; break; }
	case 4: { uint32_t x; memcpy(&x, p, 4); v = swap ? __builtin_bswap32(x) : x; break; }
	case 8: { uint64_t x; memcpy(&x, p, 8); v = swap ? __builtin_bswap64(x) : x; break; }
	}
	return v;
}

/* pread until n bytes or the end of the file: the bytes read (fewer than n at the
 * end), or -1 with errno set on an error other than EINTR. */
static inline ssize_t pread_full(int fd, void *buf, size_t n, uint64_t offset)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(offset + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

#endif
