/*
 * 2..8 threads allocating zeroed chunks, checking every byte, filling them with
 * garbage and freeing them, against one pool (verify mode on as well).
 */
#include <errno.h>
#include <prezero.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define CHUNK 16384
#define ROUNDS 4000

static struct pz_pool *pool;
static int bad;

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(size_t)arg * 2654435761u + 1;
	void *held[4] = { 0 };
	for (int r = 0; r < ROUNDS; r++) {
		int slot = (int)((seed = seed * 1103515245u + 12345u) >> 16) % 4;
		if (held[slot]) {
			memset(held[slot], (int)(seed >> 24) | 1, CHUNK);
			if (pz_pool_free(pool, held[slot]) != 0)
				__atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
			held[slot] = NULL;
			continue;
		}
		int rc = pz_pool_alloc_zeroed_timeout(pool, 2000000000ull, &held[slot]);
		if (rc == -EAGAIN)
			continue;
		if (rc != 0) {
			fprintf(stderr, "alloc: %s\n", pz_strerror(rc));
			__atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
			continue;
		}
		const unsigned char *p = held[slot];
		for (size_t i = 0; i < CHUNK; i++)
			if (p[i]) {
				fprintf(stderr, "non-zero byte %zu in a zeroed chunk\n", i);
				__atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
				break;
			}
	}
	for (int s = 0; s < 4; s++)
		if (held[s])
			pz_pool_free(pool, held[s]);
	return NULL;
}

int main(void)
{
	for (int threads = 2; threads <= 8; threads += 2) {
		struct pz_pool_config cfg;
		pz_pool_config_init(&cfg);
		cfg.backing = PZ_PAGE_BASE;
		cfg.chunk_size = CHUNK;
		cfg.capacity = 24 * CHUNK;
		cfg.verify = 1;
		cfg.hot_window = threads % 4 == 0 ? 0 : 8 * CHUNK;
		if (pz_pool_new(&cfg, &pool) != 0)
			return 1;
		pthread_t t[8];
		for (long i = 0; i < threads; i++)
			pthread_create(&t[i], NULL, worker, (void *)i);
		for (int i = 0; i < threads; i++)
			pthread_join(t[i], NULL);
		struct pz_pool_stats st = { .struct_size = sizeof st };
		pz_pool_stats(pool, &st);
		if (st.in_use != 0 || st.zeroed + st.dirty + st.scrubbing + st.in_use != st.mapped)
			bad++;
		if (pz_pool_destroy(pool) != 0)
			bad++;
	}
	if (bad) {
		printf("0 passed, %d failed\n", bad);
		return 1;
	}
	printf("c stress: all checks passed\n");
	return 0;
}
