// A per-thread cache of per-stream state (arena_resource's arenas, strata_resource's heaps):
// the fast path finds this thread's T for stream s without a shared lock.
#pragma once

#include <strata/gpu/stream_view.hpp>

#include <cstdint>

namespace strata::gpu::detail {

// The T that `find` returns for (resource, s), remembered per thread among the last 8 looked
// up.  `resource` is a process-unique id (never reused), so a destroyed resource's entries never
// match a new one.  One cache per T and Find, i.e. per call site.
template <class T, class Find>
T& cached_for_thread(std::uint64_t resource, stream_view s, Find&& find) {
  struct entry {
    std::uint64_t resource = 0;
    void* stream = nullptr;
    T* value = nullptr;
  };
  thread_local entry cache[8];
  thread_local unsigned next = 0;
  for (const entry& e : cache)
    if (e.resource == resource && e.stream == s.handle()) [[likely]]
      return *e.value;
  T& found = find();
  cache[next++ % 8] = entry{resource, s.handle(), &found};
  return found;
}

}  // namespace strata::gpu::detail
