/* preload_stress.c's measures of what the preload keeps and when: the cap, idle
 * give-back, prefill, spares, a starved scrubber, the count of mappings (cap,
 * idle, prefill, prefill-dirty, spare, starve, vmas, mremap-race). */
#include "preload_stress.h"

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

int mode_cap(void) {
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

int mode_idle(int argc, char **argv) {
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

int mode_prefill(double wait_s) {
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
int mode_prefill_dirty(void) {
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

int mode_spare(int argc, char **argv) {
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
 * calloc that waits for its step, or for the lock it holds, must not wait
 * long. `spinners` threads (-1: one per core) keep the cores busy. Prints the
 * worst. */
int mode_starve(long spinners, double secs) {
  long cpus = spinners >= 0 ? spinners : sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 0 || cpus > 64) cpus = 2;
  pthread_t t[64];
  for (long i = 0; i < cpus; i++) pthread_create(&t[i], NULL, spinner, NULL);
  const size_t n = 64 << 20;
  double worst = 0, total = 0, start = now_s();
  int rounds = 0;
  double other = 0; /* the slowest malloc or free */
#define TIMED(call) do { double t = now_s(); call; t = now_s() - t; if (t > other) other = t; } while (0)
  for (; rounds < 40 || now_s() - start < secs; rounds++) {
    unsigned char *p;
    TIMED(p = malloc(n));
    if (!p) fail("malloc(64 MiB) failed");
    memset(p, 1, n);
    __asm__ volatile("" ::"r"(p) : "memory");
    TIMED(free(p));
    usleep(5000); /* the scrubber may take a step of it meanwhile */
    double t0 = now_s();
    unsigned char *q = calloc(1, n);
    double d = now_s() - t0;
    if (!q) fail("calloc(64 MiB) failed");
    if (first_nonzero(q, n) != n) fail("calloc not zero");
    TIMED(free(q));
    total += d;
    if (d > worst) worst = d;
  }
#undef TIMED
  spinning = 0;
  for (long i = 0; i < cpus; i++) pthread_join(t[i], NULL);
  printf("starve: %ld spinning threads: calloc(64 MiB) mean %.2f ms, worst %.2f ms; "
         "malloc and free slowest %.2f ms\n", cpus, total / rounds * 1e3, worst * 1e3, other * 1e3);
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

int mode_vmas(int argc, char **argv) {
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

int mode_mremap_race(int argc, char **argv) {
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
