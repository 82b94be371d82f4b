/* SPDX-License-Identifier: GPL-2.0 */
/* The chunk table of a compressed CPU data section (trace.dat v7): one 8-byte header
 * (compressed size, uncompressed size) before each chunk, thousands of them a few KiB
 * apart. Read here in 256 KiB windows rather than one small read per header. */
#ifndef KMEMSCOPE_CHUNKS_H
#define KMEMSCOPE_CHUNKS_H

#include <stdbool.h>
#include <stdint.h>

struct chunk_entry {
	uint64_t pos;		/* file offset of the chunk's header */
	uint64_t csize;		/* compressed bytes after the header */
	uint64_t usize;		/* bytes once inflated */
};

enum chunk_fault {
	CHUNK_OK = 0,
	CHUNK_HEADER_PAST_EOF,	/* a header lies beyond the end of the file */
	CHUNK_SHORT_READ,	/* the file gave fewer bytes than its size promised */
	CHUNK_PAST_SECTION,	/* a chunk runs past the end of its CPU's data */
	CHUNK_BAD_USIZE,	/* 0, not a whole number of pages, or above max_usize */
	CHUNK_NO_MEMORY,
};

struct chunk_walk {
	/* in */
	int fd;
	uint64_t pos, end;	/* the first header, and the end of the CPU's data */
	uint64_t file_size;
	uint32_t count;		/* chunks the section claims */
	bool big_endian;
	uint32_t page_size;
	uint64_t max_usize;
	/* out: entries[0..n) are whole and valid; fault says why the walk stopped early */
	struct chunk_entry *entries;
	uint32_t n;
	enum chunk_fault fault;
	uint64_t fault_pos;	/* the header the fault is about */
	uint64_t fault_value;	/* its uncompressed size, for CHUNK_BAD_USIZE */
};

/* Walk the table; the caller frees w->entries. Never reads past file_size. */
void chunk_walk(struct chunk_walk *w);

#endif
