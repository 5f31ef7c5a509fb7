/*
 * Every pz_ function on success and on each documented error path.
 * Built and run by scripts/c-tests.sh, plainly and under ASan/UBSan.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <prezero.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int failures;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                              \
		}                                                                \
	} while (0)

#define RC(expr, want)                                                                       \
	do {                                                                                 \
		int rc_ = (expr);                                                            \
		if (rc_ != (want)) {                                                         \
			fprintf(stderr, "%s:%d: %s returned %d (%s), want %d\n", __FILE__, __LINE__, \
				#expr, rc_, pz_strerror(rc_), (want));                       \
			failures++;                                                          \
		}                                                                            \
	} while (0)

static int all(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static int stop_after_two(size_t done, void *ctx)
{
	(void)done;
	int *calls = ctx;
	return ++*calls >= 2;
}

static void stamp(size_t i, void *work, void *ctx)
{
	(void)ctx;
	memcpy(work, &i, sizeof i);
}

static void stamp_grouped(size_t i, int is_head, void *work, void *ctx)
{
	(void)ctx;
	unsigned char *w = work;
	memcpy(w, &i, sizeof i);
	w[23] = is_head ? 'H' : 'T';
}

static void test_info(void)
{
	CHECK(pz_version() && strlen(pz_version()) > 0);
	CHECK(strcmp(pz_strerror(0), "success") == 0);
	CHECK(strlen(pz_strerror(-EINVAL)) > 0 && strlen(pz_strerror(-12345)) > 0);
	struct pz_cpu_info ci = { .struct_size = sizeof ci };
	RC(pz_cpu_info(&ci), 0);
	CHECK(ci.logical_cpus >= 1 && ci.page_size >= 4096 && ci.llc >= ci.l1d && ci.vendor[0] != 0);
	CHECK(ci.kernels & (1u << (PZ_STRATEGY_PORTABLE - 3)));
	struct pz_cpu_info bad = { .struct_size = 3 };
	RC(pz_cpu_info(&bad), -EINVAL);
	RC(pz_cpu_info(NULL), -EINVAL);

	/* PREZERO_CPU only ever removes; a kernel it removed is refused as on a CPU without it. */
	uint32_t feat = 0, det = 0;
	const char *mask = getenv("PREZERO_CPU");
	int rc = pz_cpu_features(&feat, &det);
	CHECK(rc == 0 || (rc == -EINVAL && mask && *mask));
	CHECK((feat & ~det) == 0);
	if (!mask || !*mask)
		CHECK(feat == det);
	RC(pz_cpu_features(NULL, NULL), rc);
	if (!(feat & PZ_FEATURE_AVX2))
		CHECK(!(ci.kernels & (1u << (PZ_STRATEGY_AVX2 - 3))));
	if (!(feat & PZ_FEATURE_CLZERO))
		CHECK(!(ci.kernels & (1u << (PZ_STRATEGY_CLZERO - 3))));
}

static void test_clear(void)
{
	size_t len = (4 << 20) + 77;
	unsigned char *b = malloc(len + 64);
	memset(b, 0xa5, len + 64);
	RC(pz_clear(b + 1, len), 0);
	CHECK(all(b + 1, len, 0) && b[0] == 0xa5 && all(b + 1 + len, 63, 0xa5));
	RC(pz_clear(NULL, 0), 0);
	RC(pz_clear(NULL, 5), -EINVAL);
	RC(pz_clear((void *)(UINTPTR_MAX - 15), 64), -EINVAL); /* wraps the address space */
	RC(pz_clear(b, SIZE_MAX), -EINVAL);

	struct pz_cpu_info ci = { .struct_size = sizeof ci };
	pz_cpu_info(&ci);
	for (int s = PZ_STRATEGY_AUTO; s <= PZ_STRATEGY_PORTABLE; s++) {
		memset(b, 0xa5, len);
		int available = s < 3 || (ci.kernels & (1u << (s - 3)));
		RC(pz_clear_strategy(b, len, s), available ? 0 : -ENOTSUP);
		CHECK(all(b, len, available ? 0 : 0xa5));
	}
	RC(pz_clear_strategy(b, len, 99), -EINVAL);
	RC(pz_clear_strategy(b, len, -1), -EINVAL);

	/* Bounded: stop after the second chunk; exactly the reported prefix is zero. */
	memset(b, 0xa5, len);
	int calls = 0;
	size_t cleared = 0;
	RC(pz_clear_bounded(b, len, 1 << 20, stop_after_two, &calls, &cleared), 0);
	CHECK(calls == 2 && cleared > 0 && cleared < len);
	CHECK(all(b, cleared, 0) && all(b + cleared, len - cleared, 0xa5));
	RC(pz_clear_bounded(b, len, 1 << 20, NULL, NULL, NULL), -EINVAL);
	RC(pz_clear_bounded(b, len, 0, stop_after_two, &calls, NULL), -EINVAL);

	size_t hints[] = { 0, 1, len / 2, len - 1, len, SIZE_MAX };
	for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
		memset(b, 0xa5, len);
		RC(pz_clear_near(b, len, hints[i]), 0);
		CHECK(all(b, len, 0));
	}
	RC(pz_clear_near(NULL, 10, 0), -EINVAL);

	for (size_t t = 1; t <= 8; t++) {
		memset(b, 0xa5, len);
		RC(pz_clear_parallel(b, len, t), 0);
		CHECK(all(b, len, 0));
	}
	RC(pz_clear_parallel(b, len, 0), -EINVAL);

	uint32_t node0 = 0, nowhere = 9999;
	memset(b, 0xa5, len);
	RC(pz_clear_parallel_nodes(b, len, &node0, 1, 2), 0);
	CHECK(all(b, len, 0));
	RC(pz_clear_parallel_nodes(b, len, NULL, 1, 2), -EINVAL);
	RC(pz_clear_parallel_nodes(b, len, &node0, 0, 2), -EINVAL);
	RC(pz_clear_parallel_nodes(b, len, &node0, SIZE_MAX, 2), -EINVAL);
	RC(pz_clear_parallel_nodes(b, len, &nowhere, 1, 2), -EINVAL);
	RC(pz_clear_parallel_nodes(b, len, &node0, 1, 0), -EINVAL);
	RC(pz_clear_parallel_nodes(NULL, len, &node0, 1, 1), -EINVAL);
	free(b);
}

static void test_stream_and_template(void)
{
	size_t len = 1 << 20;
	unsigned char *src = malloc(len), *dst = malloc(len + 1);
	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 7);
	RC(pz_stream_copy(dst + 1, src, len), 0);
	CHECK(memcmp(dst + 1, src, len) == 0);
	pz_drain();
	RC(pz_stream_copy(NULL, src, 10), -EINVAL);
	RC(pz_stream_copy(dst, NULL, 10), -EINVAL);
	RC(pz_stream_copy(src + 10, src, 100), -EINVAL); /* overlap */
	RC(pz_stream_copy(NULL, NULL, 0), 0);

	size_t n = 1000, sz = 24;
	unsigned char tmpl[24], head[24], tail[24];
	memset(tmpl, 'x', sz);
	memset(head, 'h', sz);
	memset(tail, 't', sz);
	unsigned char *recs = malloc(n * sz);
	RC(pz_template_fill(recs, n, sz, tmpl, stamp, NULL), 0);
	for (size_t i = 0; i < n; i++) {
		size_t got;
		memcpy(&got, recs + i * sz, sizeof got);
		CHECK(got == i && all(recs + i * sz + 8, 16, 'x'));
	}
	RC(pz_template_fill(recs, n, sz, tmpl, NULL, NULL), 0); /* plain replication */
	CHECK(all(recs, n * sz, 'x'));
	RC(pz_template_fill(NULL, n, sz, tmpl, NULL, NULL), -EINVAL);
	RC(pz_template_fill(recs, n, sz, NULL, NULL, NULL), -EINVAL);
	RC(pz_template_fill(recs, n, 0, tmpl, NULL, NULL), -EINVAL);
	RC(pz_template_fill(recs, SIZE_MAX / 2, 24, tmpl, NULL, NULL), -EINVAL); /* overflow */

	RC(pz_template_fill_grouped(recs, n, sz, 4, head, tail, stamp_grouped, NULL), 0);
	for (size_t i = 0; i < n; i++) {
		unsigned char *r = recs + i * sz;
		size_t got;
		memcpy(&got, r, sizeof got);
		CHECK(got == i && r[23] == (i % 4 == 0 ? 'H' : 'T') && r[8] == (i % 4 == 0 ? 'h' : 't'));
	}
	RC(pz_template_fill_grouped(recs, n, sz, 0, head, tail, NULL, NULL), -EINVAL);
	RC(pz_template_fill_grouped(recs, n, sz, 4, head, NULL, NULL, NULL), -EINVAL);
	free(recs);
	free(src);
	free(dst);
}

/* words[0] = index, words[1] = ~index, words[2] = is_head */
static void produce3(size_t i, int is_head, uint64_t *words, void *ctx)
{
	(void)ctx;
	words[0] = i;
	words[1] = ~(uint64_t)i;
	words[2] = (uint64_t)is_head;
}

static void test_template_words(void)
{
	/* Record sizes from 16 to 264 bytes, at every 8-byte offset from a line. */
	for (size_t sz = 16; sz <= 264; sz += 8) {
		for (size_t off = 0; off < 64; off += 8) {
			size_t n = 257, guard = 64;
			size_t cap = (guard + off + n * sz + guard + 63) / 64 * 64;
			unsigned char *buf = aligned_alloc(64, cap);
			uint64_t head[33], tail[33];
			for (size_t j = 0; j < 33; j++) {
				head[j] = 0xa000 + j;
				tail[j] = 0xb000 + j;
			}
			size_t offsets[3] = { 0, sz / 2 / 8 * 8, sz - 8 };
			unsigned char *d = buf + guard + off;
			memset(buf, 0xee, guard + off + n * sz + guard);
			RC(pz_template_fill_words(d, n, sz, 5, head, tail, offsets, 3, produce3, NULL), 0);
			for (size_t i = 0; i < n; i++) {
				uint64_t want[33], got[33];
				memcpy(want, i % 5 == 0 ? head : tail, sz);
				want[0] = i;
				want[offsets[1] / 8] = ~(uint64_t)i;
				want[sz / 8 - 1] = i % 5 == 0;
				memcpy(got, d + i * sz, sz);
				CHECK(memcmp(got, want, sz) == 0);
			}
			CHECK(all(buf, guard + off, 0xee) && all(d + n * sz, guard, 0xee));
			free(buf);
		}
	}
	/* One template (tail NULL), no words, unaligned destination. */
	unsigned char t24[24], *r = malloc(24 * 100 + 1);
	memset(t24, 'q', sizeof t24);
	RC(pz_template_fill_words(r + 1, 100, 24, SIZE_MAX, t24, NULL, NULL, 0, NULL, NULL), 0);
	CHECK(all(r + 1, 2400, 'q'));
	/* Garbage: every case an error code, nothing written. */
	size_t offs[9] = { 0 }, bad_off[1] = { 17 }, past[1] = { SIZE_MAX - 3 };
	memset(r, 0, 2401);
	RC(pz_template_fill_words(NULL, 100, 24, 1, t24, NULL, offs, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, NULL, NULL, offs, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 0, 1, t24, NULL, offs, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 0, t24, NULL, offs, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, t24, NULL, offs, 9, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, t24, NULL, NULL, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, t24, NULL, offs, 1, NULL, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, t24, NULL, bad_off, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, t24, NULL, past, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, SIZE_MAX / 2, 24, 1, t24, NULL, offs, 1, produce3, NULL), -EINVAL);
	RC(pz_template_fill_words(r, 100, 24, 1, r + 48, NULL, offs, 1, produce3, NULL), -EINVAL); /* overlap */
	RC(pz_template_fill_words(r, 100, 24, 1, t24, r + 48, offs, 1, produce3, NULL), -EINVAL); /* tail too */
	RC(pz_template_fill_words(r, 100, 24, 1, t24, NULL, (size_t *)(r + 8), 1, produce3, NULL), -EINVAL);
	CHECK(all(r, 2401, 0));
	free(r);
}

static void test_regions_and_prefault(void)
{
	struct pz_region *r = NULL;
	RC(pz_region_map(3 << 20, PZ_PAGE_THP, &r), 0);
	unsigned char *p = pz_region_ptr(r);
	size_t len = pz_region_len(r);
	CHECK(p != NULL && len == (4u << 20) && all(p, len, 0));
	RC(pz_prefault(p, len, 3), 0);
	memset(p, 1, len);
	RC(pz_region_unmap(r), 0);
	RC(pz_region_unmap(r), -EINVAL); /* unmapped twice */
	CHECK(pz_region_ptr(r) == NULL && pz_region_len(r) == 0); /* freed: not read */
	int local;
	RC(pz_region_unmap((struct pz_region *)&local), -EINVAL); /* never a handle */
	RC(pz_region_unmap(NULL), -EINVAL);
	CHECK(pz_region_ptr(NULL) == NULL && pz_region_len(NULL) == 0);
	struct pz_region *untouched = (struct pz_region *)&len; /* left as it was on failure */
	RC(pz_region_map(0, PZ_PAGE_BASE, &untouched), -EINVAL);
	RC(pz_region_map(4096, 42, &untouched), -EINVAL);
	CHECK(untouched == (struct pz_region *)&len);
	RC(pz_region_map(4096, PZ_PAGE_BASE, NULL), -EINVAL);

	RC(pz_prefault(NULL, 4096, 1), -EINVAL);
	CHECK(pz_prefault((void *)4096, 4096, 1) < 0); /* below mmap_min_addr: never mapped */
	void *ro = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(pz_prefault(ro, 8192, 1) < 0);
	munmap(ro, 8192);
	void *rw = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	RC(pz_prefault(rw, 8192, 0), -EINVAL);
	RC(pz_prefault(rw, 8192, 2), 0);
	munmap(rw, 8192);

	uint32_t node0 = 0, nowhere = 9999;
	RC(pz_region_map(4 << 20, PZ_PAGE_BASE, &r), 0);
	RC(pz_prefault_nodes(r, &node0, 1, 2), 0);
	CHECK(all(pz_region_ptr(r), pz_region_len(r), 0));
	RC(pz_prefault_nodes(r, &nowhere, 1, 2), -EINVAL);
	RC(pz_prefault_nodes(r, NULL, 1, 2), -EINVAL);
	RC(pz_prefault_nodes(r, &node0, 0, 2), -EINVAL);
	RC(pz_prefault_nodes(r, &node0, 1, 0), -EINVAL);
	RC(pz_region_unmap(r), 0);
	RC(pz_prefault_nodes(r, &node0, 1, 1), -EINVAL); /* unmapped already */
	RC(pz_prefault_nodes(NULL, &node0, 1, 1), -EINVAL);
}

static void test_pool(void)
{
	struct pz_pool_config cfg;
	RC(pz_pool_config_init(&cfg), 0);
	RC(pz_pool_config_init(NULL), -EINVAL);
	struct pz_pool *pool = NULL;
	RC(pz_pool_new(NULL, &pool), -EINVAL);
	RC(pz_pool_new(&cfg, NULL), -EINVAL);
	struct pz_pool_config bad = cfg;
	bad.struct_size = 8;
	RC(pz_pool_new(&bad, &pool), -EINVAL);
	bad = cfg;
	bad.chunk_size = 4097;
	RC(pz_pool_new(&bad, &pool), -EINVAL);
	bad = cfg;
	bad.backing = 9;
	RC(pz_pool_new(&bad, &pool), -EINVAL);
	bad = cfg;
	bad.priority = 9;
	RC(pz_pool_new(&bad, &pool), -EINVAL);

	cfg.chunk_size = 64 << 10;
	cfg.backing = PZ_PAGE_BASE;
	cfg.capacity = 4 * cfg.chunk_size;
	cfg.verify = 1;
	RC(pz_pool_new(&cfg, &pool), 0);
	unsigned char *c[4];
	for (int i = 0; i < 4; i++) {
		RC(pz_pool_alloc_zeroed(pool, (void **)&c[i]), 0);
		CHECK(all(c[i], cfg.chunk_size, 0));
		memset(c[i], 0xee, cfg.chunk_size);
	}
	void *extra = NULL;
	RC(pz_pool_alloc_zeroed(pool, &extra), -EAGAIN);
	RC(pz_pool_alloc_zeroed_timeout(pool, 1000000, &extra), -EAGAIN);
	RC(pz_pool_alloc(pool, &extra), -EAGAIN);
	RC(pz_pool_alloc_zeroed(pool, NULL), -EINVAL);
	RC(pz_pool_alloc_zeroed(NULL, &extra), -EINVAL);

	int local;
	RC(pz_pool_free(pool, &local), -EINVAL);    /* foreign */
	RC(pz_pool_free(pool, c[0] + 64), -EINVAL); /* interior */
	RC(pz_pool_free(pool, NULL), -EINVAL);
	RC(pz_pool_destroy(pool), -EBUSY);          /* chunks outstanding: pool stays */
	for (int i = 0; i < 4; i++)
		RC(pz_pool_free(pool, c[i]), 0);
	RC(pz_pool_free(pool, c[1]), -EINVAL);      /* double free */

	void *again = NULL;
	RC(pz_pool_alloc_zeroed(pool, &again), 0);
	CHECK(all(again, cfg.chunk_size, 0));
	RC(pz_pool_free(pool, again), 0);
	RC(pz_pool_alloc(pool, &again), 0);
	RC(pz_pool_free(pool, again), 0);

	size_t released = 0;
	RC(pz_pool_trim(pool, 0, &released), 0);
	CHECK(released > 0);
	RC(pz_pool_trim(NULL, 0, NULL), -EINVAL);

	struct pz_pool_stats st = { .struct_size = sizeof st };
	RC(pz_pool_stats(pool, &st), 0);
	CHECK(st.zeroed + st.dirty + st.scrubbing + st.in_use == st.mapped);
	CHECK(st.mapped == 4 && st.in_use == 0 && st.chunk_size == cfg.chunk_size);
	struct pz_pool_stats bst = { .struct_size = 1 };
	RC(pz_pool_stats(pool, &bst), -EINVAL);
	RC(pz_pool_stats(pool, NULL), -EINVAL);

	RC(pz_pool_destroy(pool), 0);
	RC(pz_pool_destroy(pool), -EINVAL); /* destroyed twice */
	RC(pz_pool_destroy(NULL), -EINVAL);
}

/* Without a service: connect says why, NULL serves locally, every error path. */
static void test_service_absent(void)
{
	struct pz_service *svc = (struct pz_service *)1;
	RC(pz_service_connect("/nonexistent/prezero.sock", &svc), -ENOENT);
	CHECK(svc == NULL);
	RC(pz_service_connect("/nonexistent/prezero.sock", NULL), -EINVAL);

	struct pz_service_memory *m = NULL;
	int source = -1;
	RC(pz_service_alloc(NULL, 3 << 20, PZ_PAGE_HUGE_2M, 0, &m, &source), 0);
	CHECK(source == PZ_SOURCE_LOCAL);
	unsigned char *p = pz_service_memory_ptr(m);
	size_t len = pz_service_memory_len(m);
	CHECK(p != NULL && len == 4 << 20 && all(p, len, 0));
	memset(p, 0x5a, len);
	int fd = -1;
	size_t off = 0, slen = 0;
	RC(pz_service_segment(m, 0, &fd, &off, &slen), -ENOENT);
	RC(pz_service_segment(m, 0, NULL, &off, &slen), -EINVAL);
	RC(pz_service_segment(NULL, 0, &fd, &off, &slen), -EINVAL);
	RC(pz_service_segment((struct pz_service_memory *)p, 0, &fd, &off, &slen), -EINVAL); /* the memory, not its handle */
	RC(pz_service_free((struct pz_service_memory *)((char *)p + 4096)), -EINVAL);
	struct pz_region *r = NULL;
	RC(pz_region_map(4096, PZ_PAGE_BASE, &r), 0);
	RC(pz_service_free((struct pz_service_memory *)r), -EINVAL); /* a handle of another type */
	RC(pz_region_unmap(r), 0);
	RC(pz_service_free(m), 0);
	RC(pz_service_free(m), -EINVAL); /* freed twice */
	CHECK(pz_service_memory_ptr(m) == NULL && pz_service_memory_len(m) == 0);
	RC(pz_service_free(NULL), -EINVAL);
	CHECK(pz_service_memory_ptr(NULL) == NULL && pz_service_memory_len(NULL) == 0);
	RC(pz_service_alloc(NULL, 2 << 20, PZ_PAGE_HUGE_2M, 0, &m, NULL), 0); /* source optional */
	RC(pz_service_free(m), 0);

	struct pz_service_memory *untouched = (struct pz_service_memory *)&len; /* left as it was */
	RC(pz_service_alloc(NULL, 2 << 20, PZ_PAGE_HUGE_2M, PZ_SERVICE_NO_FALLBACK, &untouched, &source), -ENOTCONN);
	RC(pz_service_alloc(NULL, 0, PZ_PAGE_HUGE_2M, 0, &untouched, &source), -EINVAL);
	RC(pz_service_alloc(NULL, 2 << 20, PZ_PAGE_BASE, 0, &untouched, &source), -EINVAL);
	RC(pz_service_alloc(NULL, 2 << 20, 99, 0, &untouched, &source), -EINVAL);
	RC(pz_service_alloc(NULL, 2 << 20, PZ_PAGE_HUGE_2M, 0x80, &untouched, &source), -EINVAL);
	RC(pz_service_alloc(NULL, 2 << 20, PZ_PAGE_HUGE_2M, 0, NULL, &source), -EINVAL);
	RC(pz_service_alloc(NULL, SIZE_MAX, PZ_PAGE_HUGE_2M, 0, &untouched, &source), -EINVAL);
	CHECK(untouched == (struct pz_service_memory *)&len);

	/* On a node: local memory placed there, which names no node of the service's. */
	uint32_t node = 12345;
	RC(pz_service_alloc_on(NULL, 2 << 20, PZ_PAGE_HUGE_2M, 0, 0, &m, &source), 0);
	CHECK(source == PZ_SOURCE_LOCAL && all(pz_service_memory_ptr(m), 2 << 20, 0));
	RC(pz_service_memory_node(m, &node), -ENOENT);
	RC(pz_service_memory_node(m, NULL), -EINVAL);
	CHECK(node == 12345);
	RC(pz_service_free(m), 0);
	RC(pz_service_memory_node(m, &node), -EINVAL); /* freed */
	RC(pz_service_alloc_on(NULL, 2 << 20, PZ_PAGE_HUGE_2M, PZ_NODE_ANY, 0, &m, NULL), 0);
	RC(pz_service_free(m), 0);
	RC(pz_service_alloc_on(NULL, 2 << 20, PZ_PAGE_HUGE_2M, 9999, 0, &untouched, &source), -EINVAL);
	RC(pz_service_alloc_on(NULL, 2 << 20, PZ_PAGE_HUGE_2M, -3, 0, &untouched, &source), -EINVAL);
	RC(pz_service_alloc_on(NULL, 2 << 20, PZ_PAGE_HUGE_2M, INT64_MAX, 0, &untouched, &source), -EINVAL);
	RC(pz_service_alloc_on(NULL, 2 << 20, PZ_PAGE_HUGE_2M, 0, 0x80, &untouched, &source), -EINVAL);
	CHECK(untouched == (struct pz_service_memory *)&len);
	RC(pz_service_disconnect(NULL), -EINVAL);
}

int main(void)
{
	test_info();
	test_clear();
	test_stream_and_template();
	test_template_words();
	test_regions_and_prefault();
	test_pool();
	test_service_absent();
	if (failures) {
		printf("%d passed, %d failed\n", 0, failures);
		return 1;
	}
	printf("c ffi: all checks passed\n");
	return 0;
}
