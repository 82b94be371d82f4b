// SPDX-License-Identifier: GPL-2.0
/*
 * _tracedat: kmemscope's native trace.dat decoder.
 *
 * libtracecmd opens the file and parses its metadata (event formats, cmdlines;
 * the kallsyms text is kept and indexed only if a kernel stack needs it).
 * Pages are read (and, for v7 files, decompressed) and walked here rather than
 * through libtracecmd, so that several threads can decode segments of one file
 * at once without sharing any libtracecmd state: libtracecmd decodes on one
 * thread only.
 *
 * Decoded events land in per-event column builders and leave as Arrow record
 * batches through the Arrow C data interface (PyCapsules), so pyarrow takes
 * the memory without a copy. The GIL is released while pages are decoded.
 *
 * This file is the Python face of it (the Trace and Decoder types). The work
 * is in native/: plan.c (formats -> columns), decoder.c (pages -> column
 * builders -> batches), kallsyms.c (symbols for stacks), arrow_c.c (the C data
 * interface), gbuf.h (buffers).
 */
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
#include <trace-cmd.h>

#include "chunks.h"
#include "decoder.h"

/* Exported by libtracecmd 1.x but declared only in its private header. */
const char *tracecmd_get_uname(struct tracecmd_input *handle);
const char *tracecmd_get_trace_clock(struct tracecmd_input *handle);
int tracecmd_blk_hack(struct tracecmd_input *handle);

/* ---------------------------------------------------------------- Trace object */

typedef struct {
	PyObject_HEAD
	struct tracecmd_input *handle;
	struct trace_meta meta;
	bool ready;		/* __init__ succeeded: the methods may use handle and meta */
	bool reference_symbols;	/* _resolve gave tep the kallsyms text (tests only) */
} TraceObject;

static PyObject *TraceFileError;
/* Raised when the decoder's own memory runs out: a MemoryError, and a
 * TraceFileError so that callers that report file errors cleanly report it too. */
static PyObject *DecoderMemoryError;

/* common_type is an unsigned short in every kernel: no record names a larger id. */
#define MAX_EVENT_ID 0xffff

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
	if (self->handle)
		tracecmd_close(self->handle);
	ksyms_release(&self->meta.ksyms);
	pthread_mutex_destroy(&self->meta.lookup_lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Trace_init(TraceObject *self, PyObject *args, PyObject *kwds)
{
	const char *path;
	static char *kwlist[] = { "path", NULL };
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "s", kwlist, &path))
		return -1;
	if (self->handle) {
		PyErr_SetString(PyExc_RuntimeError, "Trace is already initialised");
		return -1;
	}
	pthread_mutex_init(&self->meta.lookup_lock, NULL);

	tracecmd_set_loglevel(TEP_LOG_NONE);
	tep_set_loglevel(TEP_LOG_NONE);
	int err, kept;
	Py_BEGIN_ALLOW_THREADS
	errno = 0;
	kallsyms_keep_begin(&self->meta.ksyms);	/* indexed when a stack needs it */
	/* The headers only: the decoder reads the CPU data itself (decoder.c), so
	 * libtracecmd's own set-up of it (a read and an lseek per compressed chunk,
	 * tens of thousands on a large trace, the first chunk inflated, the first
	 * pages mapped) is skipped, and none of its crashes on corrupt CPU tables can
	 * happen. layout.py reads what the set-up would add (a v6 file's trace clock);
	 * libtracecmd's guessed ftrace:blktrace format is added here, as trace-cmd
	 * report lists it. */
	self->handle = tracecmd_open_head(path, TRACECMD_FL_LOAD_NO_PLUGINS);
	if (self->handle)
		tracecmd_blk_hack(self->handle);
	err = errno;
	kept = kallsyms_keep_end();
	Py_END_ALLOW_THREADS
	if (!self->handle || kept < 0) {
		if (err == ENOMEM || kept < 0)
			PyErr_Format(DecoderMemoryError, "%s: out of memory reading the file's metadata",
				     path);
		else
			PyErr_Format(TraceFileError, "%s: libtracecmd cannot read the file's metadata "
				     "(truncated or corrupt)", path);
		return -1;
	}
	self->meta.tep = tracecmd_get_tep(self->handle);
	if (!self->meta.tep) {
		PyErr_Format(TraceFileError, "%s: no event formats in the file", path);
		return -1;
	}

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

static PyObject *maybe_str(const char *s)
{
	if (!s)
		Py_RETURN_NONE;
	return PyUnicode_DecodeUTF8(s, strlen(s), "replace");
}

/* Trace.info(): what the file says about where and how it was recorded. */
static PyObject *Trace_info(TraceObject *self, PyObject *Py_UNUSED(noargs))
{
	if (!trace_ready(self))
		return NULL;
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
	PyObject *uname = maybe_str(tracecmd_get_uname(self->handle));
	PyObject *clock = uname ? maybe_str(tracecmd_get_trace_clock(self->handle)) : NULL;
	PyObject *out = NULL;
	if (clock)
		out = Py_BuildValue("{s:O,s:O,s:i,s:i,s:i,s:O,s:O}",
				    "uname", uname, "trace_clock", clock,
				    "cpus", tep_get_cpus(self->meta.tep),
				    "long_size", tep_get_long_size(self->meta.tep),
				    "page_size", tep_get_page_size(self->meta.tep),
				    "big_endian", tep_is_file_bigendian(self->meta.tep) ? Py_True : Py_False,
				    "instances", inst);
	Py_XDECREF(uname);
	Py_XDECREF(clock);
	Py_DECREF(inst);
	return out;
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
			PyList_SET_ITEM(cols, i, col);
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

static PyTypeObject StacksType;

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
	Py_TYPE(self)->tp_free((PyObject *)self);
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
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject TraceType;

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
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!sis|LLOO", kwlist, &TraceType, &trace, &path,
					 &page_size, &compression, &batch_rows, &ts_offset, &ids,
					 &stacks))
		return -1;
	if (!trace_ready((TraceObject *)trace))
		return -1;
	if (stacks != Py_None && (!PyObject_TypeCheck(stacks, &StacksType) ||
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
					PyObject_CallNoArgs((PyObject *)&StacksType));
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

/* decompress(proto, data, size): inflate a compressed metadata section. */
static PyObject *mod_decompress(PyObject *Py_UNUSED(mod), PyObject *args)
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
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	PyObject *out = PyList_New(n);
	struct trace_meta *m = &self->meta;
	pthread_mutex_lock(&m->lookup_lock);
	if (out && reference && m->ksyms.text && !self->reference_symbols) {
		kallsyms_libtraceevent_parse(m->tep, m->ksyms.text);
		self->reference_symbols = true;
	}
	for (Py_ssize_t i = 0; out && i < n; i++) {
		unsigned long long a = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
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
		PyList_SET_ITEM(out, i, item);
	}
	pthread_mutex_unlock(&m->lookup_lock);
	Py_DECREF(seq);
	return out;
}

static PyMethodDef Trace_methods[] = {
	{ "info", (PyCFunction)Trace_info, METH_NOARGS, "What the file says about its recording." },
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

static PyTypeObject StacksType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kmemscope.parsers._tracedat.Stacks",
	.tp_basicsize = sizeof(StacksObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The stacks table of one decode, shared by its Decoders: stack_id, frames, "
		  "addresses per distinct kernel stack.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Stacks_init,
	.tp_dealloc = (destructor)Stacks_dealloc,
	.tp_methods = Stacks_methods,
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
	{ NULL, NULL, 0, NULL }
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
	if (PyType_Ready(&TraceType) < 0 || PyType_Ready(&DecoderType) < 0 ||
	    PyType_Ready(&StacksType) < 0)
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
	    PyModule_AddObjectRef(m, "Trace", (PyObject *)&TraceType) ||
	    PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) ||
	    PyModule_AddObjectRef(m, "Stacks", (PyObject *)&StacksType)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}

