/* What the files of preload_stress.c (one program: see preload_stress.c's
 * header for its modes) share: the helpers of preload_stress.c, the modes'
 * entry points, and glibc's own allocator. Included first by each file. */
#ifndef PRELOAD_STRESS_H
#define PRELOAD_STRESS_H

#define _GNU_SOURCE
/* The hostile calls (sizes past any object, frees of inner pointers, double
 * frees) are the point; the compiler is not to reason about them. */
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wpragmas"
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* glibc's own allocator, under the names the preload does not take. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

extern size_t T; /* the threshold the preload was given (or its default) */
extern size_t PAGE;
/* Set to stop the traffic threads of fork, signals and mremap-race. */
extern atomic_int stop_traffic;

void fail(const char *fmt, ...);
size_t parse_size(const char *s, size_t dflt);
uint64_t next(uint64_t *s);

/* The contents a block of this tag has: 8-byte word g (little-endian) is
 * word(tag, g), so any prefix of a block reads the same however it is
 * checked. Blocks are at least 8-aligned. */
static inline uint64_t word(uint64_t tag, size_t g) { return (tag + g) * 0x9E3779B97F4A7C15ull; }
static inline unsigned char byte_at(uint64_t tag, size_t i) {
  return (unsigned char)(word(tag, i >> 3) >> ((i & 7) * 8));
}
static inline unsigned char canary(uint64_t tag) { return (unsigned char)(0xC3 ^ (tag * 131)); }

void fill(unsigned char *p, size_t n, uint64_t tag);
/* The first byte in [0, n) that is not the pattern, or n. */
size_t check(const unsigned char *p, size_t n, uint64_t tag);
size_t first_nonzero(const unsigned char *p, size_t n);

/* The modes, by file. preload_stress_traffic.c: */
int mode_mix(int argc, char **argv);
int mode_fork(int argc, char **argv, const char *self);
int child_work(uint64_t seed);
int mode_signals(int argc, char **argv);
int mode_checker(int argc, char **argv);
/* preload_stress_calls.c: */
int mode_align(void);
int mode_huge(void);
int mode_realloc(void);
int mode_dlopen(int argc, char **argv);
int mode_badfree(void);
int mode_mmapfree(void);
int mode_early(void);
int mode_errno(void);
/* preload_stress_limits.c: */
int mode_cap(void);
int mode_idle(int argc, char **argv);
int mode_prefill(double wait_s);
int mode_prefill_dirty(void);
int mode_spare(int argc, char **argv);
int mode_starve(long spinners, double secs);
int mode_vmas(int argc, char **argv);
int mode_mremap_race(int argc, char **argv);

#endif
