/*
 * prezero-bench-alloc: the C programs of `prezero bench run`, each an
 * ordinary user of malloc/calloc/realloc/free that knows nothing of prezero.
 * The bench runs each with and without `prezero run`.
 *
 *   prezero-bench-alloc calloc-big ROUNDS MIN_BYTES MAX_BYTES
 *       calloc a block (MIN, 2*MIN, ... MAX, MIN again...), one pass that
 *       checks every word is zero and writes it, free; ROUNDS blocks.
 *   prezero-bench-alloc calloc-mix OPS MAX_BYTES
 *       sizes log-uniform in 4 KiB..MAX, 8 live at a time: each step frees
 *       the oldest and callocs a new one, checked and written as above.
 *   prezero-bench-alloc small OPS
 *       4096 slots; each step frees a slot's block or mallocs 16..256 bytes
 *       into it (one step in eight reallocs a live one instead); the first
 *       and last byte of every block carry a tag, checked on free/realloc.
 *   prezero-bench-alloc realloc-grow ROUNDS MAX_BYTES
 *       from 64 KiB, realloc to 1.5x until MAX, writing the new part each
 *       time and checking samples of the old part survived; ROUNDS times.
 *   prezero-bench-alloc first-touch COMPUTE_MS BYTES [thp]
 *       computes for COMPUTE_MS (what a program does before it needs its
 *       memory), then mmaps BYTES (MADV_HUGEPAGE on it with `thp`) and writes
 *       one byte per 4 KiB: the work is the mmap and the writes; then every
 *       word of the mapping is checked (zero but the bytes written).
 *   prezero-bench-alloc sparse BYTES STRIDE
 *       mmaps BYTES and writes every 4 KiB page of every STRIDE-th 2 MiB
 *       block; prints the process's RssAnon (rss_anon=, bytes) after; every
 *       touched block is checked as above.
 *   prezero-bench-alloc recycle ROUNDS BYTES
 *       calloc BYTES, write one byte per 4 KiB (checking the page's last word
 *       is zero), free; ROUNDS times.
 *   prezero-bench-alloc busy ROUNDS BYTES
 *       one spinning thread per core keeps every core busy (a program's
 *       compute threads) while the main thread, ROUNDS times: mallocs BYTES,
 *       writes and frees them, sleeps 5 ms (the scrubber backs off while the
 *       CPU is busy), then callocs BYTES, checks and writes them as
 *       calloc-big does, and frees them. The work is those callocs with their
 *       pass; worst_ns= the longest one.
 *   prezero-bench-alloc exit ROUNDS BYTES
 *       three spinning threads per core keep every core busy (a build beside
 *       it) while the main thread, ROUNDS times, forks a child that callocs
 *       BYTES, checks and writes them, frees them and _exits, and waits for
 *       it: the work is the forks to the children reaped; worst_ns= the
 *       longest (a child's exit waits for every thread of its to run once).
 *   prezero-bench-alloc hold BYTES
 *       recycle once, prints "held" on a line of its own, then waits for
 *       the end of its standard input: a program that has freed its memory
 *       and lives on (what prezero keeps for it is still kept).
 *
 * Prints "ns=<time of the work> bad=<blocks or bytes found wrong> sum=<...>"
 * (and rss_anon= for sparse); exits 1 when anything was wrong, 2 on a usage
 * error or a failed allocation.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t bad, sum;

static void *must(void *p, size_t size) {
    if (!p) {
        fprintf(stderr, "prezero-bench-alloc: allocation of %zu bytes failed\n", size);
        exit(2);
    }
    return p;
}

/* One pass over a fresh calloc block: every word must be zero; write it. */
static void check_zero_and_write(uint64_t *p, size_t bytes, uint64_t tag) {
    size_t words = bytes / 8;
    uint64_t nonzero = 0;
    for (size_t i = 0; i < words; i++) {
        nonzero |= p[i];
        p[i] = tag + i;
    }
    if (nonzero) {
        fprintf(stderr, "prezero-bench-alloc: calloc(%zu) returned non-zero memory\n", bytes);
        bad++;
    }
    sum += p[words / 2];
}

static void calloc_big(long rounds, size_t min, size_t max) {
    size_t size = min;
    for (long r = 0; r < rounds; r++) {
        uint64_t *p = must(calloc(1, size), size);
        check_zero_and_write(p, size, (uint64_t)r);
        free(p);
        size = size * 2 > max ? min : size * 2;
    }
}

static size_t log_uniform(size_t lo, size_t hi) {
    /* lo * 2^(u * log2(hi/lo)), in 1/16 steps of a power of two. */
    unsigned span = 0;
    while ((lo << span) < hi) span++;
    unsigned sixteenths = (unsigned)(next_rand() % (span * 16 + 1));
    size_t s = (lo << (sixteenths / 16)) + ((lo << (sixteenths / 16)) / 16) * (sixteenths % 16);
    s &= ~(size_t)7;
    return s > hi ? hi : s;
}

static void calloc_mix(long ops, size_t max) {
    enum { LIVE = 8 };
    uint64_t *live[LIVE] = {0};
    for (long i = 0; i < ops; i++) {
        free(live[i % LIVE]);
        size_t size = log_uniform(4096, max);
        uint64_t *p = must(calloc(size / 8, 8), size);
        check_zero_and_write(p, size, (uint64_t)i);
        live[i % LIVE] = p;
    }
    for (int i = 0; i < LIVE; i++) free(live[i]);
}

static void small(long ops) {
    enum { SLOTS = 4096 };
    static unsigned char *slot[SLOTS];
    static size_t len[SLOTS];
    for (long i = 0; i < ops; i++) {
        uint64_t r = next_rand();
        size_t k = r % SLOTS;
        size_t size = 16 + (size_t)((r >> 16) % 241);
        unsigned char tag = (unsigned char)k;
        unsigned char *p = slot[k];
        if (p && (r >> 40) % 8 == 0) {
            if (p[0] != tag || p[len[k] - 1] != tag) bad++;
            p = must(realloc(p, size), size);
            if (p[0] != tag) bad++;
            p[size - 1] = tag;
            slot[k] = p;
            len[k] = size;
        } else if (p) {
            if (p[0] != tag || p[len[k] - 1] != tag) bad++;
            sum += p[len[k] / 2];
            free(p);
            slot[k] = NULL;
        } else {
            p = must(malloc(size), size);
            p[0] = tag;
            p[size / 2] = (unsigned char)i;
            p[size - 1] = tag;
            slot[k] = p;
            len[k] = size;
        }
    }
    for (int k = 0; k < SLOTS; k++) free(slot[k]);
}

static void realloc_grow(long rounds, size_t max) {
    for (long r = 0; r < rounds; r++) {
        size_t size = 64 << 10;
        uint64_t *p = must(malloc(size), size);
        for (size_t i = 0; i < size / 8; i++) p[i] = i;
        while (size < max) {
            size_t grown = size + size / 2;
            if (grown > max) grown = max;
            grown &= ~(size_t)7;
            p = must(realloc(p, grown), grown);
            /* Samples of what was there: one word per MiB, and the last. */
            for (size_t i = 0; i < size / 8; i += (1 << 20) / 8)
                if (p[i] != i) bad++;
            if (p[size / 8 - 1] != size / 8 - 1) bad++;
            for (size_t i = size / 8; i < grown / 8; i++) p[i] = i;
            size = grown;
        }
        sum += p[size / 16];
        free(p);
    }
}

/* The work's own clock: first-touch times only the mmap and the writes. */
static uint64_t work_ns;

static void *must_map(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "prezero-bench-alloc: mmap of %zu bytes failed\n", bytes);
        exit(2);
    }
    return p;
}

/* Every word of [p, p + bytes) is zero but the first byte of each page,
 * which is `tag`. */
static void check_touched(const unsigned char *p, size_t bytes, unsigned char tag) {
    for (size_t o = 0; o < bytes; o += 4096) {
        const uint64_t *w = (const uint64_t *)(p + o);
        uint64_t other = w[0] & ~(uint64_t)0xff;
        for (size_t i = 1; i < 512; i++) other |= w[i];
        if (other || p[o] != tag) {
            bad++;
            return;
        }
    }
}

static void first_touch(long compute_ms, size_t bytes, int thp) {
    uint64_t until = now_ns() + (uint64_t)compute_ms * 1000000u;
    uint64_t x = 1;
    while (now_ns() < until)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005u + 1442695040888963407u;
    sum += x & 1;
    uint64_t t0 = now_ns();
    unsigned char *p = must_map(bytes);
    if (thp) madvise(p, bytes, MADV_HUGEPAGE);
    for (size_t o = 0; o < bytes; o += 4096) p[o] = 1;
    work_ns = now_ns() - t0;
    check_touched(p, bytes, 1);
    munmap(p, bytes);
}

/* RssAnon of this process, in bytes (0 if /proc says nothing). */
static unsigned long long rss_anon(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static unsigned long long sparse(size_t bytes, long stride) {
    const size_t block = 2u << 20;
    unsigned char *p = must_map(bytes);
    for (size_t b = 0; b + block <= bytes; b += block * (size_t)stride)
        for (size_t o = 0; o < block; o += 4096) p[b + o] = 2;
    unsigned long long rss = rss_anon();
    for (size_t b = 0; b + block <= bytes; b += block * (size_t)stride)
        check_touched(p + b, block, 2);
    munmap(p, bytes);
    return rss;
}

static void recycle(long rounds, size_t bytes) {
    for (long r = 0; r < rounds; r++) {
        unsigned char *p = must(calloc(1, bytes), bytes);
        for (size_t o = 0; o < bytes; o += 4096) {
            p[o] = 1;
            if (((uint64_t *)(p + o))[511]) bad++;
        }
        sum += p[bytes / 2];
        free(p);
    }
}

static volatile int spinning = 1;

static void *spin(void *arg) {
    (void)arg;
    while (spinning) {
    }
    return NULL;
}

static uint64_t worst_ns;

static void busy(long rounds, size_t bytes) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1 || cores > 256) cores = 2;
    pthread_t spinners[256];
    for (long i = 0; i < cores; i++) {
        if (pthread_create(&spinners[i], NULL, spin, NULL)) {
            fprintf(stderr, "prezero-bench-alloc: pthread_create failed\n");
            exit(2);
        }
    }
    for (long r = 0; r < rounds; r++) {
        unsigned char *p = must(malloc(bytes), bytes);
        memset(p, 1, bytes);
        __asm__ volatile("" ::"r"(p) : "memory");
        free(p);
        usleep(5000);
        uint64_t t0 = now_ns();
        uint64_t *q = must(calloc(1, bytes), bytes);
        check_zero_and_write(q, bytes, (uint64_t)r);
        uint64_t d = now_ns() - t0;
        free(q);
        work_ns += d;
        if (d > worst_ns) worst_ns = d;
    }
    spinning = 0;
    for (long i = 0; i < cores; i++) pthread_join(spinners[i], NULL);
}

static void exits(long rounds, size_t bytes) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1 || cores > 64) cores = 2;
    pthread_t spinners[192];
    for (long i = 0; i < 3 * cores; i++) {
        if (pthread_create(&spinners[i], NULL, spin, NULL)) {
            fprintf(stderr, "prezero-bench-alloc: pthread_create failed\n");
            exit(2);
        }
    }
    for (long r = 0; r < rounds; r++) {
        uint64_t t0 = now_ns();
        pid_t c = fork();
        if (c < 0) {
            fprintf(stderr, "prezero-bench-alloc: fork failed\n");
            exit(2);
        }
        if (c == 0) {
            uint64_t *q = must(calloc(1, bytes), bytes);
            check_zero_and_write(q, bytes, (uint64_t)r);
            free(q);
            _exit(bad ? 1 : 0);
        }
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) bad++;
        uint64_t d = now_ns() - t0;
        work_ns += d;
        if (d > worst_ns) worst_ns = d;
    }
    spinning = 0;
    for (long i = 0; i < 3 * cores; i++) pthread_join(spinners[i], NULL);
}

static void hold(size_t bytes) {
    recycle(1, bytes);
    printf("held\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
}

static long arg_long(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v <= 0) {
        fprintf(stderr, "prezero-bench-alloc: '%s' is not a positive number\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    unsigned long long rss = 0;
    uint64_t t0 = now_ns();
    if (!strcmp(mode, "calloc-big") && argc == 5) {
        calloc_big(arg_long(argv[2]), (size_t)arg_long(argv[3]), (size_t)arg_long(argv[4]));
    } else if (!strcmp(mode, "calloc-mix") && argc == 4) {
        calloc_mix(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else if (!strcmp(mode, "small") && argc == 3) {
        small(arg_long(argv[2]));
    } else if (!strcmp(mode, "realloc-grow") && argc == 4) {
        realloc_grow(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else if (!strcmp(mode, "first-touch") && (argc == 4 || (argc == 5 && !strcmp(argv[4], "thp")))) {
        first_touch(arg_long(argv[2]), (size_t)arg_long(argv[3]), argc == 5);
    } else if (!strcmp(mode, "sparse") && argc == 4) {
        rss = sparse((size_t)arg_long(argv[2]), arg_long(argv[3]));
    } else if (!strcmp(mode, "recycle") && argc == 4) {
        recycle(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else if (!strcmp(mode, "busy") && argc == 4) {
        busy(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else if (!strcmp(mode, "exit") && argc == 4) {
        exits(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else if (!strcmp(mode, "hold") && argc == 3) {
        hold((size_t)arg_long(argv[2]));
    } else {
        fprintf(stderr,
                "usage: prezero-bench-alloc calloc-big ROUNDS MIN MAX | calloc-mix OPS MAX | "
                "small OPS | realloc-grow ROUNDS MAX | first-touch COMPUTE_MS BYTES [thp] | "
                "sparse BYTES STRIDE | recycle ROUNDS BYTES | busy ROUNDS BYTES | exit ROUNDS BYTES | "
                "hold BYTES\n");
        return 2;
    }
    uint64_t t1 = now_ns();
    if (!work_ns) work_ns = t1 - t0;
    printf("ns=%llu bad=%llu sum=%llu", (unsigned long long)work_ns, (unsigned long long)bad,
           (unsigned long long)sum);
    if (rss) printf(" rss_anon=%llu", rss);
    if (worst_ns) printf(" worst_ns=%llu", (unsigned long long)worst_ns);
    printf("\n");
    return bad ? 1 : 0;
}
