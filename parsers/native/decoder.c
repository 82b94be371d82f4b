// SPDX-License-Identifier: GPL-2.0
/*
 * Page decoding and column building. Every read of trace data is checked
 * against the size of the page or record it lies in: a corrupt file must
 * produce an error, never a crash.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "decoder.h"
#include "fileio.h"

static void builder_reset_dict(struct col_builder *c)
{
	free(c->slots);
	c->slots = NULL;
	c->nslots = 0;
	c->nvalues = 0;
	gbuf_free(&c->dict_offsets);
	gbuf_free(&c->dict_data);
}

static void col_builder_free(struct col_builder *c)
{
	gbuf_free(&c->values);
	gbuf_free(&c->offsets);
	gbuf_free(&c->child);
	gbuf_free(&c->child_offsets);
	builder_reset_dict(c);
}

static void builder_free(struct event_builder *b)
{
	if (!b)
		return;
	for (int i = 0; i < b->plan->ncols; i++)
		col_builder_free(&b->cols[i]);
	free(b->cols);
	free(b);
}

static int offsets_start(struct gbuf *g)
{
	int32_t zero = 0;
	return g->len ? 0 : gbuf_append(g, &zero, 4);
}

static struct event_builder *builder_new(struct event_plan *plan)
{
	struct event_builder *b = km_calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->plan = plan;
	b->cols = km_calloc(plan->ncols, sizeof(*b->cols));
	if (!b->cols) {
		free(b);
		return NULL;
	}
	return b;
}

static int append_int(struct gbuf *g, uint64_t v, int width)
{
	if (gbuf_reserve(g, width))
		return -1;
	switch (width) {
	case 1: { uint8_t x = v; memcpy(g->data + g->len, &x, 1); break; }
	case 2: { uint16_t x = v; memcpy(g->data + g->len, &x, 2); break; }
	case 4: { uint32_t x = v; memcpy(g->data + g->len, &x, 4); break; }
	default: memcpy(g->data + g->len, &v, 8); break;
	}
	g->len += width;
	return 0;
}

static int append_offset(struct gbuf *offsets, size_t child_len)
{
	if (offsets_start(offsets))
		return -1;
	int32_t o = (int32_t)child_len;
	return gbuf_append(offsets, &o, 4);
}

static int comm_index(struct decoder *d, struct col_builder *c, int pid, bool *full)
{
	if (c->nslots == 0 || c->nvalues * 2 >= c->nslots) {
		int n = c->nslots ? c->nslots * 2 : 64;
		struct pid_slot *s = km_malloc(n * sizeof(*s));
		if (!s)
			return -1;
		for (int i = 0; i < n; i++)
			s[i].index = -1;
		for (int i = 0; i < c->nslots; i++) {
			if (c->slots[i].index < 0)
				continue;
			unsigned h = ((unsigned)c->slots[i].pid * 2654435761u) & (n - 1);
			while (s[h].index >= 0)
				h = (h + 1) & (n - 1);
			s[h] = c->slots[i];
		}
		free(c->slots);
		c->slots = s;
		c->nslots = n;
	}
	unsigned h = ((unsigned)pid * 2654435761u) & (c->nslots - 1);
	while (c->slots[h].index >= 0) {
		if (c->slots[h].pid == pid)
			return c->slots[h].index;
		h = (h + 1) & (c->nslots - 1);
	}
	pthread_mutex_lock(&d->trace->lookup_lock);
	const char *comm = tep_data_comm_from_pid(d->trace->tep, pid);
	int r = !comm || offsets_start(&c->dict_offsets) ||
		gbuf_append_utf8(&c->dict_data, comm, strlen(comm)) ||
		append_offset(&c->dict_offsets, c->dict_data.len);
	pthread_mutex_unlock(&d->trace->lookup_lock);
	if (r)
		return -1;
	if (c->dict_data.len > BATCH_VAR_BYTES)
		*full = true;
	c->slots[h].pid = pid;
	c->slots[h].index = c->nvalues;
	return c->nvalues++;
}

/* Locate a __data_loc / __rel_loc payload inside the record, or fail. */
static int dyn_payload(const struct col_plan *cp, const unsigned char *data, int size, bool swap,
		       const unsigned char **out, int *len)
{
	if (cp->offset + 4 > size)
		return -1;
	uint32_t loc = (uint32_t)read_uint(data + cp->offset, 4, swap);
	int off = loc & 0xffff;
	int n = loc >> 16;
	if (cp->relative)
		off += cp->offset + 4;
	if (off < 0 || n < 0 || off + n > size)
		return -1;
	*out = data + off;
	*len = n;
	return 0;
}

/* ---------------------------------------------------------------- stack symbols */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* One multiply per frame on the way, a full mix at the end: the memo compares
 * whole stacks, so the hash needs only to spread them, and this runs for
 * every stack record. */
static uint64_t hash_frames(const uint64_t *addrs, int depth)
{
	uint64_t h = (uint64_t)depth;
	for (int k = 0; k < depth; k++)
		h = (h ^ addrs[k]) * 0x9e3779b97f4a7c15ULL;
	return mix64(h);
}

/* The record's stack addresses, widened to uint64_t, into d->frames: as many
 * as the record holds, or fewer when its `size` field says so. Returns the
 * count, or -1 when out of memory. */
static int read_frames(struct decoder *d, const struct col_plan *cp, const unsigned char *data,
		       int size)
{
	int count = (size - cp->offset) / cp->width;
	if (cp->count_offset >= 0) {
		long long want = (long long)read_uint(data + cp->count_offset, cp->count_width,
						      d->trace->swap);
		if (want >= 0 && want < count)
			count = (int)want;
	}
	if (count < 0)
		count = 0;
	d->frames.len = 0;
	if (gbuf_reserve(&d->frames, (size_t)count * 8))
		return -1;
	uint64_t *f = (uint64_t *)d->frames.data;
	for (int k = 0; k < count; k++)
		f[k] = read_uint(data + cp->offset + k * cp->width, cp->width, d->trace->swap);
	d->frames.len = (size_t)count * 8;
	return count;
}

static size_t sym_memo_bytes(const struct sym_memo *m)
{
	return m->text.len + (size_t)m->nslots * sizeof(struct sym_slot);
}

static struct sym_slot *sym_memo_find(const struct sym_memo *m, uint64_t addr)
{
	if (!m->nslots)
		return NULL;
	uint32_t mask = m->nslots - 1;
	for (uint32_t h = (uint32_t)mix64(addr) & mask; m->slots[h].used; h = (h + 1) & mask)
		if (m->slots[h].addr == addr)
			return &m->slots[h];
	return NULL;
}

/* Remember `addr`'s symbol text. Returns 0 (also when the memo is full and
 * takes nothing), or -1 when out of memory. */
static int sym_memo_add(struct sym_memo *m, uint64_t addr, const char *text, size_t len)
{
	if ((m->nused + 1) * 2 > m->nslots) {
		uint32_t n = m->nslots ? m->nslots * 2 : 1024;
		if (sym_memo_bytes(m) + (size_t)n * sizeof(struct sym_slot) > MEMO_MAX_BYTES)
			return 0;
		struct sym_slot *slots = km_calloc(n, sizeof(*slots));
		if (!slots)
			return -1;
		for (uint32_t i = 0; i < m->nslots; i++) {
			if (!m->slots[i].used)
				continue;
			uint32_t h = (uint32_t)mix64(m->slots[i].addr) & (n - 1);
			while (slots[h].used)
				h = (h + 1) & (n - 1);
			slots[h] = m->slots[i];
		}
		free(m->slots);
		m->slots = slots;
		m->nslots = n;
	}
	if (sym_memo_bytes(m) + len > MEMO_MAX_BYTES)
		return 0;
	uint32_t off = (uint32_t)m->text.len;
	if (gbuf_append(&m->text, text, len))
		return -1;
	uint32_t mask = m->nslots - 1;
	uint32_t h = (uint32_t)mix64(addr) & mask;
	while (m->slots[h].used)
		h = (h + 1) & mask;
	m->slots[h] = (struct sym_slot){ .addr = addr, .off = off, .len = (uint32_t)len, .used = true };
	m->nused++;
	return 0;
}

static void sym_memo_free(struct sym_memo *m)
{
	free(m->slots);
	m->slots = NULL;
	m->nslots = m->nused = 0;
	gbuf_free(&m->text);
}

/* Write addr's symbol, `function+0xoffset`, into sym: from the kept kallsyms text
 * (indexed at the first call), or from libtraceevent's table when no text was kept
 * or `reference` asks for it (a test hook). Returns 1, 0 when no function holds
 * addr, -1 when memory ran out. The caller holds lookup_lock: the index is built
 * once, and libtraceevent sorts its table at first use. */
int trace_symbol(struct trace_meta *t, uint64_t addr, bool reference, char *sym, size_t size)
{
	if (ksyms_index(&t->ksyms))
		return -1;
	if (t->ksyms.text && !reference) {
		const struct ksym *k = ksyms_find(&t->ksyms, addr);
		if (k)
			snprintf(sym, size, "%.*s+0x%llx", (int)k->len, t->ksyms.text + k->name,
				 (unsigned long long)(addr - k->addr));
		return k != NULL;
	}
	const char *fn = tep_find_function(t->tep, addr);
	if (fn)
		snprintf(sym, size, "%s+0x%llx", fn,
			 (unsigned long long)(addr - tep_find_function_address(t->tep, addr)));
	return fn != NULL;
}

/* Append one frame's symbol (trace_symbol), or the bare address, as one more
 * string of a stacks row's frames. The lock is taken only for an address this
 * decoder has not met before. */
static int append_symbol(struct decoder *d, struct col_builder *c, uint64_t a)
{
	const struct sym_slot *s = sym_memo_find(&d->syms, a);
	if (s)
		return gbuf_append(&c->child, d->syms.text.data + s->off, s->len) ||
		       append_offset(&c->child_offsets, c->child.len);
	char sym[512];
	pthread_mutex_lock(&d->trace->lookup_lock);
	int found = trace_symbol(d->trace, a, false, sym, sizeof(sym));
	pthread_mutex_unlock(&d->trace->lookup_lock);
	if (found < 0)
		return -1;
	if (!found)
		snprintf(sym, sizeof(sym), "0x%llx", (unsigned long long)a);
	size_t before = c->child.len;
	if (gbuf_append_utf8(&c->child, sym, strlen(sym)) ||
	    append_offset(&c->child_offsets, c->child.len))
		return -1;
	return sym_memo_add(&d->syms, a, c->child.data + before, c->child.len - before);
}

static size_t stack_memo_bytes(const struct stack_memo *m)
{
	return m->addrs.len + (size_t)m->nslots * sizeof(struct stack_slot);
}

static const struct stack_slot *stack_memo_find(const struct stack_memo *m, uint64_t hash,
						 const uint64_t *addrs, int depth)
{
	if (!m->nslots)
		return NULL;
	uint32_t mask = m->nslots - 1;
	for (uint32_t h = (uint32_t)hash & mask; m->slots[h].used; h = (h + 1) & mask) {
		const struct stack_slot *s = &m->slots[h];
		if (s->hash == hash && s->depth == (uint32_t)depth &&
		    (!depth || !memcmp(m->addrs.data + (size_t)s->first * 8, addrs, (size_t)depth * 8)))
			return s;
	}
	return NULL;
}

/* Remember that the stack `addrs` is `id`. Returns 0 (also when the memo is
 * full and takes nothing: the stack then gets a new id when it comes again),
 * or -1 when out of memory. */
static int stack_memo_add(struct stack_memo *m, uint64_t hash, const uint64_t *addrs, int depth,
			  int32_t id)
{
	if ((m->nused + 1) * 2 > m->nslots) {
		uint32_t n = m->nslots ? m->nslots * 2 : 256;
		if (stack_memo_bytes(m) + (size_t)n * sizeof(struct stack_slot) > MEMO_MAX_BYTES)
			return 0;
		struct stack_slot *slots = km_calloc(n, sizeof(*slots));
		if (!slots)
			return -1;
		for (uint32_t i = 0; i < m->nslots; i++) {
			if (!m->slots[i].used)
				continue;
			uint32_t h = (uint32_t)m->slots[i].hash & (n - 1);
			while (slots[h].used)
				h = (h + 1) & (n - 1);
			slots[h] = m->slots[i];
		}
		free(m->slots);
		m->slots = slots;
		m->nslots = n;
	}
	if (stack_memo_bytes(m) + (size_t)depth * 8 > MEMO_MAX_BYTES)
		return 0;
	uint32_t first = (uint32_t)(m->addrs.len / 8);
	if (depth && gbuf_append(&m->addrs, addrs, (size_t)depth * 8))
		return -1;
	uint32_t mask = m->nslots - 1;
	uint32_t h = (uint32_t)hash & mask;
	while (m->slots[h].used)
		h = (h + 1) & mask;
	m->slots[h] = (struct stack_slot){ .hash = hash, .first = first, .depth = (uint32_t)depth,
					   .id = id, .used = true };
	m->nused++;
	return 0;
}

static void stack_memo_free(struct stack_memo *m)
{
	free(m->slots);
	m->slots = NULL;
	m->nslots = m->nused = 0;
	gbuf_free(&m->addrs);
}

/* ---------------------------------------------------------------- the stacks table */

/* A batch of the stacks table closes at this many rows (or BATCH_VAR_BYTES of
 * symbols): distinct stacks are few, except in hostile traces. */
#define STACK_BATCH_ROWS 65536

static const struct col_plan STACK_COLS[] = {
	{ .name = "stack_id", .kind = COL_INT, .width = 4, .is_signed = true, .count_offset = -1 },
	{ .name = "frames", .kind = COL_STACKSYM, .width = 8, .count_offset = -1 },
	{ .name = "addresses", .kind = COL_STACK, .width = 8, .count_offset = -1 },
};
#define NSTACK_COLS ((int)(sizeof(STACK_COLS) / sizeof(STACK_COLS[0])))

int stack_intern_init(struct stack_intern *s)
{
	memset(s, 0, sizeof(*s));
	return pthread_mutex_init(&s->lock, NULL) ? -1 : 0;
}

void stack_intern_release(struct stack_intern *s)
{
	stack_memo_free(&s->memo);
	col_builder_free(&s->ids);
	col_builder_free(&s->frames);
	col_builder_free(&s->addrs);
	for (int k = 0; k < s->nready; k++)
		batch_release(&s->ready[k]);
	free(s->ready);
	s->ready = NULL;
	s->nready = s->capready = 0;
	pthread_mutex_destroy(&s->lock);
}

/* One row of the stacks table: `id`, the frames' symbols (resolved through
 * decoder d's symbol memo), the addresses. On failure the builders are left
 * inconsistent: the caller marks the table failed. */
static int append_stack_row(struct decoder *d, struct stack_intern *s, int32_t id,
			    const uint64_t *addrs, int depth)
{
	struct col_builder *f = &s->frames, *a = &s->addrs;
	if (gbuf_append(&s->ids.values, &id, 4) || offsets_start(&f->child_offsets))
		return -1;
	for (int k = 0; k < depth; k++)
		if (append_symbol(d, f, addrs[k]))
			return -1;
	if (append_offset(&f->offsets, f->child_offsets.len / 4 - 1) ||
	    offsets_start(&a->offsets) ||
	    (depth && gbuf_append(&a->child, addrs, (size_t)depth * 8)) ||
	    append_offset(&a->offsets, a->child.len / 8))
		return -1;
	s->rows++;
	return 0;
}

static int export_column(const struct col_plan *cp, struct col_builder *c, int64_t rows,
			 struct ArrowSchema **sp, struct ArrowArray **ap);

/* The rows built so far as one more ready batch (the lock is held). */
static int queue_stacks(struct stack_intern *s)
{
	if (!s->rows)
		return 0;
	if (s->nready == s->capready) {
		int n = s->capready ? s->capready * 2 : 4;
		struct batch *q = km_realloc(s->ready, n * sizeof(*q));
		if (!q)
			return -1;
		s->ready = q;
		s->capready = n;
	}
	struct col_builder *cols[NSTACK_COLS] = { &s->ids, &s->frames, &s->addrs };
	struct ArrowSchema *root_s = schema_new("+s", "", NSTACK_COLS);
	struct ArrowArray *root_a = root_s ? array_new(s->rows, 1, NSTACK_COLS) : NULL;
	if (!root_a)
		goto fail;
	for (int i = 0; i < NSTACK_COLS; i++)
		if (export_column(&STACK_COLS[i], cols[i], s->rows, &root_s->children[i],
				  &root_a->children[i]))
			goto fail;
	s->ready[s->nready++] = (struct batch){ .event_id = -1, .schema = root_s, .array = root_a };
	s->rows = 0;
	return 0;
fail:
	schema_free(root_s);
	array_free(root_a);
	return -1;
}

int stack_intern_flush(struct stack_intern *s)
{
	pthread_mutex_lock(&s->lock);
	int r = s->failed || queue_stacks(s);
	if (r)
		__atomic_store_n(&s->failed, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&s->lock);
	return r ? -1 : 0;
}

/* A stack met for the first time: its id, row and memo entry (the lock is held). */
static int stack_new(struct decoder *d, struct stack_intern *s, uint64_t hash,
		     const uint64_t *addrs, int depth, int32_t *id)
{
	if (s->last_id == INT32_MAX) {
		snprintf(d->error, sizeof(d->error), "more than %d distinct kernel stacks in one "
			 "trace", INT32_MAX);
		return -1;
	}
	int32_t next = s->last_id + 1;
	if (append_stack_row(d, s, next, addrs, depth) ||
	    stack_memo_add(&s->memo, hash, addrs, depth, next))
		return -1;
	s->last_id = next;
	*id = next;
	if (s->rows >= STACK_BATCH_ROWS || s->frames.child.len > BATCH_VAR_BYTES ||
	    s->frames.child_offsets.len > BATCH_VAR_BYTES || s->addrs.child.len > BATCH_VAR_BYTES)
		return queue_stacks(s);
	return 0;
}

/* The stack_id of the stack `addrs`: the memo's, or a new one with its row. */
static int stack_id_of(struct decoder *d, const uint64_t *addrs, int depth, int32_t *id)
{
	struct stack_intern *s = d->stacks;
	if (!s) {
		snprintf(d->error, sizeof(d->error), "kernel stacks met by a decoder without a stack table");
		return -1;
	}
	uint64_t hash = hash_frames(addrs, depth);
	/* A stack's id never changes: once this decoder has one, it needs no lock.
	 * (A failed table fails the decode at its next take whatever this returns.) */
	const struct stack_slot *known = stack_memo_find(&d->known, hash, addrs, depth);
	if (known && !__atomic_load_n(&s->failed, __ATOMIC_RELAXED)) {
		*id = known->id;
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	int r = -1;
	if (!s->failed) {
		const struct stack_slot *slot = stack_memo_find(&s->memo, hash, addrs, depth);
		if (slot) {
			*id = slot->id;
			r = 0;
		} else {
			r = stack_new(d, s, hash, addrs, depth, id);
			if (r)
				__atomic_store_n(&s->failed, true, __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return r || stack_memo_add(&d->known, hash, addrs, depth, *id) ? -1 : 0;
}

/* Fixed-width columns get a whole batch worth of memory at once: growing them by
 * doubling costs a copy and fresh page faults per step, and page faults from
 * several decoder threads contend on the process's memory map. */
static int presize(struct decoder *d, struct col_builder *c, int width)
{
	if (c->values.cap)
		return 0;
	/* and 8 bytes more, for copy_int's whole-word store after the last row */
	return gbuf_presize(&c->values, (size_t)d->batch_rows * width + 8);
}

/* A stack column's buffers start each batch at the size the batch before
 * reached, and a little more: a batch of stack symbols is tens of MB. */
static int presize_stack(struct col_builder *c)
{
	return gbuf_presize(&c->offsets, c->last_offsets + c->last_offsets / 8) ||
	       gbuf_presize(&c->child, c->last_child + c->last_child / 8) ||
	       gbuf_presize(&c->child_offsets, c->last_child_offsets + c->last_child_offsets / 8);
}

/* One record as the column helpers see it. */
struct record {
	const unsigned char *data;
	int size;		/* bytes of data */
	int64_t ts;		/* with the trace's offset applied */
	int32_t cpu;
	int32_t pid;
	bool swap;		/* the file's byte order is not ours */
	bool full;		/* a column reached its batch's limit: flush after this row */
};

/* A variable-width column past BATCH_VAR_BYTES ends the batch after this row. */
static void note_full(struct record *rec, const struct col_builder *c)
{
	rec->full |= c->child.len > BATCH_VAR_BYTES;
}

/* One fixed-width value (the low `width` bytes of v). A batch's memory is
 * reserved at its first row (presize), so the common case is one bounds check
 * and a store of a constant size, inlined into the row loop. */
static inline int append_fixed(struct decoder *d, struct col_builder *c, uint64_t v, int width)
{
	struct gbuf *g = &c->values;
	if (__builtin_expect(g->cap - g->len < (size_t)width, 0) &&
	    (presize(d, c, width) || gbuf_reserve(g, width)))
		return -1;
	char *dst = g->data + g->len;
	switch (width) {
	case 1: { uint8_t x = v; memcpy(dst, &x, 1); break; }
	case 2: { uint16_t x = v; memcpy(dst, &x, 2); break; }
	case 4: { uint32_t x = v; memcpy(dst, &x, 4); break; }
	default: memcpy(dst, &v, 8); break;
	}
	g->len += width;
	return 0;
}

static int append_comm(struct decoder *d, struct col_builder *c, struct record *rec)
{
	int32_t idx = comm_index(d, c, rec->pid, &rec->full);
	return idx < 0 ? -1 : append_fixed(d, c, (uint32_t)idx, 4);
}

static inline int append_int_field(struct decoder *d, const struct col_plan *cp,
				   struct col_builder *c, const struct record *rec)
{
	return append_fixed(d, c, read_uint(rec->data + cp->offset, cp->width, rec->swap), cp->width);
}

/* A char array: the string up to its NUL, within the field (or the record's end
 * for a flexible array). */
static int append_str(const struct col_plan *cp, struct col_builder *c, struct record *rec)
{
	const unsigned char *s = rec->data + cp->offset;
	int limit = cp->flexible ? rec->size - cp->offset : cp->size;
	int n = 0;
	while (n < limit && s[n])
		n++;
	int r = offsets_start(&c->offsets) || gbuf_append_utf8(&c->child, s, n) ||
		append_offset(&c->offsets, c->child.len);
	note_full(rec, c);
	return r;
}

/* A __data_loc string up to its NUL; an empty string when its location is out of
 * the record. */
static int append_dynstr(const struct col_plan *cp, struct col_builder *c, struct record *rec)
{
	const unsigned char *s;
	int n;
	if (dyn_payload(cp, rec->data, rec->size, rec->swap, &s, &n))
		n = 0, s = rec->data;
	int k = 0;
	while (k < n && s[k])
		k++;
	int r = offsets_start(&c->offsets) || gbuf_append_utf8(&c->child, s, k) ||
		append_offset(&c->offsets, c->child.len);
	note_full(rec, c);
	return r;
}

/* Raw bytes: the field, or up to the record's end for a flexible one; none when
 * the field is out of the record. */
static int append_bin(const struct col_plan *cp, struct col_builder *c, struct record *rec)
{
	const unsigned char *s = rec->data;
	int n = 0;
	if (cp->flexible && cp->offset <= rec->size) {
		s = rec->data + cp->offset;
		n = rec->size - cp->offset;
	} else if (cp->offset + cp->size <= rec->size) {
		s = rec->data + cp->offset;
		n = cp->size;
	}
	int r = offsets_start(&c->offsets) || gbuf_append(&c->child, s, n) ||
		append_offset(&c->offsets, c->child.len);
	note_full(rec, c);
	return r;
}

/* An array of integers (fixed, flexible or __data_loc): a list of its elements;
 * an empty list when it is out of the record. */
static int append_array(const struct col_plan *cp, struct col_builder *c, struct record *rec)
{
	const unsigned char *s = rec->data + cp->offset;
	int n = cp->flexible ? rec->size - cp->offset : cp->size;
	if (cp->kind == COL_DYNARR && dyn_payload(cp, rec->data, rec->size, rec->swap, &s, &n))
		n = 0;
	if (n < 0 || cp->offset + n > rec->size)
		n = 0;
	int count = n / cp->width;
	int r = offsets_start(&c->offsets);
	for (int k = 0; k < count && !r; k++)
		r = append_int(&c->child, read_uint(s + k * cp->width, cp->width, rec->swap),
			       cp->width);
	if (!r)
		r = append_offset(&c->offsets, c->child.len / cp->width);
	note_full(rec, c);
	return r;
}

/* A stack's addresses (user_stack's caller). */
static int append_stack(struct decoder *d, const struct col_plan *cp, struct col_builder *c,
			struct record *rec)
{
	int count = read_frames(d, cp, rec->data, rec->size);
	int r = count < 0 || presize_stack(c) || offsets_start(&c->offsets) ||
		(count && gbuf_append(&c->child, d->frames.data, (size_t)count * 8)) ||
		append_offset(&c->offsets, c->child.len / 8);
	note_full(rec, c);
	return r;
}

/* A kernel stack's id in the decode's stacks table (a new row when it is new). */
static int append_stack_id(struct decoder *d, const struct col_plan *cp, struct col_builder *c,
			   struct record *rec)
{
	int count = read_frames(d, cp, rec->data, rec->size);
	int32_t id;
	return count < 0 || stack_id_of(d, (const uint64_t *)d->frames.data, count, &id) ||
	       append_fixed(d, c, (uint32_t)id, 4);
}

static int append_column(struct decoder *d, const struct col_plan *cp, struct col_builder *c,
			 struct record *rec)
{
	switch (cp->kind) {
	case COL_TS:
		return append_fixed(d, c, (uint64_t)rec->ts, 8);
	case COL_CPU:
		return append_fixed(d, c, (uint32_t)rec->cpu, 4);
	case COL_PID:
		return append_fixed(d, c, (uint32_t)rec->pid, 4);
	case COL_COMM:
		return append_comm(d, c, rec);
	case COL_INT:
		return append_int_field(d, cp, c, rec);
	case COL_STR:
		return append_str(cp, c, rec);
	case COL_DYNSTR:
		return append_dynstr(cp, c, rec);
	case COL_BIN:
		return append_bin(cp, c, rec);
	case COL_ARR:
	case COL_DYNARR:
		return append_array(cp, c, rec);
	case COL_STACK:
		return append_stack(d, cp, c, rec);
	case COL_STACKID:
		return append_stack_id(d, cp, c, rec);
	case COL_STACKSYM:	/* the stacks table's column only */
		return -1;
	}
	return 0;
}

/* An integer field in the file's byte order when it is ours: a whole 8-byte word
 * loaded and stored, `width` bytes of it kept, when the record holds 8 bytes
 * from the field on. No branch on the width: the dispatch per column was most of
 * the row loop's time (most events are integer fields only). */
static inline int copy_int(struct decoder *d, const struct col_plan *cp, struct col_builder *c,
			   const struct record *rec)
{
	struct gbuf *g = &c->values;
	if (__builtin_expect(cp->offset > rec->size - 8 || g->cap - g->len < 8, 0))
		return append_int_field(d, cp, c, rec);
	uint64_t v;
	memcpy(&v, rec->data + cp->offset, 8);
	memcpy(g->data + g->len, &v, 8);
	g->len += cp->width;
	return 0;
}

/* One row of event builder b from the record `data` of `size` bytes (which
 * decode_page checked against the plan's min_size). Returns 0, or -1 when memory
 * ran out or a stack was unreadable; the row is then not counted. */
static int append_record(struct decoder *d, struct event_builder *b, const unsigned char *data,
			 int size, unsigned long long ts, int cpu)
{
	struct event_plan *p = b->plan;
	struct record rec = {
		.data = data, .size = size, .ts = (int64_t)ts + d->ts_offset, .cpu = cpu,
		.pid = (int32_t)read_uint(data + d->trace->pid_offset, 4, d->trace->swap),
		.swap = d->trace->swap,
	};
	int r = 0;
	if (p->ints_only && !rec.swap) {
		/* The four columns every table starts with, then the integers (plan.c). */
		r = append_fixed(d, &b->cols[0], (uint64_t)rec.ts, 8) ||
		    append_fixed(d, &b->cols[1], (uint32_t)rec.cpu, 4) ||
		    append_fixed(d, &b->cols[2], (uint32_t)rec.pid, 4) ||
		    append_comm(d, &b->cols[3], &rec);
		for (int i = 4; i < p->ncols && !r; i++)
			r = copy_int(d, &p->cols[i], &b->cols[i], &rec);
	} else {
		for (int i = 0; i < p->ncols && !r; i++)
			r = append_column(d, &p->cols[i], &b->cols[i], &rec);
	}
	if (!r)
		b->rows++;
	b->full |= rec.full;
	return r;
}

/* ---------------------------------------------------------------- batch export */

static struct ArrowArray *export_fixed(int64_t rows, struct gbuf *values)
{
	struct ArrowArray *a = array_new(rows, 2, 0);
	if (a && !(a->buffers[1] = gbuf_take(values))) {
		array_free(a);
		return NULL;
	}
	return a;
}

static struct ArrowArray *export_var(int64_t rows, struct gbuf *offsets, struct gbuf *data)
{
	if (offsets_start(offsets))
		return NULL;
	struct ArrowArray *a = array_new(rows, 3, 0);
	if (a && (!(a->buffers[1] = gbuf_take(offsets)) || !(a->buffers[2] = gbuf_take(data)))) {
		array_free(a);
		return NULL;
	}
	return a;
}

/* One column's schema and array. Each allocation is checked before the next
 * step; on failure the partly built nodes are freed and *sp, *ap stay NULL. */
static int export_column(const struct col_plan *cp, struct col_builder *c, int64_t rows,
			 struct ArrowSchema **sp, struct ArrowArray **ap)
{
	struct ArrowSchema *s = NULL;
	struct ArrowArray *a = NULL;
	bool ok = false;
	c->last_offsets = c->offsets.len;
	c->last_child = c->child.len;
	c->last_child_offsets = c->child_offsets.len;
	switch (cp->kind) {
	case COL_TS:
	case COL_CPU:
	case COL_PID:
	case COL_STACKID:
	case COL_INT: {
		const char *fmt = cp->kind == COL_TS ? "l" :
				  cp->kind == COL_INT ? int_format(cp->width, cp->is_signed) : "i";
		s = schema_new(fmt, cp->name, 0);
		ok = s && (a = export_fixed(rows, &c->values));
		break;
	}
	case COL_COMM:
		s = schema_new("i", cp->name, 0);
		ok = s && (s->dictionary = schema_new("u", "", 0)) &&
		     (a = export_fixed(rows, &c->values)) &&
		     (a->dictionary = export_var(c->nvalues, &c->dict_offsets, &c->dict_data));
		if (ok)
			builder_reset_dict(c);
		break;
	case COL_STR:
	case COL_DYNSTR:
	case COL_BIN:
		s = schema_new(cp->kind == COL_BIN ? "z" : "u", cp->name, 0);
		ok = s && (a = export_var(rows, &c->offsets, &c->child));
		break;
	case COL_ARR:
	case COL_DYNARR:
	case COL_STACK: {
		int w = cp->kind == COL_STACK ? 8 : cp->width;
		const char *item = int_format(w, cp->kind != COL_STACK && cp->is_signed);
		s = schema_new("+l", cp->name, 1);
		ok = s && (s->children[0] = schema_new(item, "item", 0)) &&
		     !offsets_start(&c->offsets) && (a = array_new(rows, 2, 1)) &&
		     (a->children[0] = export_fixed((int64_t)(c->child.len / w), &c->child)) &&
		     (a->buffers[1] = gbuf_take(&c->offsets));
		break;
	}
	case COL_STACKSYM:
		s = schema_new("+l", cp->name, 1);
		ok = s && (s->children[0] = schema_new("u", "item", 0)) &&
		     !offsets_start(&c->offsets) && !offsets_start(&c->child_offsets) &&
		     (a = array_new(rows, 2, 1)) &&
		     (a->children[0] = export_var((int64_t)(c->child_offsets.len / 4) - 1,
						  &c->child_offsets, &c->child)) &&
		     (a->buffers[1] = gbuf_take(&c->offsets));
		break;
	}
	if (!ok) {
		schema_free(s);
		array_free(a);
		return -1;
	}
	*sp = s;
	*ap = a;
	return 0;
}

/* Turn one event's builders into an Arrow struct array + schema, and reset them. */
static int export_batch(struct decoder *d, struct event_builder *b, struct batch *out)
{
	struct event_plan *p = b->plan;
	/* Arrow's string and list offsets are int32; batches close early long
	 * before that (BATCH_VAR_BYTES), so only one absurd record gets here. */
	for (int i = 0; i < p->ncols; i++) {
		if (b->cols[i].child.len > INT32_MAX || b->cols[i].dict_data.len > INT32_MAX) {
			snprintf(d->error, sizeof(d->error), "%s events: column %s holds more than "
				 "2 GiB in one batch", p->name, p->cols[i].name);
			return -1;
		}
	}
	struct ArrowSchema *root_s = schema_new("+s", "", p->ncols);
	struct ArrowArray *root_a = root_s ? array_new(b->rows, 1, p->ncols) : NULL;
	if (!root_a)
		goto fail;
	/* Children not yet attached stay NULL, which the release callbacks skip. */
	for (int i = 0; i < p->ncols; i++)
		if (export_column(&p->cols[i], &b->cols[i], b->rows, &root_s->children[i],
				  &root_a->children[i]))
			goto fail;
	b->rows = 0;
	b->full = false;
	out->event_id = p->id;
	out->schema = root_s;
	out->array = root_a;
	return 0;
fail:
	schema_free(root_s);
	array_free(root_a);
	return -1;
}

static int queue_batch(struct decoder *d, struct event_builder *b)
{
	if (d->nready == d->capready) {
		int n = d->capready ? d->capready * 2 : 16;
		struct batch *q = km_realloc(d->ready, n * sizeof(*q));
		if (!q)
			return -1;
		d->ready = q;
		d->capready = n;
	}
	if (export_batch(d, b, &d->ready[d->nready]))
		return -1;
	d->nready++;
	return 0;
}


#define COMMIT_MASK ((1u << 27) - 1)

/* The ring buffer's event header (kernel/trace/ring_buffer.c): a 32-bit word of
 * type_len (5 bits) and time_delta (27 bits), laid out in the file's bit order;
 * type_len 1-28 is a data record of type_len * 4 bytes, 0 one whose length
 * follows, 29-31 are not records. */
#define RB_TYPE_PADDING 29
#define RB_TYPE_TIME_EXTEND 30
#define RB_TYPE_TIME_STAMP 31	/* absolute: its top bits come from the time before */
#define RB_TS_SHIFT 27
#define RB_TS_MSB (0xf8ULL << 56)

/* One record of the page: checked against the page's committed bytes, then
 * appended to its event's builder. */
static int take_record(struct decoder *d, const unsigned char *data, int64_t size,
		       unsigned long long ts, int cpu, const unsigned char *page,
		       const unsigned char *end, long long file_pos)
{
	struct trace_meta *t = d->trace;
	if (size < 0 || size > end - data) {
		snprintf(d->error, sizeof(d->error), "corrupt event at file offset %lld (CPU %d)",
			 file_pos + (long long)(data - page), cpu);
		return -1;
	}
	if (size < t->type_offset + t->type_size || size < t->pid_offset + 4) {
		d->unknown_events++;
		return 0;
	}
	int id = (int)read_uint(data + t->type_offset, t->type_size, t->swap);
	struct event_plan *p = id >= 0 && id <= t->max_id ? t->plans[id] : NULL;
	if (!p) {
		d->unknown_events++;
		return 0;
	}
	if (d->wanted && !d->wanted[id])
		return 0;
	if (size < p->min_size) {
		snprintf(d->error, sizeof(d->error), "corrupt %s event at file offset "
			 "%lld (CPU %d): %d bytes, its format needs %d", p->name,
			 file_pos + (long long)(data - page), cpu, (int)size, p->min_size);
		return -1;
	}
	struct event_builder *b = d->builders[id];
	if (!b) {
		b = d->builders[id] = builder_new(p);
		if (!b)
			return -1;
	}
	if (append_record(d, b, data, (int)size, ts, cpu))
		return -1;
	if ((b->rows >= d->batch_rows || b->full) && queue_batch(d, b))
		return -1;
	long long when = (long long)ts + d->ts_offset;
	if (!d->events || when < d->min_ts)
		d->min_ts = when;
	if (!d->events || when > d->max_ts)
		d->max_ts = when;
	d->events++;
	return 0;
}

/* Walk a page's records in the current format, as libtraceevent's kbuffer does
 * (its semantics, timestamps included), without a call per record: the walk is
 * a fifth of a parse's CPU through kbuffer. Header words are read only within
 * the page; a record's bytes must lie within its committed part (`used`). */
static int walk_page(struct decoder *d, const unsigned char *page, int hdr, uint64_t used,
		     int cpu, long long file_pos)
{
	struct trace_meta *t = d->trace;
	const bool swap = t->swap;
	const bool big = t->big_endian;
	const unsigned char *start = page + hdr;
	const unsigned char *end = start + used;
	const unsigned char *page_end = page + d->page_size;
	unsigned long long ts = read_uint(page, 8, swap);
	uint64_t next = 0;
	while (next < used) {
		const unsigned char *p = start + next;
		uint32_t word = 0;
		unsigned type_len = 0;
		/* A header and the word after it (lengths, time extends) must be in the page. */
		bool whole = page_end - p >= 4;
		if (whole) {
			word = (uint32_t)read_uint(p, 4, swap);
			type_len = big ? word >> 27 : word & 31;
			whole = type_len >= 1 && type_len < RB_TYPE_PADDING ? true : page_end - p >= 8;
		}
		if (!whole) {
			if (type_len == RB_TYPE_PADDING)
				break;	/* padding to the page's end: nothing after it */
			snprintf(d->error, sizeof(d->error), "corrupt event header at file offset %lld "
				 "(CPU %d): it runs past its page", file_pos + (long long)(p - page), cpu);
			return -1;
		}
		unsigned long long delta = big ? word & ((1u << 27) - 1) : word >> 5;
		p += 4;
		int64_t length;
		switch (type_len) {
		case RB_TYPE_PADDING:
			ts += delta;
			next = (uint64_t)(p - start) + (uint32_t)read_uint(p, 4, swap);
			continue;
		case RB_TYPE_TIME_EXTEND:
		case RB_TYPE_TIME_STAMP: {
			unsigned long long ext = (read_uint(p, 4, swap) << RB_TS_SHIFT) + delta;
			ts = type_len == RB_TYPE_TIME_STAMP ? ext | (ts & RB_TS_MSB) : ts + ext;
			next = (uint64_t)(p + 4 - start);
			continue;
		}
		case 0:
			/* array[0] holds the record's length and its own 4 bytes */
			length = (int32_t)((uint32_t)read_uint(p, 4, swap) - 4u);
			length = (length + 3) & ~(int64_t)3;
			p += 4;
			break;
		default:
			length = type_len * 4;
			break;
		}
		ts += delta;
		next = (uint64_t)(p - start) + (uint64_t)(length < 0 ? 0 : length);
		if (take_record(d, p, length, ts, cpu, page, end, file_pos))
			return -1;
	}
	return 0;
}

static int decode_page(struct decoder *d, unsigned char *page, int cpu, long long file_pos,
		       struct lost_list *lost)
{
	struct trace_meta *t = d->trace;
	int hdr = 8 + (t->lsize == KBUFFER_LSIZE_4 ? 4 : 8);
	uint64_t commit = read_uint(page + 8, t->lsize == KBUFFER_LSIZE_4 ? 4 : 8, t->swap);
	uint64_t used = commit & COMMIT_MASK;
	if (used == 0)
		return 0;	/* an empty page (the tail of a partly filled buffer) */
	if ((int64_t)used > d->page_size - hdr) {
		snprintf(d->error, sizeof(d->error), "corrupt ring-buffer page at file offset %lld "
			 "(CPU %d): it claims %llu bytes of events in a %d-byte page",
			 file_pos, cpu, (unsigned long long)used, d->page_size);
		return -1;
	}
	/* kbuffer reads the page's lost-events count (and the first record's time
	 * for its mark), as trace-cmd report does: once a page. */
	if (kbuffer_load_subbuffer(d->kbuf, page) < 0) {
		snprintf(d->error, sizeof(d->error), "corrupt ring-buffer page at file offset %lld (CPU %d)",
			 file_pos, cpu);
		return -1;
	}
	int missed = kbuffer_missed_events(d->kbuf);
	unsigned long long ts = 0;
	unsigned char *data = kbuffer_read_event(d->kbuf, &ts);
	if (missed && lost) {
		if (lost->n == lost->cap) {
			int n = lost->cap ? lost->cap * 2 : 16;
			struct lost_mark *m = km_realloc(lost->marks, n * sizeof(*m));
			if (!m)
				return -1;
			lost->marks = m;
			lost->cap = n;
		}
		lost->marks[lost->n++] = (struct lost_mark){ cpu, ts + d->ts_offset, missed };
	}
	if (!t->old_format && !d->kbuffer_walk)
		return walk_page(d, page, hdr, used, cpu, file_pos);
	/* The format of kernels before 2.6.31 (and the tests' reference walk): kbuffer's. */
	const unsigned char *end = page + hdr + used;
	while (data) {
		int size = kbuffer_event_size(d->kbuf);
		if (data < page + hdr) {
			size = -1;	/* reported as a corrupt event */
		}
		if (take_record(d, data, size, ts, cpu, page, end, file_pos))
			return -1;
		data = kbuffer_next_event(d->kbuf, &ts);
	}
	return 0;
}

static int read_exact(struct decoder *d, void *buf, size_t n, long long offset)
{
	ssize_t r = pread_full(d->fd, buf, n, (uint64_t)offset);
	if (r < 0 || (size_t)r < n) {
		snprintf(d->error, sizeof(d->error), "cannot read %zu bytes at file offset %lld: %s",
			 n, offset, r < 0 ? strerror(errno) : "unexpected end of file");
		return -1;
	}
	return 0;
}

static int decode_pages(struct decoder *d, unsigned char *buf, size_t len, int cpu, long long pos,
			struct lost_list *lost)
{
	for (size_t at = 0; at + d->page_size <= len; at += d->page_size)
		if (decode_page(d, buf + at, cpu, pos + at, lost))
			return -1;
	return 0;
}

static int decompress_chunk(struct decoder *d, const void *in, size_t in_len, void *out, size_t out_len)
{
	if (d->compression == COMPRESSION_ZSTD) {
		size_t r = ZSTD_decompressDCtx(d->zctx, out, out_len, in, in_len);
		if (ZSTD_isError(r) || r != out_len) {
			snprintf(d->error, sizeof(d->error), "zstd: %s",
				 ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short chunk");
			return -1;
		}
		return 0;
	}
	uLongf got = out_len;
	int r = uncompress(out, &got, in, in_len);
	if (r != Z_OK || got != out_len) {
		snprintf(d->error, sizeof(d->error), "zlib: cannot inflate chunk (%d)", r);
		return -1;
	}
	return 0;
}

/* Decode one segment: `length` bytes of pages, or `chunks` compressed chunks. */
static int segment(struct decoder *d, int cpu, long long offset, long long length, int chunks,
		   struct lost_list *lost)
{
	if (!chunks) {
		const long long step = 64LL * d->page_size;
		for (long long at = 0; at < length; at += step) {
			long long n = length - at < step ? length - at : step;
			d->pages.len = 0;
			if (gbuf_reserve(&d->pages, n + 64) || read_exact(d, d->pages.data, n, offset + at))
				return -1;
			memset(d->pages.data + n, 0, 64);
			if (decode_pages(d, (unsigned char *)d->pages.data, n, cpu, offset + at, lost))
				return -1;
		}
		return 0;
	}
	d->io.len = 0;
	if (gbuf_reserve(&d->io, length) || read_exact(d, d->io.data, length, offset))
		return -1;
	const unsigned char *p = (const unsigned char *)d->io.data;
	long long at = 0;
	for (int i = 0; i < chunks; i++) {
		if (at + 8 > length) {
			snprintf(d->error, sizeof(d->error), "truncated chunk header at file offset %lld",
				 offset + at);
			return -1;
		}
		uint32_t csize = (uint32_t)read_uint(p + at, 4, d->trace->swap);
		uint32_t usize = (uint32_t)read_uint(p + at + 4, 4, d->trace->swap);
		if (at + 8 + (long long)csize > length || usize > (256u << 20)) {
			snprintf(d->error, sizeof(d->error), "corrupt compressed chunk at file offset %lld",
				 offset + at);
			return -1;
		}
		d->pages.len = 0;
		if (gbuf_reserve(&d->pages, (size_t)usize + 64))
			return -1;
		if (decompress_chunk(d, p + at + 8, csize, d->pages.data, usize)) {
			/* decompress_chunk said what the codec reported; say where. */
			char why[128];
			snprintf(why, sizeof(why), "%.127s", d->error);
			snprintf(d->error, sizeof(d->error), "corrupt compressed chunk at file offset %lld "
				 "(CPU %d): %s", offset + at, cpu, why);
			return -1;
		}
		memset(d->pages.data + usize, 0, 64);
		if (decode_pages(d, (unsigned char *)d->pages.data, usize, cpu, offset + at, lost))
			return -1;
		at += 8 + csize;
	}
	return 0;
}


static bool refuse_after_failure(struct decoder *d)
{
	if (d->failed)
		snprintf(d->error, sizeof(d->error), "the decoder cannot go on after an earlier error");
	return d->failed;
}

int decoder_segment(struct decoder *d, int cpu, long long offset, long long length, int chunks,
		    struct lost_list *lost)
{
	if (refuse_after_failure(d))
		return -1;
	if (offset < 0 || length < 0 || offset > d->file_size || length > d->file_size - offset) {
		snprintf(d->error, sizeof(d->error), "segment of %lld bytes at offset %lld (CPU %d) lies "
			 "beyond the end of the file (%lld bytes)", length, offset, cpu, d->file_size);
		return -1;
	}
	if (segment(d, cpu, offset, length, chunks, lost)) {
		d->failed = true;
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- life cycle */

bool decoder_kbuffer_walk;

int decoder_init(struct decoder *d, struct trace_meta *trace)
{
	d->trace = trace;
	d->kbuffer_walk = decoder_kbuffer_walk;
	d->builders = km_calloc(trace->max_id + 1, sizeof(*d->builders));
	if (!km_fault())
		d->kbuf = kbuffer_alloc(trace->lsize, tep_is_file_bigendian(trace->tep) ?
					KBUFFER_ENDIAN_BIG : KBUFFER_ENDIAN_LITTLE);
	if (d->compression == COMPRESSION_ZSTD && !km_fault())
		d->zctx = ZSTD_createDCtx();
	if (!d->builders || !d->kbuf || (d->compression == COMPRESSION_ZSTD && !d->zctx))
		return -1;
	if (trace->old_format)
		kbuffer_set_old_format(d->kbuf);
	return 0;
}

void batch_release(struct batch *b)
{
	schema_free(b->schema);
	b->schema = NULL;
	array_free(b->array);
	b->array = NULL;
}

void decoder_release(struct decoder *d)
{
	if (d->builders && d->trace) {
		for (int id = 0; id <= d->trace->max_id; id++)
			builder_free(d->builders[id]);
	}
	free(d->builders);
	d->builders = NULL;
	for (int k = 0; k < d->nready; k++)
		batch_release(&d->ready[k]);
	free(d->ready);
	d->ready = NULL;
	d->nready = 0;
	free(d->wanted);
	d->wanted = NULL;
	if (d->kbuf)
		kbuffer_free(d->kbuf);
	d->kbuf = NULL;
	if (d->zctx)
		ZSTD_freeDCtx(d->zctx);
	d->zctx = NULL;
	gbuf_free(&d->io);
	gbuf_free(&d->pages);
	gbuf_free(&d->frames);
	sym_memo_free(&d->syms);
	stack_memo_free(&d->known);
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}

int decoder_flush(struct decoder *d)
{
	if (refuse_after_failure(d))
		return -1;
	for (int id = 0; id <= d->trace->max_id; id++) {
		struct event_builder *b = d->builders[id];
		if (b && b->rows && queue_batch(d, b)) {
			d->failed = true;
			return -1;
		}
	}
	return 0;
}
