// SPDX-License-Identifier: GPL-2.0
#define _GNU_SOURCE
#include "chunks.h"

#include <stdlib.h>

#include "alloc.h"
#include "fileio.h"

#define WINDOW (256u << 10)

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
	const bool swap = w->big_endian != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);

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
			ssize_t got = pread_full(w->fd, window, (size_t)want, pos);
			if (got < 8) {
				w->fault = CHUNK_SHORT_READ;
				break;
			}
			window_at = pos;
			window_len = (uint64_t)got;
		}
		const unsigned char *h = window + (pos - window_at);
		uint64_t csize = read_uint(h, 4, swap), usize = read_uint(h + 4, 4, swap);
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
