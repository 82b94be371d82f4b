// SPDX-License-Identifier: GPL-2.0
/* The allocation-failure test hook (alloc.h). */
#include "alloc.h"

long km_fault_at;
bool km_fault_persist;
long km_fault_count;

long km_fault_arm(long at, bool persist)
{
	long counted = __atomic_exchange_n(&km_fault_count, 0, __ATOMIC_RELAXED);
	km_fault_persist = persist;
	__atomic_store_n(&km_fault_at, at, __ATOMIC_RELAXED);
	return counted;
}
