// SPDX-License-Identifier: GPL-2.0
/* A trace's kallsyms, indexed when a kernel stack needs a symbol (kallsyms.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "kallsyms.h"

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One line (from line to end) as libtraceevent's sscanf format reads it, "%16llx
 * %c %n%*s%n..." (the module after the name does not matter here). The common
 * form, hex digits, a space, a type, a space, a name, is read by hand; anything
 * else by that very sscanf, on a copy. Returns 1, 0 where libtraceevent stops
 * reading the text, -1 when memory ran out. */
static int read_line(const char *line, const char *end, uint64_t *addr, char *type,
		     const char **name, size_t *len)
{
	const char *p = line;
	while (p < end && is_space(*p))
		p++;
	uint64_t a = 0;
	int digits = 0;
	for (int v; digits < 16 && p + digits < end && (v = hex_digit(p[digits])) >= 0; digits++)
		a = a << 4 | (uint64_t)v;
	const char *q = p + digits;
	if (digits && q < end && is_space(*q)) {
		while (q < end && is_space(*q))
			q++;
		if (q < end) {
			char t = *q;
			const char *s = q + 1;
			while (s < end && is_space(*s))
				s++;
			const char *e = s;
			while (e < end && !is_space(*e))
				e++;
			if (e > s) {
				*addr = a, *type = t, *name = s, *len = (size_t)(e - s);
				return 1;
			}
		}
	}
	size_t n = (size_t)(end - line);
	char small[512];
	char *copy = n < sizeof(small) ? small : km_malloc(n + 1);
	if (!copy)
		return -1;
	memcpy(copy, line, n);
	copy[n] = 0;
	unsigned long long sa = 0;
	char st = 0;
	int name_start = 0, name_end = 0, mod_start = 0, mod_end = 0;
	errno = 0;
	int got = sscanf(copy, "%16llx %c %n%*s%n%*1[\t][%n%*s%n", &sa, &st, &name_start, &name_end,
			 &mod_start, &mod_end);
	bool ok = !errno && got == 2 && name_end;
	if (copy != small)
		free(copy);
	if (!ok)
		return 0;
	*addr = sa, *type = st, *name = line + name_start, *len = (size_t)(name_end - name_start);
	return 1;
}

/* libtraceevent's order: by address, and among equal addresses the last line
 * first (its list is built by prepending, then merge-sorted, which is stable). */
static int ksym_cmp(const void *pa, const void *pb)
{
	const struct ksym *a = pa, *b = pb;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return a->line > b->line ? -1 : a->line < b->line;
}

int ksyms_index(struct ksyms *k)
{
	if (k->indexed)
		return 0;
	size_t cap = 0, n = 0;
	struct ksym *syms = NULL;
	bool sorted = true;
	const char *text = k->text;
	uint32_t line_no = 0;
	for (const char *line = text; text && *line;) {
		const char *end = strchr(line, '\n');
		if (!end)
			end = line + strlen(line);
		const char *next = *end ? end + 1 : end;
		if (end == line) {	/* strtok_r skips empty lines */
			line = next;
			continue;
		}
		uint64_t addr;
		char type;
		const char *name;
		size_t len;
		int r = read_line(line, end, &addr, &type, &name, &len);
		if (r < 0) {
			free(syms);
			return -1;
		}
		if (!r)
			break;	/* libtraceevent keeps what came before, and stops */
		/* Its hacks: arm's '$a' symbols, x86-64's absolute per-cpu offsets. */
		if (name[0] != '$' && type != 'A' && type != 'a' && len < UINT32_MAX) {
			if (n == cap) {
				size_t c = cap ? cap * 2 : 4096;
				struct ksym *s = km_realloc(syms, c * sizeof(*s));
				if (!s) {
					free(syms);
					return -1;
				}
				syms = s, cap = c;
			}
			if (n && addr < syms[n - 1].addr)
				sorted = false;
			syms[n++] = (struct ksym){ addr, (uint32_t)(name - text), (uint32_t)len, line_no };
		}
		line_no++;
		line = next;
	}
	if (sorted) {
		/* /proc/kallsyms is in address order: only runs of equal addresses turn round. */
		for (size_t i = 0; i < n;) {
			size_t j = i + 1;
			while (j < n && syms[j].addr == syms[i].addr)
				j++;
			for (size_t a = i, b = j - 1; a < b; a++, b--) {
				struct ksym t = syms[a];
				syms[a] = syms[b];
				syms[b] = t;
			}
			i = j;
		}
	} else {
		qsort(syms, n, sizeof(*syms), ksym_cmp);
	}
	k->syms = syms;
	k->n = n;
	k->indexed = true;
	return 0;
}

/* glibc's bsearch with libtraceevent's comparison: an entry answers for its own
 * address and for those below the next entry's; the last one only for its own
 * (the entry after it in libtraceevent's map has address 0). */
const struct ksym *ksyms_find(const struct ksyms *k, uint64_t addr)
{
	size_t lo = 0, hi = k->n;
	while (lo < hi) {
		size_t i = (lo + hi) / 2;
		const struct ksym *s = &k->syms[i];
		uint64_t next = i + 1 < k->n ? k->syms[i + 1].addr : 0;
		if (addr == s->addr || (addr > s->addr && addr < next))
			return s;
		if (addr < s->addr)
			hi = i;
		else
			lo = i + 1;
	}
	return NULL;
}

void ksyms_release(struct ksyms *k)
{
	free(k->syms);
	free(k->text);
	*k = (struct ksyms){ 0 };
}
