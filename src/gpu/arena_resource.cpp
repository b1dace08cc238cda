// arena_resource: a global arena of superblocks feeding per-stream / per-thread arenas.
//
// allocate(bytes, S)
//   large (> superblock / 2) ............. global lock: best fit of whole superblocks
//   arena = arena_for(S)  (thread-local cache; per stream, or per thread on the default stream)
//   arena lock: best fit inside its superblocks ........ return
//   global lock: take a superblock (waiting on its guards), add it to the arena, retry
//   global exhausted: defragment (synchronise, pull empty superblocks back), grow, else OOM
//
// deallocate(p, S)
//   large ................................ global free list, guarded by an event on S
//   owning arena (current one, else looked up): if its stream is not S, synchronise S first;
//   insert; a second empty superblock goes back to the global arena guarded by an event.
//
// A destroyed stream's arena stays (its blocks may still be in use by the stream's last work)
// and is left to the next defragment, which synchronises the device; so is one whose handle the
// driver gave to a newer stream (stream_id differs): that stream gets an arena of its own.  Once
// such arenas hold a growth step's worth of superblocks, the global arena defragments instead of
// growing, and drops the retired arenas left empty: a stream per task otherwise kept a superblock
// per task until the device was full.
//
// Lock order: global, then arena.  The paths that take an arena lock never take the global
// lock while holding it.
#include <strata/gpu/arena_resource.hpp>

#include "gpu/detail/chunk_set.hpp"
#include "gpu/detail/event_guard.hpp"
#include "gpu/detail/free_list.hpp"
#include "gpu/detail/overaligned.hpp"
#include "gpu/detail/stream_cache.hpp"
#include "gpu/detail/timed_mutex.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

namespace strata::gpu {

using detail::free_list;
using detail::round_up;

namespace {
std::atomic<std::uint64_t> next_arena_resource_id{1};

struct arena {
  arena(stream_view s, std::uint64_t id) : stream(s), stream_id(id), free(&sb_starts) {}
  mutable detail::timed_mutex<> mutex;
  stream_view stream;
  const std::uint64_t stream_id;  // device_backend::stream_id of the stream it was made for
  std::set<std::uintptr_t> sb_starts;  // superblocks this arena owns
  free_list free;
  std::uintptr_t empty_sb = 0;         // one empty superblock kept as hysteresis
  // Bytes handed out from its superblocks, changed under `mutex` with `free`, so that info()
  // never counts a block both allocated and free (a block is freed into the arena it came from).
  std::size_t allocated = 0;
};

struct arena_key {
  std::uintptr_t stream;
  std::thread::id thread;  // default-constructed for per-stream arenas
  bool operator==(const arena_key&) const = default;
};
struct arena_key_hash {
  std::size_t operator()(const arena_key& k) const noexcept {
    return std::hash<std::uintptr_t>{}(k.stream) * 31 + std::hash<std::thread::id>{}(k.thread);
  }
};
}  // namespace

struct arena_resource::impl {
  impl(device_memory_resource& up, arena_options o, device_backend& b)
      : options(o), backend(b), events(b), chunks(up), global_free(chunks.boundaries()) {}

  const arena_options options;
  device_backend& backend;
  const std::uint64_t id = next_arena_resource_id.fetch_add(1);
  detail::event_pool events;  // first: outlives every guard below
  detail::overaligned_table overaligned;

  mutable detail::timed_mutex<> global_mutex;
  detail::chunk_set chunks;
  free_list global_free;
  std::map<std::uintptr_t, arena*> owner;  // superblock start -> arena holding it
  std::size_t large_allocated = 0;          // bytes of large blocks handed out (global_mutex held)

  mutable std::shared_mutex arenas_mutex;
  std::unordered_map<arena_key, std::unique_ptr<arena>, arena_key_hash> arenas;
  std::vector<std::unique_ptr<arena>> retired;  // destroyed streams' arenas, handle recycled
  std::atomic<std::size_t> retired_bytes{0};     // superblocks they held when retired, since the last defragment

  // Every arena, retired ones included (arenas_mutex held).
  template <class F>
  void for_each_arena(F&& f) const {
    for (auto& [key, a] : arenas) f(*a);
    for (auto& a : retired) f(*a);
  }

  std::size_t sb() const noexcept { return options.superblock_size; }
  bool is_large(std::size_t need) const noexcept { return need > sb() / 2; }

  arena& arena_for(stream_view s) {
    const std::uint64_t sid = backend.stream_id(s);
    return detail::cached_for_thread<arena>(id, s, sid, [&]() -> arena& { return find_arena(s, sid); });
  }

  [[gnu::noinline]] arena& find_arena(stream_view s, std::uint64_t sid) {
    const arena_key key{s.id(), s.is_default() ? std::this_thread::get_id() : std::thread::id{}};
    std::unique_lock lock(arenas_mutex);
    auto& slot = arenas[key];
    if (slot && !detail::same_stream(slot->stream_id, sid)) {  // an earlier stream's
      {
        std::lock_guard al(slot->mutex);
        retired_bytes.fetch_add(slot->sb_starts.size() * sb(), std::memory_order_relaxed);
      }
      retired.push_back(std::move(slot));
    }
    if (!slot) slot = std::make_unique<arena>(s, sid);
    return *slot;
  }

  // ---- global arena (global_mutex held) -----------------------------------------------------
  // `need` is a multiple of the superblock size; so is every chunk.
  bool grow(std::size_t need) {
    const std::size_t wanted = std::max(need, options.min_growth / sb() * sb());
    return chunks.grow(need, wanted, options.maximum_size, sb(), global_free) != 0;
  }

  // Pulls every empty superblock out of every arena.  The device is synchronised first, so the
  // global arena's guards (recorded before: its lock is held) have completed.  The arenas are
  // locked only after it, and blocks freed in between may still be used by work queued since on
  // the arena's stream (a free on another stream synchronises that one first): a superblock
  // pulled back carries an event recorded on its arena's stream under the arena's lock
  // (complete at once, and dropped, when the stream is idle).
  void defragment() {
    backend.device_synchronize();
    global_free.coalesce_after_sync();
    pull_empty_superblocks();
    // A retired arena holding no superblock is reached no more: its stream's id is gone from
    // every lookup, and `owner` names only arenas that hold one.
    std::unique_lock arenas_lock(arenas_mutex);
    retired_bytes.store(0, std::memory_order_relaxed);
    std::erase_if(retired, [](const std::unique_ptr<arena>& a) {
      std::lock_guard lock(a->mutex);
      return a->sb_starts.empty();
    });
  }

  void pull_empty_superblocks() {
    std::shared_lock arenas_lock(arenas_mutex);
    for_each_arena([&](arena& a) {
      std::lock_guard lock(a.mutex);
      detail::guard_list guard;
      bool guarded = false;
      for (auto it = a.sb_starts.begin(); it != a.sb_starts.end();) {
        auto r = a.free.find_containing(*it);
        if (r && r->first == *it && r->second == sb()) {
          if (!guarded) {
            guarded = true;
            try {
              guard = {std::make_shared<detail::event_guard>(events, a.stream, a.stream_id)};
            } catch (const driver_error&) {
              // The arena's stream was destroyed (its handle invalid, or a newer stream's): a
              // second synchronisation, with a's lock held, covers every free in its list, so
              // its superblocks need no guard.
              backend.device_synchronize();
            }
          }
          a.free.take_at(*it);
          owner.erase(*it);
          global_free.insert(*it, sb(), guard);
          it = a.sb_starts.erase(it);
        } else {
          ++it;
        }
      }
      a.empty_sb = 0;
    });
  }

  // Takes `size` bytes (a superblock multiple) from the global arena for stream s, growing or
  // defragmenting as needed.  Returns 0 when even that fails.
  std::uintptr_t take_global(std::size_t size, stream_view s) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      if (auto r = global_free.take_best_fit(size)) {
        if (r->size > size) global_free.insert(r->addr + size, r->size - size, r->guards);
        detail::wait_for(backend, r->guards, s);
        return r->addr;
      }
      if (attempt == 0) {
        // Destroyed streams' arenas (handles recycled) hold a growth step: take them back first.
        if (retired_bytes.load(std::memory_order_relaxed) >= std::max(options.min_growth, size)) {
          defragment();
          continue;
        }
        if (grow(size)) continue;
      }
      if (attempt == 1) {
        defragment();
        continue;
      }
      if (attempt == 2) {
        chunks.release_free(global_free);
        if (grow(size)) continue;
      }
    }
    return 0;
  }

  [[noreturn]] void out_of_memory(std::size_t bytes) {
    std::size_t total = global_free.total(), largest = global_free.largest();
    {
      std::shared_lock arenas_lock(arenas_mutex);
      for_each_arena([&](const arena& a) {
        std::lock_guard lock(a.mutex);
        total += a.free.total();
        largest = std::max(largest, a.free.largest());
      });
    }
    throw out_of_memory_error("arena", bytes, total, detail::fragmentation(largest, total));
  }

  // ---- arena side --------------------------------------------------------------------------
  // With a's lock held: best fit inside its superblocks.
  void* try_arena(arena& a, std::size_t need, stream_view s) {
    auto r = a.free.take_best_fit(need);
    if (!r) return nullptr;
    if (r->addr == a.empty_sb) a.empty_sb = 0;
    if (r->size > need) a.free.insert(r->addr + need, r->size - need);
    a.allocated += need;
    if (backend.checks_reuse()) backend.note_reuse(reinterpret_cast<void*>(r->addr), need, s);
    return reinterpret_cast<void*>(r->addr);
  }

  void* allocate_small(std::size_t bytes, std::size_t need, stream_view s) {
    arena& a = arena_for(s);
    {
      std::lock_guard lock(a.mutex);
      if (void* p = try_arena(a, need, s)) return p;
    }
    std::uintptr_t sbp;
    {
      std::lock_guard lock(global_mutex);
      sbp = take_global(sb(), a.stream);
      if (!sbp) out_of_memory(bytes);
      owner[sbp] = &a;
    }
    std::lock_guard lock(a.mutex);
    a.sb_starts.insert(sbp);
    a.free.insert(sbp, sb());
    return try_arena(a, need, s);  // the new superblock fits: need <= sb / 2
  }

  void deallocate_small(std::uintptr_t p, std::size_t need, stream_view s) {
    arena* a = &arena_for(s);
    bool mine;
    {
      std::lock_guard lock(a->mutex);
      auto it = a->sb_starts.upper_bound(p);
      mine = it != a->sb_starts.begin() && p < *std::prev(it) + sb();
      if (mine) {
        insert_and_maybe_shrink(*a, p, need);
        return;
      }
    }
    {
      std::lock_guard lock(global_mutex);
      auto it = owner.upper_bound(p);
      if (it == owner.begin() || p >= std::prev(it)->first + sb()) return;  // not ours
      a = std::prev(it)->second;
    }
    // The owner's stream may reuse the block at once: make the free's work complete first.
    if (!(a->stream == s) || !detail::same_stream(a->stream_id, backend.stream_id(s)))
      backend.stream_synchronize(s);
    std::lock_guard lock(a->mutex);
    insert_and_maybe_shrink(*a, p, need);
  }

  // With a's lock held.  Returns an empty superblock beyond the first to the global arena.
  void insert_and_maybe_shrink(arena& a, std::uintptr_t p, std::size_t need) {
    a.free.insert(p, need);
    a.allocated -= need;
    const std::uintptr_t start = *std::prev(a.sb_starts.upper_bound(p));
    auto r = a.free.find_containing(start);
    if (!r || r->first != start || r->second != sb()) return;
    if (a.empty_sb == 0 || a.empty_sb == start) {
      a.empty_sb = start;
      return;
    }
    detail::guard_ptr guard;
    try {
      guard = std::make_shared<detail::event_guard>(events, a.stream, a.stream_id);
    } catch (const driver_error&) {
      return;  // the arena's stream was destroyed: the superblock stays until a defragment
    }
    a.free.take_at(start);
    a.sb_starts.erase(start);
    // Lock order is global then arena; a's lock is held here, so hand over with try_lock and
    // keep the superblock when the global lock is busy (it goes back on the next empty one).
    if (global_mutex.try_lock()) {
      owner.erase(start);
      global_free.insert(start, sb(), {std::move(guard)});
      global_mutex.unlock();
    } else {
      a.sb_starts.insert(start);
      a.free.insert(start, sb());
    }
  }
};

arena_resource::arena_resource(device_memory_resource& upstream, arena_options options)
    : device_memory_resource(upstream.shared_backend()),
      impl_(std::make_unique<impl>(upstream, options, backend())) {
  const std::size_t sb = options.superblock_size;
  if (sb < (std::size_t{64} << 10) || (sb & (sb - 1)) != 0)
    throw std::invalid_argument("arena_resource: superblock_size must be a power of two >= 64 KiB");
  if (options.initial_size > 0) {
    std::lock_guard lock(impl_->global_mutex);
    impl_->grow(std::max(sb, options.initial_size / sb * sb));
  }
}

arena_resource::~arena_resource() {
  backend().device_synchronize();
  impl_->global_free = free_list(impl_->chunks.boundaries());  // drop guards before the events go
  impl_->chunks.release_all();
}

void arena_resource::release() {
  std::lock_guard lock(impl_->global_mutex);
  impl_->defragment();
  impl_->chunks.release_free(impl_->global_free);
}

void* arena_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  const std::size_t need = round_up(detail::padded_size(bytes, alignment), detail::native);
  void* p;
  if (impl_->is_large(need)) {
    const std::size_t size = round_up(need, impl_->sb());
    std::lock_guard lock(impl_->global_mutex);
    const std::uintptr_t a = impl_->take_global(size, stream);
    if (!a) impl_->out_of_memory(bytes);
    if (backend().checks_reuse()) backend().note_reuse(reinterpret_cast<void*>(a), size, stream);
    p = reinterpret_cast<void*>(a);
    impl_->large_allocated += size;
  } else {
    p = impl_->allocate_small(bytes, need, stream);
  }
  return alignment > detail::native ? impl_->overaligned.align(p, alignment) : p;
}

void arena_resource::do_deallocate(void* p, std::size_t bytes, stream_view stream,
                                   std::size_t alignment) noexcept {
  const std::size_t need = round_up(detail::padded_size(bytes, alignment), detail::native);
  if (alignment > detail::native) p = impl_->overaligned.base(p);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  try {
    if (impl_->is_large(need)) {
      const std::size_t size = round_up(need, impl_->sb());
      if (backend().checks_reuse()) backend().note_release(p, size, stream);
      auto guard = std::make_shared<detail::event_guard>(impl_->events, stream);
      std::lock_guard lock(impl_->global_mutex);
      impl_->global_free.insert(a, size, {std::move(guard)});
      impl_->large_allocated -= size;
    } else {
      if (backend().checks_reuse()) backend().note_release(p, need, stream);
      impl_->deallocate_small(a, need, stream);
    }
  } catch (...) {
    // Only a failing driver call (event record, synchronise) lands here; the block is lost to
    // reuse but the resource stays consistent.
  }
}

resource_info arena_resource::do_info() const {
  resource_info i;
  std::lock_guard lock(impl_->global_mutex);
  i.reserved_bytes = impl_->chunks.reserved();
  i.peak_reserved_bytes = impl_->chunks.peak();
  std::size_t allocated = impl_->large_allocated;
  std::size_t total = impl_->global_free.total(), largest = impl_->global_free.largest();
  std::uint64_t wait = impl_->global_mutex.wait_ns();
  std::shared_lock arenas_lock(impl_->arenas_mutex);
  impl_->for_each_arena([&](const arena& a) {
    std::lock_guard al(a.mutex);
    total += a.free.total();
    largest = std::max(largest, a.free.largest());
    wait += a.mutex.wait_ns();
    allocated += a.allocated;
  });
  i.allocated_bytes = allocated;
  i.free_bytes = total;
  i.largest_free_block = largest;
  i.lock_wait_ns = wait;
  return i;
}

}  // namespace strata::gpu
