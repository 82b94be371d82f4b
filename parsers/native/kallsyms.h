/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A trace's kallsyms: kept as text by the open, indexed when the first kernel
 * stack needs a symbol.
 *
 * libtraceevent's tep_parse_kallsyms() reads the text with sscanf, line by line
 * (~120,000-200,000 lines on a 6.x kernel), three allocations a symbol and a sort:
 * 60-70 ms for every file, although kmemscope looks symbols up only to name
 * kernel stack frames. So the open (layout.py reads the text from the file) only
 * keeps it; ksyms_index() indexes it in one pass (no allocation a symbol) at the
 * first stack, and ksyms_find() answers as tep_find_function() would have: the
 * same lines kept and skipped, the same choice among symbols that share an address.
 */
#ifndef KMEMSCOPE_KALLSYMS_H
#define KMEMSCOPE_KALLSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


struct ksym {
	uint64_t addr;
	uint32_t name;		/* offset of the name in the text */
	uint32_t len;		/* its length (names are not NUL-terminated) */
	uint32_t line;		/* the line's place in the text, for libtraceevent's order */
};

struct ksyms {
	char *text;		/* the file's kallsyms (NUL-terminated), kept by the open; NULL: none */
	struct ksym *syms;	/* sorted as libtraceevent sorts its function map */
	size_t n;
	bool indexed;
};

/* Index the kept text, once. Returns 0, or -1 when memory ran out. The caller
 * serialises calls for one struct ksyms. */
int ksyms_index(struct ksyms *k);

/* The symbol whose function holds addr, or NULL; k must be indexed. */
const struct ksym *ksyms_find(const struct ksyms *k, uint64_t addr);

void ksyms_release(struct ksyms *k);

#endif
