// SPDX-License-Identifier: GPL-2.0
/*
 * Building and releasing Arrow C data interface nodes. A node may be released
 * half built (an allocation failed while its children were being attached), so
 * every release tolerates NULL children, buffers and strings.
 */
#include "alloc.h"
#include "arrow_c.h"

/* Schema nodes own their format and name strings. */
static void schema_release(struct ArrowSchema *s)
{
	if (!s || !s->release)
		return;
	for (int64_t i = 0; s->children && i < s->n_children; i++)
		schema_free(s->children[i]);
	free(s->children);
	schema_free(s->dictionary);
	free((void *)s->format);
	free((void *)s->name);
	s->children = NULL;
	s->dictionary = NULL;
	s->release = NULL;
}

void schema_free(struct ArrowSchema *s)
{
	if (!s)
		return;
	if (s->release)
		s->release(s);
	free(s);
}

struct ArrowSchema *schema_new(const char *format, const char *name, int n_children)
{
	struct ArrowSchema *s = km_calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->release = schema_release;
	s->format = km_strdup(format);
	s->name = km_strdup(name ? name : "");
	/* Decoded columns never hold nulls. Declaring them non-nullable makes them
	 * REQUIRED in Parquet, which saves writing definition levels. */
	s->flags = 0;
	if (n_children) {
		s->children = km_calloc(n_children, sizeof(*s->children));
		if (s->children)
			s->n_children = n_children;
	}
	if (!s->format || !s->name || (n_children && !s->children)) {
		schema_free(s);
		return NULL;
	}
	return s;
}

/* Array nodes own their buffers and their children. */
static void array_release(struct ArrowArray *a)
{
	if (!a || !a->release)
		return;
	for (int64_t i = 0; a->children && i < a->n_children; i++)
		array_free(a->children[i]);
	free(a->children);
	array_free(a->dictionary);
	for (int64_t i = 0; a->buffers && i < a->n_buffers; i++)
		free((void *)a->buffers[i]);
	free(a->buffers);
	a->children = NULL;
	a->dictionary = NULL;
	a->buffers = NULL;
	a->release = NULL;
}

void array_free(struct ArrowArray *a)
{
	if (!a)
		return;
	if (a->release)
		a->release(a);
	free(a);
}

struct ArrowArray *array_new(int64_t length, int n_buffers, int n_children)
{
	struct ArrowArray *a = km_calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->release = array_release;
	a->length = length;
	if (n_buffers) {
		a->buffers = km_calloc(n_buffers, sizeof(void *));
		if (a->buffers)
			a->n_buffers = n_buffers;
	}
	if (n_children) {
		a->children = km_calloc(n_children, sizeof(*a->children));
		if (a->children)
			a->n_children = n_children;
	}
	if ((n_buffers && !a->buffers) || (n_children && !a->children)) {
		array_free(a);
		return NULL;
	}
	return a;
}
