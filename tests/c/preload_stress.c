/* The hostile test program for libprezero_preload.so, run by
 * prezero-preload/tests/preload.rs with and without LD_PRELOAD. One binary,
 * one mode per run:
 *
 *   mix THREADS ITERS SEED  random traffic around the threshold on 1-8 threads:
 *                           every calloc byte zero, every malloc/realloc keeps
 *                           its contents, every aligned entry point aligned,
 *                           canaries from the requested size to the usable
 *                           size, and no two live blocks overlap
 *   align                   a table of the aligned entry points' answers (good
 *                           and bad alignments) to diff against plain glibc
 *   huge                    a table of requests past the machine's memory (the
 *                           answers must be glibc's: NULL, not an OOM later)
 *   realloc                 in place, by mremap, shrink, 0, glibc's pointers
 *                           across the threshold both ways, overflow
 *   fork THREADS ROUNDS     fork (and fork+exec of `child`) while threads allocate
 *   child                   callocs and checks, after exec under the preload
 *   signals THREADS ITERS   mix under a timer signal storm
 *   dlopen LIB ROUNDS       dlopen/dlclose a library whose constructor and
 *                           destructor allocate (tests/c/preload_dl.c)
 *   badfree                 pointers inside blocks, double frees: ignored
 *   mmapfree                free() of mmap'd memory: must die as glibc does
 *   early                   blocks from a constructor and from glibc directly
 *                           (__libc_malloc: never seen by the preload), freed,
 *                           reallocated and measured through it
 *   cap                     frees a lot; prints the resident memory it keeps
 *   idle SECS               frees; prints when the memory went back
 *   prefill [WAIT_S]        prints page faults on a calloc after PREZERO_PREFILL
 *   prefill-dirty           a block freed before the prefill ran: calloc zero?
 *   spare ROUNDS [THREADS]  calloc, check, write, work, free: page faults per round
 *   starve                  calloc latency while spinning threads take every core
 *   vmas ITERS              realloc churn; prints mappings before and after
 *   mremap-race SECS        realloc by mremap on one thread, mmap/munmap on two
 *   errno                   free() keeps errno (POSIX): large blocks calloc'd,
 *                           touched and freed with errno set before each free
 *   checker ITERS SEED      calloc/malloc/realloc/free on one thread, every answer
 *                           checked: calloc zero, contents kept, NULL only with
 *                           ENOMEM (a failed realloc keeps its block): the
 *                           program of the preload's fault matrix
 *
 * Failures print "FAIL: ..." and exit 3; the harness prints stdout/stderr. */
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

static size_t T; /* the threshold the preload was given (or its default) */
static size_t PAGE;

static void fail(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(buf, sizeof buf, "FAIL: ");
  n += vsnprintf(buf + n, sizeof buf - n, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  /* write(2): the heap may be what is broken */
  if (write(2, buf, n) < 0) {}
  _exit(3);
}

static size_t parse_size(const char *s, size_t dflt) {
  if (!s || !*s) return dflt;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
  case 'k': case 'K': v <<= 10; break;
  case 'M': v <<= 20; break;
  case 'G': v <<= 30; break;
  case 'T': v <<= 40; break;
  default: break;
  }
  return v;
}

static uint64_t next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* The contents a block of this tag has: 8-byte word g (little-endian) is
 * word(tag, g), so any prefix of a block reads the same however it is
 * checked. Blocks are at least 8-aligned. */
static inline uint64_t word(uint64_t tag, size_t g) { return (tag + g) * 0x9E3779B97F4A7C15ull; }
static inline unsigned char byte_at(uint64_t tag, size_t i) {
  return (unsigned char)(word(tag, i >> 3) >> ((i & 7) * 8));
}
static inline unsigned char canary(uint64_t tag) { return (unsigned char)(0xC3 ^ (tag * 131)); }

static void fill(unsigned char *p, size_t n, uint64_t tag) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) *(uint64_t *)(p + i) = word(tag, i >> 3);
  for (; i < n; i++) p[i] = byte_at(tag, i);
}

/* The first byte in [0, n) that is not the pattern, or n. */
static size_t check(const unsigned char *p, size_t n, uint64_t tag) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    if (*(const uint64_t *)(p + i) != word(tag, i >> 3)) break;
  for (; i < n; i++)
    if (p[i] != byte_at(tag, i)) return i;
  return n;
}

static size_t first_nonzero(const unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i < n && ((uintptr_t)(p + i) & 7); i++)
    if (p[i]) return i;
  for (; i + 8 <= n; i += 8)
    if (*(const uint64_t *)(p + i)) break;
  for (; i < n; i++)
    if (p[i]) return i;
  return n;
}

/* ---- live blocks: no two may overlap ---------------------------------- */

struct range { uintptr_t lo, hi; };
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *reg;
static size_t reg_n, reg_cap;

static void reg_add(void *p, size_t len) {
  uintptr_t lo = (uintptr_t)p, hi = lo + (len ? len : 1);
  pthread_mutex_lock(&reg_lock);
  if (reg_n == reg_cap) {
    reg_cap = reg_cap ? 2 * reg_cap : 1024;
    /* glibc's own: the registry is not under test */
    struct range *r = __libc_malloc(reg_cap * sizeof *r);
    if (!r) fail("registry");
    if (reg_n) memcpy(r, reg, reg_n * sizeof *r);
    __libc_free(reg);
    reg = r;
  }
  size_t a = 0, b = reg_n;
  while (a < b) {
    size_t m = (a + b) / 2;
    if (reg[m].lo < lo) a = m + 1; else b = m;
  }
  if (a > 0 && reg[a - 1].hi > lo)
    fail("block [%#lx, %#lx) overlaps live [%#lx, %#lx)", lo, hi, reg[a - 1].lo, reg[a - 1].hi);
  if (a < reg_n && reg[a].lo < hi)
    fail("block [%#lx, %#lx) overlaps live [%#lx, %#lx)", lo, hi, reg[a].lo, reg[a].hi);
  memmove(reg + a + 1, reg + a, (reg_n - a) * sizeof *reg);
  reg[a] = (struct range){lo, hi};
  reg_n++;
  pthread_mutex_unlock(&reg_lock);
}

static void reg_del(void *p) {
  uintptr_t lo = (uintptr_t)p;
  pthread_mutex_lock(&reg_lock);
  size_t a = 0, b = reg_n;
  while (a < b) {
    size_t m = (a + b) / 2;
    if (reg[m].lo < lo) a = m + 1; else b = m;
  }
  if (a == reg_n || reg[a].lo != lo) fail("registry lost %p", p);
  memmove(reg + a, reg + a + 1, (reg_n - a - 1) * sizeof *reg);
  reg_n--;
  pthread_mutex_unlock(&reg_lock);
}

/* ---- a block under test ---------------------------------------------- */

struct blk {
  unsigned char *p;
  size_t n;   /* requested */
  size_t u;   /* usable: canaries in [n, u) */
  uint64_t tag;
  const char *how;
};

static atomic_ulong served_zeroed, served_aligned, served_large;

/* Takes a fresh allocation: checks, registers, fills and guards it. */
static void adopt(struct blk *b, void *p, size_t n, uint64_t tag, const char *how, int zeroed,
                  size_t align) {
  if (!p) fail("%s(%zu) returned NULL (errno %d)", how, n, errno);
  if ((uintptr_t)p % 16) fail("%s(%zu) = %p: not 16-aligned", how, n, p);
  if (align && (uintptr_t)p % align) fail("%s(%zu, align %zu) = %p: misaligned", how, n, align, p);
  size_t u = malloc_usable_size(p);
  if (u < n) fail("%s(%zu) = %p: usable size %zu", how, n, p, u);
  if (zeroed) {
    size_t z = first_nonzero(p, n);
    if (z != n)
      fail("%s(%zu) = %p: byte %zu is %#x, not zero", how, n, p, z, ((unsigned char *)p)[z]);
    served_zeroed++;
  }
  if (align) served_aligned++;
  if (n >= T) served_large++;
  reg_add(p, u);
  b->p = p;
  b->n = n;
  b->u = u;
  b->tag = tag;
  b->how = how;
  fill(b->p, n, tag);
  memset(b->p + n, canary(tag), u - n);
}

static void verify(const struct blk *b, const char *when) {
  size_t at = check(b->p, b->n, b->tag);
  if (at != b->n)
    fail("%s: block %p (%s, %zu bytes) changed at byte %zu", when, b->p, b->how, b->n, at);
  unsigned char c = canary(b->tag);
  for (size_t i = b->n; i < b->u; i++)
    if (b->p[i] != c)
      fail("%s: block %p (%s, %zu of %zu usable): guard byte %zu changed", when, b->p, b->how,
           b->n, b->u, i);
  if (malloc_usable_size(b->p) != b->u)
    fail("%s: usable size of %p changed: %zu, was %zu", when, b->p, malloc_usable_size(b->p),
         b->u);
}

static void drop(struct blk *b) {
  verify(b, "free");
  reg_del(b->p);
  free(b->p);
  b->p = NULL;
}

/* Sizes around the threshold, and some far from it. */
static size_t random_size(uint64_t *s) {
  uint64_t r = next(s);
  switch (r % 20) {
  case 0: return 1 + (r >> 8) % 4096;
  case 1: return 1 + (r >> 8) % (T / 2);
  case 2: {
    static const long d[] = {-4097, -4096, -1, 0, 1, 4095, 4096, 4097};
    return (size_t)((long)T + d[(r >> 8) % 8]);
  }
  case 3: return (1 << 20) + (r >> 8) % (7 << 20);
  default: return T / 2 + (r >> 8) % (2 * T);
  }
}

/* Blocks any thread may free: handed between threads. */
#define SHARED 32
static struct blk shared[SHARED];
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static void alloc_one(struct blk *b, uint64_t *s, uint64_t tag) {
  size_t n = random_size(s);
  uint64_t r = next(s);
  size_t align = (size_t)8 << ((r >> 8) % 19); /* 8 .. 2 MiB */
  void *p = NULL;
  int rc;
  switch (r % 16) {
  case 0: case 1: case 2: case 3: adopt(b, malloc(n), n, tag, "malloc", 0, 0); break;
  case 4: case 5: case 6: {
    size_t k = 1 + (r >> 40) % 8;
    n = (n + k - 1) / k * k;
    adopt(b, calloc(k, n / k), n, tag, "calloc", 1, 0);
    break;
  }
  case 7: adopt(b, realloc(NULL, n), n, tag, "realloc(NULL)", 0, 0); break;
  case 8: adopt(b, reallocarray(NULL, 1, n), n, tag, "reallocarray(NULL)", 0, 0); break;
  case 9: case 10:
    rc = posix_memalign(&p, align, n);
    if (rc) fail("posix_memalign(%zu, %zu) = %d", align, n, rc);
    adopt(b, p, n, tag, "posix_memalign", 0, align);
    break;
  case 11:
    n = (n + align - 1) / align * align; /* C11: a multiple (ASan insists) */
    adopt(b, aligned_alloc(align, n), n, tag, "aligned_alloc", 0, align);
    break;
  case 12: adopt(b, memalign(align, n), n, tag, "memalign", 0, align); break;
  case 13: adopt(b, valloc(n), n, tag, "valloc", 0, PAGE); break;
  case 14: adopt(b, pvalloc(n), n, tag, "pvalloc", 0, PAGE); break;
  default: adopt(b, malloc(n), n, tag, "malloc", 0, 0); break;
  }
}

/* realloc a live block to a random size: the common prefix stays. */
static void realloc_one(struct blk *b, uint64_t *s, uint64_t tag) {
  verify(b, "before realloc");
  size_t n = random_size(s);
  if (next(s) % 4 == 0) n = b->n + (b->n >> 1) + 1; /* the growing-buffer pattern */
  reg_del(b->p);
  unsigned char *q = next(s) % 8 ? realloc(b->p, n) : reallocarray(b->p, 1, n);
  if (!q) fail("realloc(%p, %zu) returned NULL", b->p, n);
  size_t keep = b->n < n ? b->n : n;
  size_t at = check(q, keep, b->tag);
  if (at != keep)
    fail("realloc(%p (%s, %zu), %zu) = %p lost byte %zu", b->p, b->how, b->n, n, q, at);
  struct blk nb;
  adopt(&nb, q, n, tag, "realloc", 0, 0);
  *b = nb;
}

struct mix_arg {
  int id;
  long iters;
  uint64_t seed;
};

#define LIVE 24

static void *mix_thread(void *arg) {
  struct mix_arg *a = arg;
  uint64_t s = a->seed * 0x2545F4914F6CDD1Dull + (uint64_t)a->id * 7919 + 1;
  struct blk live[LIVE] = {0};
  for (long it = 0; it < a->iters; it++) {
    uint64_t r = next(&s);
    int k = (int)((r >> 20) % LIVE);
    uint64_t tag = ((uint64_t)a->id << 48) ^ (uint64_t)it ^ (r & 0xffff0000);
    if (r % 32 == 0) {
      /* hand a block to whichever thread comes next */
      int j = (int)((r >> 33) % SHARED);
      pthread_mutex_lock(&shared_lock);
      struct blk t = shared[j];
      shared[j] = live[k];
      live[k] = t;
      pthread_mutex_unlock(&shared_lock);
      if (live[k].p) verify(&live[k], "handed over");
    } else if (!live[k].p) {
      alloc_one(&live[k], &s, tag);
    } else if (r % 5 == 0) {
      realloc_one(&live[k], &s, tag);
    } else {
      drop(&live[k]);
    }
  }
  for (int k = 0; k < LIVE; k++)
    if (live[k].p) drop(&live[k]);
  return NULL;
}

static void run_mix(int threads, long iters, uint64_t seed) {
  pthread_t t[64];
  struct mix_arg a[64];
  if (threads < 1 || threads > 64) fail("threads");
  for (int i = 0; i < threads; i++) {
    a[i] = (struct mix_arg){i, iters, seed};
    if (pthread_create(&t[i], NULL, mix_thread, &a[i])) fail("pthread_create");
  }
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int j = 0; j < SHARED; j++)
    if (shared[j].p) drop(&shared[j]);
  if (reg_n) fail("%zu blocks still registered", reg_n);
}

static int mode_mix(int argc, char **argv) {
  if (argc < 5) fail("mix THREADS ITERS SEED");
  int threads = atoi(argv[2]);
  long iters = atol(argv[3]);
  run_mix(threads, iters, strtoull(argv[4], NULL, 0));
  printf("mix: %d threads x %ld ops: %lu zeroed, %lu aligned, %lu at or above %zu checked\n",
         threads, iters, (unsigned long)served_zeroed, (unsigned long)served_aligned,
         (unsigned long)served_large, T);
  return 0;
}

/* ---- align: the table to diff against glibc --------------------------- */

static size_t pow2_at_least(size_t a) {
  size_t p = 1;
  while (p < a && p) p <<= 1;
  return p;
}

static void report(const char *fn, size_t align, size_t size, void *p, int err, int rc) {
  /* how aligned the answer is, capped at the alignment asked for (rounded up) */
  size_t want = pow2_at_least(align ? align : 1);
  int ok = p && want ? (uintptr_t)p % want == 0 : 0;
  printf("%s(align %zu, size %zu): %s rc %d errno %d aligned %d\n", fn, align, size,
         p ? "ptr" : "NULL", rc, p ? 0 : err, ok);
  if (p) {
    size_t u = malloc_usable_size(p);
    if (u < size) fail("%s(%zu, %zu): usable %zu", fn, align, size, u);
    if (size) memset(p, 0x5A, size);
    free(p);
  }
}

static int mode_align(void) {
  const size_t aligns[] = {0, 1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64, 100, 128, 4096, 4097,
                           65536, 1 << 20, 3 << 20, 2 << 20, 4 << 20, 64 << 20,
                           (size_t)1 << 40, SIZE_MAX / 2, SIZE_MAX / 2 + 1, SIZE_MAX};
  const size_t sizes[] = {0, 1, 4096, T - 1, T, T + 1, 3 << 20, SIZE_MAX / 4};
  for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++) {
    for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
      size_t a = aligns[i], n = sizes[j];
      void *p = (void *)1;
      errno = 0;
      int rc = posix_memalign(&p, a, n);
      if (rc && p != (void *)1) fail("posix_memalign changed *memptr on error");
      report("posix_memalign", a, n, rc ? NULL : p, rc ? rc : errno, rc);
      errno = 0;
      p = aligned_alloc(a, n);
      report("aligned_alloc", a, n, p, errno, 0);
      errno = 0;
      p = memalign(a, n);
      report("memalign", a, n, p, errno, 0);
    }
  }
  const size_t vsizes[] = {0, 1, 4096, 4097, T - 1, T, T + 1, 3 << 20, SIZE_MAX - 4096, SIZE_MAX};
  for (size_t j = 0; j < sizeof vsizes / sizeof *vsizes; j++) {
    errno = 0;
    void *p = valloc(vsizes[j]);
    report("valloc", PAGE, vsizes[j], p, errno, 0);
    errno = 0;
    p = pvalloc(vsizes[j]);
    report("pvalloc", PAGE, vsizes[j], p, errno, 0);
  }
  return 0;
}

/* ---- huge: what the kernel would refuse, refused ---------------------- */

static int mode_huge(void) {
  struct { unsigned long ram, swap; } m = {0, 0};
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    unsigned long v;
    if (sscanf(line, "MemTotal: %lu kB", &v) == 1) m.ram = v << 10;
    if (sscanf(line, "SwapTotal: %lu kB", &v) == 1) m.swap = v << 10;
  }
  if (f) fclose(f);
  /* the kernel's heuristic overcommit refuses a single mapping past RAM + swap */
  size_t past = m.ram + m.swap + ((size_t)1 << 30);
  const size_t sizes[] = {past, 2 * past, (size_t)1 << 46, (size_t)1 << 47, PTRDIFF_MAX,
                          (size_t)PTRDIFF_MAX + 1, SIZE_MAX - 4096, SIZE_MAX};
  const char *names[] = {"RAM+swap+1G", "2x that", "64 TiB", "128 TiB", "PTRDIFF_MAX",
                         "PTRDIFF_MAX+1", "SIZE_MAX-4096", "SIZE_MAX"};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    errno = 0;
    void *p = malloc(n);
    printf("malloc(%s): %s errno %d\n", names[i], p ? "ptr" : "NULL", p ? 0 : errno);
    free(p);
    errno = 0;
    p = calloc(1, n);
    printf("calloc(%s): %s errno %d\n", names[i], p ? "ptr" : "NULL", p ? 0 : errno);
    free(p);
    errno = 0;
    p = calloc(n / 4096 + 1, 4096);
    printf("calloc(%s / 4096 + 1, 4096): %s errno %d\n", names[i], p ? "ptr" : "NULL",
           p ? 0 : errno);
    free(p);
    void *q = malloc(2 << 20);
    memset(q, 1, 2 << 20);
    errno = 0;
    p = realloc(q, n);
    printf("realloc(2M, %s): %s errno %d\n", names[i], p ? "ptr" : "NULL", p ? 0 : errno);
    if (!p) {
      for (size_t k = 0; k < (2 << 20); k += 4096)
        if (((unsigned char *)q)[k] != 1) fail("a failed realloc lost the block");
      free(q);
    } else {
      free(p);
    }
    void *al = NULL;
    int rc = posix_memalign(&al, 1 << 21, n);
    printf("posix_memalign(2M, %s): rc %d\n", names[i], rc);
    if (!rc) free(al);
  }
  return 0;
}

/* ---- realloc ---------------------------------------------------------- */

static void expect_same(const unsigned char *p, size_t n, uint64_t tag, const char *what) {
  size_t at = check(p, n, tag);
  if (at != n) fail("%s: byte %zu of %zu lost", what, at, n);
}

static int mode_realloc(void) {
  const size_t M = 1 << 20;
  /* grow in place: the last block grows into the free range after it */
  unsigned char *a = malloc(2 * M);
  fill(a, 2 * M, 1);
  unsigned char *a2 = realloc(a, 3 * M);
  expect_same(a2, 2 * M, 1, "grow");
  printf("grow at the top: %s\n", a2 == a ? "in place" : "moved");
  fill(a2, 3 * M, 2);

  /* grow where a live block is in the way: moved (mremap), contents kept */
  unsigned char *wall = malloc(2 * M);
  fill(wall, 2 * M, 3);
  unsigned char *b = malloc(4 * M);
  fill(b, 4 * M, 4);
  unsigned char *wall2 = malloc(2 * M);
  fill(wall2, 2 * M, 5);
  for (int round = 0; round < 8; round++) {
    size_t from = (4 * M) << round, to = from * 2;
    unsigned char *b2 = realloc(b, to);
    if (!b2) fail("realloc to %zu", to);
    expect_same(b2, from, 4 + round, "grow past a live block");
    fill(b2, to, 5 + round);
    /* the old place comes back zero to calloc */
    unsigned char *z = calloc(1, from);
    size_t nz = first_nonzero(z, from);
    if (nz != from) fail("calloc after realloc moved: byte %zu not zero", nz);
    free(z);
    b = b2;
    if (round == 3) break;
  }
  expect_same(wall, 2 * M, 3, "the wall");
  expect_same(wall2, 2 * M, 5, "the second wall");

  /* shrink, a little and a lot: the prefix stays, the block stays */
  size_t bl = malloc_usable_size(b);
  unsigned char *b3 = realloc(b, bl - 4096);
  expect_same(b3, bl - 4096, 8, "shrink a little");
  unsigned char *b4 = realloc(b3, 3 * M / 2);
  expect_same(b4, 3 * M / 2, 8, "shrink a lot");
  if (malloc_usable_size(b4) < 3 * M / 2) fail("usable after shrink");
  unsigned char *b5 = realloc(b4, 100);
  expect_same(b5, 100, 8, "shrink below the threshold");
  unsigned char *b6 = realloc(b5, 5 * M);
  expect_same(b6, 100, 8, "grow again");

  /* realloc(p, 0): freed, NULL (glibc) */
  errno = 0;
  void *r0 = realloc(b6, 0);
  printf("realloc(large, 0): %s\n", r0 ? "ptr" : "NULL");
  if (r0) free(r0);
  void *s0 = realloc(malloc(100), 0);
  printf("realloc(small, 0): %s\n", s0 ? "ptr" : "NULL");
  if (s0) free(s0);

  /* glibc's pointers across the threshold, both ways */
  unsigned char *g = malloc(T - 1);
  fill(g, T - 1, 20);
  unsigned char *g2 = realloc(g, T + 1);
  expect_same(g2, T - 1, 20, "glibc block grown past the threshold");
  fill(g2, T + 1, 21);
  unsigned char *g3 = realloc(g2, T / 2);
  expect_same(g3, T / 2, 21, "large block shrunk below the threshold");
  unsigned char *g4 = realloc(g3, 8 * T);
  expect_same(g4, T / 2, 21, "and grown again");
  free(g4);
  unsigned char *h = malloc(3 * T);
  fill(h, 3 * T, 22);
  unsigned char *h2 = realloc(h, 64);
  expect_same(h2, 64, 22, "large to tiny");
  free(h2);

  /* failures leave the block alone, with glibc's errno (not under valgrind,
   * which calls every size past PTRDIFF_MAX an error of the program's) */
  if (getenv("PRELOAD_TEST_VALGRIND")) goto growing;
  unsigned char *k = malloc(2 * M);
  fill(k, 2 * M, 23);
  errno = 0;
  if (realloc(k, SIZE_MAX - 4096)) fail("realloc to SIZE_MAX - 4096 succeeded");
  printf("realloc(large, SIZE_MAX - 4096): errno %d\n", errno);
  errno = 0;
  if (reallocarray(k, SIZE_MAX / 2, 3)) fail("reallocarray overflow succeeded");
  printf("reallocarray(large, overflow): errno %d\n", errno);
  expect_same(k, 2 * M, 23, "after failed reallocs");
  free(k);
  unsigned char *sm = malloc(64);
  errno = 0;
  if (realloc(sm, SIZE_MAX - 4096)) fail("realloc small to SIZE_MAX - 4096 succeeded");
  printf("realloc(small, SIZE_MAX - 4096): errno %d\n", errno);
  free(sm);

growing:;
  /* the growing buffer: doubling from 1 byte to 256 MiB, contents kept */
  unsigned char *buf = NULL;
  size_t have = 0;
  for (size_t n = 1; n <= (256 << 20); n *= 2) {
    unsigned char *nb = realloc(buf, n);
    if (!nb) fail("growing buffer at %zu", n);
    if (have) {
      /* spot checks: the whole check is the mix's job */
      for (size_t i = 0; i < have; i += have / 64 + 1)
        if (nb[i] != (unsigned char)(i * 7)) fail("growing buffer lost byte %zu at %zu", i, n);
    }
    for (size_t i = have; i < n; i++) nb[i] = (unsigned char)(i * 7);
    buf = nb;
    have = n;
  }
  for (size_t i = 0; i < have; i++)
    if (buf[i] != (unsigned char)(i * 7)) fail("growing buffer lost byte %zu", i);
  free(buf);
  free(a2);
  free(wall);
  free(wall2);
  printf("realloc: ok\n");
  return 0;
}

/* ---- fork ------------------------------------------------------------- */

static atomic_int stop_traffic;

static void *traffic(void *arg) {
  struct mix_arg *a = arg;
  uint64_t s = a->seed + (uint64_t)a->id * 104729 + 1;
  void *live[16] = {0};
  size_t len[16] = {0};
  while (!stop_traffic) {
    uint64_t r = next(&s);
    int k = (int)(r % 16);
    if (live[k]) {
      for (size_t i = 0; i < len[k]; i += 4096)
        if (((unsigned char *)live[k])[i] != (unsigned char)k) fail("traffic block changed");
      free(live[k]);
      live[k] = NULL;
    } else {
      len[k] = random_size(&s);
      live[k] = (r >> 32) % 2 ? malloc(len[k]) : calloc(1, len[k]);
      if (!live[k]) fail("traffic alloc");
      memset(live[k], k, len[k]);
    }
  }
  for (int k = 0; k < 16; k++) free(live[k]);
  return NULL;
}

/* What a child does: large callocs all zero, mallocs keep, frees; exit 0. */
static int child_work(uint64_t seed) {
  uint64_t s = seed | 1;
  for (int i = 0; i < 24; i++) {
    size_t n = random_size(&s);
    unsigned char *z = calloc(1, n);
    if (!z) return 10;
    if (first_nonzero(z, n) != n) return 11;
    unsigned char *m = malloc(n);
    if (!m) return 12;
    fill(m, n, seed + i);
    unsigned char *m2 = realloc(m, n + T);
    if (!m2 || check(m2, n, seed + i) != n) return 13;
    free(z);
    free(m2);
  }
  return 0;
}

static int mode_fork(int argc, char **argv, const char *self) {
  if (argc < 4) fail("fork THREADS ROUNDS");
  int threads = atoi(argv[2]), rounds = atoi(argv[3]);
  pthread_t t[16];
  struct mix_arg a[16];
  for (int i = 0; i < threads; i++) {
    a[i] = (struct mix_arg){i, 0, 42};
    pthread_create(&t[i], NULL, traffic, &a[i]);
  }
  int execs = 0, plain = 0;
  for (int r = 0; r < rounds; r++) {
    /* the parent's own block, across the fork */
    unsigned char *mine = malloc(3 * T);
    fill(mine, 3 * T, 1000 + r);
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
      if (r % 2) {
        execl(self, self, "child", NULL);
        _exit(20);
      }
      if (check(mine, 3 * T, 1000 + r) != 3 * T) _exit(21);
      int rc = child_work(r);
      free(mine);
      _exit(rc);
    }
    memset(mine, 0, 3 * T); /* the child's copy must not see this */
    int st;
    if (waitpid(pid, &st, 0) != pid) fail("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st))
      fail("fork round %d (%s): child status %#x", r, r % 2 ? "exec" : "no exec", st);
    r % 2 ? execs++ : plain++;
    free(mine);
  }
  stop_traffic = 1;
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  printf("fork: %d children without exec, %d with, all clean\n", plain, execs);
  return 0;
}

/* ---- signals ---------------------------------------------------------- */

static atomic_long signals_seen;

static void on_signal(int sig) {
  (void)sig;
  int e = errno;
  signals_seen++;
  errno = e;
}

static void *kicker(void *arg) {
  pthread_t *targets = arg;
  int i = 0;
  while (!stop_traffic) {
    pthread_kill(targets[i++ % 4], SIGUSR1);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static int mode_signals(int argc, char **argv) {
  if (argc < 4) fail("signals THREADS ITERS");
  int threads = atoi(argv[2]);
  long iters = atol(argv[3]);
  if (threads > 4) threads = 4;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  sa.sa_flags = 0; /* SIGUSR1 interrupts system calls: EINTR where they can */
  sigaction(SIGUSR1, &sa, NULL);
  struct itimerval it = {{0, 100}, {0, 100}};
  setitimer(ITIMER_PROF, &it, NULL);
  pthread_t t[4], k;
  struct mix_arg a[4];
  /* Rounds of the same traffic until the storm is one: the faster the
   * allocator, the less CPU time a round takes, and the fewer timer
   * signals come (under the lazy mode, a sixth of plainly's). */
  for (int round = 0; round < 20 && signals_seen < 100; round++) {
    stop_traffic = 0;
    for (int i = 0; i < 4; i++) {
      a[i] = (struct mix_arg){i, i < threads ? iters : iters / 4, 7 + round};
      pthread_create(&t[i], NULL, mix_thread, &a[i]);
    }
    pthread_create(&k, NULL, kicker, t);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    stop_traffic = 1;
    pthread_join(k, NULL);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
  printf("signals: %ld handled during the traffic\n", (long)signals_seen);
  if (signals_seen < 100) fail("only %ld signals arrived", (long)signals_seen);
  return 0;
}

/* ---- dlopen ----------------------------------------------------------- */

static int mode_dlopen(int argc, char **argv) {
  if (argc < 4) fail("dlopen LIB ROUNDS");
  int rounds = atoi(argv[3]);
  setenv("PRELOAD_DL_SIZE", argv[4] ? argv[4] : "4194304", 1);
  for (int r = 0; r < rounds; r++) {
    void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!h) fail("dlopen: %s", dlerror());
    int (*work)(unsigned) = (int (*)(unsigned))dlsym(h, "preload_dl_work");
    if (!work) fail("dlsym: %s", dlerror());
    int rc = work((unsigned)r);
    if (rc) fail("preload_dl_work round %d: %d", r, rc);
    /* a block the library made, freed here after it is gone */
    void *(*keep)(void) = (void *(*)(void))dlsym(h, "preload_dl_keep");
    unsigned char *kept = keep ? keep() : NULL;
    if (dlclose(h)) fail("dlclose: %s", dlerror());
    if (kept) {
      for (size_t i = 0; i < T; i += 4096)
        if (kept[i] != 0x77) fail("a library's block changed after dlclose");
      free(kept);
    }
  }
  /* system libraries that allocate in their own way */
  const char *sys[] = {"libm.so.6", "libresolv.so.2", "libnss_files.so.2", "libz.so.1"};
  int opened = 0;
  for (size_t i = 0; i < sizeof sys / sizeof *sys; i++) {
    void *h = dlopen(sys[i], RTLD_NOW);
    if (!h) continue;
    opened++;
    void *big = calloc(1, 3 * T);
    if (!big || first_nonzero(big, 3 * T) != 3 * T) fail("calloc with %s loaded", sys[i]);
    free(big);
    dlclose(h);
  }
  printf("dlopen: %d rounds of the test library, %d system libraries\n", rounds, opened);
  return 0;
}

/* ---- bad frees -------------------------------------------------------- */

static int mode_badfree(void) {
  unsigned char *p = malloc(4 << 20);
  fill(p, 4 << 20, 99);
  unsigned char *q = malloc(4 << 20);
  fill(q, 4 << 20, 98);
  size_t u = malloc_usable_size(p);
  /* pointers inside a block: ignored, and nothing moves */
  free(p + 4096);
  free(p + 1);
  free(p + (2 << 20));
  printf("usable inside a block: %zu\n", malloc_usable_size(p + 4096));
  if (malloc_usable_size(p) != u) fail("usable size changed");
  expect_same(p, 4 << 20, 99, "after inner frees");
  /* the calloc after inner frees must not get p's memory */
  unsigned char *z = calloc(1, 4 << 20);
  if (first_nonzero(z, 4 << 20) != (4 << 20)) fail("calloc after bad frees not zero");
  if (z < p + u && p < z + (4 << 20)) fail("calloc got a live block's memory");
  expect_same(p, 4 << 20, 99, "after calloc");
  free(p);
  /* a double free: ignored (glibc would abort); the memory is not handed out twice */
  free(p);
  unsigned char *x = malloc(4 << 20), *y = malloc(4 << 20);
  if (x == y) fail("a double free handed one block out twice");
  fill(x, 4 << 20, 1);
  fill(y, 4 << 20, 2);
  expect_same(x, 4 << 20, 1, "x");
  expect_same(q, 4 << 20, 98, "q");
  free(x);
  free(y);
  free(q);
  free(z);
  printf("badfree: ok\n");
  return 0;
}

/* free() of memory from mmap: glibc aborts or faults; so must we (we forward). */
static int mode_mmapfree(void) {
  unsigned char *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  m[4096] = 1;
  free(m + 4096 + 16);
  printf("mmapfree: survived\n");
  return 0;
}

/* ---- early: from a constructor, and from glibc itself ------------------ */

static unsigned char *ctor_big, *ctor_small, *ctor_zero;

__attribute__((constructor(101))) static void early_ctor(void) {
  size_t th = parse_size(getenv("PRELOAD_TEST_T"), parse_size(getenv("PREZERO_THRESHOLD"), 1 << 20));
  ctor_big = malloc(th * 2);
  ctor_small = malloc(100);
  ctor_zero = calloc(1, th * 3);
  if (ctor_big) memset(ctor_big, 0x11, th * 2);
  if (ctor_small) memset(ctor_small, 0x22, 100);
}

static int mode_early(void) {
  if (!ctor_big || !ctor_small || !ctor_zero) fail("constructor allocations");
  if (first_nonzero(ctor_zero, 3 * T) != 3 * T) fail("constructor calloc not zero");
  for (size_t i = 0; i < 2 * T; i++)
    if (ctor_big[i] != 0x11) fail("constructor block changed");
  unsigned char *b = realloc(ctor_big, 5 * T);
  for (size_t i = 0; i < 2 * T; i++)
    if (b[i] != 0x11) fail("constructor block lost on realloc");
  free(b);
  free(ctor_small);
  free(ctor_zero);
  /* glibc's own blocks, never seen by the preload: every entry point takes them */
  unsigned char *g[6];
  g[0] = __libc_malloc(100);
  g[1] = __libc_malloc(3 * T);
  g[2] = __libc_calloc(1, 2 * T);
  g[3] = __libc_memalign(4096, 2 * T);
  g[4] = __libc_malloc(T - 1);
  g[5] = __libc_malloc(200000);
  for (int i = 0; i < 6; i++)
    if (!g[i]) fail("__libc_* allocation");
  if (first_nonzero(g[2], 2 * T) != 2 * T) fail("__libc_calloc not zero");
  memset(g[1], 0x33, 3 * T);
  memset(g[4], 0x44, T - 1);
  if (malloc_usable_size(g[1]) < 3 * T) fail("usable size of a glibc block");
  free(g[0]);
  unsigned char *r1 = realloc(g[1], 6 * T);
  for (size_t i = 0; i < 3 * T; i++)
    if (r1[i] != 0x33) fail("realloc of a glibc block lost byte %zu", i);
  unsigned char *r4 = realloc(g[4], 4 * T);
  for (size_t i = 0; i < T - 1; i++)
    if (r4[i] != 0x44) fail("realloc of a glibc block across the threshold lost byte %zu", i);
  free(r1);
  free(r4);
  free(g[2]);
  free(g[3]);
  free(g[5]);
  printf("early: ok\n");
  return 0;
}

/* ---- limits: cap, idle, prefill -------------------------------------- */

static size_t rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  if (!f || fscanf(f, "%lu %lu", &size, &res) != 2) fail("statm");
  fclose(f);
  return res * PAGE;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int mode_cap(void) {
  const size_t n = 40, len = 4 << 20;
  unsigned char *p[40];
  size_t base = rss();
  for (size_t i = 0; i < n; i++) {
    p[i] = malloc(len);
    memset(p[i], 1, len);
  }
  size_t full = rss();
  for (size_t i = 0; i < n; i++) free(p[i]);
  size_t after = rss();
  printf("cap: baseline %zu MiB, in use %zu MiB, held after free %zu MiB\n", base >> 20,
         (full - base) >> 20, (after > base ? after - base : 0) >> 20);
  return 0;
}

static int mode_idle(int argc, char **argv) {
  double limit = argc > 2 ? atof(argv[2]) : 10;
  size_t base = rss();
  const size_t len = 64 << 20;
  unsigned char *p = malloc(len);
  memset(p, 1, len);
  __asm__ volatile("" ::"r"(p) : "memory");
  free(p);
  double t0 = now_s();
  size_t held = rss();
  while (now_s() - t0 < limit) {
    size_t r = rss();
    if (r < base + (8 << 20)) {
      printf("idle: held %zu MiB after free, given back after %.1f s\n",
             (held > base ? held - base : 0) >> 20, now_s() - t0);
      return 0;
    }
    usleep(100000);
  }
  printf("idle: still held %zu MiB after %.1f s\n", (rss() - base) >> 20, limit);
  return 0;
}

static int mode_prefill(double wait_s) {
  /* wait for the background prefill to populate */
  size_t want = parse_size(getenv("PREZERO_PREFILL"), 0);
  double t0 = now_s();
  while (rss() < want && now_s() - t0 < wait_s) usleep(20000);
  usleep(100000);
  struct rusage r0, r1;
  size_t n = want / 2;
  getrusage(RUSAGE_SELF, &r0);
  unsigned char *z = calloc(1, n);
  if (first_nonzero(z, n) != n) fail("calloc after prefill not zero");
  memset(z, 1, n);
  getrusage(RUSAGE_SELF, &r1);
  printf("prefill: rss %zu MiB after %.2f s; calloc(%zu MiB) + touch: %ld page faults\n",
         rss() >> 20, now_s() - t0, n >> 20, r1.ru_minflt - r0.ru_minflt);
  free(z);
  return 0;
}

/* The scrubber runs the prefill when it first gets a core; a block freed before
 * that must not be counted as zero. Run on one CPU at SCHED_FIFO so the
 * scrubber cannot run before the free (the harness does the pinning). */
static int mode_prefill_dirty(void) {
  int bad = 0;
  for (int round = 0; round < 4; round++) {
    size_t n = (2 << 20) << round;
    unsigned char *p = malloc(n);
    memset(p, 0xAA, n);
    __asm__ volatile("" ::"r"(p) : "memory");
    free(p);
    usleep(200000);
    unsigned char *q = calloc(1, n);
    size_t z = first_nonzero(q, n);
    if (z != n) {
      printf("prefill-dirty: round %d: calloc(%zu) byte %zu is %#x\n", round, n, z, q[z]);
      bad++;
    }
    free(q);
  }
  if (bad) fail("calloc returned memory that was not zero");
  printf("prefill-dirty: ok\n");
  return 0;
}

/* numpy's loop: each round's calloc comes right after the last round's free,
 * before the scrubber can clear it. The spare (populated in the background
 * once a calloc had to clear) must serve later rounds zeroed and populated;
 * on several threads, while others take and free blocks around it. */
static int spare_rounds;

static void *spare_thread(void *arg) {
  long id = (long)arg;
  const size_t n = (size_t)(32 + 8 * id) << 20;
  unsigned char *p = NULL;
  for (int i = 0; i < spare_rounds; i++) {
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    free(p);
    p = calloc(1, n);
    if (!p) fail("spare: thread %ld round %d: calloc failed", id, i);
    size_t z = first_nonzero(p, n);
    if (z != n) fail("spare: thread %ld round %d: calloc byte %zu is %#x", id, i, z, p[z]);
    memset(p, 0xA5, n);
    getrusage(RUSAGE_THREAD, &r1);
    printf("spare: thread %ld round %d: %ld page faults\n", id, i, r1.ru_minflt - r0.ru_minflt);
    usleep(200000); /* the program's work: the scrubber gets a core */
  }
  free(p);
  return NULL;
}

static int mode_spare(int argc, char **argv) {
  spare_rounds = argc > 2 ? atoi(argv[2]) : 8;
  long threads = argc > 3 ? atol(argv[3]) : 1;
  pthread_t t[8];
  if (threads < 1 || threads > 8) fail("spare: 1-8 threads");
  for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, spare_thread, (void *)i);
  for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
  return 0;
}

/* ---- a calloc while the program's threads take every core -------------- */

static volatile int spinning = 1;

static void *spinner(void *arg) {
  (void)arg;
  while (spinning) {
  }
  return NULL;
}

/* The scrubber runs at SCHED_IDLE: with every core busy it barely runs. A
 * calloc that waits for its step must not wait long. Prints the worst. */
static int mode_starve(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1 || cpus > 64) cpus = 2;
  pthread_t t[64];
  for (long i = 0; i < cpus; i++) pthread_create(&t[i], NULL, spinner, NULL);
  const size_t n = 64 << 20;
  double worst = 0, total = 0;
  const int rounds = 40;
  for (int i = 0; i < rounds; i++) {
    unsigned char *p = malloc(n);
    memset(p, 1, n);
    __asm__ volatile("" ::"r"(p) : "memory");
    free(p);
    usleep(5000); /* the scrubber may take a step of it meanwhile */
    double t0 = now_s();
    unsigned char *q = calloc(1, n);
    double d = now_s() - t0;
    if (first_nonzero(q, n) != n) fail("calloc not zero");
    free(q);
    total += d;
    if (d > worst) worst = d;
  }
  spinning = 0;
  for (long i = 0; i < cpus; i++) pthread_join(t[i], NULL);
  printf("starve: %ld spinning threads: calloc(64 MiB) mean %.2f ms, worst %.2f ms\n", cpus,
         total / rounds * 1e3, worst * 1e3);
  return 0;
}

/* ---- address space --------------------------------------------------- */

static int count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static int mode_vmas(int argc, char **argv) {
  long iters = argc > 2 ? atol(argv[2]) : 20000;
  int before = count_maps();
  unsigned char *ring[16] = {0};
  size_t len[16] = {0};
  uint64_t s = 12345;
  for (long it = 0; it < iters; it++) {
    uint64_t r = next(&s);
    int k = (int)(r % 16);
    size_t n = ((r >> 8) % (16 << 20)) + 1;
    if ((r >> 40) % 6 == 0) {
      free(ring[k]);
      ring[k] = NULL;
      len[k] = 0;
      continue;
    }
    unsigned char *q = realloc(ring[k], n);
    if (!q) fail("realloc");
    size_t keep = len[k] < n ? len[k] : n;
    if (keep && q[0] != (unsigned char)k) fail("realloc lost its first byte");
    if (keep && keep == len[k] && q[keep - 1] != (unsigned char)k) fail("realloc lost its last byte");
    /* only the ends are checked: this is about mappings, not contents */
    q[0] = (unsigned char)k;
    q[n - 1] = (unsigned char)k;
    ring[k] = q;
    len[k] = n;
  }
  for (int k = 0; k < 16; k++) free(ring[k]);
  printf("vmas: %d mappings before, %d after %ld reallocs\n", before, count_maps(), iters);
  return 0;
}

static atomic_long race_bad;
static long race_reallocs;

static void *race_realloc(void *arg) {
  (void)arg;
  unsigned char *ring[16] = {0};
  size_t len[16] = {0};
  uint64_t s = 99;
  while (!stop_traffic) {
    uint64_t r = next(&s);
    int k = (int)(r % 16);
    size_t n = (1 + (r >> 8) % 16) << 20;
    unsigned char *q = realloc(ring[k], n);
    if (!q) fail("realloc");
    size_t keep = len[k] < n ? len[k] : n;
    for (size_t i = 0; i < keep; i += 4096)
      if (q[i] != (unsigned char)k) {
        race_bad++;
        break;
      }
    for (size_t i = 0; i < n; i += 4096) q[i] = (unsigned char)k;
    ring[k] = q;
    len[k] = n;
    race_reallocs++;
  }
  for (int k = 0; k < 16; k++) free(ring[k]);
  printf("mremap-race: %ld reallocs\n", (long)(uintptr_t)0 + race_reallocs);
  return NULL;
}

static void *race_mmap(void *arg) {
  (void)arg;
  size_t len = 1 << 20;
  while (!stop_traffic) {
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("mmap");
    for (size_t i = 0; i < len; i += 4096) m[i] = 0xAB;
    for (volatile int spin = 0; spin < 1000; spin++) {
    }
    for (size_t i = 0; i < len; i += 4096)
      if (m[i] != 0xAB) {
        race_bad++;
        break;
      }
    munmap(m, len);
  }
  return NULL;
}

static int mode_mremap_race(int argc, char **argv) {
  double secs = argc > 2 ? atof(argv[2]) : 2;
  pthread_t t[3];
  pthread_create(&t[0], NULL, race_realloc, NULL);
  pthread_create(&t[1], NULL, race_mmap, NULL);
  pthread_create(&t[2], NULL, race_mmap, NULL);
  usleep((useconds_t)(secs * 1e6));
  stop_traffic = 1;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  if (race_bad) fail("%ld blocks or mappings changed under another thread", (long)race_bad);
  printf("mremap-race: ok\n");
  return 0;
}

/* ---- checker: each answer checked, NULL allowed with ENOMEM ----------- */

static int mode_checker(int argc, char **argv) {
  long iters = argc > 2 ? atol(argv[2]) : 2000;
  uint64_t s = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
  struct blk live[16] = {0};
  long nulls = 0;
  for (long it = 0; it < iters; it++) {
    uint64_t r = next(&s);
    struct blk *b = &live[(r >> 4) % 16];
    uint64_t tag = (uint64_t)it * 0x100000001b3ull ^ r;
    size_t n = random_size(&s);
    if (!b->p) {
      int zeroed = (r >> 12) % 2;
      errno = 0;
      void *p = zeroed ? calloc(1, n) : malloc(n);
      if (!p) {
        if (errno != ENOMEM) fail("%s(%zu) returned NULL with errno %d", zeroed ? "calloc" : "malloc", n, errno);
        nulls++;
        continue;
      }
      adopt(b, p, n, tag, zeroed ? "calloc" : "malloc", zeroed, 0);
    } else if ((r >> 12) % 3 == 0) {
      verify(b, "before realloc");
      reg_del(b->p);
      errno = 0;
      unsigned char *q = realloc(b->p, n);
      if (!q) {
        if (errno != ENOMEM) fail("realloc(%p, %zu) returned NULL with errno %d", b->p, n, errno);
        reg_add(b->p, b->u);
        verify(b, "after a failed realloc");
        nulls++;
        continue;
      }
      size_t keep = b->n < n ? b->n : n;
      size_t at = check(q, keep, b->tag);
      if (at != keep) fail("realloc(%p (%zu), %zu) = %p lost byte %zu", b->p, b->n, n, q, at);
      adopt(b, q, n, tag, "realloc", 0, 0);
    } else {
      drop(b);
    }
    if (it % 64 == 0)
      for (int k = 0; k < 16; k++)
        if (live[k].p) verify(&live[k], "a live block");
  }
  for (int k = 0; k < 16; k++)
    if (live[k].p) drop(&live[k]);
  if (reg_n) fail("%zu blocks still registered", reg_n);
  printf("checker: %ld operations, %ld NULL with ENOMEM\n", iters, nulls);
  return 0;
}

static int mode_errno(void) {
  for (int round = 0; round < 4; round++) {
    size_t n = (size_t)64 << 20;
    unsigned char *p = calloc(1, n);
    if (!p) fail("calloc(%zu) returned NULL", n);
    p[0] = 1;
    p[n - 1] = 1;
    /* Through a volatile: the compiler may assume free keeps errno. */
    volatile int *e = &errno;
    *e = 4321;
    free(p);
    int after = *e;
    if (after != 4321) fail("round %d: free changed errno to %d (%s)", round, after, strerror(after));
  }
  printf("errno: kept across 4 frees\n");
  return 0;
}

int main(int argc, char **argv) {
  PAGE = (size_t)sysconf(_SC_PAGESIZE);
  /* the sizes are chosen around this; PRELOAD_TEST_T: around another */
  T = parse_size(getenv("PRELOAD_TEST_T"), parse_size(getenv("PREZERO_THRESHOLD"), 1 << 20));
  if (T < (64 << 10)) T = 64 << 10; /* the preload's floor */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) fail("usage: %s MODE ...", argv[0]);
  const char *m = argv[1];
  if (!strcmp(m, "mix")) return mode_mix(argc, argv);
  if (!strcmp(m, "spare")) return mode_spare(argc, argv);
  if (!strcmp(m, "align")) return mode_align();
  if (!strcmp(m, "huge")) return mode_huge();
  if (!strcmp(m, "realloc")) return mode_realloc();
  if (!strcmp(m, "fork")) return mode_fork(argc, argv, "/proc/self/exe");
  if (!strcmp(m, "child")) return child_work(getpid());
  if (!strcmp(m, "signals")) return mode_signals(argc, argv);
  if (!strcmp(m, "dlopen")) return mode_dlopen(argc, argv);
  if (!strcmp(m, "badfree")) return mode_badfree();
  if (!strcmp(m, "mmapfree")) return mode_mmapfree();
  if (!strcmp(m, "early")) return mode_early();
  if (!strcmp(m, "cap")) return mode_cap();
  if (!strcmp(m, "idle")) return mode_idle(argc, argv);
  if (!strcmp(m, "prefill")) return mode_prefill(argc > 2 ? atof(argv[2]) : 10);
  if (!strcmp(m, "prefill-dirty")) return mode_prefill_dirty();
  if (!strcmp(m, "vmas")) return mode_vmas(argc, argv);
  if (!strcmp(m, "starve")) return mode_starve();
  if (!strcmp(m, "mremap-race")) return mode_mremap_race(argc, argv);
  if (!strcmp(m, "checker")) return mode_checker(argc, argv);
  if (!strcmp(m, "errno")) return mode_errno();
  fail("unknown mode %s", m);
  return 2;
}
