/* preload_stress.c's traffic: blocks under test (contents, canaries, no two
 * live blocks overlapping) from every entry point on threads (mix), the same
 * traffic across fork and under a signal storm (fork, child, signals), and on
 * one thread with each answer checked (checker). */
#include "preload_stress.h"

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

int mode_mix(int argc, char **argv) {
  if (argc < 5) fail("mix THREADS ITERS SEED");
  int threads = atoi(argv[2]);
  long iters = atol(argv[3]);
  run_mix(threads, iters, strtoull(argv[4], NULL, 0));
  printf("mix: %d threads x %ld ops: %lu zeroed, %lu aligned, %lu at or above %zu checked\n",
         threads, iters, (unsigned long)served_zeroed, (unsigned long)served_aligned,
         (unsigned long)served_large, T);
  return 0;
}


/* ---- fork ------------------------------------------------------------- */

atomic_int stop_traffic;

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
int child_work(uint64_t seed) {
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

int mode_fork(int argc, char **argv, const char *self) {
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

int mode_signals(int argc, char **argv) {
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


/* ---- checker: each answer checked, NULL allowed with ENOMEM ----------- */

int mode_checker(int argc, char **argv) {
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
