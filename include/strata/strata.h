/* strata — public C API.
 *
 * Every function here is also reachable when strata replaces malloc (LD_PRELOAD or static link):
 * the standard names (malloc, free, ...) behave as the strata_* functions below (malloc and free
 * run the same inline fast paths, the others call the strata_* function).
 * Statistics and options are process-wide.
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_VERSION_STRING "0.1.0"

/* Allocation: the same contracts as the C/POSIX functions of the same name (errno included). */
void*  strata_malloc(size_t size);
void*  strata_calloc(size_t count, size_t size);
void*  strata_realloc(void* p, size_t size);
void*  strata_reallocarray(void* p, size_t count, size_t size);
void   strata_free(void* p);
void   strata_free_sized(void* p, size_t size);
void   strata_free_aligned_sized(void* p, size_t alignment, size_t size);
int    strata_posix_memalign(void** out, size_t alignment, size_t size);
void*  strata_aligned_alloc(size_t alignment, size_t size);
void*  strata_memalign(size_t alignment, size_t size);
void*  strata_valloc(size_t size);
void*  strata_pvalloc(size_t size);
size_t strata_usable_size(const void* p);

/* Returns the calling thread's free memory to the OS now (force) or what is past its purge
 * delay (!force).  With force it also reclaims segments abandoned by exited threads and trims
 * the shared heap that serves threads after their own heap is gone (late key destructors). */
void strata_collect(bool force);

/* Process-wide statistics.  Byte counts are of blocks handed out (in_use), of memory backed by
 * the OS (committed, i.e. mapped and not purged) and of address space reserved (reserved). */
typedef struct strata_stats {
  uint64_t in_use_bytes;       /* bytes in live blocks (size-class rounded) */
  uint64_t committed_bytes;    /* bytes the OS backs for strata now */
  uint64_t committed_peak;     /* high-water mark of committed_bytes */
  uint64_t reserved_bytes;     /* address space mapped */
  uint64_t malloc_count;       /* allocations (all entry points) */
  uint64_t free_count;         /* deallocations */
  uint64_t remote_free_count;  /* frees by a thread other than the owner */
  uint64_t huge_count;         /* live direct mappings */
  uint64_t mmap_calls, munmap_calls, madvise_calls;
  uint64_t segments;           /* live mappings: 32 MiB segments, and huge blocks' own (live or
                                  kept for reuse) */
  uint64_t abandoned_segments; /* segments of exited threads not yet reclaimed */
  uint64_t reclaimed_segments; /* segments taken over from exited threads (cumulative) */
  uint64_t threads;            /* thread heaps alive (not the shared one of threads past their
                                  heap's end) */
  uint64_t bad_free_count;     /* invalid or double frees detected */
} strata_stats_t;

/* The cumulative counts never go back from one call to the next, and free_count never passes
 * malloc_count, while other threads run and exit too. */
void strata_stats_get(strata_stats_t* out);
/* Prints the statistics (with per-size-class counts) to stderr. */
void strata_stats_print(void);
/* Writes the statistics as one JSON object into buf, as snprintf does: at most len bytes, NUL
 * included (nothing when len is 0; buf may then be NULL).  Returns the length the whole document
 * needs, excluding the NUL, also when it was truncated: the document is complete when the result
 * is below len.  The document can grow between two calls (allocating the buffer may add a size
 * class to it), so a caller sizing it with a first call retries:
 *   size_t n = strata_stats_json(NULL, 0), m;
 *   char* buf = NULL;
 *   for (;; n = m) {
 *     buf = realloc(buf, n + 1);
 *     if ((m = strata_stats_json(buf, n + 1)) <= n) break;
 *   }
 */
size_t strata_stats_json(char* buf, size_t len);
/* The options in effect, as JSON: {"STRATA_PURGE_DELAY": 40, ...}, text options as strings or
 * null (unset, empty, rejected, or not carried out: STRATA_NUMA is the policy in effect, also one
 * set by strata_numa_set_policy; STRATA_TRACE is null unless this process started recording, and
 * always in libstrata_api.a).  Same return convention as strata_stats_json. */
size_t strata_options_json(char* buf, size_t len);

const char* strata_version(void);

/* Checks the calling thread's heap: its pages' block counts and free lists, its page lists, its
 * segments' slice bitmaps and the page map.  Returns true when every invariant holds; otherwise
 * prints the first broken one to stderr and returns false.  Walks everything the thread holds:
 * for tests and debugging, not for a hot loop.  A thread that has not allocated passes. */
bool strata_heap_check(void);

/* NUMA placement of the memory strata maps (STRATA_NUMA=local, interleave, interleave:<nodes> or
 * bind:<nodes>; nodes like 0,2-3).  strata_numa_set_policy returns 0, or -1 with errno set (EINVAL
 * for a malformed spec or a node that does not exist, a number however large included).
 * strata_numa_node_of returns the node the page holding p sits on, or -1 with errno set (e.g. the
 * page is not backed yet).  Policies apply to segments mapped after the call; strata_options_json lists the spec in effect as STRATA_NUMA (null for "none", "default"
 * or ""); a spec over 4095 bytes is rejected (EINVAL). */
int strata_numa_set_policy(const char* spec);
int strata_numa_node_of(const void* p);
int strata_numa_node_count(void);

#ifdef __cplusplus
}
#endif
#endif
