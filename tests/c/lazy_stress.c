/* The test program of the preload's lazy mode (PREZERO_LAZY=1), run by
 * prezero-preload/tests/lazy/ under PREZERO_LAZY=1. One mode per run:
 *
 *   zero ROUNDS      calloc, malloc and mmap of 1-64 MiB (whole blocks, edges,
 *                    a mapping that starts off a 2 MiB boundary, MAP_FIXED over
 *                    a PROT_NONE reservation): every byte reads zero on first
 *                    touch, in random order of pages, reads before writes on
 *                    some; then written, checked, freed or unmapped or dropped
 *                    (MADV_DONTNEED: zero again after), ROUNDS times
 *   fork             a child of a process with registered memory: it sees the
 *                    parent's bytes, its own faults work, its writes stay its
 *                    own; then fork + exec of `zero 1`
 *   threads N        N threads fault the same blocks at once, each its own bytes
 *   pretouch N       N threads write a byte a page of one 256 MiB mapping, each
 *                    its own 2 MiB blocks, at once (a JVM's pretouch); every
 *                    other byte reads zero
 *   read             read(2) from a pipe and a file into untouched memory
 *   mprotect         read-only, no-access and read-write parts of one mapping
 *   mlock            mlock of untouched registered memory, then written
 *   signals          a 1 ms timer whose handler writes untouched memory while
 *                    the main thread faults another mapping
 *   mremap           grown (moved), shrunk, moved to a fixed place: contents kept
 *   hugepage         MADV_HUGEPAGE on a registered mapping: still served, and
 *                    the mapping stays MADV_NOHUGEPAGE (smaps)
 *   starved          the preload's fault handler thread at SCHED_IDLE while two
 *                    threads spin on the CPUs: faults wait longer, all served
 *   spin SECS        spins (a competitor for the CPUs)
 *   reclaim          64 MiB blocks calloc'd, written and freed: what the
 *                    preload holds of them once scrubbed is marked free
 *                    (LazyFree); then every private writable mapping is paged
 *                    out (MADV_PAGEOUT: what a machine short of memory does to
 *                    clean pages) and new blocks and mappings read zero
 *
 * Failures print "FAIL: ..." and exit 3. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lazy_common.h"


static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}


/* Every byte of p[0..len) is zero. */

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)((i * 131 + seed) % 251 + 1); }

static void fill(unsigned char *p, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i += 1)
        p[i] = pattern(i, seed);
}

static void check_pattern(const char *what, const unsigned char *p, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, seed))
            fail("%s: byte %zu of %zu is %d, not %d", what, i, len, p[i], pattern(i, seed));
}

/* First touch of every page in random order: a read (which must see zero)
 * or a write of one byte; then every byte checked (zero but the written). */
static void first_touch(const char *what, unsigned char *p, size_t len) {
    size_t pages = (len + PAGE - 1) / PAGE;
    size_t start = next() % pages;
    size_t step = (next() % pages) | 1;
    while (pages % step == 0 && step > 1)
        step += 2;
    for (size_t k = 0; k < pages; k++) {
        size_t pg = (start + k * step) % pages;
        unsigned char *at = p + pg * PAGE + (next() % PAGE);
        if (at >= p + len)
            at = p + len - 1;
        if (next() & 1) {
            if (*(volatile unsigned char *)at != 0)
                fail("%s: first read at %zu saw %d", what, (size_t)(at - p), *at);
        } else {
            if (*at != 0)
                fail("%s: byte at %zu was %d before its first write", what, (size_t)(at - p), *at);
            *at = 0;
        }
    }
    check_zero(what, p, len);
}

static void mode_zero(int rounds) {
    static const size_t sizes[] = {1 * MB, 2 * MB, 3 * MB + 4096, 8 * MB, 17 * MB + 12288, 64 * MB};
    for (int r = 0; r < rounds; r++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t len = sizes[s];
            unsigned char *c = calloc(1, len);
            unsigned char *m = malloc(len);
            unsigned char *a = map(len);
            if (!c || !m)
                fail("calloc/malloc %zu", len);
            first_touch("calloc", c, len);
            first_touch("mmap", a, len);
            /* malloc promises nothing, but a fresh block of the cache reads zero
             * where it was never touched: not checked, only written. */
            fill(m, len, 7);
            fill(c, len, 1);
            fill(a, len, 2);
            check_pattern("calloc", c, len, 1);
            check_pattern("malloc", m, len, 7);
            check_pattern("mmap", a, len, 2);
            /* Dropped: zero again, and served again. */
            if (madvise(a, len, MADV_DONTNEED) != 0)
                fail("madvise DONTNEED: %s", strerror(errno));
            check_zero("mmap after MADV_DONTNEED", a, len);
            fill(a, len, 3);
            check_pattern("mmap after MADV_DONTNEED", a, len, 3);
            free(c);
            free(m);
            if (munmap(a, len) != 0)
                fail("munmap: %s", strerror(errno));
        }
        /* Off a 2 MiB boundary, and committed over a PROT_NONE reservation as
         * a JVM commits its heap. */
        size_t len = 24 * MB;
        unsigned char *res = mmap(NULL, len + 4 * MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (res == MAP_FAILED)
            fail("reserve: %s", strerror(errno));
        unsigned char *at = (unsigned char *)((((uintptr_t)res + 2 * MB - 1) & ~(2 * MB - 1)) + 12288);
        unsigned char *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p != at)
            fail("mmap MAP_FIXED over a reservation: %s", strerror(errno));
        first_touch("MAP_FIXED commit", p, len);
        fill(p, len, 4);
        check_pattern("MAP_FIXED commit", p, len, 4);
        /* Decommitted as a JVM does (PROT_NONE over it), then committed again. */
        if (mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != p)
            fail("decommit: %s", strerror(errno));
        if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
            fail("commit again: %s", strerror(errno));
        check_zero("committed again", p, len);
        munmap(res, len + 4 * MB);
    }
    printf("zero: %d rounds ok\n", rounds);
}

static void mode_fork(const char *self) {
    size_t len = 32 * MB;
    unsigned char *a = map(len);
    unsigned char *c = calloc(1, len);
    fill(a, len / 2, 5);
    fill(c, len / 2, 6);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        check_pattern("child: parent's mmap bytes", a, len / 2, 5);
        check_pattern("child: parent's calloc bytes", c, len / 2, 6);
        check_zero("child: untouched mmap", a + len / 2, len / 2);
        check_zero("child: untouched calloc", c + len / 2, len / 2);
        fill(a, len, 8);
        fill(c, len, 9);
        check_pattern("child: own mmap writes", a, len, 8);
        check_pattern("child: own calloc writes", c, len, 9);
        unsigned char *n = map(len);
        first_touch("child: new mapping", n, len);
        unsigned char *m = calloc(1, len);
        first_touch("child: new calloc", m, len);
        free(m);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("the child failed (status %d)", st);
    check_pattern("parent's mmap after the child", a, len / 2, 5);
    check_pattern("parent's calloc after the child", c, len / 2, 6);
    check_zero("parent's untouched mmap after the child", a + len / 2, len / 2);
    check_zero("parent's untouched calloc after the child", c + len / 2, len / 2);
    fill(a, len, 10);
    check_pattern("parent's writes after the child", a, len, 10);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        execl(self, self, "zero", "1", (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("the exec'd child failed (status %d)", st);
    printf("fork: ok\n");
}

static unsigned char *shared;
static size_t shared_len;
static pthread_barrier_t barrier;
static int nthreads;

static void *faulter(void *arg) {
    long t = (long)arg;
    for (int round = 0; round < 4; round++) {
        pthread_barrier_wait(&barrier);
        for (size_t pg = 0; pg < shared_len / PAGE; pg++)
            shared[pg * PAGE + t] = (unsigned char)(t + 1 + round);
        pthread_barrier_wait(&barrier);
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

static void mode_threads(int n) {
    nthreads = n;
    shared_len = 16 * MB;
    pthread_barrier_init(&barrier, NULL, n + 1);
    pthread_t th[64];
    for (long t = 0; t < n; t++)
        pthread_create(&th[t], NULL, faulter, (void *)t);
    for (int round = 0; round < 4; round++) {
        shared = round & 1 ? calloc(1, shared_len) : map(shared_len);
        pthread_barrier_wait(&barrier);
        pthread_barrier_wait(&barrier);
        for (size_t pg = 0; pg < shared_len / PAGE; pg++)
            for (size_t o = 0; o < PAGE; o++) {
                unsigned char want = o < (size_t)n ? (unsigned char)(o + 1 + round) : 0;
                if (shared[pg * PAGE + o] != want)
                    fail("threads: page %zu byte %zu is %d, not %d", pg, o, shared[pg * PAGE + o], want);
            }
        if (round & 1)
            free(shared);
        else
            munmap(shared, shared_len);
        pthread_barrier_wait(&barrier);
    }
    for (int t = 0; t < n; t++)
        pthread_join(th[t], NULL);
    printf("threads: %d ok\n", n);
}

static void *pretoucher(void *arg) {
    long t = (long)arg;
    pthread_barrier_wait(&barrier);
    for (size_t b = (size_t)t; b < shared_len / (2 * MB); b += (size_t)nthreads)
        for (size_t pg = 0; pg < 2 * MB / PAGE; pg++)
            shared[b * 2 * MB + pg * PAGE + (size_t)t] = (unsigned char)(t + 1);
    return NULL;
}

static void mode_pretouch(int n) {
    nthreads = n < 1 ? 1 : n > 64 ? 64 : n;
    shared_len = 256 * MB;
    shared = map(shared_len);
    pthread_barrier_init(&barrier, NULL, nthreads);
    pthread_t th[64];
    for (long t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, pretoucher, (void *)t);
    for (int t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    for (size_t i = 0; i < shared_len; i++) {
        size_t owner = (i / (2 * MB)) % (size_t)nthreads;
        unsigned char want = i % PAGE == owner ? (unsigned char)(owner + 1) : 0;
        if (shared[i] != want)
            fail("pretouch: byte %zu is %d, not %d", i, shared[i], want);
    }
    munmap(shared, shared_len);
    printf("pretouch: %d ok\n", nthreads);
}

struct writer {
    int fd;
    size_t len;
};

static void *pipe_writer(void *arg) {
    struct writer *w = arg;
    unsigned char *buf = malloc(64 * 1024);
    for (size_t off = 0; off < w->len; off += 64 * 1024) {
        for (size_t i = 0; i < 64 * 1024; i++)
            buf[i] = pattern(off + i, 11);
        size_t done = 0;
        while (done < 64 * 1024) {
            ssize_t k = write(w->fd, buf + done, 64 * 1024 - done);
            if (k <= 0)
                fail("pipe write: %s", strerror(errno));
            done += k;
        }
    }
    close(w->fd);
    free(buf);
    return NULL;
}

static void read_all(int fd, unsigned char *p, size_t len, const char *what) {
    size_t done = 0;
    while (done < len) {
        ssize_t k = read(fd, p + done, len - done);
        if (k < 0)
            fail("%s: read into untouched memory: %s", what, strerror(errno));
        if (k == 0)
            fail("%s: short read (%zu of %zu)", what, done, len);
        done += k;
    }
}

static void mode_read(void) {
    size_t len = 16 * MB;
    int fds[2];
    if (pipe(fds) != 0)
        fail("pipe");
    struct writer w = {fds[1], len};
    pthread_t th;
    pthread_create(&th, NULL, pipe_writer, &w);
    unsigned char *a = map(len);
    read_all(fds[0], a, len, "pipe into mmap");
    pthread_join(th, NULL);
    close(fds[0]);
    check_pattern("pipe into mmap", a, len, 11);
    /* A file, into a calloc'd block, whole in one read(2). */
    char path[] = "/tmp/lazy-read-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        fail("mkstemp");
    unlink(path);
    if (write(fd, a, len) != (ssize_t)len)
        fail("file write");
    lseek(fd, 0, SEEK_SET);
    unsigned char *c = calloc(1, len);
    read_all(fd, c, len, "file into calloc");
    check_pattern("file into calloc", c, len, 11);
    close(fd);
    free(c);
    munmap(a, len);
    printf("read: ok\n");
}

static void mode_mprotect(void) {
    size_t len = 16 * MB;
    unsigned char *a = map(len);
    if (mprotect(a + 2 * MB, 4 * MB, PROT_READ) != 0)
        fail("mprotect read: %s", strerror(errno));
    if (mprotect(a + 8 * MB, 2 * MB, PROT_NONE) != 0)
        fail("mprotect none: %s", strerror(errno));
    check_zero("read-only part", a + 2 * MB, 4 * MB);
    first_touch("head", a, 2 * MB);
    first_touch("middle", a + 6 * MB, 2 * MB);
    first_touch("tail", a + 10 * MB, 6 * MB);
    if (mprotect(a, len, PROT_READ | PROT_WRITE) != 0)
        fail("mprotect rw: %s", strerror(errno));
    fill(a, len, 12);
    check_pattern("after mprotect", a, len, 12);
    munmap(a, len);
    printf("mprotect: ok\n");
}

static void mode_mlock(void) {
    size_t len = 16 * MB;
    unsigned char *a = map(len);
    if (mlock(a + 4 * MB, 8 * MB) != 0)
        fail("mlock: %s", strerror(errno));
    check_zero("locked", a + 4 * MB, 8 * MB);
    first_touch("unlocked", a, 4 * MB);
    fill(a, len, 13);
    check_pattern("locked and not", a, len, 13);
    munlock(a + 4 * MB, 8 * MB);
    if (madvise(a, len, MADV_DONTNEED) != 0)
        fail("madvise: %s", strerror(errno));
    check_zero("after munlock and MADV_DONTNEED", a, len);
    munmap(a, len);
    printf("mlock: ok\n");
}

static unsigned char *sig_area;
static volatile size_t sig_next;
static size_t sig_len;

static void on_alarm(int s) {
    (void)s;
    size_t at = sig_next;
    if (at + PAGE <= sig_len) {
        if (sig_area[at] != 0)
            _exit(4);
        sig_area[at] = 1;
        sig_next = at + PAGE * 7;
    }
}

static void mode_signals(void) {
    sig_len = 64 * MB;
    sig_area = map(sig_len);
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (int r = 0; r < 4; r++) {
        size_t len = 32 * MB;
        unsigned char *a = map(len);
        first_touch("under signals", a, len);
        fill(a, len, 14);
        check_pattern("under signals", a, len, 14);
        munmap(a, len);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    size_t hits = 0;
    for (size_t o = 0; o < sig_len; o++) {
        unsigned char want = (o % (PAGE * 7) == 0 && o < sig_next) ? 1 : 0;
        if (sig_area[o] != want)
            fail("the signal handler's area: byte %zu is %d, not %d", o, sig_area[o], want);
        hits += want;
    }
    printf("signals: ok, %zu written by the handler\n", hits);
}

static void mode_mremap(void) {
    size_t len = 32 * MB;
    unsigned char *a = map(len);
    fill(a, len / 2, 15);
    unsigned char *b = mremap(a, len, 2 * len, MREMAP_MAYMOVE);
    if (b == MAP_FAILED)
        fail("mremap grow: %s", strerror(errno));
    check_pattern("grown", b, len / 2, 15);
    check_zero("grown, untouched", b + len / 2, len + len / 2);
    fill(b, 2 * len, 16);
    unsigned char *c = mremap(b, 2 * len, len / 4, 0);
    if (c != b)
        fail("mremap shrink: %s", strerror(errno));
    check_pattern("shrunk", c, len / 4, 16);
    unsigned char *target = map(len);
    unsigned char *d = mremap(c, len / 4, len / 4, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (d != target)
        fail("mremap fixed: %s", strerror(errno));
    check_pattern("moved to a fixed place", d, len / 4, 16);
    munmap(target, len);
    printf("mremap: ok\n");
}

static void mode_hugepage(void) {
    size_t len = 32 * MB;
    unsigned char *a = map(len);
    if (madvise(a, len, MADV_HUGEPAGE) != 0)
        fail("madvise HUGEPAGE: %s", strerror(errno));
    first_touch("after MADV_HUGEPAGE", a, len);
    /* The registered part keeps VM_NOHUGEPAGE ("nh" in smaps' VmFlags). */
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, nh = 0, hg = 0;
    unsigned long lo, hi;
    uintptr_t mid = (uintptr_t)a + len / 2;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo <= mid && mid < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            nh = strstr(line, " nh") != NULL;
            hg = strstr(line, " hg") != NULL;
        }
    }
    if (f)
        fclose(f);
    printf("hugepage: ok, nh=%d hg=%d\n", nh, hg);
    munmap(a, len);
}

static volatile int spinning;

static void *spinner(void *arg) {
    (void)arg;
    while (spinning)
        ;
    return NULL;
}

/* The thread of this process named `name`, or 0. */

static void mode_starved(void) {
    /* The first large block starts the lazy mode and its threads. */
    unsigned char *first = map(4 * MB);
    first[0] = 1;
    munmap(first, 4 * MB);
    /* A new thread names itself when it first runs. */
    pid_t handler = 0;
    for (int i = 0; i < 1000 && !(handler = thread_named("prezero-fault")); i++)
        usleep(1000);
    if (!handler)
        fail("no prezero-fault thread (is the lazy mode on?)");
    struct sched_param sp = {0};
    if (sched_setscheduler(handler, SCHED_IDLE, &sp) != 0)
        fail("SCHED_IDLE for the handler: %s", strerror(errno));
    spinning = 1;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, spinner, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t len = 16 * MB;
    unsigned char *a = map(len);
    first_touch("starved handler, mmap", a, len);
    unsigned char *c = calloc(1, len);
    first_touch("starved handler, calloc", c, len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    spinning = 0;
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("starved: ok in %.2f s\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
}

static void mode_spin(double secs) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
}

/* LazyFree of the whole process, in kB. */
static long lazyfree_kb(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "LazyFree: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* Every private writable anonymous mapping paged out. */
static void page_out_everything(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, inode;
        char perms[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %255s", &lo, &hi, perms, &inode, path) < 4)
            continue;
        if (!strcmp(perms, "rw-p") && inode == 0 && (!path[0] || !strcmp(path, "[heap]")))
            madvise((void *)lo, hi - lo, 21 /* MADV_PAGEOUT */);
    }
    if (f)
        fclose(f);
}

static void mode_reclaim(void) {
    size_t n = 64 * MB;
    for (int r = 0; r < 4; r++) {
        unsigned char *p = calloc(1, n);
        if (!p)
            fail("calloc");
        memset(p, r + 1, n);
        free(p);
    }
    long held = 0;
    for (int i = 0; i < 100 && (held = lazyfree_kb()) < 32 * 1024; i++)
        usleep(100000);
    if (held < 32 * 1024)
        fail("what the preload holds is not marked free: LazyFree %ld kB", held);
    /* The lazy reserve refilled after the faults above took its ready
     * slots: some of what the page-out takes is the reserve's. */
    sleep(1);
    page_out_everything();
    for (int r = 0; r < 4; r++) {
        unsigned char *p = calloc(1, n);
        if (!p)
            fail("calloc");
        check_zero("calloc after the page-out", p, n);
        memset(p, 9, n);
        free(p);
    }
    unsigned char *q = map(n);
    check_zero("mmap after the page-out", q, n);
    munmap(q, n);
    printf("reclaim: ok\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    rng ^= (uint64_t)getpid() << 20;
    if (!strcmp(mode, "zero"))
        mode_zero(argc > 2 ? atoi(argv[2]) : 2);
    else if (!strcmp(mode, "fork"))
        mode_fork(argv[0]);
    else if (!strcmp(mode, "threads"))
        mode_threads(argc > 2 ? atoi(argv[2]) : 4);
    else if (!strcmp(mode, "pretouch"))
        mode_pretouch(argc > 2 ? atoi(argv[2]) : 2);
    else if (!strcmp(mode, "read"))
        mode_read();
    else if (!strcmp(mode, "mprotect"))
        mode_mprotect();
    else if (!strcmp(mode, "mlock"))
        mode_mlock();
    else if (!strcmp(mode, "signals"))
        mode_signals();
    else if (!strcmp(mode, "mremap"))
        mode_mremap();
    else if (!strcmp(mode, "hugepage"))
        mode_hugepage();
    else if (!strcmp(mode, "starved"))
        mode_starved();
    else if (!strcmp(mode, "spin"))
        mode_spin(argc > 2 ? atof(argv[2]) : 1);
    else if (!strcmp(mode, "reclaim"))
        mode_reclaim();
    else {
        fprintf(stderr, "usage: %s zero|fork|threads|pretouch|read|mprotect|mlock|signals|mremap|hugepage|starved|spin|"
                "reclaim\n", argv[0]);
        return 2;
    }
    return 0;
}
