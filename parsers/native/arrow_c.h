/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The Arrow C data interface (arrow.apache.org/docs/format/CDataInterface.html):
 * the two structs pyarrow imports without copying, and the nodes kmemscope
 * builds them from. Each node owns its strings, buffers and children, and
 * its release callback frees them.
 */
#ifndef KMEMSCOPE_ARROW_C_H
#define KMEMSCOPE_ARROW_C_H

#include <stdint.h>

struct ArrowSchema {
	const char *format;
	const char *name;
	const char *metadata;
	int64_t flags;
	int64_t n_children;
	struct ArrowSchema **children;
	struct ArrowSchema *dictionary;
	void (*release)(struct ArrowSchema *);
	void *private_data;
};

struct ArrowArray {
	int64_t length;
	int64_t null_count;
	int64_t offset;
	int64_t n_buffers;
	int64_t n_children;
	const void **buffers;
	struct ArrowArray **children;
	struct ArrowArray *dictionary;
	void (*release)(struct ArrowArray *);
	void *private_data;
};

/* New nodes with every child slot NULL; NULL when out of memory. */
struct ArrowSchema *schema_new(const char *format, const char *name, int n_children);
struct ArrowArray *array_new(int64_t length, int n_buffers, int n_children);
/* Release a node we allocated (if no consumer has) and free it; NULL is fine,
 * and so is a node whose children were never all attached. */
void schema_free(struct ArrowSchema *s);
void array_free(struct ArrowArray *a);

#endif
