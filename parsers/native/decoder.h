/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The page decoder: turns segments of ring-buffer pages (read from the file,
 * decompressed when the file is v7-compressed) into per-event column builders,
 * and full builders into Arrow batches. One `struct decoder` per thread; the
 * `struct trace_meta` they share is read-only after it is built, except for
 * libtraceevent's lookup caches, which `lookup_lock` guards.
 */
#ifndef KMEMSCOPE_DECODER_H
#define KMEMSCOPE_DECODER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <zstd.h>

#include <event-parse.h>
#include <kbuffer.h>

#include "alloc.h"
#include "arrow_c.h"
#include "gbuf.h"
#include "kallsyms.h"
#include "plan.h"

/* What every decoder of one file shares: the event plans and the record layout. */
struct trace_meta {
	struct tep_handle *tep;
	struct event_plan **plans;	/* indexed by event id */
	int max_id;
	int type_offset, type_size;	/* common_type */
	int pid_offset;
	bool swap;			/* file byte order differs from ours */
	bool big_endian;		/* the file's byte order: the ring buffer's bit fields follow it */
	int lsize;			/* kbuffer long size enum */
	bool old_format;
	pthread_mutex_t lookup_lock;	/* tep's cmdline and symbol caches are not thread-safe */
	struct ksyms ksyms;		/* kallsyms, indexed at the first stack (kallsyms.h); under lookup_lock */
};


struct pid_slot {
	int pid;
	int index;
};

struct col_builder {
	struct gbuf values;	/* fixed values, or indices for comm */
	struct gbuf offsets;	/* int32 offsets for strings and lists */
	struct gbuf child;	/* list elements / string bytes */
	struct gbuf child_offsets;	/* stack symbols: offsets into `child` */
	/* stack columns: what the batch before held, to size the next one at once */
	size_t last_offsets, last_child, last_child_offsets;
	/* comm dictionary for the batch being built */
	struct pid_slot *slots;
	int nslots;
	int nvalues;
	struct gbuf dict_offsets;
	struct gbuf dict_data;
};

/* A batch closes early once a string or list column holds this much. Arrow's
 * int32 offsets must not overflow, whatever the records hold; and a batch of
 * kernel stacks reaches hundreds of MB of symbols long before batch_rows,
 * buffers that big do not stay in the allocator's heap once freed, and each
 * batch would fault in fresh pages for all of it. */
#define BATCH_VAR_BYTES ((size_t)16 << 20)

struct event_builder {
	struct event_plan *plan;
	int64_t rows;
	bool full;		/* BATCH_VAR_BYTES reached: queue the batch now */
	struct col_builder *cols;
};

struct batch {
	int event_id;
	struct ArrowSchema *schema;
	struct ArrowArray *array;
};

struct lost_mark {
	int cpu;
	unsigned long long ts;
	long long missed;
};

struct lost_list {
	struct lost_mark *marks;
	int n, cap;
};

enum decoder_compression { COMPRESSION_NONE, COMPRESSION_ZSTD, COMPRESSION_ZLIB };

/* Kernel stacks repeat: a recording with a stack on every allocation holds
 * millions of stacks but a few thousand distinct ones, over a few thousand
 * distinct return addresses. Each decoder keeps the symbol of every address it
 * has resolved, for as long as it lives (one run's segments on one thread), so
 * kallsyms is searched, and its lock taken, once per address per thread. The
 * memo is this decoder's own: no lock guards it. A memo that reaches
 * MEMO_MAX_BYTES takes nothing more (hostile traces may hold nothing but
 * distinct addresses) and later misses are resolved one at a time, as they
 * would be without it. */
#ifndef MEMO_MAX_BYTES	/* a build may set it low (-DMEMO_MAX_BYTES=20000) to exercise full memos */
#define MEMO_MAX_BYTES ((size_t)32 << 20)
#endif

struct sym_slot {
	uint64_t addr;
	uint32_t off;		/* the symbol's text in sym_memo.text */
	uint32_t len;
	bool used;
};

struct sym_memo {
	struct sym_slot *slots;
	uint32_t nslots, nused;	/* nslots: 0 or a power of two */
	struct gbuf text;	/* symbols as appended to a frames list (valid UTF-8) */
};

struct stack_slot {
	uint64_t hash;
	uint32_t first;		/* the stack's first frame in stack_memo.addrs */
	uint32_t depth;
	int32_t id;		/* its stack_id */
	bool used;
};

/* Whole stacks met so far: addresses -> stack_id. */
struct stack_memo {
	struct stack_slot *slots;
	uint32_t nslots, nused;
	struct gbuf addrs;	/* uint64_t per frame */
};

/* The stacks of one decode, shared by all its decoders (threads), behind
 * `lock`: each distinct stack gets a stack_id, 1, 2, ... in the order the
 * decode first met it, and one row of the `stacks` table (stack_id, frames,
 * addresses), built here and handed out as Arrow batches. A kernel_stack
 * record carries only its stack_id. The memo stops growing at MEMO_MAX_BYTES:
 * a stack not met before is then given a new id and row each time it comes
 * (its rows repeat frames, but every id names its own record's frames
 * exactly). Once `failed` (memory ran out mid-row), every later call fails. */
struct stack_intern {
	pthread_mutex_t lock;
	struct stack_memo memo;
	int32_t last_id;
	int64_t rows;		/* rows in the builders, not yet a batch */
	struct col_builder ids, frames, addrs;
	struct batch *ready;	/* finished batches of `stacks` not yet taken */
	int nready, capready;
	bool failed;
};

struct decoder {
	bool kbuffer_walk;	/* walk pages with kbuffer's calls (decoder_kbuffer_walk) */
	struct trace_meta *trace;
	int fd;
	long long file_size;
	enum decoder_compression compression;
	int page_size;
	long long ts_offset;
	int64_t batch_rows;
	unsigned char *wanted;	/* per event id: decode this event? NULL: all */
	struct event_builder **builders;	/* per event id */
	struct batch *ready;	/* finished batches not yet taken */
	int nready, capready;
	struct kbuffer *kbuf;
	ZSTD_DCtx *zctx;
	struct gbuf io;		/* compressed bytes read from the file */
	struct gbuf pages;	/* uncompressed pages */
	struct gbuf frames;	/* one stack record's addresses, as uint64_t */
	struct sym_memo syms;
	struct stack_memo known;	/* stacks this decoder has had ids for: no lock to find them */
	struct stack_intern *stacks;	/* shared with the decode's other decoders; not owned */
	int64_t events;
	int64_t unknown_events;
	long long min_ts, max_ts;	/* over decoded events, for the runs table */
	bool failed;		/* a call failed part-way: the builders are inconsistent */
	char error[512];	/* why the last call failed, when it was the file's fault */
};

/* addr's symbol, `function+0xoffset`, into sym (decoder.c); the caller holds
 * lookup_lock. Returns 1, 0 when no function holds addr, -1 when out of memory. */
int trace_symbol(struct trace_meta *t, uint64_t addr, bool reference, char *sym, size_t size);

/* Decoders made while this is set walk every page through libtraceevent's kbuffer,
 * the reference the tests compare kmemscope's own walk with. */
extern bool decoder_kbuffer_walk;

/* Set up `d` for `trace`; the caller has set fd, file_size, compression,
 * page_size, ts_offset, batch_rows and wanted. Returns -1 when out of memory. */
int decoder_init(struct decoder *d, struct trace_meta *trace);
/* Free everything `d` holds; safe on a partly initialised decoder. */
void decoder_release(struct decoder *d);
/* Decode `length` bytes of pages at `offset`, or `chunks` compressed chunks.
 * Returns -1 with d->error set when the file is at fault, -1 with it empty
 * when memory ran out. After a failure part-way through, every later call
 * fails too: the half-appended record must never reach Arrow. */
int decoder_segment(struct decoder *d, int cpu, long long offset, long long length, int chunks,
		    struct lost_list *lost);
/* Queue the partly filled batch of every event; fails like decoder_segment. */
int decoder_flush(struct decoder *d);
void batch_release(struct batch *b);

/* Set up an empty stack table; returns -1 when the lock cannot be made. */
int stack_intern_init(struct stack_intern *s);
/* Free everything `s` holds (its batches not yet taken too). */
void stack_intern_release(struct stack_intern *s);
/* Under the lock: turn the rows built so far into one more ready batch.
 * Returns -1 when memory ran out or the table failed earlier. */
int stack_intern_flush(struct stack_intern *s);

#endif
