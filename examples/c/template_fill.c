/* Initialise a large array of records from a template, streaming. */
#include <prezero.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct rec {
	uint64_t flags, next, prev, owner, index, pad[3];
};

static void update(size_t i, void *work, void *ctx)
{
	struct rec *r = work;
	struct rec *base = ctx;
	r->next = r->prev = (uint64_t)(uintptr_t)&base[i].next; /* self-pointing list head */
	r->index = i;
}

int main(void)
{
	size_t n = 1 << 20;
	struct rec *recs = aligned_alloc(64, n * sizeof *recs);
	if (!recs)
		return 1;
	struct rec tmpl = { .flags = 0x40, .owner = 0xffff888000000000ull };
	int rc = pz_template_fill(recs, n, sizeof *recs, &tmpl, update, recs);
	if (rc < 0) {
		fprintf(stderr, "pz_template_fill: %s\n", pz_strerror(rc));
		return 1;
	}
	printf("record 12345: flags %#llx index %llu\n", (unsigned long long)recs[12345].flags,
	       (unsigned long long)recs[12345].index);
	int ok = recs[12345].index == 12345 && recs[n - 1].next == (uint64_t)(uintptr_t)&recs[n - 1].next;
	free(recs);
	return !ok;
}
