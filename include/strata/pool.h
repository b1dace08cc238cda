/* strata object pools for C: fixed-size objects, O(1) allocation and free.
 *
 * The C face of strata::object_pool / strata::concurrent_object_pool (see those headers and
 * docs/pools-numa.md).  Chunks come from the process's malloc.  Link with strata_pool.
 *
 *   strata_pool_t* p = strata_pool_create(sizeof(struct node), _Alignof(struct node), 1000, 0);
 *   struct node* n = strata_pool_alloc(p);
 *   strata_pool_free(p, n);
 *   strata_pool_destroy(p);      // returns every chunk, live objects included
 */
#ifndef STRATA_POOL_H
#define STRATA_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_pool strata_pool_t;

/* Flags for strata_pool_create. */
#define STRATA_POOL_CONCURRENT 1u /* many threads may allocate and free (per-thread magazines) */
#define STRATA_POOL_CHECKED 2u    /* catch double free / foreign pointers (abort with a message) */

typedef struct strata_pool_stats {
  size_t live;           /* objects handed out and not freed */
  size_t free;           /* slots held and not handed out */
  size_t capacity;       /* live + free */
  size_t high_water;     /* peak of live (concurrent pools: an upper bound, see the header) */
  uint64_t allocations;  /* successful strata_pool_alloc calls */
  uint64_t hits;         /* allocations that did not need new memory from malloc */
  uint64_t refills;      /* chunks obtained from malloc */
  uint64_t depot_trips;  /* concurrent pools: slow paths through the shared depot */
  size_t bytes_reserved; /* bytes of chunks held */
  size_t bytes_released; /* bytes given back by strata_pool_shrink so far */
} strata_pool_stats_t;

/* A pool of objects of object_size bytes (1 to 2^30) aligned to alignment (a power of two up to
 * 4096, 0 for the natural alignment), with room for capacity objects made at once.  NULL with
 * errno EINVAL (bad size/alignment/flags) or ENOMEM. */
strata_pool_t* strata_pool_create(size_t object_size, size_t alignment, size_t capacity,
                                  unsigned flags);
/* Frees every chunk.  Objects still live are freed with it (no destructors in C).  A NULL pool
 * is ignored. */
void strata_pool_destroy(strata_pool_t* pool);
/* An uninitialised object, or NULL with errno ENOMEM (EINVAL: pool is NULL). */
void* strata_pool_alloc(strata_pool_t* pool);
/* p must come from strata_pool_alloc on this pool (checked pools abort otherwise).  A NULL p is
 * ignored; a NULL pool with another p frees nothing and sets errno EINVAL. */
void strata_pool_free(strata_pool_t* pool, void* p);
/* Gives chunks with no live object back to malloc; returns the bytes released (0 with errno
 * EINVAL: pool is NULL). */
size_t strata_pool_shrink(strata_pool_t* pool);
/* Fills *out; a NULL pool or out sets errno EINVAL (and zeroes *out if out is not NULL). */
void strata_pool_get_stats(const strata_pool_t* pool, strata_pool_stats_t* out);

#ifdef __cplusplus
}
#endif
#endif
