// strata::object_pool<T> — a pool of objects of one type, for one thread.
//
// Glossary (shared with concurrent_object_pool.hpp):
//   slot      room for one object; while free, its first word links it into the free list.
//   chunk     a block of slots obtained from the upstream allocator in one call.
//   upstream  where chunks come from (new_delete_upstream, malloc_upstream or your own type with
//             `void* allocate(size_t bytes, size_t align)` and
//             `void deallocate(void* p, size_t bytes, size_t align) noexcept`;
//             allocate returns nullptr or throws on failure).
//   refill    one upstream call for a new chunk.  Every other allocation is a hit.
//
// Guarantees: allocate/deallocate are O(1) (a free-list pop/push, or a bump inside the current
// chunk); addresses are stable until the object is deallocated; shrink() gives whole free
// chunks back; destruction destroys the objects still alive and returns every chunk.
// Destruction destroy()s the live objects in address order: an object's destructor may
// destroy() objects of the pool that are still alive (they are not destroyed twice), not use
// one already destroyed (a checked pool aborts on its destroy()); objects it creates are
// destroyed by a further walk.
//
// Misuse (double deallocate, a pointer this pool never handed out, a pointer into the middle of
// an object) is caught when the pool is Checked — the default in builds without NDEBUG, or
// forced by the third template argument — and aborts with a message naming the pointer.
// Unchecked pools do not detect it: a double deallocate corrupts the free list.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/detail/typed_pool.hpp"

#ifndef STRATA_POOL_CHECKS
#ifdef NDEBUG
#define STRATA_POOL_CHECKS 0
#else
#define STRATA_POOL_CHECKS 1
#endif
#endif

namespace strata {

// What a pool holds.  For concurrent_object_pool, `high_water` is the peak number of slots
// outside the shared depot (live objects plus those cached in threads' magazines): an upper
// bound of the peak of `live`, sampled on the slow path so that the fast path writes no shared
// counter.
struct pool_stats {
  std::size_t live = 0;            // objects handed out and not yet returned
  std::size_t free = 0;            // slots held by the pool and not handed out
  std::size_t capacity = 0;        // live + free
  std::size_t high_water = 0;      // peak of live (see above for the concurrent pool)
  std::uint64_t allocations = 0;   // calls to allocate/create that returned an object
  std::uint64_t hits = 0;          // allocations served without asking the upstream
  std::uint64_t refills = 0;       // chunks obtained from the upstream (reserve included)
  std::uint64_t depot_trips = 0;   // concurrent pool: slow paths that took the depot lock
  std::size_t bytes_reserved = 0;  // bytes of chunks held from the upstream
  std::size_t bytes_released = 0;  // bytes given back by shrink() so far
};

// Chunks from ::operator new (aligned form).  Throws std::bad_alloc on failure.
struct new_delete_upstream {
  static void* allocate(std::size_t bytes, std::size_t align) {
    return ::operator new(bytes, std::align_val_t(align));
  }
  static void deallocate(void* p, std::size_t bytes, std::size_t align) noexcept {
#ifdef __cpp_sized_deallocation
    ::operator delete(p, bytes, std::align_val_t(align));
#else
    // Without sized deallocation (clang before 17 by default, -fno-sized-deallocation) the sized
    // operator is not declared: the unsized aligned one frees the same chunk.
    (void)bytes;
    ::operator delete(p, std::align_val_t(align));
#endif
  }
};

// Chunks from aligned_alloc/free (whatever malloc the process uses).  Returns nullptr on failure.
struct malloc_upstream {
  static void* allocate(std::size_t bytes, std::size_t align) noexcept {
    if (align < alignof(std::max_align_t)) return std::malloc(bytes);
    return std::aligned_alloc(align, (bytes + align - 1) / align * align);
  }
  static void deallocate(void* p, std::size_t, std::size_t) noexcept { std::free(p); }
};

namespace detail {

[[noreturn]] __attribute__((noinline, cold)) inline void pool_misuse(const char* what,
                                                                      const void* p) noexcept {
  std::fprintf(stderr, "strata: object pool misuse: %s (pointer %p)\n", what, p);
  std::fflush(stderr);
  std::abort();
}

constexpr std::size_t slot_align_for(std::size_t align) noexcept {
  return align < alignof(void*) ? alignof(void*) : align;
}
constexpr std::size_t slot_size_for(std::size_t size, std::size_t align) noexcept {
  std::size_t a = slot_align_for(align);
  std::size_t s = size < sizeof(void*) ? sizeof(void*) : size;
  return (s + a - 1) / a * a;
}

// The slots of a pool: chunks from the upstream, a free list threaded through free slots, and a
// bump region (the untouched tail of the newest chunk, carved lazily so that reserving does not
// touch memory).  Not thread-safe; the concurrent pool guards it with its depot lock.
template <class Upstream, bool Checked>
class slot_store {
 public:
  slot_store(std::size_t slot_size, std::size_t slot_align, Upstream up) noexcept
      : up_(std::move(up)), slot_size_(slot_size), slot_align_(slot_align) {
    next_chunk_slots_ = std::max(min_auto_slots(), 4096 / slot_size_);
  }
  slot_store(slot_store&& o) noexcept
      : up_(std::move(o.up_)), slot_size_(o.slot_size_), slot_align_(o.slot_align_),
        free_(std::exchange(o.free_, nullptr)), bump_(std::exchange(o.bump_, nullptr)),
        bump_end_(std::exchange(o.bump_end_, nullptr)), chunks_(std::move(o.chunks_)),
        sorted_(std::exchange(o.sorted_, true)),  // an unsorted table must be sorted before lookups
        capacity_(std::exchange(o.capacity_, 0)), free_count_(std::exchange(o.free_count_, 0)),
        bytes_(std::exchange(o.bytes_, 0)), bytes_released_(std::exchange(o.bytes_released_, 0)),
        next_chunk_slots_(o.next_chunk_slots_) {
    o.chunks_.clear();
  }
  slot_store(const slot_store&) = delete;
  slot_store& operator=(const slot_store&) = delete;
  slot_store& operator=(slot_store&&) = delete;
  ~slot_store() { release_all(); }

  // Fast path: a free slot, or nullptr when the store must grow.  Checked stores record the slot
  // as handed out; pop_raw/push_raw leave that to the caller (the concurrent pool marks objects,
  // not the slots it moves into magazines).
  void* pop() noexcept {
    void* p = pop_raw();
    if constexpr (Checked) {
      if (p != nullptr) mark(p, true);
    }
    return p;
  }
  void push(void* p) noexcept {
    if constexpr (Checked) mark(p, false);
    push_raw(p);
  }

  void* pop_raw() noexcept {
    void* p = free_;
    if (p != nullptr) [[likely]] {
      free_ = *static_cast<void**>(p);
    } else if (bump_ != bump_end_) {
      p = bump_;
      bump_ += slot_size_;
    } else {
      return nullptr;
    }
    --free_count_;
    return p;
  }

  void push_raw(void* p) noexcept {
    *static_cast<void**>(p) = free_;
    free_ = p;
    ++free_count_;
  }

  // Obtains a chunk of `exact_slots` slots (a reserve gets what it asked for, not a rounded-up
  // chunk: a pool of 1 GiB objects with room for one must not take 8 GiB), or with 0 a chunk of
  // the automatic, geometrically growing size.  Returns false when the upstream returned nullptr,
  // or when that many slots would not fit in the address space (no upstream could give them);
  // propagates the upstream's exception.
  bool grow(std::size_t exact_slots) {
    std::size_t slots = exact_slots != 0 ? exact_slots : next_chunk_slots_;
    // A wrapped byte count would be a small chunk that the bump pointer runs past.
    if (slots > SIZE_MAX / slot_size_) return false;
    std::size_t bytes = slots * slot_size_;
    chunks_.reserve(chunks_.size() + 1);  // may throw before anything is taken
    std::unique_ptr<std::uint64_t[]> bits;  // given back if the upstream fails or throws
    if constexpr (Checked) bits.reset(new std::uint64_t[(slots + 63) / 64]());
    void* mem = up_.allocate(bytes, slot_align_);
    if (mem == nullptr) return false;
    retire_bump();
    auto* base = static_cast<char*>(mem);
    chunk c{base, slots, bits.release(), 0};
    if constexpr (Checked) {
      // Checked stores look chunks up on every call: keep them sorted.
      chunks_.insert(std::upper_bound(chunks_.begin(), chunks_.end(), c, by_base), c);
    } else {
      chunks_.push_back(c);
      sorted_ = chunks_.size() == 1 || (sorted_ && chunks_[chunks_.size() - 2].base < base);
    }
    bump_ = base;
    bump_end_ = base + bytes;  // a whole number of slots: pop_raw stops when bump_ reaches it
    capacity_ += slots;
    free_count_ += slots;
    bytes_ += bytes;
    // Double each time up to 64 KiB worth of slots: few refills for big pools, little waste for
    // small ones, and chunks small enough that shrink() finds whole free ones.
    std::size_t cap = std::max(min_auto_slots(), 65536 / slot_size_);
    next_chunk_slots_ = std::max(next_chunk_slots_, std::min(slots * 2, cap));
    return true;
  }

  // True when p is the start of a slot of one of this store's chunks.  O(log chunks).
  bool owns(const void* p) const noexcept {
    const chunk* c = find(p);
    return c != nullptr && (static_cast<const char*>(p) - c->base) % slot_size_ == 0;
  }
  // True when p is owned and currently handed out (Checked stores only).
  bool is_live(const void* p) const noexcept {
    if constexpr (Checked) {
      const chunk* c = find(p);
      if (c == nullptr) return false;
      std::size_t i = std::size_t(static_cast<const char*>(p) - c->base) / slot_size_;
      return (c->live_bits[i / 64] >> (i % 64)) & 1;
    } else {
      (void)p;
      return false;
    }
  }

  // Gives every chunk whose slots are all free back to the upstream.  Returns bytes released.
  std::size_t shrink() noexcept {
    if (chunks_.empty()) return 0;
    sort_chunks();
    for (chunk& c : chunks_) c.free_slots = 0;
    for (void* p = free_; p != nullptr; p = *static_cast<void**>(p)) find_mut(p)->free_slots++;
    if (bump_ != bump_end_) find_mut(bump_)->free_slots += std::size_t(bump_end_ - bump_) / slot_size_;
    bool any = false;
    for (const chunk& c : chunks_) any |= c.free_slots == c.slots;
    if (!any) return 0;
    // Unlink the slots of the chunks about to go, keeping the order of the others.
    void** link = &free_;
    while (*link != nullptr) {
      const chunk* c = find(*link);
      if (c->free_slots == c->slots) *link = *static_cast<void**>(*link);
      else link = static_cast<void**>(*link);
    }
    if (bump_ != bump_end_) {
      const chunk* c = find(bump_);
      if (c->free_slots == c->slots) bump_ = bump_end_ = nullptr;
    }
    std::size_t released = 0;
    auto keep = chunks_.begin();
    for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
      if (it->free_slots == it->slots) {
        released += it->slots * slot_size_;
        capacity_ -= it->slots;
        free_count_ -= it->slots;
        release(*it);
      } else {
        *keep++ = *it;
      }
    }
    chunks_.erase(keep, chunks_.end());
    bytes_ -= released;
    bytes_released_ += released;
    return released;
  }

  // Calls fn(slot) once for every slot handed out and not returned, in address order.  fn may
  // return slots (the pool's destructor destroy()s each object, and an object's destructor may
  // destroy() the objects it owns): after each call, collect() brings the slots returned
  // meanwhile onto the free list, and one returned before its turn is not visited.  Slots handed
  // out while a walk runs (an object a destructor creates) are visited by a further walk, until
  // none is left (one walk was all there was, and the pool's destructor never destroyed them);
  // a walk that visits nothing ends it.  Each walk needs a copy of the chunk table and a bitmap
  // of the free slots: returns false (calling nothing more) if they cannot be allocated.
  template <class Fn, class Collect>
  bool for_each_live(Fn&& fn, Collect&& collect) noexcept {
    bool visited = true;
    while (free_count_ != capacity_ && visited)
      if (!walk_live(fn, collect, visited)) return false;
    return true;
  }

 private:
  // One walk of for_each_live over the slots handed out when it starts; visited says whether it
  // called fn.
  template <class Fn, class Collect>
  bool walk_live(Fn& fn, Collect& collect, bool& visited) noexcept {
    visited = false;
    sort_chunks();
    std::vector<chunk> chunks;  // fn may grow the store: walk the chunks there are now
    std::vector<std::vector<bool>> is_free;
    try {
      chunks = chunks_;
      is_free.reserve(chunks.size());
      for (const chunk& c : chunks) is_free.emplace_back(c.slots, false);
    } catch (...) {
      return false;
    }
    auto mark_free = [&](const void* vp) {
      auto* p = static_cast<const char*>(vp);
      auto it = std::upper_bound(chunks.begin(), chunks.end(), p,
                                 [](const char* q, const chunk& c) { return q < c.base; });
      if (it == chunks.begin()) return;  // a chunk fn made
      --it;
      std::size_t off = std::size_t(p - it->base);
      if (off < it->slots * slot_size_) is_free[std::size_t(it - chunks.begin())][off / slot_size_] = true;
    };
    // The free list is set aside, so that after each call free_ holds what fn returned.
    void* kept = std::exchange(free_, nullptr);
    for (void* p = kept; p != nullptr; p = *static_cast<void**>(p)) mark_free(p);
    for (char* p = bump_; p != bump_end_; p += slot_size_) mark_free(p);
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      for (std::size_t i = 0; i < chunks[k].slots; ++i) {
        if (is_free[k][i]) continue;
        visited = true;
        fn(static_cast<void*>(chunks[k].base + i * slot_size_));
        collect();
        while (free_ != nullptr) {
          void* p = std::exchange(free_, *static_cast<void**>(free_));
          mark_free(p);
          *static_cast<void**>(p) = kept;
          kept = p;
        }
      }
    }
    free_ = kept;
    return true;
  }

 public:
  void release_all() noexcept {
    for (const chunk& c : chunks_) release(c);
    chunks_.clear();
    free_ = nullptr;
    bump_ = bump_end_ = nullptr;
    capacity_ = free_count_ = bytes_ = 0;
  }

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t free_count() const noexcept { return free_count_; }
  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t bytes_released() const noexcept { return bytes_released_; }
  std::size_t slot_size() const noexcept { return slot_size_; }

  // Records p as handed out (live) or returned; aborts on misuse.  Checked stores only.
  void mark(void* p, bool live) noexcept {
    chunk* c = find_mut(p);
    if (c == nullptr) pool_misuse("pointer does not come from this pool", p);
    std::size_t off = std::size_t(static_cast<char*>(p) - c->base);
    if (off % slot_size_ != 0) pool_misuse("pointer is not the start of an object", p);
    std::size_t i = off / slot_size_;
    std::uint64_t bit = std::uint64_t(1) << (i % 64);
    bool was_live = (c->live_bits[i / 64] & bit) != 0;
    if (!live && !was_live) pool_misuse("double deallocate (or never allocated)", p);
    if (live && was_live) pool_misuse("free list corrupted: slot handed out twice", p);
    c->live_bits[i / 64] ^= bit;
  }

 private:
  struct chunk {
    char* base;
    std::size_t slots;
    std::uint64_t* live_bits;  // Checked only: one bit per slot, set while handed out
    std::size_t free_slots;    // scratch for shrink()
  };
  static bool by_base(const chunk& a, const chunk& b) noexcept { return a.base < b.base; }

  // The fewest slots of an automatic chunk: 8 while that fits in 64 KiB, so that small objects
  // refill rarely; fewer for larger objects, down to one, so that growth never takes 8 objects
  // of a size where one is already a large allocation.
  std::size_t min_auto_slots() const noexcept {
    return std::clamp<std::size_t>(65536 / slot_size_, 1, 8);
  }

  // Unchecked stores append chunks and sort on the first lookup (shrink, owns) after growth, so
  // that growing stays O(1).
  void sort_chunks() const noexcept {
    if (!sorted_) std::sort(chunks_.begin(), chunks_.end(), by_base);
    sorted_ = true;
  }
  const chunk* find(const void* vp) const noexcept {
    auto* p = static_cast<const char*>(vp);
    sort_chunks();
    auto it = std::upper_bound(chunks_.begin(), chunks_.end(), p,
                               [](const char* q, const chunk& c) { return q < c.base; });
    if (it == chunks_.begin()) return nullptr;
    --it;
    return p < it->base + it->slots * slot_size_ ? &*it : nullptr;
  }
  chunk* find_mut(const void* p) noexcept { return const_cast<chunk*>(find(p)); }

  // The rest of the current bump region goes onto the free list before a new chunk replaces it.
  void retire_bump() noexcept {
    while (bump_ != bump_end_) {
      *reinterpret_cast<void**>(bump_) = free_;
      free_ = bump_;
      bump_ += slot_size_;
    }
  }

  void release(const chunk& c) noexcept {
    up_.deallocate(c.base, c.slots * slot_size_, slot_align_);
    delete[] c.live_bits;
  }

  [[no_unique_address]] Upstream up_;
  std::size_t slot_size_;
  std::size_t slot_align_;
  void* free_ = nullptr;
  char* bump_ = nullptr;
  char* bump_end_ = nullptr;
  mutable std::vector<chunk> chunks_;  // mutable: sorted lazily by const lookups
  mutable bool sorted_ = true;
  std::size_t capacity_ = 0;
  std::size_t free_count_ = 0;
  std::size_t bytes_ = 0;
  std::size_t bytes_released_ = 0;
  std::size_t next_chunk_slots_;
};

// The untyped single-thread pool: slots of a size fixed at construction.  object_pool<T> and
// the C API (strata/pool.h) are thin layers over it.
template <class Upstream, bool Checked>
class basic_pool {
 public:
  basic_pool(std::size_t size, std::size_t align, Upstream up = Upstream()) noexcept
      : store_(slot_size_for(size, align), slot_align_for(align), std::move(up)) {}
  // The moved-from pool is empty, its counters too (stats() keeps capacity = live + free).
  basic_pool(basic_pool&& o) noexcept
      : store_(std::move(o.store_)), live_(std::exchange(o.live_, 0)),
        high_water_(std::exchange(o.high_water_, 0)),
        allocations_(std::exchange(o.allocations_, 0)), misses_(std::exchange(o.misses_, 0)),
        refills_(std::exchange(o.refills_, 0)) {}
  basic_pool& operator=(basic_pool&&) = delete;

  // Raw storage for one object; nullptr only if a malloc-like upstream failed.
  void* allocate() {
    void* p = store_.pop();
    if (p == nullptr) [[unlikely]] p = refill();
    if (p != nullptr) [[likely]] {
      ++allocations_;
      if (++live_ > high_water_) high_water_ = live_;
    }
    return p;
  }

  void deallocate(void* p) noexcept {
    store_.push(p);
    --live_;
  }

  // Makes room for n more objects without further upstream calls.  False if the upstream
  // returned nullptr or n objects would not fit in the address space.
  bool reserve(std::size_t n) {
    std::size_t room = store_.free_count();
    if (room >= n) return true;
    if (!store_.grow(n - room)) return false;
    ++refills_;
    return true;
  }

  std::size_t shrink() noexcept { return store_.shrink(); }
  bool owns(const void* p) const noexcept { return store_.owns(p); }
  bool is_live(const void* p) const noexcept { return store_.is_live(p); }

  pool_stats stats() const noexcept {
    pool_stats s;
    s.live = live_;
    s.free = store_.free_count();
    s.capacity = store_.capacity();
    s.high_water = high_water_;
    s.allocations = allocations_;
    s.hits = allocations_ - misses_;
    s.refills = refills_;
    s.bytes_reserved = store_.bytes();
    s.bytes_released = store_.bytes_released();
    return s;
  }

  // Calls fn(slot) for every object handed out and not returned; fn may deallocate objects
  // (see slot_store::for_each_live).
  template <class Fn>
  bool for_each_live(Fn&& fn) noexcept {
    return store_.for_each_live(std::forward<Fn>(fn), [] {});
  }

 private:
  __attribute__((noinline)) void* refill() {
    if (!store_.grow(0)) return nullptr;
    ++refills_;
    ++misses_;
    return store_.pop();
  }

  slot_store<Upstream, Checked> store_;
  std::size_t live_ = 0;
  std::size_t high_water_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t refills_ = 0;
};

}  // namespace detail

template <class T, class Upstream = new_delete_upstream, bool Checked = STRATA_POOL_CHECKS != 0>
class object_pool : public detail::typed_pool<T, detail::basic_pool<Upstream, Checked>, Checked> {
  using base = detail::typed_pool<T, detail::basic_pool<Upstream, Checked>, Checked>;

 public:
  explicit object_pool(Upstream up = Upstream()) noexcept : base(std::move(up)) {}
  // A pool that already holds room for n objects: the first n allocations make no upstream call.
  static object_pool with_capacity(std::size_t n, Upstream up = Upstream()) {
    object_pool pool(std::move(up));
    if (!pool.reserve(n)) throw std::bad_alloc();
    return pool;
  }
  object_pool(object_pool&&) noexcept = default;
  // Destruction destroys the objects still alive, then every chunk goes back to the upstream.
};

}  // namespace strata
