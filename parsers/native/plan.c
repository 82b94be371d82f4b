// SPDX-License-Identifier: GPL-2.0
/* Event plans: the columns of each event's table, from its recorded format. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "plan.h"

const char *int_format(int width, bool is_signed)
{
	switch (width) {
	case 1: return is_signed ? "c" : "C";
	case 2: return is_signed ? "s" : "S";
	case 4: return is_signed ? "i" : "I";
	default: return is_signed ? "l" : "L";
	}
}

bool valid_width(int w)
{
	return w == 1 || w == 2 || w == 4 || w == 8;
}

void plan_free(struct event_plan *p)
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
		struct col_plan *c = km_realloc(p->cols, ncap * sizeof(*c));
		if (!c)
			return -1;
		p->cols = c;
		*cap = ncap;
	}
	col.name = km_strdup(col.name);
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
/* A char array is a string; any other array is a list of integers of its
 * element size, or raw bytes when that size is not 1, 2, 4 or 8. */
static void array_plan(struct col_plan *c, struct tep_format_field *f, enum col_kind string_kind,
		       enum col_kind list_kind)
{
	if (f->flags & TEP_FIELD_IS_STRING) {
		c->kind = string_kind;
		return;
	}
	c->kind = list_kind;
	c->width = f->elementsize;
	if (!valid_width(c->width))
		c->kind = COL_BIN;
}

static struct col_plan field_plan(struct tep_format_field *f)
{
	struct col_plan c = { .name = f->name, .offset = f->offset, .size = f->size,
			      .count_offset = -1 };
	unsigned long fl = f->flags;
	c.is_signed = fl & TEP_FIELD_IS_SIGNED;
	if (fl & TEP_FIELD_IS_DYNAMIC) {
		c.relative = fl & TEP_FIELD_IS_RELATIVE;
		array_plan(&c, f, COL_DYNSTR, COL_DYNARR);
	} else if (f->size == 0 && !(fl & TEP_FIELD_IS_ARRAY)) {
		/* Older kernels declare print's trailing buffer as `char buf;` of size 0. */
		c.flexible = true;
		c.kind = f->type && strstr(f->type, "char") ? COL_STR : COL_BIN;
	} else if (fl & TEP_FIELD_IS_ARRAY) {
		/* ftrace's print and bprint end in `char buf[]` / `u32 buf[]`: size 0 in
		 * the format, filled up to the end of the record. */
		c.flexible = f->size == 0 || f->arraylen == 0;
		array_plan(&c, f, COL_STR, COL_ARR);
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
		char *name = km_strdup(buf);
		if (!name)
			return -1;
		free(p->cols[i].name);
		p->cols[i].name = name;
	}
	return 0;
}

/* Records must hold every fixed field: min_size grows to each field's end.
 * Offsets and sizes come from the file, so add them without overflow; a field
 * beyond any record's reach makes every record of the event corrupt. */
static void need_bytes(struct event_plan *p, long long offset, long long size)
{
	long long end = offset < 0 || size < 0 ? INT_MAX : offset + size;
	if (end > INT_MAX)
		end = INT_MAX;
	if (end > p->min_size)
		p->min_size = (int)end;
}

/* The columns every table starts with: ts, cpu, pid, comm. */
static int plan_fixed_columns(struct event_plan *p, int *cap)
{
	static const struct col_plan fixed[] = {
		{ .name = "ts", .kind = COL_TS, .count_offset = -1 },
		{ .name = "cpu", .kind = COL_CPU, .count_offset = -1 },
		{ .name = "pid", .kind = COL_PID, .count_offset = -1 },
		{ .name = "comm", .kind = COL_COMM, .count_offset = -1 },
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (plan_add(p, cap, fixed[i]))
			return -1;
	return 0;
}

/* Common fields other than type and pid (flags, preempt count, and whatever
 * else an older or newer kernel records) keep their own names. The list is
 * NULL only when libtraceevent ran out of memory. */
static int plan_common_fields(struct event_plan *p, int *cap, struct tep_event *ev)
{
	struct tep_format_field **common = km_fault() ? NULL : tep_event_common_fields(ev);
	int r = common ? 0 : -1;
	for (int i = 0; !r && common[i]; i++) {
		struct tep_format_field *f = common[i];
		if (!strcmp(f->name, "common_type") || !strcmp(f->name, "common_pid"))
			continue;
		r = plan_add(p, cap, field_plan(f));
		if (!r)
			need_bytes(p, f->offset, f->size);
	}
	free(common);
	return r;
}

/* A stack event's caller: the format declares caller[8]; the kernel writes as
 * many entries as the stack had, and the `size` field (depth) says how many.
 * user_stack keeps its addresses; kernel_stack's become a stack_id, the row of
 * the run's stacks table that holds them and their symbols. */
static int plan_stack_field(struct event_plan *p, int *cap, struct tep_event *ev,
			    struct tep_format_field *f, struct tep_format_field *depth)
{
	struct col_plan c = field_plan(f);
	c.kind = COL_STACK;
	c.width = f->elementsize ? (int)f->elementsize : f->size;
	if (!valid_width(c.width) || c.width < 4)
		c.width = 8;
	if (depth && valid_width(depth->size)) {
		c.count_offset = depth->offset;
		c.count_width = depth->size;
	}
	if (!strcmp(ev->name, "kernel_stack")) {
		c.kind = COL_STACKID;
		c.name = "stack_id";
	}
	if (plan_add(p, cap, c))
		return -1;
	need_bytes(p, f->offset, 0);
	return 0;
}

/* The event's own fields, in the order of its recorded format. The list is
 * NULL only when libtraceevent ran out of memory. */
static int plan_event_fields(struct event_plan *p, int *cap, struct tep_event *ev)
{
	struct tep_format_field **fields = km_fault() ? NULL : tep_event_fields(ev);
	if (!fields)
		return -1;
	bool stack = is_stack_event(ev);
	struct tep_format_field *depth = stack ? tep_find_field(ev, "size") : NULL;
	int r = 0;
	for (int i = 0; !r && fields[i]; i++) {
		struct tep_format_field *f = fields[i];
		if (stack && !strcmp(f->name, "caller")) {
			r = plan_stack_field(p, cap, ev, f, depth);
			continue;
		}
		r = plan_add(p, cap, field_plan(f));
		if (!r)
			need_bytes(p, f->offset, (f->flags & TEP_FIELD_IS_DYNAMIC) ? 4 : f->size);
	}
	free(fields);
	return r;
}

/**
 * build_plan - the columns of an event's table, from its recorded format
 * @ev: the event, as libtraceevent parsed its format from the trace
 *
 * Returns a plan the caller releases with plan_free(), or NULL when memory ran
 * out (nothing is left allocated then).
 */
struct event_plan *build_plan(struct tep_event *ev)
{
	struct event_plan *p = km_calloc(1, sizeof(*p));
	int cap = 0;
	if (!p)
		return NULL;
	p->id = ev->id;
	p->system = km_strdup(ev->system ? ev->system : "");
	p->name = km_strdup(ev->name ? ev->name : "");
	if (!p->system || !p->name || plan_fixed_columns(p, &cap) ||
	    plan_common_fields(p, &cap, ev) || plan_event_fields(p, &cap, ev) ||
	    dedupe_columns(p)) {
		plan_free(p);
		return NULL;
	}
	p->ints_only = true;
	for (int i = 4; i < p->ncols; i++)
		p->ints_only &= p->cols[i].kind == COL_INT;
	return p;
}
