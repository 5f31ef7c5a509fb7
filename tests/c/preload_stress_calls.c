/* preload_stress.c's calls one at a time: aligned entry points, requests past
 * the machine, realloc, dlopen, bad frees, blocks from before the preload
 * (align, huge, realloc, dlopen, badfree, mmapfree, early), and errno kept
 * by free (errno). */
#include "preload_stress.h"

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

int mode_align(void) {
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

int mode_huge(void) {
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

int mode_realloc(void) {
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


/* ---- dlopen ----------------------------------------------------------- */

int mode_dlopen(int argc, char **argv) {
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

int mode_badfree(void) {
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
int mode_mmapfree(void) {
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

int mode_early(void) {
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


int mode_errno(void) {
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
