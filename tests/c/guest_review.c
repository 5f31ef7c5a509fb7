/* What a hostile review of the preload's threads found (each ran plainly
 * and failed under the preload or its lazy mode), run by
 * prezero-preload/tests/guest/review.rs plainly, under the preload and
 * under the lazy mode. One mode per run:
 *
 *   setid-storm SECS  six threads call seteuid(65534) and seteuid(0) in a
 *                     loop while another callocs, touches and frees 16 MiB
 *                     blocks and mmaps, and another forks children that do
 *                     the same: glibc aborted ("failed to execute setxid")
 *                     or the program hung
 *   lifetimes N       N times a 32 MiB block is calloc'd and freed and the
 *                     scrubber let end (idle); then setresuid to
 *                     65534 while a thread allocates: threads that ended on
 *                     their own were never joined, their slots ran out
 *                     after 64, and glibc aborted; the growth of
 *                     /proc/self/maps after the first life (their stacks)
 *   strict HOW        after a large block, seccomp strict mode (HOW: prctl,
 *                     syscall) or an allow-list filter (HOW: filter): the
 *                     preload's system calls after it killed the program
 *   sandbox           an allow-list filter fit for a compute program, then
 *                     20 blocks of 32 MiB calloc'd, touched and freed
 *   tsync-other       a thread enters a filter of its own and takes a large
 *                     block; then another, not the main one, enters one with
 *                     TSYNC: it failed on a thread of ours
 *   raw-clone         syscall(SYS_clone, CLONE_VM | SIGCHLD, stack) with a
 *                     function address at the stack's top: the child died
 *   chroot DIR        after a large block, chroot into an empty DIR (no
 *                     /proc), 512 MiB freed in 32 MiB blocks: kept for good
 *                     (the resident set 3 s after, on stderr, read by a
 *                     child left outside)
 *   suspend-race SECS 4 MiB mappings made and unmapped in a loop, each
 *                     touched whenever no fault handler thread exists: a
 *                     mapping registered after the handler handed over hung
 *
 * Each prints "MODE: ok" (and figures on stderr) and exits 0; a failure
 * prints "FAIL: ..." and exits 3. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lazy_common.h"

static volatile int stop;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* A calloc block of `len` bytes, checked zero, written, freed. */
static void churn_once(size_t len) {
    unsigned char *p = calloc(1, len);
    if (!p)
        fail("calloc: %s", strerror(errno));
    check_zero("a calloc block", p, len);
    memset(p, 7, len);
    free(p);
}

/* How many of this process's threads are named "prezero-..." (`prefix`). */
static int threads_named(const char *prefix) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd >= 0 && read(fd, comm, sizeof comm - 1) > 0 && !strncmp(comm, prefix, strlen(prefix)))
            n++;
        if (fd >= 0)
            close(fd);
    }
    if (d)
        closedir(d);
    return n;
}

static int lines_of(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

/* ---- setid-storm --------------------------------------------------------- */

static void *setter(void *arg) {
    long *calls = arg;
    while (!stop) {
        if (seteuid(65534) || seteuid(0))
            fail("seteuid: %s", strerror(errno));
        (*calls)++;
    }
    return NULL;
}

static void *churner(void *arg) {
    (void)arg;
    while (!stop) {
        churn_once(16 * MB);
        unsigned char *m = map(16 * MB);
        check_zero("a mapping", m, 16 * MB);
        memset(m, 3, 16 * MB);
        munmap(m, 16 * MB);
    }
    return NULL;
}

static void *forker(void *arg) {
    (void)arg;
    while (!stop) {
        pid_t c = fork();
        if (c == 0) {
            churn_once(8 * MB);
            _exit(0);
        }
        int st = 0;
        if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st))
            fail("a forked child ended with %#x", st);
    }
    return NULL;
}

static void mode_setid_storm(double secs) {
    if (geteuid() != 0) {
        printf("skipped: not root\n");
        return;
    }
    pthread_t t[8];
    long calls[6] = {0};
    /* A large block first, as root: the lazy mode starts here. One that
     * would start at a moment the euid is 65534 is refused (no access to
     * userfaultfd), as it is for any program that drops before it starts. */
    churn_once(16 * MB);
    pthread_create(&t[0], NULL, churner, NULL);
    pthread_create(&t[1], NULL, forker, NULL);
    for (int i = 0; i < 6; i++)
        pthread_create(&t[2 + i], NULL, setter, &calls[i]);
    usleep((useconds_t)(secs * 1e6));
    stop = 1;
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    long n = 0;
    for (int i = 0; i < 6; i++)
        n += calls[i];
    fprintf(stderr, "setid-storm: %ld seteuid pairs\n", n);
    printf("setid-storm: ok\n");
}

/* ---- lifetimes ------------------------------------------------------------ */

static void *allocator(void *arg) {
    (void)arg;
    while (!stop)
        churn_once(32 * MB);
    return NULL;
}

static void mode_lifetimes(int n) {
    if (geteuid() != 0) {
        printf("skipped: not root\n");
        return;
    }
    int before = 0;
    for (int i = 0; i < n; i++) {
        churn_once(32 * MB);
        /* The scrubber ends once nothing is held (IDLE_SECS=0): a new one
         * starts each life (the watcher may linger between them). */
        for (int waited = 0; threads_named("prezero-scrub") > 0 && waited < 12000; waited += 10)
            usleep(10000);
        /* After the first life: what the preload maps once is there. */
        if (i == 0)
            before = lines_of("/proc/self/maps");
    }
    int after = lines_of("/proc/self/maps");
    pthread_t t;
    pthread_create(&t, NULL, allocator, NULL);
    usleep(200000);
    if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
        fail("setresuid: %s", strerror(errno));
    usleep(200000);
    stop = 1;
    pthread_join(t, NULL);
    fprintf(stderr, "lifetimes: %d, /proc/self/maps %d lines before, %d after\n", n, before, after);
    if (after > before + 8)
        fail("the mappings grew from %d to %d lines: stacks of threads never joined", before, after);
    printf("lifetimes: ok\n");
}

/* ---- seccomp -------------------------------------------------------------- */

#define ALLOW(n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static void enter_filter(struct sock_filter *f, unsigned short n, unsigned flags) {
    struct sock_fprog prog = {n, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog))
        fail("seccomp: %s", strerror(errno));
}

static void mode_strict(const char *how) {
    churn_once(64 * MB);
    usleep(100000);
    long r = 0;
    if (!strcmp(how, "prctl")) {
        r = prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0);
    } else if (!strcmp(how, "syscall")) {
        r = syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 0, NULL);
    } else {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_exit), ALLOW(SYS_exit_group),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        };
        enter_filter(f, sizeof f / sizeof f[0], 0);
    }
    if (r)
        fail("seccomp: %s", strerror(errno));
    static const char ok[] = "strict: ok\n";
    syscall(SYS_write, 1, ok, sizeof ok - 1);
    syscall(SYS_exit, 0);
}

static void mode_sandbox(void) {
    churn_once(64 * MB);
    usleep(100000);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_mremap),
        ALLOW(SYS_madvise), ALLOW(SYS_mprotect), ALLOW(SYS_brk), ALLOW(SYS_futex), ALLOW(SYS_exit),
        ALLOW(SYS_exit_group), ALLOW(SYS_clock_gettime), ALLOW(SYS_clock_nanosleep),
        ALLOW(SYS_nanosleep), ALLOW(SYS_rt_sigprocmask), ALLOW(SYS_rt_sigreturn), ALLOW(SYS_getpid),
        ALLOW(SYS_gettid), ALLOW(SYS_clone), ALLOW(SYS_set_robust_list), ALLOW(SYS_rseq),
        ALLOW(SYS_sched_yield), ALLOW(SYS_fstat), ALLOW(SYS_newfstatat),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    enter_filter(f, sizeof f / sizeof f[0], 0);
    for (int i = 0; i < 20; i++)
        churn_once(32 * MB);
    printf("sandbox: ok\n");
}

static struct sock_filter allow_all[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};

static void *own_filter(void *arg) {
    (void)arg;
    enter_filter(allow_all, 1, 0);
    churn_once(64 * MB);
    usleep(100000);
    return NULL;
}

static void *tsync(void *arg) {
    struct sock_fprog prog = {1, allow_all};
    *(long *)arg = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    return NULL;
}

static void mode_tsync_other(void) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        fail("PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
    pthread_t t;
    long r = -1;
    pthread_create(&t, NULL, own_filter, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, tsync, &r);
    pthread_join(t, NULL);
    if (r != 0)
        fail("seccomp with TSYNC: %ld (%s)", r, r > 0 ? "a thread could not take it" : strerror(errno));
    printf("tsync-other: ok\n");
}

/* ---- raw clone, chroot, the lazy mode's suspension ------------------------- */

static void raw_child(void) {
    static const char ran[] = "raw-clone: the child ran\n";
    syscall(SYS_write, 1, ran, sizeof ran - 1);
    syscall(SYS_exit, 0);
}

static void mode_raw_clone(void) {
#if defined(__x86_64__)
    size_t len = 1 << 16;
    unsigned long *top = (unsigned long *)((char *)malloc(len) + len) - 2;
    /* A function address at the stack's top: the stub's `ret` runs it. */
    top[0] = (unsigned long)raw_child;
    top[1] = 0;
    fflush(stdout);
    long pid = syscall(SYS_clone, CLONE_VM | SIGCHLD, top, 0, 0, 0);
    if (pid < 0)
        fail("clone: %s", strerror(errno));
    int st;
    waitpid((pid_t)pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        fail("the raw clone's child ended with %#x", st);
    printf("raw-clone: ok\n");
#else
    printf("raw-clone: ok\n");
#endif
}

/* The resident set of process `pid`, in KiB (read from /proc). */
static long rss_kib(pid_t pid) {
    char path[64], line[128];
    long kib = -1;
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

static void mode_chroot(const char *dir) {
    if (geteuid() != 0) {
        printf("skipped: not root\n");
        return;
    }
    churn_once(32 * MB);
    /* A child outside the jail reads the resident set when told. */
    int p[2];
    if (pipe(p))
        fail("pipe: %s", strerror(errno));
    pid_t parent = getpid(), reader = fork();
    if (reader == 0) {
        char c;
        close(p[1]);
        if (read(p[0], &c, 1) == 1)
            fprintf(stderr, "chroot: %ld KiB resident 3 s after 512 MiB freed\n", rss_kib(parent));
        _exit(0);
    }
    close(p[0]);
    if (chroot(dir) || chdir("/"))
        fail("chroot %s: %s", dir, strerror(errno));
    void *b[16];
    for (int i = 0; i < 16; i++) {
        b[i] = calloc(1, 32 * MB);
        if (!b[i])
            fail("calloc: %s", strerror(errno));
        memset(b[i], 1, 32 * MB);
    }
    for (int i = 0; i < 16; i++)
        free(b[i]);
    sleep(3);
    if (write(p[1], "r", 1) != 1)
        fail("write: %s", strerror(errno));
    waitpid(reader, NULL, 0);
    printf("chroot: ok\n");
}

static void on_alarm(int sig) {
    (void)sig;
    static const char hang[] = "FAIL: a touch of a fresh mapping hung\n";
    (void)!write(1, hang, sizeof hang - 1);
    _exit(3);
}

static void mode_suspend_race(double secs) {
    signal(SIGALRM, on_alarm);
    double end = now_s() + secs;
    long n = 0, touched = 0;
    while (now_s() < end) {
        unsigned char *p = map(4 * MB);
        if (threads_named("prezero-fault") == 0) {
            alarm(3);
            p[0] = 1;
            p[4 * MB - 1] = 1;
            alarm(0);
            touched++;
        }
        munmap(p, 4 * MB);
        n++;
    }
    fprintf(stderr, "suspend-race: %ld mappings, %ld touched with no handler\n", n, touched);
    printf("suspend-race: ok\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    const char *arg = argc > 2 ? argv[2] : "";
    if (!strcmp(mode, "setid-storm"))
        mode_setid_storm(atof(arg));
    else if (!strcmp(mode, "lifetimes"))
        mode_lifetimes(atoi(arg));
    else if (!strcmp(mode, "strict"))
        mode_strict(arg);
    else if (!strcmp(mode, "sandbox"))
        mode_sandbox();
    else if (!strcmp(mode, "tsync-other"))
        mode_tsync_other();
    else if (!strcmp(mode, "raw-clone"))
        mode_raw_clone();
    else if (!strcmp(mode, "chroot"))
        mode_chroot(arg);
    else if (!strcmp(mode, "suspend-race"))
        mode_suspend_race(atof(arg));
    else
        fail("usage: guest_review setid-storm SECS | lifetimes N | strict prctl|syscall|filter | sandbox | "
             "tsync-other | raw-clone | chroot DIR | suspend-race SECS");
    return 0;
}
