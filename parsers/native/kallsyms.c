// SPDX-License-Identifier: GPL-2.0
/* A trace's kallsyms, parsed only when a kernel stack needs a symbol (kallsyms.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "alloc.h"
#include "kallsyms.h"

typedef int (*parse_kallsyms_fn)(struct tep_handle *tep, const char *text);

static parse_kallsyms_fn libtraceevent_parse;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* Where the open running on this thread keeps its text; NULL: no such open. */
static __thread char **keep_slot;
static __thread bool keep_failed;	/* the text could not be copied */

static void resolve(void)
{
	/* The next definition after this library's own: libtraceevent's. */
	libtraceevent_parse = (parse_kallsyms_fn)dlsym(RTLD_NEXT, "tep_parse_kallsyms");
}

static int parse_now(struct tep_handle *tep, const char *text)
{
	pthread_once(&resolve_once, resolve);
	return libtraceevent_parse ? libtraceevent_parse(tep, text) : -1;
}

/* libtracecmd's call while it opens a file (see kallsyms.h). */
__attribute__((visibility("default")))
int tep_parse_kallsyms(struct tep_handle *tep, const char *text)
{
	if (!keep_slot)
		return parse_now(tep, text);
	/* libtracecmd frees its buffer on return: keep a copy (a second text in one
	 * file, which libtracecmd never reads, would replace the first). */
	char *copy = km_strdup(text);
	if (!copy) {
		keep_failed = true;
		return -1;
	}
	free(*keep_slot);
	*keep_slot = copy;
	return 0;
}

void kallsyms_keep_begin(char **slot)
{
	*slot = NULL;
	keep_slot = slot;
	keep_failed = false;
}

int kallsyms_keep_end(void)
{
	keep_slot = NULL;
	return keep_failed ? -1 : 0;
}

int kallsyms_load(struct tep_handle *tep, char **slot)
{
	char *text = *slot;
	if (!text)
		return 0;
	*slot = NULL;
	int r = parse_now(tep, text);
	free(text);
	return r < 0 ? -1 : 0;
}
