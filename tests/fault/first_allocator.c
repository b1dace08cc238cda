// Another allocator, preloaded before strata (LD_PRELOAD="first_allocator.so libstrata.so"), with
// jemalloc's and tcmalloc's set of names: the malloc family but no reallocarray.  Blocks come from
// a static region (a bump pointer with a size header, never reused), so the loader's and the C
// library's first allocations need no set-up.  Its free aborts on a pointer of anyone else's, as
// tcmalloc's does (jemalloc's crashes).
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REGION_BYTES ((size_t)64 << 20)
#define HEADER 16

static _Alignas(4096) unsigned char region[REGION_BYTES];
static atomic_size_t used;

__attribute__((visibility("default"))) int first_allocator_owns(const void* p) {
  return (const unsigned char*)p >= region && (const unsigned char*)p < region + REGION_BYTES;
}

static size_t* header_of(void* p) { return (size_t*)((unsigned char*)p - HEADER); }

static void* take(size_t alignment, size_t size) {
  if (alignment < HEADER) alignment = HEADER;
  if (size > REGION_BYTES) {
    errno = ENOMEM;
    return NULL;
  }
  size_t need = alignment + HEADER + ((size + HEADER - 1) & ~(size_t)(HEADER - 1));
  size_t at = atomic_fetch_add(&used, need);
  if (at + need > REGION_BYTES) {
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t start = (uintptr_t)(region + at) + HEADER;
  unsigned char* p = (unsigned char*)((start + alignment - 1) & ~(uintptr_t)(alignment - 1));
  *header_of(p) = size;
  return p;
}

void* malloc(size_t size) { return take(HEADER, size); }
void* calloc(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return take(HEADER, bytes);  // the region is zero and never reused
}
void* memalign(size_t alignment, size_t size) { return take(alignment, size); }
void* aligned_alloc(size_t alignment, size_t size) { return take(alignment, size); }
void* valloc(size_t size) { return take(4096, size); }
int posix_memalign(void** out, size_t alignment, size_t size) {
  void* p = take(alignment, size);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

static void not_mine(const char* call) {
  static const char message[] = "first_allocator: a pointer it did not allocate, given to ";
  write(2, message, sizeof message - 1);
  write(2, call, strlen(call));
  write(2, "\n", 1);
  abort();
}

void free(void* p) {
  if (p != NULL && !first_allocator_owns(p)) not_mine("free");
}
size_t malloc_usable_size(void* p) {
  if (p == NULL) return 0;
  if (!first_allocator_owns(p)) not_mine("malloc_usable_size");
  return *header_of(p);
}
void* realloc(void* p, size_t size) {
  if (p == NULL) return malloc(size);
  if (!first_allocator_owns(p)) not_mine("realloc");
  void* q = malloc(size);
  if (q == NULL) return NULL;
  size_t old = *header_of(p);
  memcpy(q, p, old < size ? old : size);
  return q;
}
