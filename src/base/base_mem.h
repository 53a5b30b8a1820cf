/*
 * base_mem: allocation for objects made and freed once per message.
 */
#ifndef CS_BASE_MEM_H
#define CS_BASE_MEM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A zeroed block of n bytes, or NULL. For small objects on the per-message path: glibc's calloc
 * never takes a block from the thread cache (malloc does), so an object made and freed for every
 * message through calloc goes to the arena each time and, freed next to the top chunk, sets off
 * a consolidation of the fast bins: about 1,000 instructions a message, a third of a ping. */
static inline void *cs_zalloc(size_t n)
{
    void *p = malloc(n);
    if (p)
        memset(p, 0, n);
    return p;
}

/* Blocks at least this large are their own mapping in the gateway (main fixes glibc's mmap
 * threshold there), so each one's pages are new to the process and first-touched as it fills. */
#define CS_MEM_HUGE_FROM ((size_t)8 * 1024 * 1024)

/*
 * Asks for transparent huge pages under the 2 MiB-aligned inside of the n bytes at p, a block of
 * at least CS_MEM_HUGE_FROM about to be filled: a 13.6 MB reply (an exec answer holding a 1 MiB
 * ring of NULs) takes 3,300 page faults in 4 KiB pages and about 260 this way; in a PVM guest a
 * fault costs 20-50 µs (issue 33, bench/README.md), 100-170 ms an answer against 12-15 ms. Only
 * a preference: with THP "never", or no huge page free, the kernel gives small pages as before;
 * the advice ends with the mapping. Smaller blocks are left alone (heap memory is shared).
 */
static inline void cs_mem_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 * 1024 * 1024;
    if (!p || n < CS_MEM_HUGE_FROM)
        return;
    uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)p + n) & ~(huge - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* malloc(n), with cs_mem_huge for a big block. */
static inline void *cs_big_alloc(size_t n)
{
    void *p = malloc(n);
    cs_mem_huge(p, n);
    return p;
}

#endif
