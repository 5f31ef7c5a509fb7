/* A library that allocates large blocks in its constructor, its functions and
 * its destructor, for the dlopen/dlclose test of libprezero_preload.so
 * (tests/c/preload_stress.c, mode dlopen). PRELOAD_DL_SIZE: the block size;
 * PRELOAD_DL_FINI_ONLY=1: the constructor frees nothing, so the process's
 * first large free happens in the destructor, inside dlclose. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *held, *kept;
static size_t size;

static int zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static void die(const char *m) {
  if (write(2, m, strlen(m)) < 0) {}
  _exit(4);
}

__attribute__((constructor)) static void init(void) {
  const char *s = getenv("PRELOAD_DL_SIZE");
  size = s ? strtoul(s, NULL, 0) : 4 << 20;
  int fini_only = getenv("PRELOAD_DL_FINI_ONLY") != NULL;
  held = calloc(1, size);
  if (!held || !zero(held, size)) die("preload_dl: constructor calloc not zero\n");
  memset(held, 0x55, size);
  kept = malloc(size);
  if (!kept) die("preload_dl: constructor malloc\n");
  memset(kept, 0x77, size);
  if (!fini_only) {
    for (int i = 0; i < 4; i++) {
      unsigned char *p = malloc(size + i * 4096);
      if (!p) die("preload_dl: constructor malloc\n");
      memset(p, i, size);
      unsigned char *q = realloc(p, 2 * size);
      if (!q || q[size - 1] != i) die("preload_dl: constructor realloc\n");
      free(q);
    }
  }
}

static void *worker(void *arg) {
  unsigned r = *(unsigned *)arg;
  for (int i = 0; i < 8; i++) {
    size_t n = size / 2 + (r * 7919 + i * 4096) % size;
    unsigned char *z = calloc(1, n);
    if (!z || !zero(z, n)) return (void *)1;
    memset(z, 0xEE, n);
    free(z);
  }
  return NULL;
}

int preload_dl_work(unsigned round) {
  pthread_t t[2];
  unsigned arg[2] = {round, round + 1};
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, worker, &arg[i])) return 2;
  int bad = 0;
  for (int i = 0; i < 2; i++) {
    void *rv;
    pthread_join(t[i], &rv);
    bad |= rv != NULL;
  }
  for (size_t i = 0; i < size; i += 4096)
    if (held[i] != 0x55) return 3;
  return bad;
}

/* The caller frees this one after dlclose. */
void *preload_dl_keep(void) {
  void *k = kept;
  kept = NULL;
  return k;
}

__attribute__((destructor)) static void fini(void) {
  for (size_t i = 0; i < size; i += 4096)
    if (held[i] != 0x55) die("preload_dl: destructor: block changed\n");
  free(held);
  free(kept);
  unsigned char *z = calloc(1, size);
  if (!z || !zero(z, size)) die("preload_dl: destructor calloc not zero\n");
  free(z);
}
