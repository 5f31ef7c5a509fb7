/* What UFFDIO_MOVE of pre-zeroed transparent huge pages costs on this machine
 * (faults served by moving zeroed pages in), before the preload's lazy mode
 * builds on it.
 *
 *   uffd_probe [MiB]      default 512
 *
 * Each line: one way of first-touching MiB of fresh memory (one store per
 * 4 KiB), its time, and how much of the target ended up PMD-mapped:
 *   kernel-4k     plain anonymous memory (the kernel zeroes 4 KiB pages)
 *   kernel-thp    MADV_HUGEPAGE (the kernel zeroes 2 MiB pages)
 *   move          a userfaultfd handler thread moves a pre-zeroed THP from a
 *                 reserve into each faulting 2 MiB block (MADV_DONTNEED first:
 *                 the 4 KiB fault path left an empty page table)
 *   copy-2m       the handler copies zeroes into the whole faulting block
 *                 (UFFDIO_COPY of 2 MiB: small pages, one call)
 *   copy-4k       the handler copies zeroes into the faulting page only
 *   zero-4k       the handler maps the zero page there (UFFDIO_ZEROPAGE): the
 *                 write then takes the kernel's copy-on-write fault
 *   move-ra8      the same as move, moving the next 8 blocks too after each fault
 *   move-small    move, from a reserve of small pages (MADV_NOHUGEPAGE): a page
 *                 table entry at a time
 * and the costs beside them: populating the reserve per 2 MiB, moving a THP
 * back into it, scrubbing it with streaming stores, a PAGEMAP_SCAN per block.
 * The reserve is registered in write-protect mode (only so that moves may
 * land in it), the target in missing mode with MADV_NOHUGEPAGE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <immintrin.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MB (1UL << 20)
#define HUGE (2 * MB)

/* Newer than these headers (6.8, 6.7). */
struct uffdio_move_ {
    uint64_t dst, src, len, mode;
    int64_t move;
};
#define UFFDIO_MOVE_ _IOWR(UFFDIO, 0x05, struct uffdio_move_)
#define UFFD_FEATURE_MOVE_ (1ULL << 16)
struct page_region_ {
    uint64_t start, end, categories;
};
struct pm_scan_arg_ {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages,
        category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN_ _IOWR('f', 16, struct pm_scan_arg_)
#define PAGE_IS_PRESENT_ (1 << 3)
#define PAGE_IS_SWAPPED_ (1 << 4)
#define PAGE_IS_HUGE_ (1 << 6)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static char *map_aligned(size_t len) {
    char *p = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    char *a = (char *)(((uintptr_t)p + HUGE - 1) & ~(HUGE - 1));
    return a;
}

static int pagemap = -1;

/* Bytes of [p, p+len) PMD-mapped, and bytes present at all. */
static void scan(char *p, size_t len, size_t *huge, size_t *present) {
    struct page_region_ v[512];
    struct pm_scan_arg_ a = {
        .size = sizeof a,
        .start = (uintptr_t)p,
        .end = (uintptr_t)p + len,
        .vec = (uintptr_t)v,
        .vec_len = 512,
        .category_anyof_mask = PAGE_IS_PRESENT_ | PAGE_IS_SWAPPED_,
        .return_mask = PAGE_IS_PRESENT_ | PAGE_IS_SWAPPED_ | PAGE_IS_HUGE_,
    };
    *huge = *present = 0;
    for (;;) {
        long n = ioctl(pagemap, PAGEMAP_SCAN_, &a);
        if (n < 0)
            die("PAGEMAP_SCAN");
        for (long i = 0; i < n; i++) {
            size_t l = v[i].end - v[i].start;
            *present += l;
            if (v[i].categories & PAGE_IS_HUGE_)
                *huge += l;
        }
        if (a.walk_end >= a.end)
            break;
        a.start = a.walk_end;
    }
}

static int uffd;
static char *reserve, *target;
static size_t len, reserve_next;
static int ra_limit;
/* 0: move huge pages; 1: UFFDIO_COPY the whole block from zeroes; 2: UFFDIO_COPY the page;
 * 3: UFFDIO_ZEROPAGE the page (the write then takes the kernel's copy-on-write fault). */
static int fill_mode;
static char *zeroes;
static long moved, zeropages, faults;

static void move(char *dst, char *src, size_t l) {
    struct uffdio_move_ m = {.dst = (uintptr_t)dst, .src = (uintptr_t)src, .len = l};
    if (ioctl(uffd, UFFDIO_MOVE_, &m) != 0)
        die("UFFDIO_MOVE");
}

static void *handler(void *unused) {
    (void)unused;
    char *next_seq = NULL;
    int window = 1;
    struct pollfd pfd = {.fd = uffd, .events = POLLIN};
    for (;;) {
        if (poll(&pfd, 1, -1) < 0)
            die("poll");
        struct uffd_msg msg;
        if (read(uffd, &msg, sizeof msg) != sizeof msg) {
            if (errno == EAGAIN)
                continue;
            die("read uffd");
        }
        if (msg.event != UFFD_EVENT_PAGEFAULT)
            continue;
        faults++;
        char *at = (char *)(uintptr_t)msg.arg.pagefault.address;
        char *block = (char *)((uintptr_t)at & ~(HUGE - 1));
        if (fill_mode == 3) {
            struct uffdio_zeropage z = {.range = {(uintptr_t)at & ~4095UL, 4096}};
            if (ioctl(uffd, UFFDIO_ZEROPAGE, &z) != 0 && errno != EEXIST)
                die("UFFDIO_ZEROPAGE");
            zeropages++;
            continue;
        }
        if (fill_mode) {
            size_t l = fill_mode == 1 ? HUGE : 4096;
            char *d = fill_mode == 1 ? block : (char *)((uintptr_t)at & ~4095UL);
            struct uffdio_copy c = {.dst = (uintptr_t)d, .src = (uintptr_t)zeroes, .len = l};
            if (ioctl(uffd, UFFDIO_COPY, &c) != 0 && errno != EEXIST)
                die("UFFDIO_COPY");
            zeropages += l / 4096;
            continue;
        }
        int n = 1;
        if (ra_limit) {
            window = block == next_seq ? (window * 2 > ra_limit ? ra_limit : window * 2) : 1;
            n = 1 + (block == next_seq ? window : 0);
        }
        for (int i = 0; i < n; i++) {
            char *b = block + i * HUGE;
            if (b + HUGE > target + len || reserve_next + HUGE > len) {
                if (i == 0) {
                    struct uffdio_zeropage z = {.range = {(uintptr_t)at & ~4095UL, 4096}};
                    ioctl(uffd, UFFDIO_ZEROPAGE, &z);
                    zeropages++;
                }
                break;
            }
            if (i > 0) {
                size_t h, pr;
                scan(b, HUGE, &h, &pr);
                if (pr)
                    break;
            }
            if (madvise(b, HUGE, MADV_DONTNEED) != 0)
                die("madvise dontneed");
            move(b, reserve + reserve_next, HUGE);
            reserve_next += HUGE;
            moved++;
        }
        next_seq = block + n * HUGE;
    }
    return NULL;
}

static void touch(char *p, size_t l) {
    for (size_t o = 0; o < l; o += 4096)
        p[o] = 1;
}

static int all_ones(char *p, size_t l) {
    for (size_t o = 0; o < l; o += 4096)
        if (p[o] != 1 || p[o + 1] != 0)
            return 0;
    return 1;
}

static void clear_nt(char *p, size_t l) {
    __m128i z = _mm_setzero_si128();
    for (size_t o = 0; o < l; o += 64) {
        _mm_stream_si128((__m128i *)(p + o), z);
        _mm_stream_si128((__m128i *)(p + o + 16), z);
        _mm_stream_si128((__m128i *)(p + o + 32), z);
        _mm_stream_si128((__m128i *)(p + o + 48), z);
    }
    _mm_sfence();
}

int main(int argc, char **argv) {
    len = (argc > 1 ? strtoul(argv[1], NULL, 0) : 512) * MB;
    pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap < 0)
        die("open pagemap");
    size_t h, pr;

    for (int thp = 0; thp < 2; thp++) {
        char *p = map_aligned(len);
        if (thp)
            madvise(p, len, MADV_HUGEPAGE);
        double t = now();
        touch(p, len);
        t = now() - t;
        scan(p, len, &h, &pr);
        printf("%-10s %8.1f ms  %5.1f us/2M  huge %zu/%zu MiB\n", thp ? "kernel-thp" : "kernel-4k",
               t * 1e3, t * 1e6 / (len / HUGE), h / MB, len / MB);
        munmap(p, len);
    }

    uffd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (uffd >= 0) {
        int fd = ioctl(uffd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        close(uffd);
        uffd = fd;
    } else {
        uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    }
    if (uffd < 0)
        die("userfaultfd");
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_MOVE_};
    if (ioctl(uffd, UFFDIO_API, &api) != 0)
        die("UFFDIO_API (no UFFD_FEATURE_MOVE?)");

    zeroes = map_aligned(HUGE);
    for (int mode = 1; mode <= 3; mode++) {
        fill_mode = mode;
        target = map_aligned(len);
        madvise(target, len, MADV_NOHUGEPAGE);
        struct uffdio_register tr = {.range = {(uintptr_t)target, len}, .mode = UFFDIO_REGISTER_MODE_MISSING};
        if (ioctl(uffd, UFFDIO_REGISTER, &tr) != 0)
            die("UFFDIO_REGISTER target");
        faults = zeropages = 0;
        pthread_t th;
        pthread_create(&th, NULL, handler, NULL);
        double t = now();
        touch(target, len);
        t = now() - t;
        const char *name = mode == 1 ? "copy-2m" : mode == 2 ? "copy-4k" : "zero-4k";
        printf("%-10s %8.1f ms  %5.1f us/2M  (%ld faults, %ld pages filled) %s\n", name,
               t * 1e3, t * 1e6 / (len / HUGE), faults, zeropages, all_ones(target, len) ? "ok" : "WRONG");
        pthread_cancel(th);
        pthread_join(th, NULL);
        munmap(target, len);
    }
    fill_mode = 0;
    for (int ra = 0; ra < 3; ra++) {
        /* 2: a reserve of small pages (no huge page to be had), moved a page
         * table entry at a time. */
        int small = ra == 2;
        ra_limit = ra == 1 ? 8 : 0;
        reserve = map_aligned(len);
        target = map_aligned(len);
        reserve_next = 0;
        moved = zeropages = faults = 0;
        madvise(reserve, len, small ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
        madvise(reserve, len, MADV_DONTFORK);
        struct uffdio_register rr = {.range = {(uintptr_t)reserve, len}, .mode = UFFDIO_REGISTER_MODE_WP};
        if (ioctl(uffd, UFFDIO_REGISTER, &rr) != 0)
            die("UFFDIO_REGISTER reserve (wp)");
        double t = now();
        if (madvise(reserve, len, MADV_POPULATE_WRITE) != 0)
            die("MADV_POPULATE_WRITE");
        double fill = now() - t;
        scan(reserve, len, &h, &pr);
        printf("reserve    populate %5.1f us/2M, huge %zu/%zu MiB\n", fill * 1e6 / (len / HUGE),
               h / MB, len / MB);
        madvise(target, len, MADV_NOHUGEPAGE);
        struct uffdio_register tr = {.range = {(uintptr_t)target, len}, .mode = UFFDIO_REGISTER_MODE_MISSING};
        if (ioctl(uffd, UFFDIO_REGISTER, &tr) != 0)
            die("UFFDIO_REGISTER target");
        pthread_t th;
        pthread_create(&th, NULL, handler, NULL);
        t = now();
        touch(target, len);
        t = now() - t;
        scan(target, len, &h, &pr);
        printf("%-10s %8.1f ms  %5.1f us/2M  huge %zu/%zu MiB (%ld faults, %ld moved, %ld zero pages) %s\n",
               small ? "move-small" : ra ? "move-ra8" : "move", t * 1e3, t * 1e6 / (len / HUGE), h / MB, len / MB, faults,
               moved, zeropages, all_ones(target, len) ? "ok" : "WRONG");
        pthread_cancel(th);
        pthread_join(th, NULL);

        /* Back: the target's THPs into the reserve, scrubbed there. */
        size_t s0, s1;
        t = now();
        for (size_t o = 0; o < len; o += HUGE)
            scan(target + o, HUGE, &s0, &s1);
        double tscan = now() - t;
        t = now();
        for (size_t o = 0; o < len; o += HUGE)
            move(reserve + o, target + o, HUGE);
        double back = now() - t;
        scan(reserve, len, &h, &pr);
        t = now();
        clear_nt(reserve, len);
        double scrub = now() - t;
        printf("back       scan %4.1f us/2M, move %4.1f us/2M (huge %zu MiB), scrub %4.1f us/2M (%.1f GB/s)\n",
               tscan * 1e6 / (len / HUGE), back * 1e6 / (len / HUGE), h / MB, scrub * 1e6 / (len / HUGE),
               len / scrub / 1e9);
        munmap(reserve, len);
        munmap(target, len);
    }
    return 0;
}
