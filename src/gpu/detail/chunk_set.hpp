// chunk_set: the memory a pooling resource (pool, arena, strata) holds from its upstream, one
// chunk per upstream allocation.  Chunk starts are the boundaries its free lists never merge
// across, so every chunk can go back upstream whole.  Not thread-safe: the resource's global
// lock guards it.
#pragma once

#include "gpu/detail/free_list.hpp"

#include <strata/gpu/device_memory_resource.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <set>

namespace strata::gpu::detail {

class chunk_set {
 public:
  explicit chunk_set(device_memory_resource& upstream) : upstream_(upstream) {}
  chunk_set(const chunk_set&) = delete;
  chunk_set& operator=(const chunk_set&) = delete;

  // For free lists over these chunks: free_list(chunks.boundaries()).
  const std::set<std::uintptr_t>* boundaries() const noexcept { return &starts_; }
  std::size_t reserved() const noexcept { return reserved_; }
  std::size_t peak() const noexcept { return peak_; }

  // Records [p, p + size), just allocated upstream, and adds it to `into`.
  void add(std::uintptr_t p, std::size_t size, free_list& into) {
    chunks_.emplace(p, size);
    starts_.insert(p);
    into.insert(p, size);
    reserved_ += size;
    peak_ = std::max(peak_, reserved_);
  }

  // A new chunk of `wanted` bytes (cut to what `maximum` leaves, in multiples of `unit`, and at
  // least `need`) added to `into`; when the upstream refuses that, `need` bytes alone.  The
  // chunk's start, or 0 when maximum or the upstream refuses even `need`.
  std::uintptr_t grow(std::size_t need, std::size_t wanted, std::size_t maximum, std::size_t unit,
                      free_list& into) {
    if (reserved_ >= maximum || maximum - reserved_ < need) return 0;
    std::size_t size = std::max(need, std::min(wanted, (maximum - reserved_) / unit * unit));
    for (;;) {
      try {
        const auto p = reinterpret_cast<std::uintptr_t>(upstream_.allocate(size));
        add(p, size, into);
        return p;
      } catch (const std::bad_alloc&) {
        if (size == need) return 0;
        size = need;
      }
    }
  }

  // Every chunk that is one whole free range of `from` goes back upstream, while more than
  // `keep` bytes are reserved; with only_ready, only ranges no pending event guards.
  void release_free(free_list& from, std::size_t keep = 0, bool only_ready = false) {
    for (auto it = chunks_.begin(); it != chunks_.end() && reserved_ > keep;) {
      auto r = from.find_containing(it->first);
      if (r && r->first == it->first && r->second == it->second &&
          (!only_ready || from.ready_at(it->first))) {
        from.take_at(it->first);
        starts_.erase(it->first);
        reserved_ -= it->second;
        upstream_.deallocate(reinterpret_cast<void*>(it->first), it->second);
        it = chunks_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Notes that a range was freed into the chunk holding addr: release_marked looks at it.
  void mark(std::uintptr_t addr) {
    const auto it = chunks_.upper_bound(addr);
    if (it != chunks_.begin()) marked_.insert(std::prev(it)->first);
  }

  // release_free(from, keep, true) for the marked chunks only, so that a release threshold
  // checked at every free costs what that free touched, not a walk over every chunk (which made
  // one deallocate take time in proportion to the chunks: 1.2 us with 100, 0.36 ms with 10 000).
  // A chunk not wholly free loses its mark (a later free marks it again); one wholly free but
  // still guarded keeps it, and at most `pending` of those are asked about their events per call,
  // in turn, the chunk holding `freed` first.
  void release_marked(free_list& from, std::size_t keep, std::uintptr_t freed, std::size_t pending = 8) {
    const auto holder = chunks_.upper_bound(freed);
    if (holder == chunks_.begin()) return;
    const std::uintptr_t first = std::prev(holder)->first;
    marked_.insert(first);
    if (reserved_ <= keep) return;
    std::size_t asked = 0;
    // One look at a marked chunk: released, or not wholly free, it loses its mark.
    auto look = [&](std::set<std::uintptr_t>::iterator m) {
      const auto c = chunks_.find(*m);
      const auto r = c == chunks_.end() ? std::nullopt : from.find_containing(c->first);
      if (!r || r->first != c->first || r->second != c->second) return marked_.erase(m);
      if (!from.ready_at(c->first)) return ++asked, std::next(m);
      from.take_at(c->first);
      starts_.erase(c->first);
      reserved_ -= c->second;
      upstream_.deallocate(reinterpret_cast<void*>(c->first), c->second);
      chunks_.erase(c);
      return marked_.erase(m);
    };
    look(marked_.find(first));
    auto it = marked_.upper_bound(cursor_);
    for (std::size_t n = marked_.size(); n > 0 && reserved_ > keep && asked < pending; --n) {
      if (it == marked_.end()) it = marked_.begin();
      cursor_ = *it;
      it = look(it);
    }
  }

  // Every chunk goes back upstream, free or not (the resource's destructor, device synchronised).
  void release_all() noexcept {
    for (auto& [p, size] : chunks_) upstream_.deallocate(reinterpret_cast<void*>(p), size);
    chunks_.clear();
    starts_.clear();
    marked_.clear();
    reserved_ = 0;
  }

 private:
  device_memory_resource& upstream_;
  std::map<std::uintptr_t, std::size_t> chunks_;  // start -> size
  std::set<std::uintptr_t> starts_;
  std::set<std::uintptr_t> marked_;  // chunk starts a range was freed into (release_marked)
  std::uintptr_t cursor_ = 0;        // the marked chunk release_marked looked at last
  std::size_t reserved_ = 0, peak_ = 0;
};

// 1 - largest / total: how much of the free memory a single request cannot use at once.
inline double fragmentation(std::size_t largest, std::size_t total) noexcept {
  return total ? 1.0 - double(largest) / double(total) : 0.0;
}

}  // namespace strata::gpu::detail
