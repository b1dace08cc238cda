// The allocation recorder: STRATA_TRACE=path (%p: the process id) makes the preload library
// write every allocation event of the program to a trace (format.h, docs/trace-format.md).
//
// override.cpp tests `active` once per call and, only when it is set, calls the recording
// entry points below, which allocate through strata and record the event.  With STRATA_TRACE
// unset the flag is never written after load, so the test is one predictable load.
//
// Each thread fills its own mmap'd buffer (no malloc, no lock) and writes it to the file as one
// chunk when it is full, when the thread exits and at exit, so a killed program leaves a trace
// valid up to each thread's last full chunk.  A forked child records into its own file when the
// path has %p, and stops recording otherwise.
#pragma once
#include <cstddef>

namespace strata::trace {

extern __attribute__((visibility("hidden"))) bool active;

void* malloc(size_t size) noexcept;
void* calloc(size_t count, size_t size) noexcept;
void* realloc(void* p, size_t size) noexcept;
int posix_memalign(void** out, size_t alignment, size_t size) noexcept;
void* aligned_alloc(size_t alignment, size_t size) noexcept;
void* memalign(size_t alignment, size_t size) noexcept;  // also aligned operator new
void* valloc(size_t size) noexcept;
void* pvalloc(size_t size) noexcept;
void free(void* p) noexcept;
void free_sized(void* p, size_t size) noexcept;

}  // namespace strata::trace
