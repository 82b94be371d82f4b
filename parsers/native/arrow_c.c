// SPDX-License-Identifier: GPL-2.0
/* Building and releasing Arrow C data interface nodes. */
#include <stdlib.h>
#include <string.h>

#include "arrow_c.h"

/* Schema nodes own their format and name strings. */
void schema_release(struct ArrowSchema *s)
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

struct ArrowSchema *schema_new(const char *format, const char *name, int n_children)
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
void array_release(struct ArrowArray *a)
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

struct ArrowArray *array_new(int64_t length, int n_buffers, int n_children)
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

