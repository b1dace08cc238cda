// pool_resource: one lock, per-stream coalescing free lists, event-guarded stealing.
//
// allocate(bytes, S)
//   lock
//   best fit in S's list ............................... split, return
//   steal: another stream T has a fit -> record T's event, S waits on it, T's list joins S's
//   grow from upstream (growth policy) ................. new chunk joins S's list
//   defragment: synchronise the device, every list joins S's, wholly free chunks go upstream,
//               grow once more
//   out_of_memory_error
#include <strata/gpu/pool_resource.hpp>

#include "gpu/detail/free_list.hpp"
#include "gpu/detail/overaligned.hpp"
#include "gpu/detail/timed_mutex.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace strata::gpu {

using detail::free_list;
using detail::round_up;

struct pool_resource::impl {
  struct stream_state {
    explicit stream_state(const std::set<std::uintptr_t>* b) : free(b) {}
    free_list free;
    void* event = nullptr;
  };
  struct block {
    std::uintptr_t start;
    std::size_t size;
  };

  impl(device_memory_resource& up, pool_options o, device_backend& b)
      : upstream(up), options(o), backend(b) {}

  device_memory_resource& upstream;
  const pool_options options;
  device_backend& backend;

  mutable detail::timed_mutex<> mutex;
  std::map<std::uintptr_t, std::size_t> chunks;
  std::set<std::uintptr_t> chunk_starts;
  std::unordered_map<stream_view, stream_state> streams;
  std::unordered_map<std::uintptr_t, block> live;  // user pointer -> block
  std::size_t reserved = 0, peak = 0, allocated = 0;

  stream_state& state(stream_view s) {
    auto it = streams.find(s);
    if (it == streams.end()) it = streams.emplace(s, stream_state(&chunk_starts)).first;
    return it->second;
  }

  std::size_t free_total() const {
    std::size_t t = 0;
    for (auto& [s, st] : streams) t += st.free.total();
    return t;
  }
  std::size_t largest_free() const {
    std::size_t l = 0;
    for (auto& [s, st] : streams) l = std::max(l, st.free.largest());
    return l;
  }

  void* carve(detail::free_range r, std::size_t need, std::size_t alignment, stream_view s,
              stream_state& st) {
    if (r.size > need) st.free.insert(r.addr + need, r.size - need);
    if (backend.checks_reuse()) backend.note_reuse(reinterpret_cast<void*>(r.addr), need, s);
    const std::uintptr_t user = round_up(r.addr, std::max(alignment, detail::native));
    live.emplace(user, block{r.addr, need});
    allocated += need;
    return reinterpret_cast<void*>(user);
  }

  // Moves every range of stream `from` into `to`; `to` must already be ordered after `from`.
  static void merge_into(stream_state& to, stream_state& from) {
    while (auto r = from.free.take_any()) to.free.insert(r->addr, r->size);
  }

  bool steal(stream_view s, stream_state& st, std::size_t need) {
    for (auto& [other, ot] : streams) {
      if (other == s || ot.free.largest() < need) continue;
      if (!ot.event) ot.event = backend.event_create();
      backend.event_record(ot.event, other);
      backend.stream_wait_event(s, ot.event);
      merge_into(st, ot);
      return true;
    }
    return false;
  }

  bool grow(std::size_t need, stream_state& st) {
    if (reserved >= options.maximum_size || options.maximum_size - reserved < need) return false;
    const std::size_t room = options.maximum_size - reserved;
    std::size_t size = std::max({need, options.min_growth,
                                 static_cast<std::size_t>(options.growth_factor * static_cast<double>(reserved))});
    size = round_up(std::min(size, room), detail::native);
    if (size > room) size = need;
    for (;;) {
      try {
        void* p = upstream.allocate(size);
        add_chunk(reinterpret_cast<std::uintptr_t>(p), size, st);
        return true;
      } catch (const std::bad_alloc&) {
        if (size == need) return false;
        size = need;  // the policy asked for more than the upstream has; try the request alone
      }
    }
  }

  void add_chunk(std::uintptr_t p, std::size_t size, stream_state& st) {
    chunks.emplace(p, size);
    chunk_starts.insert(p);
    st.free.insert(p, size);
    reserved += size;
    peak = std::max(peak, reserved);
  }

  // After a device synchronisation every free block is safe for every stream.
  void gather_all(stream_state& into) {
    for (auto& [other, ot] : streams)
      if (&ot != &into) merge_into(into, ot);
  }

  void release_free_chunks(stream_state& st) {
    for (auto it = chunks.begin(); it != chunks.end();) {
      auto r = st.free.find_containing(it->first);
      if (r && r->first == it->first && r->second == it->second) {
        st.free.take_at(it->first);
        chunk_starts.erase(it->first);
        reserved -= it->second;
        upstream.deallocate(reinterpret_cast<void*>(it->first), it->second);
        it = chunks.erase(it);
      } else {
        ++it;
      }
    }
  }
};

pool_resource::pool_resource(device_memory_resource& upstream, pool_options options)
    : device_memory_resource(upstream.shared_backend()),
      impl_(std::make_unique<impl>(upstream, options, backend())) {
  if (options.initial_size > 0) {
    const std::size_t size = round_up(std::min(options.initial_size, options.maximum_size), detail::native);
    void* p = upstream.allocate(size);
    impl_->add_chunk(reinterpret_cast<std::uintptr_t>(p), size, impl_->state(stream_view{}));
  }
}

pool_resource::~pool_resource() {
  backend().device_synchronize();
  for (auto& [s, st] : impl_->streams)
    if (st.event) backend().event_destroy(st.event);
  for (auto& [p, size] : impl_->chunks) impl_->upstream.deallocate(reinterpret_cast<void*>(p), size);
}

void pool_resource::release() {
  std::lock_guard lock(impl_->mutex);
  backend().device_synchronize();
  auto& st = impl_->state(stream_view{});
  impl_->gather_all(st);
  impl_->release_free_chunks(st);
}

void* pool_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  const std::size_t need = round_up(detail::padded_size(bytes, alignment), detail::native);
  std::lock_guard lock(impl_->mutex);
  auto& st = impl_->state(stream);
  auto fit = [&]() { return st.free.take_best_fit(need); };
  if (auto r = fit()) return impl_->carve(std::move(*r), need, alignment, stream, st);
  if (impl_->steal(stream, st, need))
    if (auto r = fit()) return impl_->carve(std::move(*r), need, alignment, stream, st);
  if (impl_->grow(need, st))
    if (auto r = fit()) return impl_->carve(std::move(*r), need, alignment, stream, st);
  // defragment and retry
  backend().device_synchronize();
  impl_->gather_all(st);
  if (auto r = fit()) return impl_->carve(std::move(*r), need, alignment, stream, st);
  impl_->release_free_chunks(st);
  if (impl_->grow(need, st))
    if (auto r = fit()) return impl_->carve(std::move(*r), need, alignment, stream, st);
  const std::size_t free_total = impl_->free_total();
  const double frag = free_total ? 1.0 - double(impl_->largest_free()) / double(free_total) : 0.0;
  throw out_of_memory_error("pool", bytes, free_total, frag);
}

void pool_resource::do_deallocate(void* p, std::size_t, stream_view stream, std::size_t) noexcept {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->live.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == impl_->live.end()) return;  // not ours: ignore rather than corrupt the lists
  const impl::block b = it->second;
  impl_->live.erase(it);
  impl_->allocated -= b.size;
  if (backend().checks_reuse()) backend().note_release(reinterpret_cast<void*>(b.start), b.size, stream);
  impl_->state(stream).free.insert(b.start, b.size);
}

resource_info pool_resource::do_info() const {
  std::lock_guard lock(impl_->mutex);
  resource_info i;
  i.reserved_bytes = impl_->reserved;
  i.peak_reserved_bytes = impl_->peak;
  i.allocated_bytes = impl_->allocated;
  i.free_bytes = impl_->free_total();
  i.largest_free_block = impl_->largest_free();
  i.lock_wait_ns = impl_->mutex.wait_ns();
  return i;
}

}  // namespace strata::gpu
