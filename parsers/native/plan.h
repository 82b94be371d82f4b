/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Event plans: how each field of an event's recorded format becomes an Arrow
 * column. Built once per file from libtraceevent's parsed formats, then read
 * (never written) by every decoder thread.
 */
#ifndef KMEMSCOPE_PLAN_H
#define KMEMSCOPE_PLAN_H

#include <stdbool.h>

#include <event-parse.h>


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
	COL_STACKSYM,	/* stack addresses resolved through kallsyms (the stacks table's frames) */
	COL_STACKID,	/* kernel_stack's caller[] as the int32 id of its row in the stacks table */
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
	int count_offset;	/* COL_STACK, COL_STACKID: the `size` field holding the depth, or -1 */
	int count_width;
};

struct event_plan {
	int id;
	char *system;
	char *name;
	int ncols;
	struct col_plan *cols;
	int min_size;		/* bytes every record of this event must have */
	bool ints_only;		/* ts, cpu, pid, comm, then integer fields only */
};

const char *int_format(int width, bool is_signed);
bool valid_width(int w);
struct event_plan *build_plan(struct tep_event *ev);
void plan_free(struct event_plan *p);

#endif
