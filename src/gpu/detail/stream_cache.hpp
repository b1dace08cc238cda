// A per-thread cache of per-stream state (arena_resource's arenas, strata_resource's heaps):
// the fast path finds this thread's T for stream s without a shared lock.
#pragma once

#include <strata/gpu/stream_view.hpp>

#include <cstdint>

namespace strata::gpu::detail {

// Whether two device_backend::stream_id values read for one handle name the same stream.  0 is
// "unknown" (a driver without cuStreamGetId, or one refusing it, as during graph capture): then
// it is taken to be the same stream, as before stream ids existed.
constexpr bool same_stream(std::uint64_t a, std::uint64_t b) noexcept { return a == b || a == 0 || b == 0; }

// The T that `find` returns for (resource, s), remembered per thread among the last 8 looked
// up.  `resource` is a process-unique id (never reused), so a destroyed resource's entries never
// match a new one; `stream_id` (device_backend::stream_id) does the same for a destroyed
// stream's entries once the driver hands its handle to a new stream.  One cache per T and Find,
// i.e. per call site.
template <class T, class Find>
T& cached_for_thread(std::uint64_t resource, stream_view s, std::uint64_t stream_id, Find&& find) {
  struct entry {
    std::uint64_t resource = 0;
    void* stream = nullptr;
    std::uint64_t stream_id = 0;
    T* value = nullptr;
  };
  thread_local entry cache[8];
  thread_local unsigned next = 0;
  for (const entry& e : cache)
    if (e.resource == resource && e.stream == s.handle() && e.stream_id == stream_id) [[likely]]
      return *e.value;
  T& found = find();
  cache[next++ % 8] = entry{resource, s.handle(), stream_id, &found};
  return found;
}

}  // namespace strata::gpu::detail
