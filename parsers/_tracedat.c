// SPDX-License-Identifier: GPL-2.0
/*
 * _tracedat: kmemscope's native trace.dat decoder.
 *
 * libtracecmd opens the file and parses its metadata (event formats, cmdlines,
 * kallsyms); libtraceevent's kbuffer walks each ring-buffer page. Pages are
 * read (and, for v7 files, decompressed) here rather than through libtracecmd,
 * so that several threads can decode segments of one file at once without
 * sharing any libtracecmd state: libtracecmd decodes on one thread only.
 *
 * Decoded events land in per-event column builders and leave as Arrow record
 * batches through the Arrow C data interface (PyCapsules), so pyarrow takes
 * the memory without a copy. The GIL is released while pages are decoded.
 *
 * Every read of trace data is checked against the size of the page or record
 * it lies in: a corrupt file must produce an error, never a crash.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include <event-parse.h>
#include <kbuffer.h>
#include <trace-cmd.h>

/* Exported by libtracecmd 1.x but declared only in its private header. */
const char *tracecmd_get_uname(struct tracecmd_input *handle);
const char *tracecmd_get_trace_clock(struct tracecmd_input *handle);

/* ---------------------------------------------------------------- Arrow C data interface */


struct ArrowSchema {
	const char *format;
	const char *name;
	const char *metadata;
	int64_t flags;
	int64_t n_children;
	struct ArrowSchema **children;
	struct ArrowSchema *dictionary;
	void (*release)(struct ArrowSchema *);
	void *private_data;
};

struct ArrowArray {
	int64_t length;
	int64_t null_count;
	int64_t offset;
	int64_t n_buffers;
	int64_t n_children;
	const void **buffers;
	struct ArrowArray **children;
	struct ArrowArray *dictionary;
	void (*release)(struct ArrowArray *);
	void *private_data;
};

/* Schema nodes own their format and name strings. */
static void schema_release(struct ArrowSchema *s)
{
	if (!s || !s->release)
		return;
	for (int64_t i = 0; i < s->n_children; i++) {
		if (s->children[i]->release)
			s->children[i]->release(s->children[i]);
		free(s->children[i]);
	}
	free(s->children);
	if (s->dictionary) {
		if (s->dictionary->release)
			s->dictionary->release(s->dictionary);
		free(s->dictionary);
	}
	free((void *)s->format);
	free((void *)s->name);
	s->release = NULL;
}

static struct ArrowSchema *schema_new(const char *format, const char *name, int n_children)
{
	struct ArrowSchema *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->format = strdup(format);
	s->name = strdup(name ? name : "");
	/* Decoded columns never hold nulls. Declaring them non-nullable makes them
	 * REQUIRED in Parquet, which saves writing definition levels. */
	s->flags = 0;
	s->n_children = n_children;
	s->children = n_children ? calloc(n_children, sizeof(*s->children)) : NULL;
	s->release = schema_release;
	if (!s->format || !s->name || (n_children && !s->children)) {
		schema_release(s);
		free(s);
		return NULL;
	}
	return s;
}

/* Array nodes own their buffers (at most 3) and their children. */
static void array_release(struct ArrowArray *a)
{
	if (!a || !a->release)
		return;
	for (int64_t i = 0; i < a->n_children; i++) {
		if (a->children[i]->release)
			a->children[i]->release(a->children[i]);
		free(a->children[i]);
	}
	free(a->children);
	if (a->dictionary) {
		if (a->dictionary->release)
			a->dictionary->release(a->dictionary);
		free(a->dictionary);
	}
	for (int64_t i = 0; i < a->n_buffers; i++)
		free((void *)a->buffers[i]);
	free(a->buffers);
	a->release = NULL;
}

static struct ArrowArray *array_new(int64_t length, int n_buffers, int n_children)
{
	struct ArrowArray *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->length = length;
	a->n_buffers = n_buffers;
	a->buffers = calloc(n_buffers, sizeof(void *));
	a->n_children = n_children;
	a->children = n_children ? calloc(n_children, sizeof(*a->children)) : NULL;
	a->release = array_release;
	if (!a->buffers || (n_children && !a->children)) {
		free(a->buffers);
		free(a->children);
		free(a);
		return NULL;
	}
	return a;
}

/* ---------------------------------------------------------------- growable buffers */

struct gbuf {
	char *data;
	size_t len;
	size_t cap;
};

static int gbuf_reserve(struct gbuf *b, size_t extra)
{
	size_t need = b->len + extra;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

static int gbuf_append(struct gbuf *b, const void *src, size_t n)
{
	if (gbuf_reserve(b, n))
		return -1;
	memcpy(b->data + b->len, src, n);
	b->len += n;
	return 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static int utf8_seq(const unsigned char *s, size_t n)
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
static int gbuf_append_utf8(struct gbuf *b, const void *src, size_t n)
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

/* Hand the memory to an Arrow buffer slot; an empty buffer still gets a valid pointer. */
static void *gbuf_take(struct gbuf *b)
{
	void *p = b->data ? b->data : malloc(8);
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

static void gbuf_free(struct gbuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* ---------------------------------------------------------------- event plans */

enum col_kind {
	COL_TS,		/* int64 ns */
	COL_CPU,	/* int32 */
	COL_PID,	/* int32 from common_pid */
	COL_COMM,	/* dictionary<int32, utf8>, resolved from the saved cmdlines */
	COL_INT,	/* fixed-width integer field */
	COL_STR,	/* char array, NUL-terminated within its size */
	COL_DYNSTR,	/* __data_loc / __rel_loc char[] */
	COL_ARR,	/* fixed array of integers -> list */
	COL_DYNARR,	/* __data_loc array of integers -> list */
	COL_BIN,	/* anything else: raw bytes */
	COL_STACK,	/* stack-trace caller[]: addresses, as many as the record holds */
	COL_STACKSYM,	/* the same addresses resolved through kallsyms */
};

struct col_plan {
	char *name;
	enum col_kind kind;
	int offset;
	int size;
	int width;		/* integer width, or element width for arrays */
	bool is_signed;
	bool relative;		/* __rel_loc: offset counts from the end of the field */
	bool flexible;		/* a trailing `type name[]`: runs to the end of the record */
	int count_offset;	/* COL_STACK: the `size` field holding the depth, or -1 */
	int count_width;
};

struct event_plan {
	int id;
	char *system;
	char *name;
	int ncols;
	struct col_plan *cols;
	int min_size;		/* bytes every record of this event must have */
};

static const char *int_format(int width, bool is_signed)
{
	switch (width) {
	case 1: return is_signed ? "c" : "C";
	case 2: return is_signed ? "s" : "S";
	case 4: return is_signed ? "i" : "I";
	default: return is_signed ? "l" : "L";
	}
}

static bool valid_width(int w)
{
	return w == 1 || w == 2 || w == 4 || w == 8;
}

/* ---------------------------------------------------------------- Trace object */

typedef struct {
	PyObject_HEAD
	struct tracecmd_input *handle;
	struct tep_handle *tep;
	struct event_plan **plans;	/* indexed by event id */
	int max_id;
	int type_offset, type_size;	/* common_type */
	int pid_offset;
	bool swap;
	int lsize;			/* kbuffer long size enum */
	bool old_format;
	pthread_mutex_t lookup_lock;	/* tep's cmdline and symbol caches are not thread-safe */
} TraceObject;

static PyObject *TraceFileError;

static void plan_free(struct event_plan *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->ncols; i++)
		free(p->cols[i].name);
	free(p->cols);
	free(p->system);
	free(p->name);
	free(p);
}

static int plan_add(struct event_plan *p, int *cap, struct col_plan col)
{
	if (p->ncols == *cap) {
		int ncap = *cap ? *cap * 2 : 16;
		struct col_plan *c = realloc(p->cols, ncap * sizeof(*c));
		if (!c)
			return -1;
		p->cols = c;
		*cap = ncap;
	}
	col.name = strdup(col.name);
	if (!col.name)
		return -1;
	p->cols[p->ncols++] = col;
	return 0;
}

static bool is_stack_event(struct tep_event *ev)
{
	return ev->system && strcmp(ev->system, "ftrace") == 0 &&
	       (strcmp(ev->name, "kernel_stack") == 0 || strcmp(ev->name, "user_stack") == 0);
}

/* Decide how each field of an event's recorded format becomes an Arrow column. */
static struct col_plan field_plan(struct tep_format_field *f)
{
	struct col_plan c = { .name = f->name, .offset = f->offset, .size = f->size,
			      .count_offset = -1 };
	unsigned long fl = f->flags;
	c.is_signed = fl & TEP_FIELD_IS_SIGNED;
	if (fl & TEP_FIELD_IS_DYNAMIC) {
		c.relative = fl & TEP_FIELD_IS_RELATIVE;
		if (fl & TEP_FIELD_IS_STRING) {
			c.kind = COL_DYNSTR;
		} else {
			c.kind = COL_DYNARR;
			c.width = f->elementsize;
			if (!valid_width(c.width))
				c.kind = COL_BIN;
		}
	} else if (f->size == 0 && !(fl & TEP_FIELD_IS_ARRAY)) {
		/* Older kernels declare print's trailing buffer as `char buf;` of size 0. */
		c.flexible = true;
		c.kind = f->type && strstr(f->type, "char") ? COL_STR : COL_BIN;
	} else if (fl & TEP_FIELD_IS_ARRAY) {
		/* ftrace's print and bprint end in `char buf[]` / `u32 buf[]`: size 0 in
		 * the format, filled up to the end of the record. */
		c.flexible = f->size == 0 || f->arraylen == 0;
		if (fl & TEP_FIELD_IS_STRING) {
			c.kind = COL_STR;
		} else {
			c.kind = COL_ARR;
			c.width = f->elementsize;
			if (!valid_width(c.width))
				c.kind = COL_BIN;
		}
	} else if (valid_width(f->size)) {
		c.kind = COL_INT;
		c.width = f->size;
	} else {
		c.kind = COL_BIN;
	}
	return c;
}

static bool name_taken(struct event_plan *p, int except, const char *name)
{
	for (int i = 0; i < p->ncols; i++)
		if (i != except && !strcmp(p->cols[i].name, name))
			return true;
	return false;
}

/* Events such as sched_wakeup have fields named comm and pid of their own. The
 * event's field keeps its name (the one trace-cmd prints); the common column
 * becomes common_comm, common_pid. Any clash left gets a numeric suffix, since
 * Parquet readers refuse duplicate column names. */
static int dedupe_columns(struct event_plan *p)
{
	for (int i = 0; i < p->ncols; i++) {
		if (!name_taken(p, i, p->cols[i].name))
			continue;
		char buf[256];
		if (p->cols[i].kind <= COL_COMM)
			snprintf(buf, sizeof(buf), "common_%s", p->cols[i].name);
		else
			snprintf(buf, sizeof(buf), "%s", p->cols[i].name);
		for (int k = 2; name_taken(p, i, buf) && k < 1000; k++) {
			if (p->cols[i].kind <= COL_COMM)
				snprintf(buf, sizeof(buf), "common_%s_%d", p->cols[i].name, k);
			else
				snprintf(buf, sizeof(buf), "%s_%d", p->cols[i].name, k);
		}
		char *name = strdup(buf);
		if (!name)
			return -1;
		free(p->cols[i].name);
		p->cols[i].name = name;
	}
	return 0;
}

static struct event_plan *build_plan(TraceObject *self, struct tep_event *ev)
{
	struct event_plan *p = calloc(1, sizeof(*p));
	int cap = 0;
	if (!p)
		return NULL;
	p->id = ev->id;
	p->system = strdup(ev->system ? ev->system : "");
	p->name = strdup(ev->name ? ev->name : "");
	if (!p->system || !p->name)
		goto fail;

	struct col_plan fixed[] = {
		{ .name = "ts", .kind = COL_TS, .count_offset = -1 },
		{ .name = "cpu", .kind = COL_CPU, .count_offset = -1 },
		{ .name = "pid", .kind = COL_PID, .count_offset = -1 },
		{ .name = "comm", .kind = COL_COMM, .count_offset = -1 },
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (plan_add(p, &cap, fixed[i]))
			goto fail;

	/* Common fields other than type and pid (flags, preempt count, and whatever
	 * else an older or newer kernel records) keep their own names. */
	struct tep_format_field **common = tep_event_common_fields(ev);
	for (int i = 0; common && common[i]; i++) {
		struct tep_format_field *f = common[i];
		if (!strcmp(f->name, "common_type") || !strcmp(f->name, "common_pid"))
			continue;
		if (plan_add(p, &cap, field_plan(f)))
			goto fail_fields;
		if (f->offset + (int)f->size > p->min_size)
			p->min_size = f->offset + f->size;
	}
	free(common);
	common = NULL;

	struct tep_format_field **fields = tep_event_fields(ev);
	bool stack = is_stack_event(ev);
	struct tep_format_field *depth = stack ? tep_find_field(ev, "size") : NULL;
	for (int i = 0; fields && fields[i]; i++) {
		struct tep_format_field *f = fields[i];
		struct col_plan c = field_plan(f);
		if (stack && !strcmp(f->name, "caller")) {
			/* The format declares caller[8]; the kernel writes as many
			 * entries as the stack had, and `size` says how many. */
			c.kind = COL_STACK;
			c.width = f->elementsize ? f->elementsize : f->size;
			if (!valid_width(c.width) || c.width < 4)
				c.width = 8;
			if (depth && valid_width(depth->size)) {
				c.count_offset = depth->offset;
				c.count_width = depth->size;
			}
			if (plan_add(p, &cap, c))
				goto fail_fields;
			if (!strcmp(ev->name, "kernel_stack")) {
				c.kind = COL_STACKSYM;
				c.name = "caller_symbols";
				if (plan_add(p, &cap, c))
					goto fail_fields;
			}
			if (f->offset > p->min_size)
				p->min_size = f->offset;
			continue;
		}
		if (plan_add(p, &cap, c))
			goto fail_fields;
		int end = f->offset + ((f->flags & TEP_FIELD_IS_DYNAMIC) ? 4 : f->size);
		if (end > p->min_size)
			p->min_size = end;
	}
	free(fields);
	(void)self;
	if (dedupe_columns(p))
		goto fail;
	return p;

fail_fields:
	free(common);
fail:
	plan_free(p);
	return NULL;
}

static void Trace_dealloc(TraceObject *self)
{
	if (self->plans) {
		for (int i = 0; i <= self->max_id; i++)
			plan_free(self->plans[i]);
		free(self->plans);
	}
	if (self->handle)
		tracecmd_close(self->handle);
	pthread_mutex_destroy(&self->lookup_lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Trace_init(TraceObject *self, PyObject *args, PyObject *kwds)
{
	const char *path;
	static char *kwlist[] = { "path", NULL };
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "s", kwlist, &path))
		return -1;
	pthread_mutex_init(&self->lookup_lock, NULL);

	tracecmd_set_loglevel(TEP_LOG_NONE);
	tep_set_loglevel(TEP_LOG_NONE);
	Py_BEGIN_ALLOW_THREADS
	self->handle = tracecmd_open(path, TRACECMD_FL_LOAD_NO_PLUGINS);
	Py_END_ALLOW_THREADS
	if (!self->handle) {
		PyErr_Format(TraceFileError, "%s: libtracecmd cannot read the file's metadata "
			     "(truncated or corrupt)", path);
		return -1;
	}
	self->tep = tracecmd_get_tep(self->handle);
	if (!self->tep) {
		PyErr_Format(TraceFileError, "%s: no event formats in the file", path);
		return -1;
	}

	struct tep_event **events = tep_list_events(self->tep, TEP_EVENT_SORT_ID);
	int n = tep_get_events_count(self->tep);
	self->max_id = 0;
	for (int i = 0; i < n; i++)
		if (events[i]->id > self->max_id)
			self->max_id = events[i]->id;
	self->plans = calloc(self->max_id + 1, sizeof(*self->plans));
	if (!self->plans) {
		PyErr_NoMemory();
		return -1;
	}
	self->type_offset = 0;
	self->type_size = 2;
	self->pid_offset = 4;
	bool common_seen = false;
	for (int i = 0; i < n; i++) {
		struct tep_event *ev = events[i];
		if (ev->id < 0)
			continue;
		self->plans[ev->id] = build_plan(self, ev);
		if (!self->plans[ev->id]) {
			PyErr_NoMemory();
			return -1;
		}
		if (!common_seen) {
			struct tep_format_field *t = tep_find_common_field(ev, "common_type");
			struct tep_format_field *p = tep_find_common_field(ev, "common_pid");
			if (t && p && valid_width(t->size)) {
				self->type_offset = t->offset;
				self->type_size = t->size;
				self->pid_offset = p->offset;
				common_seen = true;
			}
		}
	}

	self->swap = tep_is_file_bigendian(self->tep) != tep_is_local_bigendian(self->tep);
	int hps = tep_get_header_page_size(self->tep);
	if (hps != 4 && hps != 8)
		hps = tep_get_long_size(self->tep);
	self->lsize = hps == 4 ? KBUFFER_LSIZE_4 : KBUFFER_LSIZE_8;
	self->old_format = tep_is_old_format(self->tep);

	/* Build tep's symbol and cmdline lookup tables now, on this thread:
	 * their first use sorts them in place. */
	tep_find_function(self->tep, 0);
	tep_data_comm_from_pid(self->tep, 0);
	return 0;
}

static PyObject *maybe_str(const char *s)
{
	if (!s)
		Py_RETURN_NONE;
	return PyUnicode_DecodeUTF8(s, strlen(s), "replace");
}

/* Trace.info(): what the file says about where and how it was recorded. */
static PyObject *Trace_info(TraceObject *self, PyObject *noargs)
{
	int ninst = tracecmd_buffer_instances(self->handle);
	PyObject *inst = PyList_New(0);
	if (!inst)
		return NULL;
	for (int i = 0; i < ninst; i++) {
		PyObject *s = maybe_str(tracecmd_buffer_instance_name(self->handle, i));
		if (!s || PyList_Append(inst, s)) {
			Py_XDECREF(s);
			Py_DECREF(inst);
			return NULL;
		}
		Py_DECREF(s);
	}
	return Py_BuildValue("{s:N,s:N,s:i,s:i,s:i,s:O,s:K,s:N}",
			     "uname", maybe_str(tracecmd_get_uname(self->handle)),
			     "trace_clock", maybe_str(tracecmd_get_trace_clock(self->handle)),
			     "cpus", tep_get_cpus(self->tep),
			     "long_size", tep_get_long_size(self->tep),
			     "page_size", tep_get_page_size(self->tep),
			     "big_endian", tep_is_file_bigendian(self->tep) ? Py_True : Py_False,
			     "first_ts", (unsigned long long)tracecmd_get_first_ts(self->handle),
			     "instances", inst);
}

/* Trace.events(): (id, system, name, [(column, arrow format)]) per event format. */
static PyObject *Trace_events(TraceObject *self, PyObject *noargs)
{
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	for (int id = 0; id <= self->max_id; id++) {
		struct event_plan *p = self->plans[id];
		if (!p)
			continue;
		PyObject *cols = PyList_New(p->ncols);
		if (!cols)
			goto fail;
		for (int i = 0; i < p->ncols; i++) {
			struct col_plan *c = &p->cols[i];
			PyList_SET_ITEM(cols, i, Py_BuildValue("(si)", c->name, (int)c->kind));
		}
		PyObject *t = Py_BuildValue("(issN)", id, p->system, p->name, cols);
		if (!t || PyList_Append(out, t)) {
			Py_XDECREF(t);
			goto fail;
		}
		Py_DECREF(t);
	}
	return out;
fail:
	Py_DECREF(out);
	return NULL;
}

/* The first field named anywhere inside a print argument, e.g. REC->gfp_flags. */
static const char *arg_field_name(struct tep_print_arg *arg, int depth)
{
	if (!arg || depth > 32)
		return NULL;
	switch (arg->type) {
	case TEP_PRINT_FIELD:
		return arg->field.name;
	case TEP_PRINT_TYPE:
		return arg_field_name(arg->typecast.item, depth + 1);
	case TEP_PRINT_OP: {
		const char *l = arg_field_name(arg->op.left, depth + 1);
		return l ? l : arg_field_name(arg->op.right, depth + 1);
	}
	default:
		return NULL;
	}
}

static int collect_symbols(PyObject *out, struct tep_event *ev, struct tep_print_arg *arg, int depth);

static int add_symbols(PyObject *out, struct tep_event *ev, const char *kind,
		       struct tep_print_arg *field, struct tep_print_flag_sym *sym, int depth)
{
	const char *fname = arg_field_name(field, 0);
	for (; sym; sym = sym->next) {
		if (!sym->value || !sym->str)
			continue;
		/* libtraceevent has already evaluated the value expression (e.g.
		 * "(( gfp_t)((((1UL))) << (10)))") to a number string. */
		char *end = NULL;
		errno = 0;
		unsigned long long v = strtoull(sym->value, &end, 0);
		PyObject *val;
		if (errno || !end || *end || end == sym->value) {
			long long sv = strtoll(sym->value, &end, 0);
			if (end && !*end && end != sym->value)
				val = PyLong_FromUnsignedLongLong((unsigned long long)sv);
			else
				val = Py_NewRef(Py_None);
		} else {
			val = PyLong_FromUnsignedLongLong(v);
		}
		PyObject *t = Py_BuildValue("(sssszNs)", ev->system, ev->name, fname ? fname : "",
					    kind, sym->str, val, sym->value);
		if (!t || PyList_Append(out, t)) {
			Py_XDECREF(t);
			return -1;
		}
		Py_DECREF(t);
	}
	return collect_symbols(out, ev, field, depth + 1);
}

static int collect_symbols(PyObject *out, struct tep_event *ev, struct tep_print_arg *arg, int depth)
{
	for (; arg && depth < 64; arg = arg->next) {
		int r = 0;
		switch (arg->type) {
		case TEP_PRINT_FLAGS:
			r = add_symbols(out, ev, "flags", arg->flags.field, arg->flags.flags, depth);
			break;
		case TEP_PRINT_SYMBOL:
			r = add_symbols(out, ev, "symbolic", arg->symbol.field, arg->symbol.symbols, depth);
			break;
		case TEP_PRINT_TYPE:
			r = collect_symbols(out, ev, arg->typecast.item, depth + 1);
			break;
		case TEP_PRINT_OP:
			r = collect_symbols(out, ev, arg->op.left, depth + 1);
			if (!r)
				r = collect_symbols(out, ev, arg->op.right, depth + 1);
			break;
		case TEP_PRINT_FUNC:
			r = collect_symbols(out, ev, arg->func.args, depth + 1);
			break;
		default:
			break;
		}
		if (r)
			return r;
	}
	return 0;
}

/* Trace.print_flags(): (system, event, field, kind, name, value, expression) rows
 * from every __print_flags and __print_symbolic table in the recorded formats. */
static PyObject *Trace_print_flags(TraceObject *self, PyObject *noargs)
{
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	struct tep_event **events = tep_list_events(self->tep, TEP_EVENT_SORT_ID);
	int n = tep_get_events_count(self->tep);
	for (int i = 0; i < n; i++) {
		if (collect_symbols(out, events[i], events[i]->print_fmt.args, 0)) {
			Py_DECREF(out);
			return NULL;
		}
	}
	return out;
}

/* ---------------------------------------------------------------- column builders */

struct pid_slot {
	int pid;
	int index;
};

struct col_builder {
	struct gbuf values;	/* fixed values, or indices for comm */
	struct gbuf offsets;	/* int32 offsets for strings and lists */
	struct gbuf child;	/* list elements / string bytes */
	struct gbuf child_offsets;	/* stack symbols: offsets into `child` */
	/* comm dictionary for the batch being built */
	struct pid_slot *slots;
	int nslots;
	int nvalues;
	struct gbuf dict_offsets;
	struct gbuf dict_data;
};

struct event_builder {
	struct event_plan *plan;
	int64_t rows;
	struct col_builder *cols;
};

struct batch {
	int event_id;
	struct ArrowSchema *schema;
	struct ArrowArray *array;
};

typedef struct {
	PyObject_HEAD
	TraceObject *trace;
	int fd;
	int compression;	/* 0 none, 1 zstd, 2 zlib */
	int page_size;
	long long ts_offset;
	int64_t batch_rows;
	unsigned char *wanted;	/* per event id: decode this event? NULL: all */
	struct event_builder **builders;	/* per event id */
	struct batch *ready;
	int nready, capready;
	struct kbuffer *kbuf;
	ZSTD_DCtx *zctx;
	struct gbuf io;		/* compressed bytes read from the file */
	struct gbuf pages;	/* uncompressed pages */
	PyObject *lost;		/* list of (cpu, ts, missed) */
	int64_t events;
	int64_t unknown_events;
	long long min_ts, max_ts;	/* over decoded events, for the runs table */
	char error[512];
} DecoderObject;

static void builder_reset_dict(struct col_builder *c)
{
	free(c->slots);
	c->slots = NULL;
	c->nslots = 0;
	c->nvalues = 0;
	gbuf_free(&c->dict_offsets);
	gbuf_free(&c->dict_data);
}

static void builder_free(struct event_builder *b)
{
	if (!b)
		return;
	for (int i = 0; i < b->plan->ncols; i++) {
		struct col_builder *c = &b->cols[i];
		gbuf_free(&c->values);
		gbuf_free(&c->offsets);
		gbuf_free(&c->child);
		gbuf_free(&c->child_offsets);
		builder_reset_dict(c);
	}
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
	struct event_builder *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->plan = plan;
	b->cols = calloc(plan->ncols, sizeof(*b->cols));
	if (!b->cols) {
		free(b);
		return NULL;
	}
	return b;
}

static uint64_t read_uint(const unsigned char *p, int width, bool swap)
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

static int comm_index(DecoderObject *d, struct col_builder *c, int pid)
{
	if (c->nslots == 0 || c->nvalues * 2 >= c->nslots) {
		int n = c->nslots ? c->nslots * 2 : 64;
		struct pid_slot *s = malloc(n * sizeof(*s));
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
	int r = comm ? 0 : -1;
	if (comm) {
		r |= offsets_start(&c->dict_offsets);
		r |= gbuf_append_utf8(&c->dict_data, comm, strlen(comm));
		r |= append_offset(&c->dict_offsets, c->dict_data.len);
	}
	pthread_mutex_unlock(&d->trace->lookup_lock);
	if (r)
		return -1;
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

/* Fixed-width columns get a whole batch worth of memory at once: growing them by
 * doubling costs a copy and fresh page faults per step, and page faults from
 * several decoder threads contend on the process's memory map. */
static int presize(DecoderObject *d, struct col_builder *c, int width)
{
	if (c->values.cap)
		return 0;
	return gbuf_reserve(&c->values, (size_t)d->batch_rows * width);
}

static int append_record(DecoderObject *d, struct event_builder *b, const unsigned char *data,
			 int size, unsigned long long ts, int cpu)
{
	struct event_plan *p = b->plan;
	bool swap = d->trace->swap;
	int pid = (int)(int32_t)read_uint(data + d->trace->pid_offset, 4, swap);
	int r = 0;
	for (int i = 0; i < p->ncols && !r; i++) {
		struct col_plan *cp = &p->cols[i];
		struct col_builder *c = &b->cols[i];
		switch (cp->kind) {
		case COL_TS: {
			int64_t t = (int64_t)ts + d->ts_offset;
			r = presize(d, c, 8) || gbuf_append(&c->values, &t, 8);
			break;
		}
		case COL_CPU: {
			int32_t v = cpu;
			r = presize(d, c, 4) || gbuf_append(&c->values, &v, 4);
			break;
		}
		case COL_PID:
			r = presize(d, c, 4) || gbuf_append(&c->values, &pid, 4);
			break;
		case COL_COMM: {
			int32_t idx = comm_index(d, c, pid);
			r = idx < 0 ? -1 : (presize(d, c, 4) || gbuf_append(&c->values, &idx, 4));
			break;
		}
		case COL_INT:
			r = presize(d, c, cp->width) || append_int(&c->values, read_uint(data + cp->offset, cp->width, swap), cp->width);
			break;
		case COL_STR: {
			const unsigned char *s = data + cp->offset;
			int limit = cp->flexible ? size - cp->offset : cp->size;
			int n = 0;
			while (n < limit && s[n])
				n++;
			r = offsets_start(&c->offsets) || gbuf_append_utf8(&c->child, s, n) ||
			    append_offset(&c->offsets, c->child.len);
			break;
		}
		case COL_DYNSTR:
		case COL_BIN: {
			const unsigned char *s;
			int n;
			if (cp->kind == COL_DYNSTR) {
				if (dyn_payload(cp, data, size, swap, &s, &n))
					n = 0, s = data;
				int k = 0;
				while (k < n && s[k])
					k++;
				n = k;
			} else if (cp->flexible && cp->offset <= size) {
				s = data + cp->offset;
				n = size - cp->offset;
			} else if (cp->offset + cp->size <= size) {
				s = data + cp->offset;
				n = cp->size;
			} else {
				s = data;
				n = 0;
			}
			r = offsets_start(&c->offsets) ||
			    (cp->kind == COL_DYNSTR ? gbuf_append_utf8(&c->child, s, n)
						    : gbuf_append(&c->child, s, n)) ||
			    append_offset(&c->offsets, c->child.len);
			break;
		}
		case COL_ARR:
		case COL_DYNARR: {
			const unsigned char *s = data + cp->offset;
			int n = cp->flexible ? size - cp->offset : cp->size;
			if (cp->kind == COL_DYNARR && dyn_payload(cp, data, size, swap, &s, &n))
				n = 0;
			if (n < 0 || cp->offset + n > size)
				n = 0;
			int count = n / cp->width;
			r = offsets_start(&c->offsets);
			for (int k = 0; k < count && !r; k++)
				r = append_int(&c->child, read_uint(s + k * cp->width, cp->width, swap),
					       cp->width);
			if (!r)
				r = append_offset(&c->offsets, c->child.len / cp->width);
			break;
		}
		case COL_STACK:
		case COL_STACKSYM: {
			int avail = (size - cp->offset) / cp->width;
			int count = avail;
			if (cp->count_offset >= 0) {
				long long want = (long long)read_uint(data + cp->count_offset,
								      cp->count_width, swap);
				if (want >= 0 && want < count)
					count = (int)want;
			}
			if (count < 0)
				count = 0;
			r = offsets_start(&c->offsets);
			if (cp->kind == COL_STACK) {
				for (int k = 0; k < count && !r; k++) {
					uint64_t a = read_uint(data + cp->offset + k * cp->width,
							       cp->width, swap);
					r = append_int(&c->child, a, 8);
				}
				if (!r)
					r = append_offset(&c->offsets, c->child.len / 8);
				break;
			}
			for (int k = 0; k < count && !r; k++) {
				uint64_t a = read_uint(data + cp->offset + k * cp->width, cp->width, swap);
				char sym[512];
				unsigned long long start = 0;
				const char *fn = NULL;
				pthread_mutex_lock(&d->trace->lookup_lock);
				fn = tep_find_function(d->trace->tep, a);
				start = fn ? tep_find_function_address(d->trace->tep, a) : 0;
				if (fn)
					snprintf(sym, sizeof(sym), "%s+0x%llx", fn, (unsigned long long)(a - start));
				pthread_mutex_unlock(&d->trace->lookup_lock);
				if (!fn)
					snprintf(sym, sizeof(sym), "0x%llx", (unsigned long long)a);
				r = offsets_start(&c->child_offsets) ||
				    gbuf_append_utf8(&c->child, sym, strlen(sym)) ||
				    append_offset(&c->child_offsets, c->child.len);
			}
			if (!r)
				r = append_offset(&c->offsets, c->child_offsets.len ?
						  c->child_offsets.len / 4 - 1 : 0);
			break;
		}
		}
	}
	if (!r)
		b->rows++;
	return r;
}

/* ---------------------------------------------------------------- batch export */

static struct ArrowArray *export_var(int64_t rows, struct gbuf *offsets, struct gbuf *data)
{
	struct ArrowArray *a = array_new(rows, 3, 0);
	if (!a)
		return NULL;
	if (offsets_start(offsets)) {
		array_release(a);
		free(a);
		return NULL;
	}
	a->buffers[1] = gbuf_take(offsets);
	a->buffers[2] = gbuf_take(data);
	return a;
}

/* Turn one event's builders into an Arrow struct array + schema, and reset them. */
static int export_batch(DecoderObject *d, struct event_builder *b, struct batch *out)
{
	struct event_plan *p = b->plan;
	int64_t rows = b->rows;
	struct ArrowSchema *root_s = schema_new("+s", "", p->ncols);
	struct ArrowArray *root_a = array_new(rows, 1, p->ncols);
	if (!root_s || !root_a)
		goto fail;
	for (int i = 0; i < p->ncols; i++) {
		struct col_plan *cp = &p->cols[i];
		struct col_builder *c = &b->cols[i];
		struct ArrowSchema *s = NULL;
		struct ArrowArray *a = NULL;
		switch (cp->kind) {
		case COL_TS:
		case COL_CPU:
		case COL_PID:
		case COL_INT: {
			const char *fmt = cp->kind == COL_TS ? "l" :
					  cp->kind == COL_INT ? int_format(cp->width, cp->is_signed) : "i";
			s = schema_new(fmt, cp->name, 0);
			a = array_new(rows, 2, 0);
			if (a)
				a->buffers[1] = gbuf_take(&c->values);
			break;
		}
		case COL_COMM: {
			s = schema_new("i", cp->name, 0);
			if (s) {
				s->dictionary = schema_new("u", "", 0);
				if (!s->dictionary)
					goto fail_col;
			}
			a = array_new(rows, 2, 0);
			if (a) {
				a->buffers[1] = gbuf_take(&c->values);
				a->dictionary = export_var(c->nvalues, &c->dict_offsets, &c->dict_data);
				if (!a->dictionary)
					goto fail_col;
			}
			builder_reset_dict(c);
			break;
		}
		case COL_STR:
		case COL_DYNSTR:
		case COL_BIN:
			s = schema_new(cp->kind == COL_BIN ? "z" : "u", cp->name, 0);
			a = export_var(rows, &c->offsets, &c->child);
			break;
		case COL_ARR:
		case COL_DYNARR:
		case COL_STACK: {
			int w = cp->kind == COL_STACK ? 8 : cp->width;
			s = schema_new("+l", cp->name, 1);
			if (s) {
				s->children[0] = schema_new(int_format(w, cp->kind != COL_STACK && cp->is_signed), "item", 0);
				if (!s->children[0])
					goto fail_col;
			}
			a = array_new(rows, 2, 1);
			if (a) {
				if (offsets_start(&c->offsets))
					goto fail_col;
				int64_t n = (int64_t)(c->child.len / w);
				a->buffers[1] = gbuf_take(&c->offsets);
				a->children[0] = array_new(n, 2, 0);
				if (!a->children[0])
					goto fail_col;
				a->children[0]->buffers[1] = gbuf_take(&c->child);
			}
			break;
		}
		case COL_STACKSYM: {
			s = schema_new("+l", cp->name, 1);
			if (s) {
				s->children[0] = schema_new("u", "item", 0);
				if (!s->children[0])
					goto fail_col;
			}
			a = array_new(rows, 2, 1);
			if (a) {
				if (offsets_start(&c->offsets) || offsets_start(&c->child_offsets))
					goto fail_col;
				int64_t n = (int64_t)(c->child_offsets.len / 4) - 1;
				a->buffers[1] = gbuf_take(&c->offsets);
				a->children[0] = export_var(n, &c->child_offsets, &c->child);
				if (!a->children[0])
					goto fail_col;
			}
			break;
		}
		}
		if (!s || !a)
			goto fail_col;
		root_s->children[i] = s;
		root_a->children[i] = a;
		continue;
fail_col:
		if (s) {
			schema_release(s);
			free(s);
		}
		if (a) {
			array_release(a);
			free(a);
		}
		goto fail;
	}
	b->rows = 0;
	out->event_id = p->id;
	out->schema = root_s;
	out->array = root_a;
	return 0;
fail:
	/* Children not yet attached are NULL: fill them so release can walk them. */
	if (root_s) {
		for (int i = 0; i < root_s->n_children; i++)
			if (!root_s->children[i])
				root_s->children[i] = schema_new("n", "", 0);
		schema_release(root_s);
		free(root_s);
	}
	if (root_a) {
		for (int i = 0; i < root_a->n_children; i++)
			if (!root_a->children[i])
				root_a->children[i] = array_new(0, 0, 0);
		array_release(root_a);
		free(root_a);
	}
	return -1;
}

static int queue_batch(DecoderObject *d, struct event_builder *b)
{
	if (d->nready == d->capready) {
		int n = d->capready ? d->capready * 2 : 16;
		struct batch *q = realloc(d->ready, n * sizeof(*q));
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

/* ---------------------------------------------------------------- page decoding */

#define COMMIT_MASK ((1u << 27) - 1)

struct lost_mark {
	int cpu;
	unsigned long long ts;
	long long missed;
};

struct lost_list {
	struct lost_mark *marks;
	int n, cap;
};

static int decode_page(DecoderObject *d, unsigned char *page, int cpu, long long file_pos,
		       struct lost_list *lost)
{
	TraceObject *t = d->trace;
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
			struct lost_mark *m = realloc(lost->marks, n * sizeof(*m));
			if (!m)
				return -1;
			lost->marks = m;
			lost->cap = n;
		}
		lost->marks[lost->n++] = (struct lost_mark){ cpu, ts + d->ts_offset, missed };
	}
	const unsigned char *end = page + hdr + used;
	while (data) {
		int size = kbuffer_event_size(d->kbuf);
		if (size < 0 || data < page + hdr || data + size > end) {
			snprintf(d->error, sizeof(d->error), "corrupt event at file offset %lld (CPU %d)",
				 file_pos + (long long)(data - page), cpu);
			return -1;
		}
		if (size >= t->type_offset + t->type_size && size >= t->pid_offset + 4) {
			int id = (int)read_uint(data + t->type_offset, t->type_size, t->swap);
			struct event_plan *p = id >= 0 && id <= t->max_id ? t->plans[id] : NULL;
			if (!p) {
				d->unknown_events++;
			} else if (!d->wanted || d->wanted[id]) {
				if (size < p->min_size) {
					snprintf(d->error, sizeof(d->error), "corrupt %s event at file offset "
						 "%lld (CPU %d): %d bytes, its format needs %d", p->name,
						 file_pos + (long long)(data - page), cpu, size, p->min_size);
					return -1;
				}
				struct event_builder *b = d->builders[id];
				if (!b) {
					b = d->builders[id] = builder_new(p);
					if (!b)
						return -1;
				}
				if (append_record(d, b, data, size, ts, cpu))
					return -1;
				if (b->rows >= d->batch_rows && queue_batch(d, b))
					return -1;
				long long t = (long long)ts + d->ts_offset;
				if (!d->events || t < d->min_ts)
					d->min_ts = t;
				if (!d->events || t > d->max_ts)
					d->max_ts = t;
				d->events++;
			}
		} else {
			d->unknown_events++;
		}
		data = kbuffer_next_event(d->kbuf, &ts);
	}
	return 0;
}

static int read_exact(DecoderObject *d, void *buf, size_t n, long long offset)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(d->fd, (char *)buf + done, n - done, offset + done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(d->error, sizeof(d->error), "cannot read %zu bytes at file offset %lld: %s",
				 n, offset, r < 0 ? strerror(errno) : "unexpected end of file");
			return -1;
		}
		done += r;
	}
	return 0;
}

static int decode_pages(DecoderObject *d, unsigned char *buf, size_t len, int cpu, long long pos,
			struct lost_list *lost)
{
	for (size_t at = 0; at + d->page_size <= len; at += d->page_size)
		if (decode_page(d, buf + at, cpu, pos + at, lost))
			return -1;
	return 0;
}

static int decompress_chunk(DecoderObject *d, const void *in, size_t in_len, void *out, size_t out_len)
{
	if (d->compression == 1) {
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
static int decode_segment(DecoderObject *d, int cpu, long long offset, long long length, int chunks,
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
			char why[256];
			snprintf(why, sizeof(why), "%s", d->error);
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

static void capsule_schema_free(PyObject *cap)
{
	struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
	if (s) {
		if (s->release)
			s->release(s);
		free(s);
	}
}

static void capsule_array_free(PyObject *cap)
{
	struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
	if (a) {
		if (a->release)
			a->release(a);
		free(a);
	}
}

/* Move the finished batches to Python as (event_id, schema capsule, array capsule). */
static PyObject *take_ready(DecoderObject *d)
{
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	int i = 0;
	for (; i < d->nready; i++) {
		struct batch *b = &d->ready[i];
		PyObject *s = PyCapsule_New(b->schema, "arrow_schema", capsule_schema_free);
		if (!s)
			break;
		b->schema = NULL;
		PyObject *a = PyCapsule_New(b->array, "arrow_array", capsule_array_free);
		if (!a) {
			Py_DECREF(s);
			break;
		}
		b->array = NULL;
		PyObject *t = Py_BuildValue("(iNN)", b->event_id, s, a);
		if (!t || PyList_Append(out, t)) {
			Py_XDECREF(t);
			break;
		}
		Py_DECREF(t);
	}
	if (i < d->nready) {
		for (int k = i; k < d->nready; k++) {
			if (d->ready[k].schema) {
				schema_release(d->ready[k].schema);
				free(d->ready[k].schema);
			}
			if (d->ready[k].array) {
				array_release(d->ready[k].array);
				free(d->ready[k].array);
			}
		}
		d->nready = 0;
		Py_DECREF(out);
		return NULL;
	}
	d->nready = 0;
	return out;
}

static int add_lost(DecoderObject *d, struct lost_list *lost)
{
	for (int i = 0; i < lost->n; i++) {
		PyObject *t = Py_BuildValue("(iKL)", lost->marks[i].cpu, lost->marks[i].ts,
					    lost->marks[i].missed);
		if (!t || PyList_Append(d->lost, t)) {
			Py_XDECREF(t);
			return -1;
		}
		Py_DECREF(t);
	}
	return 0;
}

/* Decoder.decode(cpu, offset, length, chunks) -> list of finished batches. */
static PyObject *Decoder_decode(DecoderObject *d, PyObject *args)
{
	int cpu, chunks;
	long long offset, length;
	if (!PyArg_ParseTuple(args, "iLLi", &cpu, &offset, &length, &chunks))
		return NULL;
	if (offset < 0 || length < 0 || chunks < 0) {
		PyErr_SetString(PyExc_ValueError, "negative segment bounds");
		return NULL;
	}
	struct lost_list lost = { 0 };
	int r;
	d->error[0] = 0;
	Py_BEGIN_ALLOW_THREADS
	r = decode_segment(d, cpu, offset, length, chunks, &lost);
	Py_END_ALLOW_THREADS
	int lr = add_lost(d, &lost);
	free(lost.marks);
	if (r) {
		if (!d->error[0])
			PyErr_NoMemory();
		else
			PyErr_SetString(TraceFileError, d->error);
		return NULL;
	}
	if (lr)
		return NULL;
	return take_ready(d);
}

/* Decoder.finish() -> the partly filled batches of every event. */
static PyObject *Decoder_finish(DecoderObject *d, PyObject *noargs)
{
	int r = 0;
	Py_BEGIN_ALLOW_THREADS
	for (int id = 0; id <= d->trace->max_id && !r; id++) {
		struct event_builder *b = d->builders[id];
		if (b && b->rows)
			r = queue_batch(d, b);
	}
	Py_END_ALLOW_THREADS
	if (r)
		return PyErr_NoMemory();
	return take_ready(d);
}

static PyObject *Decoder_stats(DecoderObject *d, PyObject *noargs)
{
	if (!d->events)
		return Py_BuildValue("{s:L,s:L,s:O,s:O,s:O}", "events", 0LL, "unknown_events",
				     (long long)d->unknown_events, "lost", d->lost, "min_ts", Py_None,
				     "max_ts", Py_None);
	return Py_BuildValue("{s:L,s:L,s:O,s:L,s:L}", "events", (long long)d->events,
			     "unknown_events", (long long)d->unknown_events, "lost", d->lost,
			     "min_ts", d->min_ts, "max_ts", d->max_ts);
}

static void Decoder_dealloc(DecoderObject *d)
{
	if (d->builders) {
		for (int id = 0; id <= d->trace->max_id; id++)
			builder_free(d->builders[id]);
		free(d->builders);
	}
	for (int k = 0; k < d->nready; k++) {
		if (d->ready[k].schema) {
			schema_release(d->ready[k].schema);
			free(d->ready[k].schema);
		}
		if (d->ready[k].array) {
			array_release(d->ready[k].array);
			free(d->ready[k].array);
		}
	}
	free(d->ready);
	free(d->wanted);
	if (d->kbuf)
		kbuffer_free(d->kbuf);
	if (d->zctx)
		ZSTD_freeDCtx(d->zctx);
	gbuf_free(&d->io);
	gbuf_free(&d->pages);
	if (d->fd >= 0)
		close(d->fd);
	Py_XDECREF(d->lost);
	Py_XDECREF(d->trace);
	Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyTypeObject TraceType;

static int Decoder_init(DecoderObject *d, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "trace", "path", "page_size", "compression", "batch_rows",
				  "ts_offset", "event_ids", NULL };
	PyObject *trace, *ids = Py_None;
	const char *path, *compression;
	int page_size;
	long long batch_rows = 65536, ts_offset = 0;
	d->fd = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!sis|LLO", kwlist, &TraceType, &trace, &path,
					 &page_size, &compression, &batch_rows, &ts_offset, &ids))
		return -1;
	d->trace = (TraceObject *)Py_NewRef(trace);
	if (page_size < 64 || page_size > (1 << 24) || batch_rows < 1) {
		PyErr_SetString(PyExc_ValueError, "bad page size or batch size");
		return -1;
	}
	d->page_size = page_size;
	d->batch_rows = batch_rows;
	d->ts_offset = ts_offset;
	if (!strcmp(compression, "") || !strcmp(compression, "none"))
		d->compression = 0;
	else if (!strcmp(compression, "zstd"))
		d->compression = 1;
	else if (!strcmp(compression, "zlib"))
		d->compression = 2;
	else {
		PyErr_Format(TraceFileError, "%s: compression %s is not supported", path, compression);
		return -1;
	}
	d->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (d->fd < 0) {
		PyErr_Format(TraceFileError, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	int max_id = d->trace->max_id;
	d->builders = calloc(max_id + 1, sizeof(*d->builders));
	d->lost = PyList_New(0);
	d->kbuf = kbuffer_alloc(d->trace->lsize,
				tep_is_file_bigendian(d->trace->tep) ? KBUFFER_ENDIAN_BIG : KBUFFER_ENDIAN_LITTLE);
	d->zctx = d->compression == 1 ? ZSTD_createDCtx() : NULL;
	if (!d->builders || !d->lost || !d->kbuf || (d->compression == 1 && !d->zctx)) {
		PyErr_NoMemory();
		return -1;
	}
	if (d->trace->old_format)
		kbuffer_set_old_format(d->kbuf);
	if (ids != Py_None) {
		d->wanted = calloc(max_id + 1, 1);
		if (!d->wanted) {
			PyErr_NoMemory();
			return -1;
		}
		PyObject *it = PyObject_GetIter(ids), *item;
		if (!it)
			return -1;
		while ((item = PyIter_Next(it))) {
			long id = PyLong_AsLong(item);
			Py_DECREF(item);
			if (id >= 0 && id <= max_id)
				d->wanted[id] = 1;
		}
		Py_DECREF(it);
		if (PyErr_Occurred())
			return -1;
	}
	return 0;
}

/* decompress(proto, data, size): inflate a compressed metadata section. */
static PyObject *mod_decompress(PyObject *mod, PyObject *args)
{
	const char *proto;
	Py_buffer in;
	Py_ssize_t out_len;
	if (!PyArg_ParseTuple(args, "sy*n", &proto, &in, &out_len))
		return NULL;
	if (out_len < 0 || out_len > (1LL << 31)) {
		PyBuffer_Release(&in);
		PyErr_SetString(TraceFileError, "corrupt compressed section size");
		return NULL;
	}
	PyObject *out = PyBytes_FromStringAndSize(NULL, out_len);
	if (!out) {
		PyBuffer_Release(&in);
		return NULL;
	}
	int ok;
	if (!strcmp(proto, "zstd")) {
		size_t r = ZSTD_decompress(PyBytes_AS_STRING(out), out_len, in.buf, in.len);
		ok = !ZSTD_isError(r) && (Py_ssize_t)r == out_len;
	} else if (!strcmp(proto, "zlib")) {
		uLongf got = out_len;
		ok = uncompress((Bytef *)PyBytes_AS_STRING(out), &got, in.buf, in.len) == Z_OK &&
		     (Py_ssize_t)got == out_len;
	} else {
		ok = 0;
	}
	PyBuffer_Release(&in);
	if (!ok) {
		Py_DECREF(out);
		PyErr_Format(TraceFileError, "cannot decompress a %s section", proto);
		return NULL;
	}
	return out;
}

static PyMethodDef Trace_methods[] = {
	{ "info", (PyCFunction)Trace_info, METH_NOARGS, "What the file says about its recording." },
	{ "events", (PyCFunction)Trace_events, METH_NOARGS, "Event formats and their columns." },
	{ "print_flags", (PyCFunction)Trace_print_flags, METH_NOARGS,
	  "Rows of every __print_flags/__print_symbolic table in the formats." },
	{ NULL }
};

static PyTypeObject TraceType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kmemscope.parsers._tracedat.Trace",
	.tp_basicsize = sizeof(TraceObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A trace.dat's metadata, opened with libtracecmd.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Trace_init,
	.tp_dealloc = (destructor)Trace_dealloc,
	.tp_methods = Trace_methods,
};

static PyMethodDef Decoder_methods[] = {
	{ "decode", (PyCFunction)Decoder_decode, METH_VARARGS,
	  "decode(cpu, offset, length, chunks) -> [(event_id, schema, array)]" },
	{ "finish", (PyCFunction)Decoder_finish, METH_NOARGS, "Flush partly filled batches." },
	{ "stats", (PyCFunction)Decoder_stats, METH_NOARGS, "Counts and lost-event markers." },
	{ NULL }
};

static PyTypeObject DecoderType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kmemscope.parsers._tracedat.Decoder",
	.tp_basicsize = sizeof(DecoderObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Decodes segments of one trace.dat's ring-buffer pages into Arrow batches.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Decoder_init,
	.tp_dealloc = (destructor)Decoder_dealloc,
	.tp_methods = Decoder_methods,
};

static PyMethodDef module_methods[] = {
	{ "decompress", mod_decompress, METH_VARARGS, "decompress(proto, data, size) -> bytes" },
	{ NULL }
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_tracedat", "kmemscope's native trace.dat decoder.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__tracedat(void)
{
	if (PyType_Ready(&TraceType) < 0 || PyType_Ready(&DecoderType) < 0)
		return NULL;
	/* Batch buffers are a few MB, handed to Arrow and freed batch after batch.
	 * Keep such blocks on the heap instead of fresh mmaps so their pages are
	 * reused rather than faulted in (and zeroed by the kernel) every time. */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	TraceFileError = PyErr_NewException("kmemscope.parsers._tracedat.TraceFileError", NULL, NULL);
	if (!TraceFileError || PyModule_AddObjectRef(m, "TraceFileError", TraceFileError) ||
	    PyModule_AddObjectRef(m, "Trace", (PyObject *)&TraceType) ||
	    PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) ||
	    PyModule_AddIntConstant(m, "COL_STACK", COL_STACK)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
