/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A trace's kallsyms, parsed only when a kernel stack needs a symbol.
 *
 * libtracecmd parses the file's kallsyms text (sscanf over ~200,000 lines, then
 * a sort: about 60 ms on a 6.x kernel) inside tracecmd_open(), for every file,
 * although kmemscope looks symbols up only to name the frames of kernel stacks.
 * kallsyms.c defines tep_parse_kallsyms() itself: the extension's own
 * definitions come first in the lookup scope of the libraries it loads, so
 * libtracecmd's call lands there. While an open made between
 * kallsyms_keep_begin() and kallsyms_keep_end() runs on this thread, the text is
 * kept instead of parsed; kallsyms_load() parses it with libtraceevent's own
 * function on first use. Every other call goes straight to libtraceevent.
 */
#ifndef KMEMSCOPE_KALLSYMS_H
#define KMEMSCOPE_KALLSYMS_H

#include <event-parse.h>

/* Keep the kallsyms text of the opens on this thread from now on in *slot (NULL
 * if none); kallsyms_keep_end() stops, and returns -1 if memory for the copy ran
 * out (the symbols are then missing: the open must fail). */
void kallsyms_keep_begin(char **slot);
int kallsyms_keep_end(void);

/* Parse the text kept in *slot into tep's symbol table, once, and free it.
 * Returns 0, or -1 when libtraceevent ran out of memory part way. The caller
 * serialises calls for one tep (tep is not thread-safe). */
int kallsyms_load(struct tep_handle *tep, char **slot);

#endif
