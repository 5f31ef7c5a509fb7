/* The preload's lazy mode (PREZERO_LAZY=1) against what a hostile review of it
 * found, run by prezero-preload/tests/lazy/ under PREZERO_LAZY=1: one mode
 * per finding, each the review's reproducer made a test. One mode per run:
 *
 *   lockdrop MB  with the reserve (MB) full and its worker stopped (ptrace:
 *                as if starved), a calloc'd block faulted in, written and
 *                freed (its huge pages wait in the reserve unscrubbed), then
 *                mlockall locks them; the program idles, the worker resumed
 *                gives the reserve back (and the lazy mode, idle with it
 *                empty, steps aside); after munlockall a new mapping starts
 *                it again, the reserve fills, and new memory reads zero
 *                (run with PREZERO_IDLE_SECS=1 PREZERO_CAP=0)
 *   vmsplice MB  (the reserve's size) a mapping's pages given to a pipe
 *                (vmsplice), the mapping unmapped, new memory written: the
 *                pipe delivers what the program wrote before
 *   failcalls    mmap(MAP_FIXED), munmap, madvise and mremap that fail
 *                (EBADF, EACCES, EINVAL, EFAULT) keep the memory they were
 *                given, written and not, and its faults served a block at
 *                a time (the lazy line's count)
 *   closefds     every descriptor above 2 closed (close_range), a pipe
 *                opened at the userfaultfd's number: the pipe's bytes stay
 *                the program's, memory is served (by the kernel) as before
 *   devnull      /dev/null put at the userfaultfd's number (dup2): no
 *                thread spins on its end
 *   stack FROM TO  threads whose stacks are registered mappings (their
 *                stack pointer FROM to TO bytes, by 16, above an untouched
 *                block) map, touch and unmap: no hang
 *   atfork       fork handlers of the program's that map, touch and unmap,
 *                registered before the lazy mode starts (it execs itself
 *                without PREZERO_PREFILL_PID): no hang
 *   mremap-edges mremap of whole mappings of no multiple of 2 MiB, or off a
 *                2 MiB boundary: grown, moved with DONTUNMAP, contents kept
 *   memcg        200 MiB used for 3 s while the reserve fills (run in a
 *                memory cgroup of 512 MiB, the reserve's size the default)
 *
 * Failures print "FAIL: ..." and exit 3; a mode that cannot run here prints
 * "skipped: ..." and exits 0. */
#define _GNU_SOURCE
#include <alloca.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lazy_common.h"



/* Every byte of p[0..len) is zero. */

/* Every byte of p[0..len) is v. */
static void check_fill(const char *what, const unsigned char *p, size_t len, unsigned char v) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != v)
            fail("%s: byte %zu of %zu is %#x, not %#x", what, i, len, p[i], v);
}

static void touch(unsigned char *p, size_t len, unsigned char v) {
    for (size_t i = 0; i < len; i += PAGE)
        ((volatile unsigned char *)p)[i] = v;
}

/* The thread of this process named `name`, waited for (a new thread names
 * itself when it first runs). */
/* The lazy mode's thread `name`, waited for (it starts with the mode). */
static pid_t wait_for_thread(const char *name) {
    for (int tries = 0; tries < 1000; tries++) {
        pid_t found = thread_named(name);
        if (found)
            return found;
        usleep(1000);
    }
    fail("no %s thread (is the lazy mode on?)", name);
}

/* Stops thread `tid` of this process (a child traces it: the thread alone
 * stops, as if starved), until resume(). */
static pid_t stop_thread(pid_t tid) {
    int ready[2], go[2];
    if (pipe(ready) || pipe(go))
        fail("pipe: %s", strerror(errno));
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    pid_t k = fork();
    if (k < 0)
        fail("fork: %s", strerror(errno));
    if (k == 0) {
        char c = 0;
        close(go[1]);
        if (ptrace(PTRACE_SEIZE, tid, 0, 0) || ptrace(PTRACE_INTERRUPT, tid, 0, 0))
            c = 1;
        else
            waitpid(tid, NULL, __WALL);
        if (write(ready[1], &c, 1) != 1 || c)
            _exit(1);
        /* Until the parent says so; the thread runs on once we exit. */
        (void)!read(go[0], &c, 1);
        ptrace(PTRACE_DETACH, tid, 0, 0);
        _exit(0);
    }
    char c = 1;
    if (read(ready[0], &c, 1) != 1 || c) {
        /* Not allowed here (Yama's ptrace_scope 3, a container's seccomp). */
        printf("skipped: no ptrace of thread %d allowed\n", tid);
        exit(0);
    }
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    return go[1];
}

static void resume(pid_t go) {
    close(go);
    wait(NULL);
}

/* The resident bytes of the mapping of `len` bytes (the first), or -1. */
static long resident(size_t len) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    long found = -1, rss;
    int in = 0;
    unsigned long a, b;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2)
            in = found < 0 && b - a == len;
        else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
            found = rss * 1024;
    }
    if (f)
        fclose(f);
    return found;
}

/* A fault of one small page (in a block populated already: the reserve
 * gives nothing) that keeps the lazy mode from going idle, in `r`, a
 * mapping of 4 MiB whose first page was touched. */
static void fault_one(unsigned char *r) {
    madvise(r + PAGE, PAGE, MADV_DONTNEED);
    r[PAGE] = 1;
}

/* Waits until the reserve of `mb` MiB is full (the worker fills it while
 * the machine has a core to spare: slowly on a busy machine, and only while
 * the program is not idle). */
static void reserve_full(size_t mb, unsigned char *r) {
    /* A mapping of its own (its advice splits it from the margin that
     * aligned it). */
    size_t len = mb * MB;
    for (int i = 0; i < 600; i++) {
        if (resident(len) >= (long)(mb * MB))
            return;
        usleep(100000);
        fault_one(r);
    }
    fail("the reserve (%zu MiB) never filled: %ld bytes resident", mb, resident(len));
}

static void mode_lockdrop(size_t reserve_mb) {
    unsigned char *r = map(4 * MB);
    r[0] = 1;
    reserve_full(reserve_mb, r);
    /* Stopped before the faults, so the slots they empty stay empty. */
    int go = stop_thread(wait_for_thread("prezero-reserve"));
    size_t n = 128 * MB;
    unsigned char *p = calloc(1, n);
    if (!p)
        fail("calloc");
    touch(p, n, 1);
    memset(p, 0xab, n);
    check_fill("the block written", p, n, 0xab);
    /* Its huge pages move into the reserve, to be scrubbed by the worker. */
    free(p);
    if (mlockall(MCL_CURRENT | MCL_ONFAULT))
        fail("mlockall: %s", strerror(errno));
    sleep(2); /* idle: the worker, resumed, gives the reserve back */
    resume(go);
    sleep(2);
    munlockall();
    /* Active again (a new mapping): the worker fills the reserve, the
     * handler hands it out. */
    unsigned char *again = map(4 * MB);
    again[0] = 1;
    reserve_full(reserve_mb, again);
    n = 512 * MB;
    unsigned char *q = map(n);
    check_zero("new memory after a give-back under mlockall", q, n);
    printf("lockdrop: ok\n");
}

/* A pipe given the pages of a mapping (vmsplice: references, not pins),
 * then the mapping unmapped and new memory written: the pipe delivers the
 * bytes first written. With the reserve full and its worker stopped, so
 * that the mapping's huge pages are the reserve's and it has room for them
 * back: a page moved back while the pipe held it would be scrubbed and
 * handed to the new memory. */
static void mode_vmsplice(size_t reserve_mb) {
    unsigned char *r = map(4 * MB);
    r[0] = 1;
    reserve_full(reserve_mb, r);
    int go = stop_thread(wait_for_thread("prezero-reserve"));
    size_t n = reserve_mb / 2 * MB;
    unsigned char *p = map(n);
    memset(p, 0x77, n);
    /* 64 KiB of each of 8 whole blocks. */
    enum { PARTS = 8, PART = 64 * 1024 };
    unsigned char *base = (unsigned char *)(((uintptr_t)p + 2 * MB - 1) & ~(2 * MB - 1));
    struct iovec iov[PARTS];
    for (int i = 0; i < PARTS; i++)
        iov[i] = (struct iovec){base + i * 2 * MB + PAGE, PART};
    int pfd[2];
    if (pipe(pfd))
        fail("pipe: %s", strerror(errno));
    if (fcntl(pfd[1], F_SETPIPE_SZ, (int)MB) < 0)
        fail("F_SETPIPE_SZ: %s", strerror(errno));
    ssize_t given = vmsplice(pfd[1], iov, PARTS, 0);
    if (given != PARTS * PART)
        fail("vmsplice gave %zd of %d bytes: %s", given, PARTS * PART, strerror(errno));
    if (munmap(p, n))
        fail("munmap: %s", strerror(errno));
    unsigned char *q = map(2 * n);
    memset(q, 0x99, 2 * n);
    resume(go);
    static unsigned char buf[PARTS * PART];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t k = read(pfd[0], buf + got, sizeof buf - got);
        if (k <= 0)
            fail("read from the pipe: %s", k ? strerror(errno) : "end of file");
        got += k;
    }
    check_fill("what the pipe delivered", buf, sizeof buf, 0x77);
    printf("vmsplice: ok\n");
}

/* A mapping of n bytes (a multiple of 2 MiB) at a 2 MiB boundary, its
 * first half written with v (its second half left to fault later): no
 * edges, so every fault is a block's. */
static unsigned char *half_written(size_t n, unsigned char v) {
    unsigned char *raw = map(n + 2 * MB);
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + 2 * MB - 1) & ~(2 * MB - 1));
    if (p > raw)
        munmap(raw, p - raw);
    if (raw + 2 * MB > p)
        munmap(p + n, raw + 2 * MB - p);
    memset(p, v, n / 2);
    return p;
}

/* After a call that failed: the written half kept, the rest zero, then
 * written too (served as before). */
static void still_whole(const char *what, unsigned char *p, size_t n, unsigned char v) {
    check_fill(what, p, n / 2, v);
    check_zero(what, p + n / 2, n - n / 2);
    memset(p + n / 2, v, n - n / 2);
    check_fill(what, p, n, v);
}

/* Calls that fail leave memory as it was: mmap(MAP_FIXED) with a bad
 * descriptor (EBADF) or of a file open write-only (EACCES), munmap and
 * madvise(MADV_DONTNEED) of an unaligned start (EINVAL), mremap onto a
 * target overlapping its source (EINVAL) or from a hole onto data
 * (EFAULT). */
static void mode_failcalls(void) {
    size_t n = 16 * MB;
    unsigned char *a = half_written(n, 0x11);
    if (mmap(a, n, PROT_READ, MAP_PRIVATE | MAP_FIXED, 12345, 0) != MAP_FAILED || errno != EBADF)
        fail("mmap(MAP_FIXED) of a bad descriptor did not fail with EBADF");
    still_whole("after a failed mmap(MAP_FIXED) (EBADF)", a, n, 0x11);

    char path[] = "/tmp/lazy_review.XXXXXX";
    int tmp = mkstemp(path);
    int wo = tmp < 0 ? -1 : open(path, O_WRONLY);
    if (wo < 0 || ftruncate(wo, n))
        fail("a write-only file: %s", strerror(errno));
    unlink(path);
    unsigned char *b = half_written(n, 0x12);
    if (mmap(b, n, PROT_READ, MAP_PRIVATE | MAP_FIXED, wo, 0) != MAP_FAILED || errno != EACCES)
        fail("mmap(MAP_FIXED) of a write-only file did not fail with EACCES");
    still_whole("after a failed mmap(MAP_FIXED) (EACCES)", b, n, 0x12);

    unsigned char *c = half_written(n, 0x22);
    if (munmap(c + 1, n - PAGE) == 0 || errno != EINVAL)
        fail("munmap of an unaligned start did not fail with EINVAL");
    still_whole("after a failed munmap", c, n, 0x22);

    unsigned char *d = half_written(n, 0x33);
    if (madvise(d + 1, n - PAGE, MADV_DONTNEED) == 0 || errno != EINVAL)
        fail("madvise of an unaligned start did not fail with EINVAL");
    still_whole("after a failed madvise", d, n, 0x33);

    unsigned char *e = half_written(n, 0x44);
    if (mremap(e, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, e + 4 * MB) != MAP_FAILED || errno != EINVAL)
        fail("mremap onto an overlapping target did not fail with EINVAL");
    still_whole("after a failed mremap (overlapping)", e, n, 0x44);

    unsigned char *f = half_written(n, 0x55);
    unsigned char *hole = map(n);
    munmap(hole, n);
    if (mremap(hole, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, f) != MAP_FAILED || errno != EFAULT)
        fail("mremap from a hole did not fail with EFAULT");
    still_whole("the target of a failed mremap (from a hole)", f, n, 0x55);
    printf("failcalls: ok\n");
}

/* The number of this process's userfaultfd (the lazy mode's), or fail. */
static int uffd_number(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = -1;
    while (d && (e = readdir(d))) {
        char path[300], link[128] = "";
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        if (readlink(path, link, sizeof link - 1) > 0 && strstr(link, "userfaultfd"))
            found = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    if (found < 0)
        fail("no userfaultfd among the descriptors (is the lazy mode on?)");
    return found;
}

/* A daemon's start: every descriptor above 2 closed, then a pipe of its own
 * at the number the userfaultfd had. Faults after it are the kernel's;
 * the pipe's bytes are the program's alone. */
static void mode_closefds(void) {
    size_t n = 64 * MB;
    unsigned char *p = map(n);
    touch(p, 8 * MB, 1);
    int at = uffd_number();
    if (syscall(SYS_close_range, 3, ~0U, 0))
        fail("close_range: %s", strerror(errno));
    int pfd[2];
    if (pipe(pfd))
        fail("pipe: %s", strerror(errno));
    if (dup2(pfd[0], at) != at || dup2(pfd[1], at + 1) != at + 1)
        fail("dup2: %s", strerror(errno));
    fcntl(at, F_SETFL, O_NONBLOCK);
    /* The handler's read, waiting since before the close, returns. */
    touch(p + 8 * MB, 8 * MB, 2);
    usleep(200000);
    const char msg[] = "the program's own bytes, for the program alone";
    if (write(at + 1, msg, sizeof msg) != sizeof msg)
        fail("write to the pipe: %s", strerror(errno));
    touch(p + 16 * MB, 8 * MB, 3);
    usleep(200000);
    char buf[sizeof msg] = "";
    ssize_t got = read(at, buf, sizeof buf);
    if (got != sizeof msg || memcmp(buf, msg, sizeof msg))
        fail("the pipe gave %zd bytes, not the %zu written", got, sizeof msg);
    for (size_t i = 0; i < 24 * MB; i += PAGE)
        if (p[i] != (i < 8 * MB ? 1 : i < 16 * MB ? 2 : 3))
            fail("byte %zu is %#x", i, p[i]);
    for (size_t i = 0; i < 24 * MB; i++)
        if (i % PAGE && p[i])
            fail("byte %zu is %#x, not zero", i, p[i]);
    check_zero("untouched after the close", p + 24 * MB, n - 24 * MB);
    printf("closefds: ok\n");
}

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* /dev/null put at the userfaultfd's number (dup2): the process does not
 * spin reading its end. */
static void mode_devnull(void) {
    unsigned char *p = map(64 * MB);
    p[0] = 1;
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, uffd_number()) < 0)
        fail("/dev/null: %s", strerror(errno));
    p[8 * MB] = 1;
    usleep(200000);
    double t0 = cpu_seconds();
    sleep(1);
    double spent = cpu_seconds() - t0;
    if (spent > 0.3)
        fail("%.2f s of CPU over 1 s of sleep", spent);
    check_zero("after the dup2", p + 1, 8 * MB - 1);
    printf("devnull: ok\n");
}

/* A thread whose stack is a registered mapping of the program's own
 * (pthread_attr_setstack), its stack pointer `gap` bytes above a block it has
 * not touched, maps, touches and unmaps a mapping: under the lazy mode's
 * lock, its calls reach into the untouched block, a fault the handler must
 * answer without that lock. */
static unsigned char *stack_map;
static size_t stack_gap;

__attribute__((noinline)) static void map_touch_unmap(void) {
    unsigned char *m = map(8 * MB);
    touch(m, 8 * MB, 1);
    if (munmap(m, 8 * MB))
        fail("munmap: %s", strerror(errno));
}

static void *on_own_stack(void *arg) {
    (void)arg;
    unsigned char *sp = __builtin_frame_address(0);
    size_t down = sp - (stack_map + 2 * MB) - stack_gap;
    volatile unsigned char *pad = alloca(down);
    pad[down - 1] = 0;
    map_touch_unmap();
    return NULL;
}

static void mode_stack(size_t from, size_t to) {
    for (stack_gap = from; stack_gap < to; stack_gap += 16) {
        stack_map = map(4 * MB);
        pthread_attr_t at;
        pthread_t t;
        pthread_attr_init(&at);
        pthread_attr_setstack(&at, stack_map, 4 * MB);
        if (pthread_create(&t, &at, on_own_stack, NULL))
            fail("pthread_create");
        pthread_join(t, NULL);
        munmap(stack_map, 4 * MB);
    }
    printf("stack: ok\n");
}

/* Fork handlers of the program's that map, touch and unmap large memory,
 * registered before the lazy mode starts (in a process that is not the one
 * prezero run executes, at its first large block): they run inside the lazy
 * mode's own, which hold its lock across fork. */
static unsigned char *before_fork_map;

static void prepare(void) {
    before_fork_map = map(8 * MB);
    before_fork_map[0] = 1;
}

static void parent(void) {
    munmap(before_fork_map, 8 * MB);
}

static void child(void) {
    unsigned char *m = map(8 * MB);
    m[0] = 1;
}

static void mode_atfork(void) {
    if (getenv("PREZERO_PREFILL_PID")) {
        /* Named as the program prezero run executes, whose lazy mode starts
         * (and registers its fork handlers) before main: again without. */
        unsetenv("PREZERO_PREFILL_PID");
        execl("/proc/self/exe", "lazy_review", "atfork", (char *)NULL);
        fail("exec: %s", strerror(errno));
    }
    pthread_atfork(prepare, parent, child);
    unsigned char *c = calloc(1, 64 * MB);
    if (!c)
        fail("calloc");
    touch(c, 64 * MB, 1);
    pid_t k = fork();
    if (k < 0)
        fail("fork: %s", strerror(errno));
    if (k == 0)
        _exit(0);
    int st;
    if (waitpid(k, &st, 0) != k || st != 0)
        fail("the child ended with status %#x", st);
    printf("atfork: ok\n");
}

/* mremap of whole mappings whose size is no multiple of 2 MiB, or whose
 * start is off a 2 MiB boundary: grown (moved), moved with DONTUNMAP,
 * contents kept, the rest zero. */
static void mode_mremap_edges(void) {
    size_t n = 5 * MB + PAGE;
    unsigned char *p = map(n);
    memset(p, 0x5a, n);
    unsigned char *q = mremap(p, n, 3 * n, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        fail("mremap to grow a mapping of 5 MiB + 4 KiB: %s", strerror(errno));
    check_fill("grown", q, n, 0x5a);
    check_zero("grown, its new part", q + n, 2 * n);
    n *= 3;
    memset(q, 0x5b, n);
    unsigned char *r = mremap(q, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
    if (r == MAP_FAILED)
        fail("mremap with DONTUNMAP: %s", strerror(errno));
    check_fill("moved with DONTUNMAP", r, n, 0x5b);
    check_zero("left by DONTUNMAP", q, n);
    /* Off a 2 MiB boundary. */
    unsigned char *raw = map(24 * MB);
    unsigned char *at = (unsigned char *)((((uintptr_t)raw + 2 * MB - 1) & ~(2 * MB - 1)) + 3 * PAGE);
    size_t m = 16 * MB;
    unsigned char *s = mmap(at, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (s != at)
        fail("mmap(MAP_FIXED): %s", strerror(errno));
    memset(s, 0x5c, m / 2);
    unsigned char *t = mremap(s, m, 2 * m, MREMAP_MAYMOVE);
    if (t == MAP_FAILED)
        fail("mremap to grow a mapping off a 2 MiB boundary: %s", strerror(errno));
    check_fill("grown off a boundary", t, m / 2, 0x5c);
    check_zero("grown off a boundary, the rest", t + m / 2, 2 * m - m / 2);
    printf("mremap-edges: ok\n");
}

/* 200 MiB mapped, written, and kept a few seconds while the reserve fills
 * (run in a memory cgroup of 512 MiB with the default reserve). */
static void mode_memcg(void) {
    size_t n = 200 * MB;
    unsigned char *p = map(n);
    memset(p, 1, n);
    for (int i = 0; i < 30; i++) {
        usleep(100000);
        p[i * PAGE] = 2;
    }
    printf("memcg: ok\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "lockdrop") && argc > 2)
        mode_lockdrop(atol(argv[2]));
    else if (!strcmp(mode, "vmsplice") && argc > 2)
        mode_vmsplice(atol(argv[2]));
    else if (!strcmp(mode, "failcalls"))
        mode_failcalls();
    else if (!strcmp(mode, "closefds"))
        mode_closefds();
    else if (!strcmp(mode, "devnull"))
        mode_devnull();
    else if (!strcmp(mode, "stack") && argc > 3)
        mode_stack(atol(argv[2]), atol(argv[3]));
    else if (!strcmp(mode, "atfork"))
        mode_atfork();
    else if (!strcmp(mode, "mremap-edges"))
        mode_mremap_edges();
    else if (!strcmp(mode, "memcg"))
        mode_memcg();
    else {
        fprintf(stderr,
                "usage: %s lockdrop RESERVE_MB|vmsplice RESERVE_MB|failcalls|closefds|devnull|"
                "stack FROM TO|atfork|mremap-edges|memcg\n",
                argv[0]);
        return 2;
    }
    return 0;
}
