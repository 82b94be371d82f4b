// SPDX-License-Identifier: GPL-2.0
/*
 * _tracedat: kmemscope's native trace.dat decoder.
 *
 * parsers/layout.py reads the file's table of contents and metadata (page
 * header, event formats, printk formats, cmdlines, kallsyms) from the file
 * format itself; the Trace type hands them to libtraceevent's public parsers
 * (the kallsyms text is kept, and indexed only if a kernel stack needs it).
 * libtracecmd is not used: its public API opens a file only whole, every
 * kallsyms symbol parsed, and keeps where the CPU data lies to itself. Pages are
 * read (and, for v7 files, decompressed) and walked here, so that several
 * threads can decode segments of one file at once without sharing any state.
 *
 * Decoded events land in per-event column builders and leave as Arrow record
 * batches through the Arrow C data interface (PyCapsules), so pyarrow takes
 * the memory without a copy. The GIL is released while pages are decoded.
 *
 * This file is the Python face of it (the Trace and Decoder types). The work
 * is in native/: plan.c (formats -> columns), decoder.c (pages -> column
 * builders -> batches), kallsyms.c (symbols for stacks), arrow_c.c (the C data
 * interface), gbuf.h (buffers).
 *
 * Only CPython's limited API (3.10) is used, so one build (an abi3 wheel) loads in
 * every CPython from 3.10 on: the types are made from PyType_Spec at import, and
 * only functions of the stable ABI are called (no PyList_SET_ITEM, no Py_buffer).
 * setup.py defines Py_LIMITED_API as well, for the wheel's tag.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include <event-parse.h>
#include <kbuffer.h>

#include "chunks.h"
#include "decoder.h"

/* ---------------------------------------------------------------- Trace object */

typedef struct {
	PyObject_HEAD
	struct trace_meta meta;
	bool initialised;	/* __init__ ran (once only) */
	bool ready;		/* __init__ succeeded: the methods may use meta */
	bool reference_symbols;	/* _resolve gave tep the kallsyms text (tests only) */
} TraceObject;

static PyObject *TraceFileError;
/* Raised when the decoder's own memory runs out: a MemoryError, and a
 * TraceFileError so that callers that report file errors cleanly report it too. */
static PyObject *DecoderMemoryError;

/* common_type is an unsigned short in every kernel: no record names a larger id. */
#define MAX_EVENT_ID 0xffff

/* The types, made from their specs when the module is imported. */
static PyTypeObject *TraceType, *DecoderType, *StacksType;

/* Free an instance of one of the heap types above and drop its reference to its type
 * (an instance of a heap type holds one). */
static void free_instance(PyObject *self)
{
	PyTypeObject *type = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
	tp_free(self);
	Py_DECREF(type);
}

/* Size and borrowed item i of a list or tuple from PySequence_Fast (its macros are not
 * in the limited API; like them, these skip a subclass's __getitem__). */
static Py_ssize_t fast_size(PyObject *seq)
{
	return PyList_Check(seq) ? PyList_Size(seq) : PyTuple_Size(seq);
}

static PyObject *fast_item(PyObject *seq, Py_ssize_t i)
{
	return PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i);
}

static PyObject *no_memory(const char *what)
{
	PyErr_Format(DecoderMemoryError, "out of memory %s", what);
	return NULL;
}

static bool trace_ready(TraceObject *self)
{
	if (!self->ready)
		PyErr_SetString(PyExc_RuntimeError, "Trace is not initialised");
	return self->ready;
}


static void Trace_dealloc(TraceObject *self)
{
	if (self->meta.plans) {
		for (int i = 0; i <= self->meta.max_id; i++)
			plan_free(self->meta.plans[i]);
		free(self->meta.plans);
	}
	if (self->meta.tep)
		tep_free(self->meta.tep);
	ksyms_release(&self->meta.ksyms);
	if (self->initialised)
		pthread_mutex_destroy(&self->meta.lookup_lock);
	free_instance((PyObject *)self);
}

/* A bytes attribute of the metadata object: its data and size (data NULL: missing). */
static int meta_bytes(PyObject *meta, const char *name, const char **data, Py_ssize_t *size)
{
	PyObject *v = PyObject_GetAttrString(meta, name);
	if (!v)
		return -1;
	int r = PyBytes_AsStringAndSize(v, (char **)data, size);
	Py_DECREF(v);	/* the metadata object, which the caller holds, keeps it alive */
	return r;
}

/* libtraceevent's parsers take NUL-terminated text: a copy that is. */
static char *text_copy(const char *data, Py_ssize_t size)
{
	char *s = km_malloc((size_t)size + 1);
	if (s) {
		memcpy(s, data, (size_t)size);
		s[size] = 0;
	}
	return s;
}

/* The event format of ftrace's blktrace, which the kernel never exports (blk events
 * are written straight into the ring buffer). trace-cmd report guesses its id from
 * the ftrace formats that once came just before it and lists it; so does the
 * decoder, for the same rows. Its layout follows struct blk_io_trace after the
 * common fields. */
static void add_guessed_blktrace(struct tep_handle *tep)
{
	static const char *const before[] = { "power", "kmem_free", "user_stack" };
	struct tep_event *prev = NULL;
	for (size_t i = 0; !prev && i < sizeof(before) / sizeof(before[0]); i++)
		prev = tep_find_event_by_name(tep, "ftrace", before[i]);
	if (!prev)
		return;
	static const struct { const char *name; int offset, size; } common[] = {
		{ "common_type", 0, 2 }, { "common_flags", 2, 1 },
		{ "common_preempt_count", 3, 1 }, { "common_pid", 4, 4 },
	};
	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++) {
		struct tep_format_field *f = tep_find_common_field(prev, common[i].name);
		if (!f || f->offset != common[i].offset || f->size != common[i].size)
			return;
	}
	struct tep_format_field *depth = tep_find_common_field(prev, "common_lock_depth");
	if (depth && (depth->offset != 8 || depth->size != 4))
		return;
	char format[2048];
	int n = snprintf(format, sizeof(format),
		"name: blktrace\nID: %d\nformat:\n"
		"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\n"
		"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\n"
		"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\n"
		"\tfield:int common_pid;\toffset:4;\tsize:4;\n"
		"%s\n"
		"\tfield:u64 sector;\toffset:16;\tsize:8;\n"
		"\tfield:int bytes;\toffset:24;\tsize:4;\n"
		"\tfield:int action;\toffset:28;\tsize:4;\n"
		"\tfield:int pid;\toffset:32;\tsize:4;\n"
		"\tfield:int device;\toffset:36;\tsize:4;\n"
		"\tfield:int cpu;\toffset:40;\tsize:4;\n"
		"\tfield:short error;\toffset:44;\tsize:2;\n"
		"\tfield:short pdu_len;\toffset:46;\tsize:2;\n"
		"\tfield:void data;\toffset:48;\tsize:0;\n"
		"\nprint fmt: \"%%d\", REC->pid\n",
		prev->id + 1, depth ? "\tfield:int common_lock_depth;\toffset:8;\tsize:4;\n" : "");
	if (n > 0 && (size_t)n < sizeof(format))
		tep_parse_event(tep, format, (unsigned long)n, "ftrace");
}

struct format_text {
	const char *system;
	const char *data;
	Py_ssize_t size;
};

/* Parse the metadata into a new tep (no Python object touched: the GIL is released).
 * Returns the tep, or NULL when memory ran out. */
static struct tep_handle *parse_metadata(const char *header, Py_ssize_t header_size,
					 const struct format_text *formats, Py_ssize_t nformats,
					 const char *printk, Py_ssize_t printk_size,
					 const char *cmdlines, Py_ssize_t cmdlines_size,
					 int cpus, int long_size, int big_endian)
{
	struct tep_handle *tep = km_fault() ? NULL : tep_alloc();
	if (!tep)
		return NULL;
	tep_set_file_bigendian(tep, big_endian ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);
	tep_set_local_bigendian(tep, tep_is_bigendian() ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);
	tep_set_long_size(tep, long_size);
	tep_set_cpus(tep, cpus);
	char *text = text_copy(header, header_size);
	if (!text)
		goto no_memory;
	/* A page header it cannot read leaves libtraceevent's defaults, as under trace-cmd. */
	tep_parse_header_page(tep, text, (unsigned long)header_size, long_size);
	free(text);
	/* A format libtraceevent cannot parse is left out, as trace-cmd report leaves it. */
	for (Py_ssize_t i = 0; i < nformats; i++)
		tep_parse_event(tep, formats[i].data, (unsigned long)formats[i].size, formats[i].system);
	add_guessed_blktrace(tep);
	if (printk_size > 0) {
		if (!(text = text_copy(printk, printk_size)))
			goto no_memory;
		tep_parse_printk_formats(tep, text);
		free(text);
	}
	if (cmdlines_size > 0) {
		if (!(text = text_copy(cmdlines, cmdlines_size)))
			goto no_memory;
		tep_parse_saved_cmdlines(tep, text);
		free(text);
	}
	return tep;
no_memory:
	tep_free(tep);
	return NULL;
}

/* Build self->meta.tep from layout.read_metadata()'s object; 0, or -1 with an exception.
 * libtraceevent parses without the GIL: pyarrow loads meanwhile (tracedat.py). */
static int load_metadata(TraceObject *self, const char *path, PyObject *meta, int cpus,
			 int long_size, int big_endian)
{
	const char *kallsyms, *header, *printk, *cmdlines;
	Py_ssize_t kallsyms_size, header_size, printk_size, cmdlines_size;
	if (meta_bytes(meta, "kallsyms", &kallsyms, &kallsyms_size) ||
	    meta_bytes(meta, "header_page", &header, &header_size) ||
	    meta_bytes(meta, "printk", &printk, &printk_size) ||
	    meta_bytes(meta, "cmdlines", &cmdlines, &cmdlines_size))
		return -1;
	PyObject *list = PyObject_GetAttrString(meta, "formats");
	PyObject *seq = list ? PySequence_Fast(list, "formats must be a sequence") : NULL;
	Py_XDECREF(list);
	if (!seq)
		return -1;
	Py_ssize_t n = fast_size(seq);
	/* The kallsyms text is kept for the first stack (the open's first counted allocation). */
	if (kallsyms_size > 0 && !(self->meta.ksyms.text = text_copy(kallsyms, kallsyms_size)))
		goto no_memory;
	struct format_text *formats = km_calloc(n ? (size_t)n : 1, sizeof(*formats));
	if (!formats)
		goto no_memory;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *item = fast_item(seq, i);
		if (!item || !PyArg_ParseTuple(item, "sy#", &formats[i].system,
				      &formats[i].data, &formats[i].size)) {
			free(formats);
			Py_DECREF(seq);
			return -1;
		}
	}
	struct tep_handle *tep;
	Py_BEGIN_ALLOW_THREADS
	tep = parse_metadata(header, header_size, formats, n, printk, printk_size, cmdlines,
			     cmdlines_size, cpus, long_size, big_endian);
	Py_END_ALLOW_THREADS
	free(formats);
	Py_DECREF(seq);
	if (!tep) {
		PyErr_Format(DecoderMemoryError, "%s: out of memory reading the file's metadata", path);
		return -1;
	}
	self->meta.tep = tep;
	return 0;
no_memory:
	Py_DECREF(seq);
	PyErr_Format(DecoderMemoryError, "%s: out of memory reading the file's metadata", path);
	return -1;
}

/* Trace(path, metadata, cpus, long_size, big_endian): metadata is layout.read_metadata()'s. */
static int Trace_init(TraceObject *self, PyObject *args, PyObject *kwds)
{
	const char *path;
	PyObject *meta;
	int cpus, long_size, big_endian;
	static char *kwlist[] = { "path", "metadata", "cpus", "long_size", "big_endian", NULL };
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "sOiip", kwlist, &path, &meta, &cpus,
					 &long_size, &big_endian))
		return -1;
	if (self->initialised) {
		PyErr_SetString(PyExc_RuntimeError, "Trace is already initialised");
		return -1;
	}
	self->initialised = true;
	pthread_mutex_init(&self->meta.lookup_lock, NULL);
	tep_set_loglevel(TEP_LOG_NONE);
	if (long_size != 4 && long_size != 8) {
		PyErr_Format(PyExc_ValueError, "long_size is 4 or 8, not %d", long_size);
		return -1;
	}
	if (load_metadata(self, path, meta, cpus, long_size, big_endian))
		return -1;

	int n = tep_get_events_count(self->meta.tep);
	/* NULL only when libtraceevent cannot allocate its sorted list. */
	struct tep_event **events = n <= 0 || km_fault() ? NULL :
				    tep_list_events(self->meta.tep, TEP_EVENT_SORT_ID);
	if (n > 0 && !events) {
		PyErr_Format(DecoderMemoryError, "%s: out of memory listing the event formats", path);
		return -1;
	}
	self->meta.max_id = 0;
	for (int i = 0; i < n; i++) {
		if (events[i]->id > MAX_EVENT_ID) {
			PyErr_Format(TraceFileError, "%s: corrupt event format: %s:%s has id %d, "
				     "more than common_type can hold", path,
				     events[i]->system ? events[i]->system : "?",
				     events[i]->name ? events[i]->name : "?", events[i]->id);
			return -1;
		}
		if (events[i]->id > self->meta.max_id)
			self->meta.max_id = events[i]->id;
	}
	self->meta.plans = km_calloc(self->meta.max_id + 1, sizeof(*self->meta.plans));
	if (!self->meta.plans) {
		PyErr_Format(DecoderMemoryError, "%s: out of memory reading the event formats", path);
		return -1;
	}
	self->meta.type_offset = 0;
	self->meta.type_size = 2;
	self->meta.pid_offset = 4;
	bool common_seen = false;
	for (int i = 0; i < n; i++) {
		struct tep_event *ev = events[i];
		if (ev->id < 0)
			continue;
		/* Two formats with one id (a corrupt file): the last one wins. */
		plan_free(self->meta.plans[ev->id]);
		self->meta.plans[ev->id] = build_plan(ev);
		if (!self->meta.plans[ev->id]) {
			PyErr_Format(DecoderMemoryError, "%s: out of memory reading the event formats", path);
			return -1;
		}
		if (!common_seen) {
			struct tep_format_field *t = tep_find_common_field(ev, "common_type");
			struct tep_format_field *p = tep_find_common_field(ev, "common_pid");
			/* Records are checked against these before they are read. */
			if (t && p && valid_width(t->size) && t->offset >= 0 && t->offset < 64 &&
			    p->offset >= 0 && p->offset < 64) {
				self->meta.type_offset = t->offset;
				self->meta.type_size = t->size;
				self->meta.pid_offset = p->offset;
				common_seen = true;
			}
		}
	}

	self->meta.big_endian = tep_is_file_bigendian(self->meta.tep);
	self->meta.swap = self->meta.big_endian != tep_is_local_bigendian(self->meta.tep);
	int hps = tep_get_header_page_size(self->meta.tep);
	if (hps != 4 && hps != 8)
		hps = tep_get_long_size(self->meta.tep);
	self->meta.lsize = hps == 4 ? KBUFFER_LSIZE_4 : KBUFFER_LSIZE_8;
	self->meta.old_format = tep_is_old_format(self->meta.tep);

	/* Build tep's cmdline lookup table now, on this thread: its first use sorts
	 * it in place. The symbol table waits for the first stack (kallsyms.h). */
	tep_data_comm_from_pid(self->meta.tep, 0);
	self->ready = true;
	return 0;
}

/* Trace.events(): (id, system, name, [(column, arrow format)]) per event format. */
static PyObject *Trace_events(TraceObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!trace_ready(self))
		return NULL;
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	for (int id = 0; id <= self->meta.max_id; id++) {
		struct event_plan *p = self->meta.plans[id];
		if (!p)
			continue;
		PyObject *cols = PyList_New(p->ncols);
		if (!cols)
			goto fail;
		for (int i = 0; i < p->ncols; i++) {
			struct col_plan *c = &p->cols[i];
			PyObject *col = Py_BuildValue("(si)", c->name, (int)c->kind);
			if (!col) {
				Py_DECREF(cols);
				goto fail;
			}
			if (PyList_SetItem(cols, i, col)) {	/* steals col */
				Py_DECREF(cols);
				goto fail;
			}
		}
		PyObject *t = Py_BuildValue("(issO)", id, p->system, p->name, cols);
		Py_DECREF(cols);
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
		if (!val)
			return -1;
		PyObject *t = Py_BuildValue("(sssszOs)", ev->system, ev->name, fname ? fname : "",
					    kind, sym->str, val, sym->value);
		Py_DECREF(val);
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
static PyObject *Trace_print_flags(TraceObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!trace_ready(self))
		return NULL;
	int n = tep_get_events_count(self->meta.tep);
	struct tep_event **events = n <= 0 || km_fault() ? NULL :
				    tep_list_events(self->meta.tep, TEP_EVENT_SORT_ID);
	if (n > 0 && !events)
		return no_memory("listing the event formats");
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	for (int i = 0; i < n; i++) {
		if (collect_symbols(out, events[i], events[i]->print_fmt.args, 0)) {
			Py_DECREF(out);
			return NULL;
		}
	}
	return out;
}


/* ---------------------------------------------------------------- Stacks object */

/* The stacks table of one decode: every Decoder of the decode is given the
 * same Stacks, so that a stack has one id across the decoder threads. */
typedef struct {
	PyObject_HEAD
	struct stack_intern st;
	bool ready;		/* __init__ succeeded */
} StacksObject;

static int Stacks_init(StacksObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { NULL };
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
		return -1;
	if (self->ready) {
		PyErr_SetString(PyExc_RuntimeError, "Stacks is already initialised");
		return -1;
	}
	if (stack_intern_init(&self->st)) {
		PyErr_SetString(PyExc_RuntimeError, "cannot make the stack table's lock");
		return -1;
	}
	self->ready = true;
	return 0;
}

static void Stacks_dealloc(StacksObject *self)
{
	if (self->ready)
		stack_intern_release(&self->st);
	free_instance((PyObject *)self);
}

static PyObject *batches_to_python(struct batch *ready, int n, bool *failed);

/* Stacks.take() -> [(schema, array)]: the finished batches of the stacks table. */
static PyObject *Stacks_take(StacksObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!self->ready) {
		PyErr_SetString(PyExc_RuntimeError, "Stacks is not initialised");
		return NULL;
	}
	struct stack_intern *s = &self->st;
	pthread_mutex_lock(&s->lock);
	struct batch *ready = s->ready;
	int n = s->nready;
	bool failed = s->failed;
	s->ready = NULL;
	s->nready = s->capready = 0;
	pthread_mutex_unlock(&s->lock);
	if (failed) {
		for (int k = 0; k < n; k++)
			batch_release(&ready[k]);
		free(ready);
		return no_memory("building the stacks table");
	}
	bool lost = false;
	PyObject *out = batches_to_python(ready, n, &lost);
	free(ready);
	if (lost) {
		pthread_mutex_lock(&s->lock);
		/* rows were dropped: the table cannot be whole */
		__atomic_store_n(&s->failed, true, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&s->lock);
	}
	return out;
}

/* Stacks.finish() -> the last batches: the rows not yet in one, then all not taken. */
static PyObject *Stacks_finish(StacksObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!self->ready) {
		PyErr_SetString(PyExc_RuntimeError, "Stacks is not initialised");
		return NULL;
	}
	if (stack_intern_flush(&self->st))
		return no_memory("finishing the stacks table");
	return Stacks_take(self, NULL);
}

/* Stacks.count() -> stack ids given so far. */
static PyObject *Stacks_count(StacksObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!self->ready) {
		PyErr_SetString(PyExc_RuntimeError, "Stacks is not initialised");
		return NULL;
	}
	pthread_mutex_lock(&self->st.lock);
	long n = self->st.last_id;
	pthread_mutex_unlock(&self->st.lock);
	return PyLong_FromLong(n);
}

/* ---------------------------------------------------------------- Decoder object */

typedef struct {
	PyObject_HEAD
	TraceObject *trace;	/* keeps the shared metadata alive */
	StacksObject *stacks;	/* the decode's stacks table, shared with its other decoders */
	struct decoder dec;
	PyObject *lost;		/* list of (cpu, ts, missed) */
	bool ready;		/* __init__ succeeded */
	bool busy;		/* a call is decoding with the GIL released */
} DecoderObject;

/* May this call use the decoder? One call at a time: it is not thread-safe. */
static bool decoder_enter(DecoderObject *self)
{
	if (!self->ready) {
		PyErr_SetString(PyExc_RuntimeError, "Decoder is not initialised");
		return false;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "Decoder is in use by another thread");
		return false;
	}
	self->busy = true;
	return true;
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

/* Hand `n` batches to Python: (event_id, schema capsule, array capsule) each,
 * or (schema, array) for batches of the stacks table (event_id -1). Batches
 * not handed over are released and *failed set; the list is then NULL. */
static PyObject *batches_to_python(struct batch *ready, int n, bool *failed)
{
	PyObject *out = PyList_New(0);
	int i = 0;
	for (; out && i < n; i++) {
		struct batch *b = &ready[i];
		PyObject *id = PyLong_FromLong(b->event_id);
		PyObject *s = id ? PyCapsule_New(b->schema, "arrow_schema", capsule_schema_free) : NULL;
		if (s)
			b->schema = NULL;	/* the capsule owns it now */
		PyObject *a = s ? PyCapsule_New(b->array, "arrow_array", capsule_array_free) : NULL;
		if (a)
			b->array = NULL;
		PyObject *t = !a ? NULL : b->event_id < 0 ? PyTuple_Pack(2, s, a) :
			      PyTuple_Pack(3, id, s, a);
		Py_XDECREF(id);
		Py_XDECREF(s);
		Py_XDECREF(a);
		if (!t || PyList_Append(out, t)) {
			Py_XDECREF(t);
			break;
		}
		Py_DECREF(t);
	}
	if (i < n) {
		for (int k = i; k < n; k++)
			batch_release(&ready[k]);
		*failed = true;
		Py_CLEAR(out);
	}
	return out;
}

/* Move the finished batches to Python as (event_id, schema capsule, array capsule). */
static PyObject *take_ready(struct decoder *d)
{
	bool failed = false;
	PyObject *out = batches_to_python(d->ready, d->nready, &failed);
	if (failed)
		d->failed = true;	/* batches not handed over are dropped: the decoder cannot go on */
	d->nready = 0;
	return out;
}

static int add_lost(DecoderObject *self, struct lost_list *lost)
{
	for (int i = 0; i < lost->n; i++) {
		PyObject *t = Py_BuildValue("(iKL)", lost->marks[i].cpu, lost->marks[i].ts,
					    lost->marks[i].missed);
		if (!t || PyList_Append(self->lost, t)) {
			Py_XDECREF(t);
			return -1;
		}
		Py_DECREF(t);
	}
	return 0;
}

/* Decoder.decode(cpu, offset, length, chunks) -> list of finished batches. */
static PyObject *Decoder_decode(DecoderObject *self, PyObject *args)
{
	struct decoder *d = &self->dec;
	int cpu, chunks;
	long long offset, length;
	if (!PyArg_ParseTuple(args, "iLLi", &cpu, &offset, &length, &chunks))
		return NULL;
	if (offset < 0 || length < 0 || chunks < 0) {
		PyErr_SetString(PyExc_ValueError, "negative segment bounds");
		return NULL;
	}
	if (!decoder_enter(self))
		return NULL;
	struct lost_list lost = { 0 };
	int r;
	d->error[0] = 0;
	Py_BEGIN_ALLOW_THREADS
	r = decoder_segment(d, cpu, offset, length, chunks, &lost);
	Py_END_ALLOW_THREADS
	PyObject *out = NULL;
	if (r && !d->error[0])
		PyErr_Format(DecoderMemoryError, "out of memory decoding CPU %d's pages", cpu);
	else if (r)
		PyErr_SetString(TraceFileError, d->error);
	else if (add_lost(self, &lost))
		d->failed = true;
	else
		out = take_ready(d);
	free(lost.marks);
	self->busy = false;
	return out;
}

/* Decoder.finish() -> the partly filled batches of every event. */
static PyObject *Decoder_finish(DecoderObject *self, PyObject *Py_UNUSED(noargs))
{
	struct decoder *d = &self->dec;
	if (!decoder_enter(self))
		return NULL;
	int r;
	d->error[0] = 0;
	Py_BEGIN_ALLOW_THREADS
	r = decoder_flush(d);
	Py_END_ALLOW_THREADS
	PyObject *out = NULL;
	if (r && !d->error[0])
		no_memory("finishing the last batches");
	else if (r)
		PyErr_SetString(TraceFileError, d->error);
	else
		out = take_ready(d);
	self->busy = false;
	return out;
}

static PyObject *Decoder_stats(DecoderObject *self, PyObject *Py_UNUSED(noargs))
{
	struct decoder *d = &self->dec;
	if (!self->ready) {
		PyErr_SetString(PyExc_RuntimeError, "Decoder is not initialised");
		return NULL;
	}
	if (!d->events)
		return Py_BuildValue("{s:L,s:L,s:O,s:O,s:O}", "events", 0LL, "unknown_events",
				     (long long)d->unknown_events, "lost", self->lost, "min_ts", Py_None,
				     "max_ts", Py_None);
	return Py_BuildValue("{s:L,s:L,s:O,s:L,s:L}", "events", (long long)d->events,
			     "unknown_events", (long long)d->unknown_events, "lost", self->lost,
			     "min_ts", d->min_ts, "max_ts", d->max_ts);
}

static void Decoder_dealloc(DecoderObject *self)
{
	if (self->trace)
		decoder_release(&self->dec);
	Py_XDECREF(self->lost);
	Py_XDECREF(self->stacks);
	Py_XDECREF(self->trace);
	free_instance((PyObject *)self);
}

static int Decoder_init(DecoderObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "trace", "path", "page_size", "compression", "batch_rows",
				  "ts_offset", "event_ids", "stacks", NULL };
	struct decoder *d = &self->dec;
	PyObject *trace, *ids = Py_None, *stacks = Py_None;
	const char *path, *compression;
	int page_size;
	long long batch_rows = 65536, ts_offset = 0;
	if (self->trace) {
		PyErr_SetString(PyExc_RuntimeError, "Decoder is already initialised");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!sis|LLOO", kwlist, TraceType, &trace, &path,
					 &page_size, &compression, &batch_rows, &ts_offset, &ids,
					 &stacks))
		return -1;
	if (!trace_ready((TraceObject *)trace))
		return -1;
	if (stacks != Py_None && (!PyObject_TypeCheck(stacks, StacksType) ||
				  !((StacksObject *)stacks)->ready)) {
		PyErr_SetString(PyExc_TypeError, "stacks must be an initialised Stacks");
		return -1;
	}
	if (page_size < 64 || page_size > (1 << 24) || batch_rows < 1 || batch_rows > (1 << 30)) {
		PyErr_SetString(PyExc_ValueError, "bad page size or batch size");
		return -1;
	}
	if (!strcmp(compression, "") || !strcmp(compression, "none"))
		d->compression = COMPRESSION_NONE;
	else if (!strcmp(compression, "zstd"))
		d->compression = COMPRESSION_ZSTD;
	else if (!strcmp(compression, "zlib"))
		d->compression = COMPRESSION_ZLIB;
	else {
		PyErr_Format(TraceFileError, "%s: compression %s is not supported", path, compression);
		return -1;
	}
	TraceObject *t = (TraceObject *)trace;
	self->trace = (TraceObject *)Py_NewRef(trace);	/* from here on, dealloc releases `d` */
	d->fd = -1;
	d->page_size = page_size;
	d->batch_rows = batch_rows;
	d->ts_offset = ts_offset;
	if (ids != Py_None) {
		d->wanted = km_calloc(t->meta.max_id + 1, 1);
		if (!d->wanted) {
			no_memory("setting up a decoder");
			return -1;
		}
		PyObject *it = PyObject_GetIter(ids), *item;
		if (!it)
			return -1;
		while ((item = PyIter_Next(it))) {
			long id = PyLong_AsLong(item);
			Py_DECREF(item);
			if (id == -1 && PyErr_Occurred())
				break;
			if (id >= 0 && id <= t->meta.max_id)
				d->wanted[id] = 1;
		}
		Py_DECREF(it);
		if (PyErr_Occurred())
			return -1;
	}
	self->lost = PyList_New(0);
	if (!self->lost)
		return -1;
	/* A decoder on its own (no decode shares its stacks) gets a table of its own. */
	self->stacks = (StacksObject *)(stacks != Py_None ? Py_NewRef(stacks) :
					PyObject_CallNoArgs((PyObject *)StacksType));
	if (!self->stacks)
		return -1;
	d->stacks = &self->stacks->st;
	if (decoder_init(d, &t->meta)) {
		no_memory("setting up a decoder");
		return -1;
	}
	d->fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (d->fd < 0 || fstat(d->fd, &st)) {
		PyErr_Format(TraceFileError, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	d->file_size = st.st_size;
	self->ready = true;
	return 0;
}

/* The bytes of a bytes-like object: itself when it is bytes (a new reference), else a
 * copy through a memoryview (Py_buffer is not in the 3.10 limited API). */
static PyObject *as_bytes(PyObject *data)
{
	if (PyBytes_Check(data))
		return Py_NewRef(data);
	if (PyUnicode_Check(data)) {
		PyErr_SetString(PyExc_TypeError, "a bytes-like object is required, not 'str'");
		return NULL;
	}
	PyObject *view = PyMemoryView_FromObject(data);	/* TypeError unless bytes-like */
	PyObject *copy = view ? PyBytes_FromObject(view) : NULL;
	Py_XDECREF(view);
	return copy;
}

/* decompress(proto, data, size): inflate a compressed metadata section. */
static PyObject *mod_decompress(PyObject *Py_UNUSED(mod), PyObject *args)
{
	const char *proto;
	PyObject *data;
	Py_ssize_t out_len;
	if (!PyArg_ParseTuple(args, "sOn", &proto, &data, &out_len))
		return NULL;
	PyObject *in = as_bytes(data);
	if (!in)
		return NULL;
	if (out_len < 0 || out_len > (1LL << 31)) {
		Py_DECREF(in);
		PyErr_SetString(TraceFileError, "corrupt compressed section size");
		return NULL;
	}
	char *in_buf;
	Py_ssize_t in_len;
	PyObject *out = PyBytes_AsStringAndSize(in, &in_buf, &in_len) ? NULL :
			PyBytes_FromStringAndSize(NULL, out_len);
	char *out_buf = out ? PyBytes_AsString(out) : NULL;
	if (!out_buf) {
		Py_DECREF(in);
		Py_XDECREF(out);
		return NULL;
	}
	int ok;
	if (!strcmp(proto, "zstd")) {
		size_t r = ZSTD_decompress(out_buf, out_len, in_buf, in_len);
		ok = !ZSTD_isError(r) && (Py_ssize_t)r == out_len;
	} else if (!strcmp(proto, "zlib")) {
		uLongf got = out_len;
		ok = uncompress((Bytef *)out_buf, &got, (const Bytef *)in_buf, in_len) == Z_OK &&
		     (Py_ssize_t)got == out_len;
	} else {
		ok = 0;
	}
	Py_DECREF(in);
	if (!ok) {
		Py_DECREF(out);
		PyErr_Format(TraceFileError, "cannot decompress a %s section", proto);
		return NULL;
	}
	return out;
}

/* chunk_table(fd, pos, end, file_size, count, big_endian, page_size, max_usize)
 * -> (table, fault): the chunk headers of one compressed CPU section (chunks.h) as
 * native uint64 triples (pos, csize, usize), and None or (kind, index, pos, value)
 * naming the header that stopped the walk. layout.py words the errors. */
static PyObject *mod_chunk_table(PyObject *Py_UNUSED(mod), PyObject *args)
{
	struct chunk_walk w = { 0 };
	unsigned long long pos, end, file_size, max_usize;
	unsigned int count, page_size;
	int big_endian;
	if (!PyArg_ParseTuple(args, "iKKKIpIK", &w.fd, &pos, &end, &file_size, &count,
			      &big_endian, &page_size, &max_usize))
		return NULL;
	if (!page_size) {
		PyErr_SetString(PyExc_ValueError, "page_size must be positive");
		return NULL;
	}
	w.pos = pos;
	w.end = end;
	w.file_size = file_size;
	w.count = count;
	w.big_endian = big_endian;
	w.page_size = page_size;
	w.max_usize = max_usize;
	Py_BEGIN_ALLOW_THREADS
	chunk_walk(&w);
	Py_END_ALLOW_THREADS
	if (w.fault == CHUNK_NO_MEMORY) {
		free(w.entries);
		PyErr_SetString(DecoderMemoryError, "out of memory reading the chunk table");
		return NULL;
	}
	PyObject *table = PyBytes_FromStringAndSize((const char *)w.entries,
						    (Py_ssize_t)w.n * (Py_ssize_t)sizeof(*w.entries));
	free(w.entries);
	if (!table)
		return NULL;
	static const char *const kinds[] = {
		[CHUNK_HEADER_PAST_EOF] = "past_eof", [CHUNK_SHORT_READ] = "short_read",
		[CHUNK_PAST_SECTION] = "past_section", [CHUNK_BAD_USIZE] = "bad_usize",
	};
	if (w.fault == CHUNK_OK)
		return Py_BuildValue("(NO)", table, Py_None);
	return Py_BuildValue("(N(sIKK))", table, kinds[w.fault], w.n,
			     (unsigned long long)w.fault_pos, (unsigned long long)w.fault_value);
}

/* kill_with_parent(): the kernel sends this process SIGKILL when its parent dies
 * (PR_SET_PDEATHSIG): the parse's decoder child ends with the command. */
static PyObject *mod_kill_with_parent(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(noargs))
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0))
		return PyErr_SetFromErrno(PyExc_OSError);
	Py_RETURN_NONE;
}

/* Trace._kallsyms_waiting(): is the kept kallsyms text still unindexed (kallsyms.h)? For tests. */
static PyObject *Trace_kallsyms_waiting(TraceObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!trace_ready(self))
		return NULL;
	pthread_mutex_lock(&self->meta.lookup_lock);
	bool waiting = self->meta.ksyms.text && !self->meta.ksyms.indexed;
	pthread_mutex_unlock(&self->meta.lookup_lock);
	return PyBool_FromLong(waiting);
}

/* Trace._resolve(addresses, reference=False) -> ["function+0xoffset" or None]: the
 * decoder's symbol for each address, or with reference libtraceevent's own parse
 * and lookup of the same text. A test hook (kallsyms.h). */
static PyObject *Trace_resolve(TraceObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "addresses", "reference", NULL };
	PyObject *addrs;
	int reference = 0;
	if (!trace_ready(self) ||
	    !PyArg_ParseTupleAndKeywords(args, kwds, "O|p", kwlist, &addrs, &reference))
		return NULL;
	PyObject *seq = PySequence_Fast(addrs, "addresses must be a sequence");
	if (!seq)
		return NULL;
	Py_ssize_t n = fast_size(seq);
	PyObject *out = n < 0 ? NULL : PyList_New(n);
	struct trace_meta *m = &self->meta;
	pthread_mutex_lock(&m->lookup_lock);
	if (out && reference && m->ksyms.text && !self->reference_symbols) {
		tep_parse_kallsyms(m->tep, m->ksyms.text);
		self->reference_symbols = true;
	}
	for (Py_ssize_t i = 0; out && i < n; i++) {
		PyObject *addr = fast_item(seq, i);
		unsigned long long a = addr ? PyLong_AsUnsignedLongLong(addr) : (unsigned long long)-1;
		if (a == (unsigned long long)-1 && PyErr_Occurred()) {
			Py_CLEAR(out);
			break;
		}
		char sym[512];
		int found = trace_symbol(m, a, reference, sym, sizeof(sym));
		if (found < 0) {
			Py_CLEAR(out);
			no_memory("indexing kallsyms");
			break;
		}
		PyObject *item = found ? PyUnicode_DecodeUTF8(sym, strlen(sym), "replace")
				       : Py_NewRef(Py_None);
		if (!item) {
			Py_CLEAR(out);
			break;
		}
		if (PyList_SetItem(out, i, item)) {	/* steals item */
			Py_CLEAR(out);
			break;
		}
	}
	pthread_mutex_unlock(&m->lookup_lock);
	Py_DECREF(seq);
	return out;
}

static PyMethodDef Trace_methods[] = {
	{ "events", (PyCFunction)Trace_events, METH_NOARGS, "Event formats and their columns." },
	{ "print_flags", (PyCFunction)Trace_print_flags, METH_NOARGS,
	  "Rows of every __print_flags/__print_symbolic table in the formats." },
	{ "_resolve", (PyCFunction)(void (*)(void))Trace_resolve, METH_VARARGS | METH_KEYWORDS,
	  "_resolve(addresses, reference=False): symbols, the decoder's or libtraceevent's (a test hook)" },
	{ "_kallsyms_waiting", (PyCFunction)Trace_kallsyms_waiting, METH_NOARGS,
	  "Is the file's kallsyms text kept unindexed until a stack needs it? (a test hook)" },
	{ NULL, NULL, 0, NULL }
};

static PyMethodDef Stacks_methods[] = {
	{ "take", (PyCFunction)Stacks_take, METH_NOARGS,
	  "take() -> [(schema, array)]: finished batches of the stacks table" },
	{ "finish", (PyCFunction)Stacks_finish, METH_NOARGS,
	  "finish() -> [(schema, array)]: the remaining rows and every batch not taken" },
	{ "count", (PyCFunction)Stacks_count, METH_NOARGS, "count() -> stack ids given so far" },
	{ NULL, NULL, 0, NULL }
};

static PyType_Slot Stacks_slots[] = {
	{ Py_tp_doc, (void *)"The stacks table of one decode, shared by its Decoders: stack_id, frames, "
			      "addresses per distinct kernel stack." },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_init, Stacks_init },
	{ Py_tp_dealloc, Stacks_dealloc },
	{ Py_tp_methods, Stacks_methods },
	{ 0, NULL }
};

static PyType_Spec Stacks_spec = {
	.name = "kmemscope.parsers._tracedat.Stacks",
	.basicsize = sizeof(StacksObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Stacks_slots,
};

static PyType_Slot Trace_slots[] = {
	{ Py_tp_doc, (void *)"A trace.dat's event formats and symbols, given to libtraceevent: "
			      "Trace(path, metadata, cpus, long_size, big_endian)." },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_init, Trace_init },
	{ Py_tp_dealloc, Trace_dealloc },
	{ Py_tp_methods, Trace_methods },
	{ 0, NULL }
};

static PyType_Spec Trace_spec = {
	.name = "kmemscope.parsers._tracedat.Trace",
	.basicsize = sizeof(TraceObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Trace_slots,
};

static PyMethodDef Decoder_methods[] = {
	{ "decode", (PyCFunction)Decoder_decode, METH_VARARGS,
	  "decode(cpu, offset, length, chunks) -> [(event_id, schema, array)]" },
	{ "finish", (PyCFunction)Decoder_finish, METH_NOARGS, "Flush partly filled batches." },
	{ "stats", (PyCFunction)Decoder_stats, METH_NOARGS, "Counts and lost-event markers." },
	{ NULL, NULL, 0, NULL }
};

static PyType_Slot Decoder_slots[] = {
	{ Py_tp_doc, (void *)"Decodes segments of one trace.dat's ring-buffer pages into Arrow batches." },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_init, Decoder_init },
	{ Py_tp_dealloc, Decoder_dealloc },
	{ Py_tp_methods, Decoder_methods },
	{ 0, NULL }
};

static PyType_Spec Decoder_spec = {
	.name = "kmemscope.parsers._tracedat.Decoder",
	.basicsize = sizeof(DecoderObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Decoder_slots,
};

/* _alloc_fault(at, persistent=False) -> allocations counted since the last call.
 * A test hook (alloc.h): at > 0 makes the at-th allocation from now fail (and
 * every later one when persistent); at < 0 only counts; 0 turns it off. */
static PyObject *mod_alloc_fault(PyObject *Py_UNUSED(mod), PyObject *args)
{
	long at;
	int persistent = 0;
	if (!PyArg_ParseTuple(args, "l|p", &at, &persistent))
		return NULL;
	return PyLong_FromLong(km_fault_arm(at, persistent));
}

/* _kbuffer_walk(on) -> the setting before: Decoders made while on walk pages with
 * libtraceevent's kbuffer calls instead of the decoder's own walk (a test hook). */
static PyObject *mod_kbuffer_walk(PyObject *Py_UNUSED(mod), PyObject *args)
{
	int on;
	if (!PyArg_ParseTuple(args, "p", &on))
		return NULL;
	bool before = decoder_kbuffer_walk;
	decoder_kbuffer_walk = on;
	return PyBool_FromLong(before);
}

/* KMEMSCOPE_FAIL_ALLOC=N or N+ arms the hook for a whole process (a test of
 * the command line); anything else leaves it off. */
static void arm_from_environment(void)
{
	const char *v = getenv("KMEMSCOPE_FAIL_ALLOC");
	if (!v || !*v)
		return;
	char *end;
	errno = 0;
	long at = strtol(v, &end, 10);
	bool persistent = *end == '+';
	if (!errno && at > 0 && end != v && (!*end || (persistent && !end[1])))
		km_fault_arm(at, persistent);
}

static PyMethodDef module_methods[] = {
	{ "decompress", mod_decompress, METH_VARARGS, "decompress(proto, data, size) -> bytes" },
	{ "kill_with_parent", mod_kill_with_parent, METH_NOARGS,
	  "kill_with_parent(): SIGKILL this process when its parent dies" },
	{ "chunk_table", mod_chunk_table, METH_VARARGS,
	  "chunk_table(fd, pos, end, file_size, count, big_endian, page_size, max_usize) -> "
	  "(table, fault)" },
	{ "_kbuffer_walk", mod_kbuffer_walk, METH_VARARGS,
	  "_kbuffer_walk(on) -> bool: test hook, walk pages with libtraceevent's kbuffer" },
	{ "_alloc_fault", mod_alloc_fault, METH_VARARGS,
	  "_alloc_fault(at, persistent=False) -> int: test hook, fail the at-th allocation" },
	{ NULL, NULL, 0, NULL }
};

static struct PyModuleDef module = {
	.m_base = PyModuleDef_HEAD_INIT,
	.m_name = "_tracedat",
	.m_doc = "kmemscope's native trace.dat decoder.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__tracedat(void)
{
	if ((!TraceType && !(TraceType = (PyTypeObject *)PyType_FromSpec(&Trace_spec))) ||
	    (!DecoderType && !(DecoderType = (PyTypeObject *)PyType_FromSpec(&Decoder_spec))) ||
	    (!StacksType && !(StacksType = (PyTypeObject *)PyType_FromSpec(&Stacks_spec))))
		return NULL;
	/* Batch buffers are a few MB, handed to Arrow and freed batch after batch.
	 * Keep such blocks on the heap instead of fresh mmaps so their pages are
	 * reused rather than faulted in (and zeroed by the kernel) every time. */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	arm_from_environment();
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	TraceFileError = PyErr_NewException("kmemscope.parsers._tracedat.TraceFileError", NULL, NULL);
	PyObject *bases = TraceFileError ? PyTuple_Pack(2, TraceFileError, PyExc_MemoryError) : NULL;
	DecoderMemoryError = bases ? PyErr_NewException("kmemscope.parsers._tracedat.DecoderMemoryError",
							bases, NULL) : NULL;
	Py_XDECREF(bases);
	if (!DecoderMemoryError || PyModule_AddObjectRef(m, "TraceFileError", TraceFileError) ||
	    PyModule_AddObjectRef(m, "DecoderMemoryError", DecoderMemoryError) ||
	    PyModule_AddObjectRef(m, "Trace", (PyObject *)TraceType) ||
	    PyModule_AddObjectRef(m, "Decoder", (PyObject *)DecoderType) ||
	    PyModule_AddObjectRef(m, "Stacks", (PyObject *)StacksType)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}

