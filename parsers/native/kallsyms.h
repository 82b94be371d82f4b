/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A trace's kallsyms: kept as text by the open, indexed when the first kernel
 * stack needs a symbol.
 *
 * libtracecmd hands the file's kallsyms text to libtraceevent's
 * tep_parse_kallsyms() inside tracecmd_open(), for every file: sscanf over
 * ~120,000-200,000 lines, three allocations a symbol, a sort; 60-70 ms on a 6.x
 * kernel, although kmemscope looks symbols up only to name kernel stack frames.
 * kallsyms.c defines tep_parse_kallsyms() itself: the extension's own
 * definitions come first in the lookup scope of the libraries it loads, so
 * libtracecmd's call lands there. During an open between kallsyms_keep_begin()
 * and kallsyms_keep_end() on this thread the text is kept instead; any other call
 * goes on to libtraceevent. ksyms_index() then indexes the text in one pass (no
 * allocation a symbol) and ksyms_find() answers as tep_find_function() would
 * have: the same lines kept and skipped, the same choice among symbols that
 * share an address.
 */
#ifndef KMEMSCOPE_KALLSYMS_H
#define KMEMSCOPE_KALLSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event-parse.h>

struct ksym {
	uint64_t addr;
	uint32_t name;		/* offset of the name in the text */
	uint32_t len;		/* its length (names are not NUL-terminated) */
	uint32_t line;		/* the line's place in the text, for libtraceevent's order */
};

struct ksyms {
	char *text;		/* the file's kallsyms, kept by the open; NULL: none kept */
	struct ksym *syms;	/* sorted as libtraceevent sorts its function map */
	size_t n;
	bool indexed;
};

/* Keep the kallsyms text of the opens on this thread from now on in k->text
 * (NULL if none); kallsyms_keep_end() stops, and returns -1 if memory for the
 * copy ran out (the symbols are then missing: the open must fail). */
void kallsyms_keep_begin(struct ksyms *k);
int kallsyms_keep_end(void);

/* Index the kept text, once. Returns 0, or -1 when memory ran out. The caller
 * serialises calls for one struct ksyms. */
int ksyms_index(struct ksyms *k);

/* The symbol whose function holds addr, or NULL; k must be indexed. */
const struct ksym *ksyms_find(const struct ksyms *k, uint64_t addr);

void ksyms_release(struct ksyms *k);

/* libtraceevent's own tep_parse_kallsyms(): the reference the tests compare with. */
int kallsyms_libtraceevent_parse(struct tep_handle *tep, const char *text);

#endif
