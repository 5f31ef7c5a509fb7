/* The hostile test program for libprezero_preload.so, run by
 * prezero-preload/tests/preload/ with and without LD_PRELOAD. One binary
 * (this file's helpers and dispatch, and the modes' files, by what they test:
 * preload_stress_traffic.c, preload_stress_calls.c, preload_stress_limits.c;
 * what they share is in preload_stress.h), one mode per run:
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
 *   starve [SPINNERS [SECS]] calloc latency while spinning threads (default: one per
 *                           core) keep every core busy; 40 rounds, and more until
 *                           SECS have passed
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

#include "preload_stress.h"

size_t T; /* the threshold the preload was given (or its default) */
size_t PAGE;

void fail(const char *fmt, ...) {
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

size_t parse_size(const char *s, size_t dflt) {
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

uint64_t next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

void fill(unsigned char *p, size_t n, uint64_t tag) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) *(uint64_t *)(p + i) = word(tag, i >> 3);
  for (; i < n; i++) p[i] = byte_at(tag, i);
}

/* The first byte in [0, n) that is not the pattern, or n. */
size_t check(const unsigned char *p, size_t n, uint64_t tag) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    if (*(const uint64_t *)(p + i) != word(tag, i >> 3)) break;
  for (; i < n; i++)
    if (p[i] != byte_at(tag, i)) return i;
  return n;
}

size_t first_nonzero(const unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i < n && ((uintptr_t)(p + i) & 7); i++)
    if (p[i]) return i;
  for (; i + 8 <= n; i += 8)
    if (*(const uint64_t *)(p + i)) break;
  for (; i < n; i++)
    if (p[i]) return i;
  return n;
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
  if (!strcmp(m, "starve")) return mode_starve(argc > 2 ? atol(argv[2]) : -1, argc > 3 ? atof(argv[3]) : 0);
  if (!strcmp(m, "mremap-race")) return mode_mremap_race(argc, argv);
  if (!strcmp(m, "checker")) return mode_checker(argc, argv);
  if (!strcmp(m, "errno")) return mode_errno();
  fail("unknown mode %s", m);
  return 2;
}
