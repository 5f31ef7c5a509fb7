/*
 * An independent check of `prezero bench mmap -f demand`: mmap + one write per
 * page, timed like perf's `bench mem mmap` (the munmap is not timed).
 *
 *   gcc -O2 -o /tmp/mmap_demand prezero-cli/src/bench/c/mmap_demand.c -lm
 *   /tmp/mmap_demand <page: 4K|2M|1G> <bytes> <loops>
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s 4K|2M|1G bytes loops\n", argv[0]);
		return 2;
	}
	size_t page = 4096;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS;
	if (!strcmp(argv[1], "2M")) {
		page = 2UL << 20;
		flags |= MAP_HUGETLB | (21 << MAP_HUGE_SHIFT);
	} else if (!strcmp(argv[1], "1G")) {
		page = 1UL << 30;
		flags |= MAP_HUGETLB | (30 << MAP_HUGE_SHIFT);
	}
	size_t size = strtoull(argv[2], NULL, 0);
	int loops = atoi(argv[3]);
	double sum = 0, sum2 = 0;
	for (int l = -1; l < loops; l++) { /* loop -1 warms the host */
		double t0 = now();
		char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		for (size_t i = 0; i < size; i += page)
			((volatile char *)p)[i] = 1;
		double gbps = size / (now() - t0) / 1e9;
		munmap(p, size);
		if (l >= 0) {
			sum += gbps;
			sum2 += gbps * gbps;
		}
	}
	double mean = sum / loops;
	double var = loops > 1 ? (sum2 - loops * mean * mean) / (loops - 1) : 0;
	printf("%8.2f GB/sec +- %.2f%%\n", mean, var > 0 ? 100 * __builtin_sqrt(var) / mean : 0.0);
	return 0;
}
