/* Ordinary things programs do, which must behave under the preload's lazy
 * mode as they do plainly: same exit, same output. Run by
 * prezero-preload/tests/lazy/ once without the preload and once under
 * PREZERO_LAZY=1, and the two runs compared. One mode per run:
 *
 *   seccomp-ioctl  a seccomp filter on every thread (TSYNC) answers ioctl
 *                  with EPERM, then a 64 MiB calloc block is touched
 *   seccomp-kill   under a filter that kills the process on userfaultfd(2)
 *                  (systemd's SystemCallFilter= default), with
 *                  /dev/userfaultfd unusable (a bind mount of /dev/null in a
 *                  mount namespace of its own), the program runs itself again
 *                  and touches a 64 MiB calloc block
 *   fork-worker    a fork prepare handler, registered before the lazy mode
 *                  starts (the program runs itself again as a process the
 *                  mode starts in at its first large block), waits for a
 *                  worker thread that maps, touches and unmaps a 32 MiB
 *                  buffer; then the program forks
 *   closefds-child a child made without fork handlers (_Fork) sleeps while
 *                  the parent closes every descriptor above 2 (close_range)
 *                  and touches a 64 MiB malloc block
 *   rlimit-data    with RLIMIT_DATA at 3 GiB (set, then the program runs
 *                  itself again, as under prlimit --data), a 2.5 GiB mmap
 *   mlock-mremap   a 32 MiB mapping locked (mlock), grown in place to 64 MiB
 *                  by mremap (the kernel populates the locked growth in the
 *                  call), every byte zero
 *   merged-mremap  an 8 MiB mapping and a 1 MiB one placed right after it
 *                  (the kernel merges them), written, grown whole by one
 *                  mremap(MREMAP_MAYMOVE): contents kept
 *   thp-disable    PR_SET_THP_DISABLE, then a 40 MiB mapping asked for huge
 *                  pages (MADV_HUGEPAGE) and written: how much of it is in
 *                  huge pages (AnonHugePages)
 *   collapse       MADV_COLLAPSE of a written 4 MiB mapping: refused or not
 *   unshare-user   unshare(CLONE_NEWUSER), which the kernel allows only a
 *                  single-threaded process, between two 64 MiB calloc
 *                  blocks touched
 *   setpriv        as root, a setpriv-style drop between two 64 MiB calloc
 *                  blocks touched: PR_SET_KEEPCAPS, setresuid to 65534,
 *                  CAP_SETGID made effective for the calling thread alone
 *                  (capset), setresgid to 65534 (glibc makes every thread
 *                  repeat it, and aborts if one fails)
 *   initgroups     as setpriv, with initgroups("nobody") (glibc's internal
 *                  setgroups) for the last step
 *   cap-drop       as setpriv, then every capability dropped (capset on the
 *                  calling thread alone, as libcap does): after 1.5 s no thread
 *                  of the process holds one
 *   setid-fault    a thread reads /dev/zero into fresh 64 MiB mappings (the
 *                  kernel faults on registered memory for it) while the main
 *                  thread calls setresgid, again and again
 *   mincore        2048 pages written one by one from the start of a 16 MiB
 *                  mapping: how many mincore reports resident
 *   guard          a guard page (MADV_GUARD_INSTALL, 6.13) 64 pages after
 *                  one the program then writes, in the same 2 MiB block of
 *                  an 8 MiB mapping: writing the guard page raises SIGSEGV
 *
 * Each prints "MODE: ..." lines and exits 0; a failure prints "FAIL: ..."
 * and exits 3; a mode that cannot run here prints "skipped: ..." and exits
 * 0 (the same in both runs). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lazy_common.h"

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

/* Installs a filter that answers system call `nr` with `action` (all
 * others allowed), with `flags` (SECCOMP_FILTER_FLAG_TSYNC: every thread). */
static void filter(int nr, unsigned action, unsigned flags) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        fail("PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog))
        fail("seccomp: %s", strerror(errno));
}

/* A calloc block of `len` bytes, every page written once after a check
 * that it reads zero. */
static void touch_calloc(const char *what, size_t len) {
    unsigned char *p = calloc(1, len);
    if (!p)
        fail("%s: calloc: %s", what, strerror(errno));
    for (size_t i = 0; i < len; i += PAGE) {
        if (p[i])
            fail("%s: byte %zu is %#x, not zero", what, i, p[i]);
        p[i] = 1;
    }
    free(p);
}

static void mode_seccomp_ioctl(void) {
    unsigned char *p = calloc(1, 64 * MB);
    if (!p)
        fail("calloc: %s", strerror(errno));
    filter(SYS_ioctl, SECCOMP_RET_ERRNO | EPERM, SECCOMP_FILTER_FLAG_TSYNC);
    check_zero("after the filter", p, 64 * MB);
    memset(p, 7, 64 * MB);
    free(p);
    printf("seccomp-ioctl: ok\n");
}

static void mode_seccomp_kill(char **argv) {
    if (argv[2] && !strcmp(argv[2], "again")) {
        touch_calloc("under the filter", 64 * MB);
        printf("seccomp-kill: ok\n");
        return;
    }
    /* Made in a child of one thread (a mount namespace needs its own fs
     * state), which then runs this program again. */
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
            printf("skipped: no mount namespace here (%s)\n", strerror(errno));
            fflush(stdout);
            _exit(0);
        }
        if (access("/dev/userfaultfd", F_OK) == 0 &&
            mount("/dev/null", "/dev/userfaultfd", NULL, MS_BIND, NULL))
            fail("bind mount over /dev/userfaultfd: %s", strerror(errno));
        filter(SYS_userfaultfd, SECCOMP_RET_KILL_PROCESS, 0);
        char pidbuf[32];
        snprintf(pidbuf, sizeof pidbuf, "%d", getpid());
        /* The program `prezero run` executes is this one now. */
        if (getenv("PREZERO_PREFILL_PID"))
            setenv("PREZERO_PREFILL_PID", pidbuf, 1);
        execl("/proc/self/exe", argv[0], "seccomp-kill", "again", (char *)NULL);
        fail("exec: %s", strerror(errno));
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        fail("waitpid: %s", strerror(errno));
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        fail("the filtered program ended with status %#x", st);
}

static pthread_mutex_t worker_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t worker_cond = PTHREAD_COND_INITIALIZER;
static int worker_round, worker_done;

/* Maps, touches and unmaps a 32 MiB buffer each time it is asked. */
static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&worker_lock);
        while (worker_done == worker_round)
            pthread_cond_wait(&worker_cond, &worker_lock);
        pthread_mutex_unlock(&worker_lock);
        unsigned char *p = map(32 * MB);
        for (size_t i = 0; i < 32 * MB; i += PAGE)
            p[i] = 1;
        munmap(p, 32 * MB);
        pthread_mutex_lock(&worker_lock);
        worker_done++;
        pthread_cond_broadcast(&worker_cond);
        pthread_mutex_unlock(&worker_lock);
    }
    return NULL;
}

/* A library's prepare handler: its worker finishes a round first. */
static void prepare(void) {
    pthread_mutex_lock(&worker_lock);
    int want = ++worker_round;
    pthread_cond_broadcast(&worker_cond);
    while (worker_done < want)
        pthread_cond_wait(&worker_cond, &worker_lock);
    pthread_mutex_unlock(&worker_lock);
}

static void mode_fork_worker(char **argv) {
    if (!argv[2] || strcmp(argv[2], "again")) {
        unsetenv("PREZERO_PREFILL_PID");
        execl("/proc/self/exe", argv[0], "fork-worker", "again", (char *)NULL);
        fail("exec: %s", strerror(errno));
    }
    pthread_t t;
    pthread_atfork(prepare, NULL, NULL);
    pthread_create(&t, NULL, worker, NULL);
    touch_calloc("before the forks", 8 * MB);
    for (int i = 0; i < 4; i++) {
        pid_t pid = fork();
        if (pid < 0)
            fail("fork: %s", strerror(errno));
        if (pid == 0)
            _exit(0);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
            fail("child %d: status %#x", i, st);
    }
    printf("fork-worker: 4 forks\n");
}

static void mode_closefds_child(void) {
    /* No fork handlers run in the child: it keeps a copy of every
     * descriptor, the preload's too. */
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid < 0)
        fail("clone: %s", strerror(errno));
    if (pid == 0) {
        struct timespec ts = {30, 0};
        syscall(SYS_nanosleep, &ts, NULL);
        syscall(SYS_exit_group, 0);
    }
    if (close_range(3, ~0U, 0))
        fail("close_range: %s", strerror(errno));
    unsigned char *p = malloc(64 * MB);
    if (!p)
        fail("malloc: %s", strerror(errno));
    memset(p, 5, 64 * MB);
    free(p);
    touch_calloc("after close_range", 64 * MB);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("closefds-child: ok\n");
}

static void mode_rlimit_data(char **argv) {
    if (!argv[2] || strcmp(argv[2], "again")) {
        struct rlimit r = {3UL << 30, 3UL << 30};
        if (setrlimit(RLIMIT_DATA, &r))
            fail("setrlimit: %s", strerror(errno));
        execl("/proc/self/exe", argv[0], "rlimit-data", "again", (char *)NULL);
        fail("exec: %s", strerror(errno));
    }
    size_t len = 5UL << 29;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("rlimit-data: mmap of 2.5 GiB: %s\n", p == MAP_FAILED ? strerror(errno) : "ok");
    if (p != MAP_FAILED)
        munmap(p, len);
}

static void mode_mlock_mremap(void) {
    /* Room after it, so that it grows in place. */
    unsigned char *p = map(64 * MB);
    munmap(p + 32 * MB, 32 * MB);
    if (mlock(p, 32 * MB)) {
        printf("skipped: mlock: %s\n", strerror(errno));
        return;
    }
    unsigned char *q = mremap(p, 32 * MB, 64 * MB, 0);
    if (q == MAP_FAILED)
        fail("mremap in place: %s", strerror(errno));
    check_zero("the locked mapping, grown", q, 64 * MB);
    munmap(q, 64 * MB);
    printf("mlock-mremap: ok\n");
}

static void mode_merged_mremap(void) {
    /* Room for both, then each placed (MAP_FIXED_NOREPLACE). */
    unsigned char *p = map(9 * MB);
    munmap(p, 9 * MB);
    int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    if (mmap(p, 8 * MB, prot, flags, -1, 0) != p || mmap(p + 8 * MB, MB, prot, flags, -1, 0) != p + 8 * MB)
        fail("placing the mappings: %s", strerror(errno));
    for (size_t i = 0; i < 9 * MB; i += PAGE)
        p[i] = (unsigned char)(i / PAGE);
    unsigned char *q = mremap(p, 9 * MB, 16 * MB, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) {
        printf("merged-mremap: %s\n", strerror(errno));
        return;
    }
    for (size_t i = 0; i < 9 * MB; i += PAGE)
        if (q[i] != (unsigned char)(i / PAGE))
            fail("merged-mremap: page %zu lost its byte", i / PAGE);
    check_zero("the growth", q + 9 * MB, 7 * MB);
    munmap(q, 16 * MB);
    printf("merged-mremap: ok\n");
}

/* AnonHugePages of the mapping that holds `p`, in kB (-1: not found). */
static long huge_kb(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    long kb = -1;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char dash;
        if (sscanf(line, "%lx%c%lx ", &lo, &dash, &hi) == 3 && dash == '-')
            in = lo <= (uintptr_t)p && (uintptr_t)p < hi;
        else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    if (f)
        fclose(f);
    return kb;
}

static void mode_thp_disable(void) {
    if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0))
        fail("PR_SET_THP_DISABLE: %s", strerror(errno));
    unsigned char *p = map(40 * MB);
    madvise(p, 40 * MB, MADV_HUGEPAGE);
    memset(p, 3, 40 * MB);
    printf("thp-disable: %ld kB of 40 MiB in huge pages\n", huge_kb(p));
    munmap(p, 40 * MB);
}

static void mode_collapse(void) {
    unsigned char *p = map(6 * MB);
    unsigned char *block = (unsigned char *)(((uintptr_t)p + 2 * MB - 1) & ~(2 * MB - 1));
    memset(block, 1, 4 * MB);
    int r = madvise(block, 4 * MB, 25 /* MADV_COLLAPSE */);
    printf("collapse: %s\n", r == 0 || errno != EINVAL ? "not refused" : "refused (EINVAL)");
    munmap(p, 6 * MB);
}

/* The process's threads, on stderr (not compared: the preload's are there). */
static void say_threads(const char *when) {
    char line[128];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8))
            fprintf(stderr, "%s: %s", when, line);
    if (f)
        fclose(f);
}

static void mode_unshare_user(void) {
    touch_calloc("before", 64 * MB);
    say_threads("unshare-user");
    if (unshare(CLONE_NEWUSER))
        printf("unshare-user: %s\n", strerror(errno));
    else
        printf("unshare-user: ok\n");
    touch_calloc("after", 64 * MB);
}

/* The first steps of a setpriv-style drop: CAP_SETGID left effective for
 * the calling thread alone; false (and "skipped") where it cannot run. */
static int drop_to_nobody(void) {
    if (geteuid() != 0) {
        printf("skipped: not root\n");
        return 0;
    }
    touch_calloc("before", 64 * MB);
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
        fail("PR_SET_KEEPCAPS: %s", strerror(errno));
    if (setresuid(65534, 65534, 65534))
        fail("setresuid: %s", strerror(errno));
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &head, data))
        fail("capget: %s", strerror(errno));
    data[0].effective = 1u << CAP_SETGID;
    if (syscall(SYS_capset, &head, data))
        fail("capset: %s", strerror(errno));
    return 1;
}

static void mode_setpriv(void) {
    if (!drop_to_nobody())
        return;
    say_threads("setpriv");
    if (setresgid(65534, 65534, 65534))
        fail("setresgid: %s", strerror(errno));
    printf("setpriv: uid %d gid %d\n", (int)getuid(), (int)getgid());
    touch_calloc("after", 64 * MB);
}

static void mode_initgroups(void) {
    if (!drop_to_nobody())
        return;
    if (initgroups("nobody", 65534))
        fail("initgroups: %s", strerror(errno));
    printf("initgroups: uid %d\n", (int)getuid());
    touch_calloc("after", 64 * MB);
}

static void mode_cap_drop(void) {
    if (!drop_to_nobody())
        return;
    if (setresgid(65534, 65534, 65534) || setgroups(0, NULL))
        fail("setresgid, setgroups: %s", strerror(errno));
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &head, none))
        fail("capset: %s", strerror(errno));
    usleep(1500000);
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int keep = 0;
    while (d && (e = readdir(d))) {
        char path[300], line[128];
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "CapPrm:", 7) && strtoull(line + 7, NULL, 16) != 0) {
                fprintf(stderr, "thread %s keeps %s", e->d_name, line);
                keep++;
            }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    printf("cap-drop: %s\n", keep ? "a thread keeps capabilities" : "no thread keeps one");
}

static volatile int reader_done;

static void *zero_reader(void *arg) {
    (void)arg;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0)
        fail("/dev/zero: %s", strerror(errno));
    for (int round = 0; round < 8; round++) {
        unsigned char *p = map(64 * MB);
        for (size_t got = 0; got < 64 * MB;) {
            ssize_t r = read(fd, p + got, 64 * MB - got);
            if (r <= 0)
                fail("read: %s", strerror(errno));
            got += (size_t)r;
        }
        munmap(p, 64 * MB);
    }
    close(fd);
    reader_done = 1;
    return NULL;
}

static void mode_setid_fault(void) {
    if (geteuid() != 0) {
        printf("skipped: not root\n");
        return;
    }
    touch_calloc("before", 64 * MB);
    pthread_t t;
    pthread_create(&t, NULL, zero_reader, NULL);
    int calls = 0;
    while (!reader_done || calls < 50) {
        if (setresgid(0, 0, 0))
            fail("setresgid: %s", strerror(errno));
        calls++;
        usleep(500);
    }
    pthread_join(t, NULL);
    printf("setid-fault: ok\n");
}

static void mode_mincore(void) {
    size_t len = 16 * MB, pages = len / PAGE, resident = 0;
    unsigned char *p = map(len);
    for (size_t i = 0; i < 2048; i++)
        p[i * PAGE] = 1;
    static unsigned char vec[16 * MB / PAGE];
    if (mincore(p, len, vec))
        fail("mincore: %s", strerror(errno));
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    printf("mincore: %zu of %zu pages resident\n", resident, pages);
    munmap(p, len);
}

static sigjmp_buf guard_jump;

static void on_segv(int sig) {
    (void)sig;
    siglongjmp(guard_jump, 1);
}

static void mode_guard(void) {
    unsigned char *p = map(8 * MB);
    /* The second 2 MiB block: page 0 written, page 64 the guard. */
    unsigned char *block = (unsigned char *)(((uintptr_t)p + 2 * MB) & ~(2 * MB - 1));
    if (madvise(block + 64 * PAGE, PAGE, 102 /* MADV_GUARD_INSTALL */)) {
        printf("skipped: MADV_GUARD_INSTALL: %s\n", strerror(errno));
        return;
    }
    block[0] = 1;
    signal(SIGSEGV, on_segv);
    if (sigsetjmp(guard_jump, 1) == 0) {
        ((volatile unsigned char *)block)[64 * PAGE] = 1;
        printf("guard: the guard page was written\n");
    } else {
        printf("guard: the guard page faults\n");
    }
    signal(SIGSEGV, SIG_DFL);
    check_zero("beside the guard", block + PAGE, 63 * PAGE);
    munmap(p, 8 * MB);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "seccomp-ioctl"))
        mode_seccomp_ioctl();
    else if (!strcmp(mode, "seccomp-kill"))
        mode_seccomp_kill(argv);
    else if (!strcmp(mode, "fork-worker"))
        mode_fork_worker(argv);
    else if (!strcmp(mode, "closefds-child"))
        mode_closefds_child();
    else if (!strcmp(mode, "rlimit-data"))
        mode_rlimit_data(argv);
    else if (!strcmp(mode, "mlock-mremap"))
        mode_mlock_mremap();
    else if (!strcmp(mode, "guard"))
        mode_guard();
    else if (!strcmp(mode, "merged-mremap"))
        mode_merged_mremap();
    else if (!strcmp(mode, "thp-disable"))
        mode_thp_disable();
    else if (!strcmp(mode, "collapse"))
        mode_collapse();
    else if (!strcmp(mode, "unshare-user"))
        mode_unshare_user();
    else if (!strcmp(mode, "setpriv"))
        mode_setpriv();
    else if (!strcmp(mode, "initgroups"))
        mode_initgroups();
    else if (!strcmp(mode, "cap-drop"))
        mode_cap_drop();
    else if (!strcmp(mode, "setid-fault"))
        mode_setid_fault();
    else if (!strcmp(mode, "mincore"))
        mode_mincore();
    else {
        fprintf(stderr,
                "usage: %s seccomp-ioctl|seccomp-kill|fork-worker|closefds-child|rlimit-data|"
                "mlock-mremap|guard|merged-mremap|thp-disable|collapse|unshare-user|setpriv|"
                "initgroups|cap-drop|setid-fault|mincore\n",
                argv[0]);
        return 2;
    }
    return 0;
}
