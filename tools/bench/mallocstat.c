/* Counts the bytes a process holds through the C library's malloc, for the
 * footprint bench's TLS rows: on the unix port (and on an ESP32) mbedtls
 * allocates there, not on MicroPython's GC heap, so gc.mem_alloc() cannot
 * see it. Loaded with LD_PRELOAD (glibc); on SIGUSR1 it writes
 *   MALLOC live=<bytes held now> peak=<most bytes held at once>
 * to stderr. Bytes are the allocator's usable sizes (malloc_usable_size).
 * Built by the bench: cc -O2 -shared -fPIC mallocstat.c -o mallocstat.so */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static long live, peak;

static void *took(void *p) {
    if (p) {
        long n = __atomic_add_fetch(&live, (long)malloc_usable_size(p), __ATOMIC_RELAXED);
        if (n > peak) {
            peak = n;
        }
    }
    return p;
}

static void gave(void *p) {
    if (p) {
        __atomic_sub_fetch(&live, (long)malloc_usable_size(p), __ATOMIC_RELAXED);
    }
}

void *malloc(size_t n) { return took(__libc_malloc(n)); }
void *calloc(size_t k, size_t n) { return took(__libc_calloc(k, n)); }
void *memalign(size_t a, size_t n) { return took(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return took(__libc_memalign(a, n)); }
void *valloc(size_t n) { return took(__libc_memalign(sysconf(_SC_PAGESIZE), n)); }
void free(void *p) { gave(p); __libc_free(p); }

void *realloc(void *p, size_t n) {
    gave(p);
    void *q = __libc_realloc(p, n);
    if (!q && n) {
        took(p);  /* failed: p is still held */
        return q;
    }
    return took(q);
}

int posix_memalign(void **out, size_t a, size_t n) {
    void *p = took(__libc_memalign(a, n));
    if (!p) {
        return ENOMEM;
    }
    *out = p;
    return 0;
}

static char *put(char *s, const char *w, long v) {
    char d[24];
    int i = 0;
    while (*w) {
        *s++ = *w++;
    }
    do {
        d[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i < 23);
    while (i) {
        *s++ = d[--i];
    }
    return s;
}

static void report(int sig) {
    char line[96];
    char *s = put(line, "MALLOC live=", live < 0 ? 0 : live);
    s = put(s, " peak=", peak);
    *s++ = '\n';
    (void)sig;
    (void)!write(2, line, (size_t)(s - line));
}

__attribute__((constructor)) static void init(void) {
    signal(SIGUSR1, report);
}
