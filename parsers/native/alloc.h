/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Every allocation the decoder makes goes through these wrappers, so that a
 * test can make allocations fail on purpose and check that each out-of-memory
 * path ends in a clean error. The hook is off unless armed, by the environment
 * variable KMEMSCOPE_FAIL_ALLOC=N (the Nth counted allocation fails; "N+": it
 * and every later one) or by _tracedat._alloc_fault(). Off, it costs one
 * well-predicted branch per allocation.
 */
#ifndef KMEMSCOPE_ALLOC_H
#define KMEMSCOPE_ALLOC_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* 0: off; > 0: fail the allocation with this number; < 0: count only. */
extern long km_fault_at;
extern bool km_fault_persist;	/* fail every allocation after that one too */
extern long km_fault_count;	/* allocations counted since the hook was armed */

static inline bool km_fault(void)
{
	long at = __atomic_load_n(&km_fault_at, __ATOMIC_RELAXED);
	if (__builtin_expect(at == 0, 1))
		return false;
	long n = __atomic_add_fetch(&km_fault_count, 1, __ATOMIC_RELAXED);
	return at > 0 && (n == at || (n > at && km_fault_persist));
}

static inline void *km_malloc(size_t n)
{
	return km_fault() ? NULL : malloc(n);
}

static inline void *km_calloc(size_t n, size_t size)
{
	return km_fault() ? NULL : calloc(n, size);
}

static inline void *km_realloc(void *p, size_t n)
{
	return km_fault() ? NULL : realloc(p, n);
}

static inline char *km_strdup(const char *s)
{
	return km_fault() ? NULL : strdup(s);
}

/* Arm the hook (see km_fault_at); returns the count since it was last armed. */
long km_fault_arm(long at, bool persist);

#endif
