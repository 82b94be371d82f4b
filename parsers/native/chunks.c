// SPDX-License-Identifier: GPL-2.0
#define _GNU_SOURCE
#include "chunks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"

#define WINDOW (256u << 10)

static uint32_t read_u32(const unsigned char *p, bool big_endian)
{
	return big_endian ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
			  : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* pread until `len` bytes or the end of the file; -1 on an error other than EINTR. */
static ssize_t read_full(int fd, unsigned char *buf, size_t len, uint64_t at)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, buf + got, len - got, (off_t)(at + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static bool grow(struct chunk_walk *w, uint32_t *cap)
{
	uint32_t want = *cap ? *cap * 2 : 1024;
	if (want > w->count)
		want = w->count;
	struct chunk_entry *e = km_realloc(w->entries, (size_t)want * sizeof(*e));
	if (!e)
		return false;
	w->entries = e;
	*cap = want;
	return true;
}

void chunk_walk(struct chunk_walk *w)
{
	unsigned char *window = km_malloc(WINDOW);
	uint64_t window_at = 0, window_len = 0;
	uint32_t cap = 0;
	uint64_t pos = w->pos;

	w->entries = NULL;
	w->n = 0;
	w->fault = CHUNK_OK;
	if (!window) {
		w->fault = CHUNK_NO_MEMORY;
		return;
	}
	for (uint32_t i = 0; i < w->count; i++) {
		if (pos + 8 > w->file_size) {
			w->fault = CHUNK_HEADER_PAST_EOF;
			break;
		}
		if (pos < window_at || pos + 8 > window_at + window_len) {
			uint64_t want = w->file_size - pos < WINDOW ? w->file_size - pos : WINDOW;
			ssize_t got = read_full(w->fd, window, (size_t)want, pos);
			if (got < 8) {
				w->fault = CHUNK_SHORT_READ;
				break;
			}
			window_at = pos;
			window_len = (uint64_t)got;
		}
		const unsigned char *h = window + (pos - window_at);
		uint64_t csize = read_u32(h, w->big_endian), usize = read_u32(h + 4, w->big_endian);
		if (pos + 8 + csize > w->end) {
			w->fault = CHUNK_PAST_SECTION;
			break;
		}
		if (!usize || usize % w->page_size || usize > w->max_usize) {
			w->fault = CHUNK_BAD_USIZE;
			w->fault_value = usize;
			break;
		}
		if (w->n == cap && !grow(w, &cap)) {
			w->fault = CHUNK_NO_MEMORY;
			break;
		}
		w->entries[w->n++] = (struct chunk_entry){ pos, csize, usize };
		pos += 8 + csize;
	}
	w->fault_pos = pos;
	free(window);
}
