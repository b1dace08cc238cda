// strata::concurrent_object_pool<T> — a pool of objects of one type shared by many threads.
//
// Layout (after Bonwick's magazines):
//
//   thread cache (one per thread per pool)   depot (one per pool, behind a mutex)
//     loaded   magazine  ─┐                    filled magazines   empty magazines
//     previous magazine  ─┴── exchanged ──►    slot store (chunks from the upstream)
//
// allocate pops from the thread's loaded magazine and deallocate pushes onto it: no lock, no
// atomic read-modify-write, no write to memory another thread writes.  When the loaded magazine
// is empty (full), the thread swaps it with its previous one; only when both are empty (full)
// does it take the depot lock to exchange a magazine — once per magazine_capacity operations at
// most.  An object may be deallocated by any thread: it simply lands in that thread's magazine,
// and magazines travel between threads through the depot.
//
// Threads are numbered by a process-wide index (reused after a thread exits); each pool keeps
// its caches in a table by that index, so a pool never depends on a thread's lifetime and a
// thread never refers to a pool.  The objects in the magazines of a thread that exits stay in
// its cache until a new thread takes the same index; they are not lost (the destructor and
// capacity see them) but they are not reused before.
//
// Misuse checks (Checked pools, see object_pool.hpp) take the depot lock on every call.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/detail/typed_pool.hpp"
#include "strata/object_pool.hpp"

namespace strata {
namespace detail {

inline constexpr std::uint32_t max_cached_threads = 64 * 64;

struct thread_index_registry {
  std::mutex mutex;
  std::vector<std::uint32_t> released;
  std::uint32_t next = 0;
};
inline thread_index_registry& thread_indices() noexcept {
  static auto* registry = new thread_index_registry;  // never destroyed: threads outlive main
  return *registry;
}

// index + 1 of the calling thread; 0 until it first uses a concurrent pool (thread_index_exited
// once its index is given back at thread exit).  Plain data, so the
// fast path reads it without a TLS init guard.
inline thread_local std::uint32_t t_thread_index_plus1 = 0;

// t_thread_index_plus1 once the thread's holder is gone (its index given back): a thread-exit
// destructor that runs after it (a thread_local made before the thread's first pool call) and
// uses a pool must not take an index again, which it would never give back (the holder, a
// thread_local already destroyed, is not made anew): 4096 such threads left every later thread
// without a cache, on the depot lock for every call.  An index past max_cached_threads: served
// from the depot under its lock, as a thread without a cache.
inline constexpr std::uint32_t thread_index_exited = UINT32_MAX;

struct thread_index_holder {
  std::uint32_t index;
  ~thread_index_holder() {
    t_thread_index_plus1 = thread_index_exited;
    thread_index_registry& r = thread_indices();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.released.push_back(index);
  }
};

__attribute__((noinline)) inline std::uint32_t acquire_thread_index() {
  thread_index_registry& r = thread_indices();
  std::uint32_t index;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.released.empty()) {
      // Smallest first keeps the indices dense, so pools' tables stay small.
      auto it = std::min_element(r.released.begin(), r.released.end());
      index = *it;
      *it = r.released.back();
      r.released.pop_back();
    } else {
      index = r.next++;
    }
  }
  static thread_local thread_index_holder holder{index};
  holder.index = index;
  t_thread_index_plus1 = index + 1;
  return index;
}

}  // namespace detail

template <class T, class Upstream = new_delete_upstream, bool Checked = STRATA_POOL_CHECKS != 0>
class concurrent_object_pool;

namespace detail {

// The untyped concurrent pool (fixed slot size); concurrent_object_pool<T> and the C API sit on it.
template <class Upstream, bool Checked>
class basic_concurrent_pool {
 public:
  static constexpr std::uint32_t magazine_capacity = 64;

  basic_concurrent_pool(std::size_t size, std::size_t align, Upstream up = Upstream()) noexcept
      : up_(up), store_(slot_size_for(size, align), slot_align_for(align), up) {
    for (auto& b : blocks_) b.store(nullptr, std::memory_order_relaxed);
  }
  basic_concurrent_pool(const basic_concurrent_pool&) = delete;
  basic_concurrent_pool& operator=(const basic_concurrent_pool&) = delete;

  ~basic_concurrent_pool() {
    for (auto& b : blocks_) {
      cache_slot* block = b.load(std::memory_order_relaxed);
      if (block == nullptr) continue;
      for (std::uint32_t i = 0; i < 64; ++i) {
        thread_cache* c = block[i].load(std::memory_order_relaxed);
        if (c == nullptr) continue;
        free_magazine(c->loaded);
        free_magazine(c->previous);
        c->~thread_cache();
        up_.deallocate(c, sizeof(thread_cache), alignof(thread_cache));
      }
      up_.deallocate(block, sizeof(cache_slot) * 64, alignof(cache_slot));
    }
    free_list(filled_);
    free_list(empty_);
  }

  void* allocate() {
    thread_cache* c = cache();
    if (c != nullptr) [[likely]] {
      magazine* m = c->loaded;
      if (m->count != 0) [[likely]] {
        void* p = m->slots[--m->count];
        bump(c->allocations);
        if constexpr (Checked) check(p, true);
        return p;
      }
    }
    return allocate_slow(c);
  }

  void deallocate(void* p) noexcept {
    if constexpr (Checked) check(p, false);
    thread_cache* c = cache();
    if (c != nullptr) [[likely]] {
      magazine* m = c->loaded;
      if (m->count != magazine_capacity) [[likely]] {
        m->slots[m->count++] = p;
        bump(c->deallocations);
        return;
      }
    }
    deallocate_slow(c, p);
  }

  bool reserve(std::size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t room = store_.free_count();
    if (room >= n) return true;
    if (!store_.grow(n - room)) return false;
    ++refills_;
    return true;
  }

  // Gives back the chunks whose objects are all in the depot.  Objects cached in threads'
  // magazines keep their chunk alive.  Safe while other threads use the pool.
  std::size_t shrink() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    drain_filled();
    return store_.shrink();
  }

  bool owns(const void* p) const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return store_.owns(p);
  }
  bool is_live(const void* p) const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return store_.is_live(p);
  }

  pool_stats stats() const noexcept {
    pool_stats s;
    std::uint64_t allocs = overflow_allocations_.load(std::memory_order_relaxed);
    std::uint64_t frees = overflow_deallocations_.load(std::memory_order_relaxed);
    for (const auto& b : blocks_) {
      const cache_slot* block = b.load(std::memory_order_acquire);
      if (block == nullptr) continue;
      for (std::uint32_t i = 0; i < 64; ++i) {
        const thread_cache* c = block[i].load(std::memory_order_acquire);
        if (c == nullptr) continue;
        allocs += c->allocations.load(std::memory_order_relaxed);
        frees += c->deallocations.load(std::memory_order_relaxed);
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    s.live = allocs > frees ? std::size_t(allocs - frees) : 0;
    s.capacity = store_.capacity();
    s.free = s.capacity > s.live ? s.capacity - s.live : 0;
    s.high_water = high_water_;
    s.allocations = allocs;
    s.hits = allocs > misses_ ? allocs - misses_ : 0;
    s.refills = refills_;
    s.depot_trips = depot_trips_;
    s.bytes_reserved = store_.bytes();
    s.bytes_released = store_.bytes_released();
    return s;
  }

  // Calls fn(slot) for each object alive; fn may deallocate objects (see
  // slot_store::for_each_live).  Only while no other thread uses the pool.
  template <class Fn>
  bool for_each_live(Fn&& fn) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& b : blocks_) {
        cache_slot* block = b.load(std::memory_order_relaxed);
        if (block == nullptr) continue;
        for (std::uint32_t i = 0; i < 64; ++i)
          if (thread_cache* c = block[i].load(std::memory_order_relaxed)) {
            drain(c->loaded);
            drain(c->previous);
          }
      }
      drain_filled();
    }
    // fn runs without the lock: a checked pool's deallocate takes it.  What fn deallocates lands
    // in this thread's magazines (or the depot's) and is brought back to the store after it.
    return store_.for_each_live(fn, [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      if (thread_cache* c = cache()) {
        drain(c->loaded);
        drain(c->previous);
      }
      drain_filled();
    });
  }

 private:
  struct magazine {
    std::uint32_t count;
    magazine* next;
    void* slots[magazine_capacity];
  };
  struct alignas(64) thread_cache {  // alignas: no false sharing between threads' caches
    magazine* loaded;
    magazine* previous;
    // Written by the owner only (a plain increment); read by stats().
    std::atomic<std::uint64_t> allocations{0};
    std::atomic<std::uint64_t> deallocations{0};
  };
  using cache_slot = std::atomic<thread_cache*>;

  static void bump(std::atomic<std::uint64_t>& counter) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  thread_cache* cache() const noexcept {
    std::uint32_t i = detail::t_thread_index_plus1 - 1;  // wraps to ~0 when unset
    if (i >= max_cached_threads) [[unlikely]] return nullptr;
    const cache_slot* block = blocks_[i / 64].load(std::memory_order_acquire);
    if (block == nullptr) [[unlikely]] return nullptr;
    return block[i % 64].load(std::memory_order_acquire);
  }

  // Creates this thread's cache (under the lock); nullptr if the thread is beyond the table or
  // memory ran out, in which case the caller works on the depot directly.
  thread_cache* attach() {
    std::uint32_t i = detail::t_thread_index_plus1 != 0 ? detail::t_thread_index_plus1 - 1
                                                        : detail::acquire_thread_index();
    if (i >= max_cached_threads) return nullptr;
    cache_slot* block = blocks_[i / 64].load(std::memory_order_relaxed);
    if (block == nullptr) {
      void* mem = up_.allocate(sizeof(cache_slot) * 64, alignof(cache_slot));
      if (mem == nullptr) return nullptr;
      block = static_cast<cache_slot*>(mem);
      for (std::uint32_t k = 0; k < 64; ++k) ::new (&block[k]) cache_slot(nullptr);
      blocks_[i / 64].store(block, std::memory_order_release);
    }
    if (thread_cache* c = block[i % 64].load(std::memory_order_relaxed)) return c;
    magazine* a = nullptr;
    magazine* b = nullptr;
    void* mem = nullptr;
    try {  // a throwing upstream: the magazines already taken stay the pool's
      a = take_empty();
      b = a != nullptr ? take_empty() : nullptr;
      mem = b != nullptr ? up_.allocate(sizeof(thread_cache), alignof(thread_cache)) : nullptr;
    } catch (...) {
      give_empty(a);
      give_empty(b);
      throw;
    }
    if (mem == nullptr) {
      give_empty(a);
      give_empty(b);
      return nullptr;
    }
    auto* c = ::new (mem) thread_cache;
    c->loaded = a;
    c->previous = b;
    block[i % 64].store(c, std::memory_order_release);
    return c;
  }

  __attribute__((noinline)) void* allocate_slow(thread_cache* c) {
    if (c != nullptr && c->previous->count != 0) {
      std::swap(c->loaded, c->previous);
      return finish_allocate(c, c->loaded->slots[--c->loaded->count]);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++depot_trips_;
    if (c == nullptr) c = attach();
    if (c == nullptr) {  // no cache for this thread: serve from the store under the lock
      void* p = store_take();
      if (p != nullptr) {
        note_high_water();  // high_water bounds live: objects of threads without a cache too
        overflow_allocations_.fetch_add(1, std::memory_order_relaxed);
        if constexpr (Checked) store_.mark(p, true);
      }
      return p;
    }
    if (c->loaded->count == 0 && c->previous->count != 0) std::swap(c->loaded, c->previous);
    if (c->loaded->count == 0) {
      if (filled_ != nullptr) {
        magazine* full = filled_;
        filled_ = full->next;
        in_filled_ -= full->count;
        give_empty(c->loaded);
        c->loaded = full;
      } else {
        magazine* m = c->loaded;
        while (m->count < magazine_capacity) {
          // At most one refill per magazine: the free slots and one new chunk, not 64 objects'
          // worth of chunks (64 GiB for objects of 1 GiB).
          void* p = m->count == 0 ? store_take() : store_.pop_raw();
          if (p == nullptr) break;
          m->slots[m->count++] = p;
        }
        if (m->count == 0) return nullptr;
      }
    }
    note_high_water();
    void* p = c->loaded->slots[--c->loaded->count];
    bump(c->allocations);
    if constexpr (Checked) store_.mark(p, true);
    return p;
  }

  void* finish_allocate(thread_cache* c, void* p) noexcept {
    bump(c->allocations);
    if constexpr (Checked) check(p, true);
    return p;
  }

  __attribute__((noinline)) void deallocate_slow(thread_cache* c, void* p) noexcept {
    if (c != nullptr && c->previous->count == 0) {
      std::swap(c->loaded, c->previous);
      c->loaded->slots[c->loaded->count++] = p;
      bump(c->deallocations);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++depot_trips_;
    if (c == nullptr) {
      // attach() may throw (new_delete_upstream); a deallocation must not.
      try {
        c = attach();
      } catch (...) {
        c = nullptr;
      }
    }
    if (c != nullptr && c->loaded->count == magazine_capacity) {
      magazine* empty = c->previous->count == 0 ? nullptr : take_empty_nothrow();
      if (c->previous->count == 0) {
        std::swap(c->loaded, c->previous);
      } else if (empty != nullptr) {
        c->previous->next = filled_;
        filled_ = c->previous;
        in_filled_ += c->previous->count;
        c->previous = c->loaded;
        c->loaded = empty;
      } else {
        c = nullptr;  // no magazine to be had: straight into the store
      }
    }
    if (c == nullptr) {
      store_.push_raw(p);
      overflow_deallocations_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    c->loaded->slots[c->loaded->count++] = p;
    bump(c->deallocations);
  }

  // Under the lock: a slot from the store, growing it when needed.
  void* store_take() {
    void* p = store_.pop_raw();
    if (p == nullptr) {
      if (!store_.grow(0)) return nullptr;
      ++refills_;
      ++misses_;
      p = store_.pop_raw();
    }
    return p;
  }

  // Under the lock: slots outside the depot = capacity - free slots in the store - slots in
  // filled magazines.
  void note_high_water() noexcept {
    std::size_t out = store_.capacity() - store_.free_count() - in_filled_;
    if (out > high_water_) high_water_ = out;
  }

  magazine* take_empty() {
    if (empty_ != nullptr) {
      magazine* m = empty_;
      empty_ = m->next;
      return m;
    }
    void* mem = up_.allocate(sizeof(magazine), alignof(magazine));
    if (mem == nullptr) return nullptr;
    auto* m = static_cast<magazine*>(mem);
    m->count = 0;
    m->next = nullptr;
    return m;
  }
  magazine* take_empty_nothrow() noexcept {
    try {
      return take_empty();
    } catch (...) {
      return nullptr;
    }
  }
  void give_empty(magazine* m) noexcept {
    if (m == nullptr) return;
    m->next = empty_;
    empty_ = m;
  }
  void drain(magazine* m) noexcept {
    while (m->count != 0) store_.push_raw(m->slots[--m->count]);
  }
  // Under the lock: the filled magazines' objects back to the store, the magazines to empty_
  // (a filled magazine with no object would be handed to a thread as one with some).
  void drain_filled() noexcept {
    while (filled_ != nullptr) {
      magazine* m = filled_;
      filled_ = m->next;
      drain(m);
      give_empty(m);
    }
    in_filled_ = 0;
  }
  void free_magazine(magazine* m) noexcept { up_.deallocate(m, sizeof(magazine), alignof(magazine)); }
  void free_list(magazine* m) noexcept {
    while (m != nullptr) {
      magazine* next = m->next;
      free_magazine(m);
      m = next;
    }
  }

  void check(void* p, bool live) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    store_.mark(p, live);
  }

  [[no_unique_address]] Upstream up_;
  std::atomic<cache_slot*> blocks_[max_cached_threads / 64];
  mutable std::mutex mutex_;  // the depot lock: everything below
  slot_store<Upstream, Checked> store_;
  magazine* filled_ = nullptr;
  magazine* empty_ = nullptr;
  std::size_t in_filled_ = 0;  // objects in filled magazines
  std::size_t high_water_ = 0;
  std::uint64_t refills_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t depot_trips_ = 0;
  std::atomic<std::uint64_t> overflow_allocations_{0};
  std::atomic<std::uint64_t> overflow_deallocations_{0};
};

}  // namespace detail

template <class T, class Upstream, bool Checked>
class concurrent_object_pool
    : public detail::typed_pool<T, detail::basic_concurrent_pool<Upstream, Checked>, Checked> {
  using base = detail::typed_pool<T, detail::basic_concurrent_pool<Upstream, Checked>, Checked>;

 public:
  static constexpr std::uint32_t magazine_capacity =
      detail::basic_concurrent_pool<Upstream, Checked>::magazine_capacity;

  explicit concurrent_object_pool(Upstream up = Upstream()) noexcept : base(std::move(up)) {}
  explicit concurrent_object_pool(std::size_t capacity, Upstream up = Upstream())
      : base(std::move(up)) {
    if (!this->reserve(capacity)) throw std::bad_alloc();
  }
  // Any thread may destroy() an object any thread created.  At destruction no other thread may
  // use the pool any more: live objects are destroyed, then chunks returned.
};

}  // namespace strata
