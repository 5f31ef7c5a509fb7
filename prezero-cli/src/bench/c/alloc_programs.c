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
 *
 * Prints "ns=<time of the work> bad=<blocks or bytes found wrong> sum=<...>";
 * exits 1 when anything was wrong, 2 on a usage error or a failed allocation.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    uint64_t t0 = now_ns();
    if (!strcmp(mode, "calloc-big") && argc == 5) {
        calloc_big(arg_long(argv[2]), (size_t)arg_long(argv[3]), (size_t)arg_long(argv[4]));
    } else if (!strcmp(mode, "calloc-mix") && argc == 4) {
        calloc_mix(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else if (!strcmp(mode, "small") && argc == 3) {
        small(arg_long(argv[2]));
    } else if (!strcmp(mode, "realloc-grow") && argc == 4) {
        realloc_grow(arg_long(argv[2]), (size_t)arg_long(argv[3]));
    } else {
        fprintf(stderr,
                "usage: prezero-bench-alloc calloc-big ROUNDS MIN MAX | calloc-mix OPS MAX | "
                "small OPS | realloc-grow ROUNDS MAX\n");
        return 2;
    }
    uint64_t t1 = now_ns();
    printf("ns=%llu bad=%llu sum=%llu\n", (unsigned long long)(t1 - t0),
           (unsigned long long)bad, (unsigned long long)sum);
    return bad ? 1 : 0;
}
