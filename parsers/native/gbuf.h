/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Growable byte buffers: the memory behind one Arrow buffer while a batch is
 * being built. gbuf_take hands the memory over to Arrow and leaves the buffer
 * empty for the next batch.
 */
#ifndef KMEMSCOPE_GBUF_H
#define KMEMSCOPE_GBUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

struct gbuf {
	char *data;
	size_t len;
	size_t cap;
};

static inline int gbuf_reserve(struct gbuf *b, size_t extra)
{
	if (extra > SIZE_MAX / 4 - b->len)
		return -1;	/* no real request is that large: treat it as out of memory */
	size_t need = b->len + extra;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	char *p = km_realloc(b->data, cap);
	if (!p)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

/* Give an empty buffer `n` bytes at once, for a size known in advance (the
 * batch before's): doubling towards it copies the bytes at every step, and a
 * power of two past the allocator's mmap threshold is a fresh mapping whose
 * pages are faulted in and zeroed batch after batch. */
static inline int gbuf_presize(struct gbuf *b, size_t n)
{
	if (b->cap || !n)
		return 0;
	char *p = km_malloc(n);
	if (!p)
		return -1;
	b->data = p;
	b->cap = n;
	return 0;
}

static inline int gbuf_append(struct gbuf *b, const void *src, size_t n)
{
	if (gbuf_reserve(b, n))
		return -1;
	memcpy(b->data + b->len, src, n);
	b->len += n;
	return 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static inline int utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	int len;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if ((size_t)len > n)
		return 0;
	for (int i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f)))
		return 0;	/* overlong, or a UTF-16 surrogate */
	if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f)))
		return 0;
	return len;
}

/* Append text as valid UTF-8: Arrow strings must be, and kernel strings (a
 * task's comm, a corrupt record) need not be. Bad bytes become U+FFFD. */
static inline int gbuf_append_utf8(struct gbuf *b, const void *src, size_t n)
{
	const unsigned char *s = src;
	size_t i = 0;
	while (i < n && s[i] < 0x80)
		i++;
	if (i == n)
		return gbuf_append(b, src, n);	/* the usual case: plain ASCII */
	if (gbuf_reserve(b, n * 3))
		return -1;
	memcpy(b->data + b->len, s, i);
	b->len += i;
	while (i < n) {
		int len = utf8_seq(s + i, n - i);
		if (len) {
			memcpy(b->data + b->len, s + i, len);
			b->len += len;
			i += len;
		} else {
			memcpy(b->data + b->len, "\xef\xbf\xbd", 3);
			b->len += 3;
			i++;
		}
	}
	return 0;
}

/* Hand the memory to an Arrow buffer slot; an empty buffer still gets a valid
 * pointer. NULL (and `b` untouched) when out of memory. */
static inline void *gbuf_take(struct gbuf *b)
{
	void *p = b->data ? b->data : km_malloc(8);
	if (!p)
		return NULL;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

static inline void gbuf_free(struct gbuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}


#endif
