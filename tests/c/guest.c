/* The preload as a guest in the program's process: its threads hold no
 * privilege the program gave up, escape no filter it entered, never hold up
 * its exit, and exist only while needed. Run by prezero-preload/tests/guest/
 * plainly, under the preload (`prezero run`) and under its lazy mode. One
 * mode per run:
 *
 *   route ROUTE    as root, a 64 MiB calloc block touched (the preload's
 *                  threads start), then the main thread changes who it is by
 *                  ROUTE, then another block; a forked sampler reads every
 *                  thread's /proc status every 2 ms meanwhile and prints the
 *                  longest time a thread of the preload's ("prezero-*") was
 *                  less restricted than the main thread: other ids or
 *                  groups, a capability the main thread lacks (any set),
 *                  no_new_privs or a seccomp filter it lacks, another
 *                  namespace. ROUTE is one of
 *                    glibc-setuid   setgroups, setresgid, setresuid (glibc)
 *                    raw-setuid     the same through syscall(2)
 *                    asm-setuid     the same as inline system calls
 *                    capset         every capability dropped (syscall(2))
 *                    asm-capset     the same, inline
 *                    keepcaps       PR_SET_KEEPCAPS, setresuid, then capset
 *                                   to nothing (setpriv's way)
 *                    capbset        every capability dropped from the
 *                                   bounding set (PR_CAPBSET_DROP)
 *                    nnp            PR_SET_NO_NEW_PRIVS
 *                    asm-nnp        the same, inline
 *                    seccomp        a filter on the calling thread alone
 *                                   (seccomp(2) through syscall(2))
 *                    seccomp-prctl  the same through prctl(PR_SET_SECCOMP)
 *                    asm-seccomp    the same, inline
 *                    seccomp-tsync  a filter on every thread (TSYNC): it
 *                                   must not fail for a thread of ours
 *                    landlock       a Landlock ruleset (syscall(2))
 *                    unshare-net    unshare(CLONE_NEWNET) (glibc)
 *                    asm-unshare-net the same, inline
 *   exit N BUSY    BUSY processes spin while N children are forked one by
 *                  one, each calloc()s, touches and frees a 64 MiB block and
 *                  _exit()s: the worst and mean time from fork to reaped, and
 *                  from _exit to reaped
 *   threads        the preload's threads over time: after small blocks only
 *                  (none), after a 64 MiB block (some, none at SCHED_IDLE),
 *                  and when the last one ended after it went idle
 *   close-raw HOW  a child made without fork handlers holds every
 *                  descriptor while the parent closes all of them above 2
 *                  (close_range through syscall(2), HOW=syscall, or inline,
 *                  HOW=asm) and touches a 64 MiB malloc block
 *   v1-oom [MB]    inside a cgroup v1 memory limit of 256 MiB (the caller
 *                  sets it up): 60 MiB of 4 MiB calloc blocks freed, then
 *                  MB (240) MiB mapped and touched
 *
 * Each prints "MODE: ..." lines and exits 0; a failure prints "FAIL: ..."
 * and exits 3; a mode that cannot run here prints "skipped: ..." and exits
 * 0. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lazy_common.h"

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
/* A system call made by the program itself, past any function a preload
 * could take the place of. */
static long inline_syscall(long nr, long a, long b, long c, long d) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = 0;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
static long inline_syscall(long nr, long a, long b, long c, long d) {
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = 0;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
    return x0;
}
#endif

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* A calloc block of `len` bytes, checked zero, every page written, freed. */
static void touch_calloc(const char *what, size_t len) {
    unsigned char *p = calloc(1, len);
    if (!p)
        fail("%s: calloc: %s", what, strerror(errno));
    check_zero(what, p, len);
    for (size_t i = 0; i < len; i += PAGE)
        p[i] = 1;
    free(p);
}

/* ---- who a thread is ---------------------------------------------------- */

enum { NS_KINDS = 8 };
static const char *const NS[NS_KINDS] = {"cgroup", "ipc", "mnt", "net", "pid_for_children", "time", "user", "uts"};

/* What /proc says of a thread's identity and restrictions. */
struct who {
    char uid[64], gid[64], groups[512];
    unsigned long long cap[5]; /* CapInh, CapPrm, CapEff, CapBnd, CapAmb */
    int nnp, seccomp, filters;
    unsigned long long ns[NS_KINDS];
};

static const char *const CAPS[5] = {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"};

/* Reads thread `tid` of process `pid`; false if it is gone. */
static int read_who(pid_t pid, pid_t tid, struct who *w) {
    char path[128], line[600];
    memset(w, 0, sizeof *w);
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", pid, tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "Uid:", 4))
            snprintf(w->uid, sizeof w->uid, "%.63s", line + 4);
        else if (!strncmp(line, "Gid:", 4))
            snprintf(w->gid, sizeof w->gid, "%.63s", line + 4);
        else if (!strncmp(line, "Groups:", 7))
            snprintf(w->groups, sizeof w->groups, "%.511s", line + 7);
        else if (!strncmp(line, "NoNewPrivs:", 11))
            w->nnp = atoi(line + 11);
        else if (!strncmp(line, "Seccomp:", 8))
            w->seccomp = atoi(line + 8);
        else if (!strncmp(line, "Seccomp_filters:", 16))
            w->filters = atoi(line + 16);
        for (int i = 0; i < 5; i++)
            if (!strncmp(line, CAPS[i], strlen(CAPS[i])))
                w->cap[i] = strtoull(line + strlen(CAPS[i]), NULL, 16);
    }
    fclose(f);
    for (int i = 0; i < NS_KINDS; i++) {
        struct stat st;
        snprintf(path, sizeof path, "/proc/%d/task/%d/ns/%s", pid, tid, NS[i]);
        /* A thread ending as it is read: not counted. */
        if (stat(path, &st))
            return 0;
        w->ns[i] = (unsigned long long)st.st_ino;
    }
    return 1;
}

/* What `ours` may do that `prog` may not (NULL: nothing). */
static const char *less_restricted(const struct who *ours, const struct who *prog) {
    if (strcmp(ours->uid, prog->uid))
        return "uid";
    if (strcmp(ours->gid, prog->gid))
        return "gid";
    if (strcmp(ours->groups, prog->groups))
        return "groups";
    for (int i = 0; i < 5; i++)
        if (ours->cap[i] & ~prog->cap[i])
            return CAPS[i];
    if (prog->nnp > ours->nnp)
        return "no_new_privs";
    if (prog->seccomp > ours->seccomp || prog->filters > ours->filters)
        return "seccomp";
    for (int i = 0; i < NS_KINDS; i++)
        if (ours->ns[i] != prog->ns[i])
            return NS[i];
    return NULL;
}

/* Whether thread `tid` of `pid` is one of the preload's ("prezero-*"). */
static int is_ours(pid_t pid, const char *tid) {
    char path[128], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%s/comm", pid, tid);
    FILE *f = fopen(path, "r");
    int ours = f && fgets(comm, sizeof comm, f) && !strncmp(comm, "prezero-", 8);
    if (f)
        fclose(f);
    return ours;
}

/* How many of the preload's threads process `pid` has. */
static int ours_in(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.' && is_ours(pid, e->d_name);
    if (d)
        closedir(d);
    return n;
}

/* The sampler: until `stop` is set, every 2 ms, each thread of the preload's
 * in `pid` against its main thread; prints the longest window in which one
 * was less restricted, and what it had. */
static void sample(pid_t pid, volatile int *stop, int out) {
    double bad_since = -1, worst = 0;
    char worst_what[64] = "nothing", bad_what[64] = "";
    int most = 0;
    while (!*stop) {
        struct who prog, ours;
        char path[64];
        const char *what = NULL;
        int n = 0;
        if (!read_who(pid, pid, &prog))
            break;
        snprintf(path, sizeof path, "/proc/%d/task", pid);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.' || !is_ours(pid, e->d_name))
                continue;
            n++;
            if (read_who(pid, atoi(e->d_name), &ours) && !what)
                what = less_restricted(&ours, &prog);
        }
        if (d)
            closedir(d);
        most = n > most ? n : most;
        double t = now_ms();
        if (what && bad_since < 0) {
            bad_since = t;
            snprintf(bad_what, sizeof bad_what, "%s", what);
        }
        if (bad_since >= 0 && t - bad_since > worst) {
            worst = t - bad_since;
            snprintf(worst_what, sizeof worst_what, "%s", bad_what);
        }
        if (!what)
            bad_since = -1;
        usleep(2000);
    }
    dprintf(out, "%.0f %d %s\n", worst, most, worst_what);
}

/* ---- the routes --------------------------------------------------------- */

static struct sock_fprog *allow_all(void) {
    static struct sock_filter f[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    static struct sock_fprog prog = {1, f};
    return &prog;
}

static void check(const char *what, long r) {
    if (r < 0 || (r == -1 && errno))
        fail("%s: %s", what, strerror(r < -1 ? (int)-r : errno));
}

static void caps_to_nothing(int inline_call) {
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (inline_call)
        check("capset", inline_syscall(SYS_capset, (long)&head, (long)none, 0, 0));
    else
        check("capset", syscall(SYS_capset, &head, none));
}

/* Changes who the main thread is by `route`: 0 if done, 1 if it cannot run
 * here (printed). */
static int take_route(const char *route) {
    long nobody = 65534;
    if (!strcmp(route, "glibc-setuid")) {
        check("setgroups", setgroups(0, NULL));
        check("setresgid", setresgid(nobody, nobody, nobody));
        check("setresuid", setresuid(nobody, nobody, nobody));
    } else if (!strcmp(route, "raw-setuid")) {
        check("setgroups", syscall(SYS_setgroups, 0, NULL));
        check("setresgid", syscall(SYS_setresgid, nobody, nobody, nobody));
        check("setresuid", syscall(SYS_setresuid, nobody, nobody, nobody));
    } else if (!strcmp(route, "asm-setuid")) {
        check("setgroups", inline_syscall(SYS_setgroups, 0, 0, 0, 0));
        check("setresgid", inline_syscall(SYS_setresgid, nobody, nobody, nobody, 0));
        check("setresuid", inline_syscall(SYS_setresuid, nobody, nobody, nobody, 0));
    } else if (!strcmp(route, "capset") || !strcmp(route, "asm-capset")) {
        caps_to_nothing(route[0] == 'a');
    } else if (!strcmp(route, "keepcaps")) {
        check("PR_SET_KEEPCAPS", prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0));
        check("setresuid", setresuid(nobody, nobody, nobody));
        caps_to_nothing(0);
    } else if (!strcmp(route, "capbset")) {
        for (int c = 0; prctl(PR_CAPBSET_READ, c, 0, 0, 0) >= 0; c++)
            check("PR_CAPBSET_DROP", prctl(PR_CAPBSET_DROP, c, 0, 0, 0));
    } else if (!strcmp(route, "nnp")) {
        check("PR_SET_NO_NEW_PRIVS", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    } else if (!strcmp(route, "asm-nnp")) {
        check("PR_SET_NO_NEW_PRIVS", inline_syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0));
    } else if (!strcmp(route, "seccomp")) {
        check("PR_SET_NO_NEW_PRIVS", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
        check("seccomp", syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, allow_all()));
    } else if (!strcmp(route, "seccomp-prctl")) {
        check("PR_SET_NO_NEW_PRIVS", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
        check("PR_SET_SECCOMP", prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, allow_all(), 0, 0));
    } else if (!strcmp(route, "asm-seccomp")) {
        check("PR_SET_NO_NEW_PRIVS", inline_syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0));
        check("seccomp", inline_syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)allow_all(), 0));
    } else if (!strcmp(route, "seccomp-tsync")) {
        check("PR_SET_NO_NEW_PRIVS", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
        long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, allow_all());
        if (r != 0)
            fail("seccomp TSYNC: %ld (%s)", r, r > 0 ? "a thread could not take the filter" : strerror(errno));
    } else if (!strcmp(route, "landlock")) {
        /* struct landlock_ruleset_attr: handled_access_fs only (ABI 1). */
        unsigned long long handled = 1ULL << 2; /* LANDLOCK_ACCESS_FS_READ_FILE */
        long fd = syscall(444 /* landlock_create_ruleset */, &handled, sizeof handled, 0);
        if (fd < 0) {
            printf("skipped: landlock: %s\n", strerror(errno));
            return 1;
        }
        check("PR_SET_NO_NEW_PRIVS", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
        check("landlock_restrict_self", syscall(446 /* landlock_restrict_self */, fd, 0));
        close((int)fd);
    } else if (!strcmp(route, "unshare-net")) {
        check("unshare", unshare(CLONE_NEWNET));
    } else if (!strcmp(route, "asm-unshare-net")) {
        check("unshare", inline_syscall(SYS_unshare, CLONE_NEWNET, 0, 0, 0));
    } else {
        fail("no route %s", route);
    }
    return 0;
}

static void mode_route(const char *route) {
    if (!route)
        fail("route: which one?");
    if (geteuid() != 0) {
        printf("skipped: not root\n");
        return;
    }
    touch_calloc("before", 64 * MB);
    usleep(100 * 1000);
    int before = ours_in(getpid());
    volatile int *stop = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int p[2];
    if (stop == MAP_FAILED || pipe(p))
        fail("route: set-up: %s", strerror(errno));
    pid_t parent = getpid(), sampler = fork();
    if (sampler < 0)
        fail("fork: %s", strerror(errno));
    if (sampler == 0) {
        close(p[0]);
        sample(parent, stop, p[1]);
        _exit(0);
    }
    close(p[1]);
    usleep(50 * 1000);
    if (take_route(route)) {
        *stop = 1;
        waitpid(sampler, NULL, 0);
        return;
    }
    usleep(200 * 1000);
    touch_calloc("after", 64 * MB);
    usleep(1300 * 1000);
    *stop = 1;
    char line[128] = "";
    ssize_t n = read(p[0], line, sizeof line - 1);
    waitpid(sampler, NULL, 0);
    double worst = 0;
    int most = 0;
    char what[64] = "";
    if (n <= 0 || sscanf(line, "%lf %d %63s", &worst, &most, what) != 3)
        fail("route: the sampler said nothing");
    /* The figures on stderr (they differ from run to run); stdout is the
     * same plainly and under the preload. */
    fprintf(stderr, "route %s: worst %.0f ms less restricted (%s); threads of ours: %d before, at most %d, %d after\n",
            route, worst, what, before, most, ours_in(getpid()));
    printf("route %s: ok\n", route);
}

/* ---- exit --------------------------------------------------------------- */

static void mode_exit(char **argv) {
    int n = argv[2] ? atoi(argv[2]) : 20, busy = argv[3] && argv[2] ? atoi(argv[3]) : 6;
    int pause_ms = argv[2] && argv[3] && argv[4] ? atoi(argv[4]) : 0;
    pid_t spinners[64];
    busy = busy > 64 ? 64 : busy;
    for (int i = 0; i < busy; i++) {
        spinners[i] = fork();
        if (spinners[i] == 0)
            for (;;)
                __asm__ volatile("" ::: "memory");
    }
    double *at = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED)
        fail("exit: mmap: %s", strerror(errno));
    double worst_fork = 0, worst_exit = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        double forked = now_ms();
        pid_t c = fork();
        if (c < 0)
            fail("fork: %s", strerror(errno));
        if (c == 0) {
            touch_calloc("child", 64 * MB);
            if (pause_ms)
                usleep(pause_ms * 1000);
            *at = now_ms();
            _exit(0);
        }
        int status;
        if (waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status))
            fail("exit: child %d ended with %#x", i, status);
        double reaped = now_ms();
        worst_fork = reaped - forked > worst_fork ? reaped - forked : worst_fork;
        worst_exit = reaped - *at > worst_exit ? reaped - *at : worst_exit;
        sum += reaped - *at;
    }
    for (int i = 0; i < busy; i++) {
        kill(spinners[i], SIGKILL);
        waitpid(spinners[i], NULL, 0);
    }
    fprintf(stderr, "exit: %d children beside %d busy processes: fork to reaped worst %.1f ms; _exit to reaped worst %.1f ms, mean %.2f ms\n",
            n, busy, worst_fork, worst_exit, sum / n);
    printf("exit: ok\n");
}

/* ---- threads ------------------------------------------------------------ */

/* Fails if a thread of the preload's is at SCHED_IDLE (an exit would wait
 * for it to be given a CPU, seconds on a busy machine). */
static void none_idle(void) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && is_ours(getpid(), e->d_name) &&
            sched_getscheduler(atoi(e->d_name)) == SCHED_IDLE)
            fail("thread %s of the preload's is at SCHED_IDLE", e->d_name);
    if (d)
        closedir(d);
}

static void mode_threads(void) {
    for (int i = 0; i < 100; i++)
        free(malloc(4096 + i));
    usleep(300 * 1000);
    int small = ours_in(getpid());
    touch_calloc("large", 64 * MB);
    usleep(50 * 1000);
    int large = ours_in(getpid());
    none_idle();
    double idle = now_ms(), gone = -1;
    while (now_ms() - idle < 8000) {
        if (ours_in(getpid()) == 0) {
            gone = now_ms() - idle;
            break;
        }
        usleep(20 * 1000);
    }
    fprintf(stderr, "threads: %d after small blocks, %d after a large one, none left %.0f ms after it went idle\n",
            small, large, gone);
    printf("threads: %d after small blocks; %s\n", small, gone < 0 ? "some left after 8 s idle" : "none left when idle");
}

/* ---- descriptors closed ------------------------------------------------- */

static void mode_close_raw(const char *how) {
    int inline_call = how && !strcmp(how, "asm");
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
    long r = inline_call ? inline_syscall(SYS_close_range, 3, ~0U, 0, 0) : syscall(SYS_close_range, 3, ~0U, 0);
    if (r)
        fail("close_range: %ld", r);
    unsigned char *p = malloc(64 * MB);
    if (!p)
        fail("malloc: %s", strerror(errno));
    memset(p, 5, 64 * MB);
    free(p);
    touch_calloc("after close_range", 64 * MB);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("close-raw %s: ok\n", inline_call ? "asm" : "syscall");
}

/* ---- a cgroup v1 memory limit ------------------------------------------- */

static void mode_v1_oom(const char *mb) {
    void *blocks[15];
    for (int i = 0; i < 15; i++) {
        blocks[i] = calloc(1, 4 * MB);
        if (!blocks[i])
            fail("calloc: %s", strerror(errno));
        memset(blocks[i], 1, 4 * MB);
    }
    for (int i = 0; i < 15; i++)
        free(blocks[i]);
    size_t len = (size_t)(mb ? atoi(mb) : 240) * MB;
    unsigned char *p = map(len);
    for (size_t i = 0; i < len; i += PAGE)
        p[i] = 1;
    munmap(p, len);
    printf("v1-oom: ok\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "route"))
        mode_route(argv[2]);
    else if (!strcmp(mode, "exit"))
        mode_exit(argv);
    else if (!strcmp(mode, "threads"))
        mode_threads();
    else if (!strcmp(mode, "close-raw"))
        mode_close_raw(argv[2]);
    else if (!strcmp(mode, "v1-oom"))
        mode_v1_oom(argv[2]);
    else
        fail("usage: guest route ROUTE | exit N BUSY | threads | close-raw syscall|asm | v1-oom");
    return 0;
}
