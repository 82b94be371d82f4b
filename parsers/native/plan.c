// SPDX-License-Identifier: GPL-2.0
/* Event plans: the columns of each event's table, from its recorded format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		char *name = strdup(buf);
		if (!name)
			return -1;
		free(p->cols[i].name);
		p->cols[i].name = name;
	}
	return 0;
}

struct event_plan *build_plan(struct tep_event *ev)
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
			c.width = f->elementsize ? (int)f->elementsize : f->size;
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
	if (dedupe_columns(p))
		goto fail;
	return p;

fail_fields:
	free(common);
fail:
	plan_free(p);
	return NULL;
}

