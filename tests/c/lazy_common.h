/* What tests/c/lazy_stress.c and tests/c/lazy_review.c share: failing,
 * mapping, checking zeroes and finding the lazy mode's threads.
 * Included after the system headers (it needs _GNU_SOURCE set). */
#ifndef PREZERO_LAZY_COMMON_H
#define PREZERO_LAZY_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#define MB (1UL << 20)
#define PAGE 4096UL

/* Prints "FAIL: ..." and exits 3. */
static void fail(const char *what, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *what, ...) {
    va_list ap;
    va_start(ap, what);
    printf("FAIL: ");
    vprintf(what, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    _exit(3);
}

/* A private anonymous mapping of `len` bytes, untouched. */
static void *map(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail("mmap %zu: %s", len, strerror(errno));
    return p;
}

/* Fails at the first byte of [p, p+len) that is not zero. */
static void check_zero(const char *what, const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (p[i])
            fail("%s: byte %zu of %zu is %#x, not zero", what, i, len, p[i]);
}

/* The thread id of this process's thread whose name starts with `name`, or 0. */
static inline pid_t thread_named(const char *name) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    pid_t found = 0;
    while (d && (e = readdir(d))) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f) && !strncmp(comm, name, strlen(name)))
            found = atoi(e->d_name);
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return found;
}

#endif
