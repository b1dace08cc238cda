// Event guards: "this memory may still be in use by work enqueued on some stream before this
// event".  A guard is shared by every free range it covers; when the last range lets go, the
// event goes back to the pool it came from.  Taking guarded memory for stream S means, for each
// guard not yet complete, making S wait on its event (no host blocking).
#pragma once

#include <strata/gpu/device_backend.hpp>
#include <strata/gpu/errors.hpp>

#include "gpu/detail/stream_cache.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::gpu::detail {

class event_pool {
 public:
  explicit event_pool(device_backend& backend) : backend_(backend) {}
  ~event_pool() {
    for (void* e : free_) backend_.event_destroy(e);
  }
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;

  void* get() {
    {
      std::lock_guard lock(m_);
      if (!free_.empty()) {
        void* e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    return backend_.event_create();
  }
  void put(void* e) noexcept {
    std::lock_guard lock(m_);
    free_.push_back(e);
  }
  device_backend& backend() const noexcept { return backend_; }

 private:
  device_backend& backend_;
  std::mutex m_;
  std::vector<void*> free_;
};

// Records ev on the stream with id `expected_id` (device_backend::stream_id) behind handle s: the
// stream a resource's per-stream state was made for.  Throws driver_error when that stream was
// destroyed: the record fails, or the handle names a newer stream now (the driver recycles
// handles; recording there would order the wrong stream), checked before the record and after
// it (a recycle in between).
inline void record_on_stream(device_backend& backend, void* ev, stream_view s, std::uint64_t expected_id) {
  auto check = [&] {
    if (!same_stream(backend.stream_id(s), expected_id))
      throw driver_error("the stream was destroyed and its handle names a newer stream");
  };
  check();
  backend.event_record(ev, s);
  check();
}

struct event_guard {
  // An event recorded on s now.
  event_guard(event_pool& pool, stream_view s) : event_guard(pool, s, pool.backend().stream_id(s)) {}

  // An event recorded on the stream with id `expected_id` behind handle s (record_on_stream);
  // when that throws, the event goes back to the pool.
  event_guard(event_pool& pool, stream_view s, std::uint64_t expected_id)
      : pool(pool), event(pool.get()), stream(s), stream_id(expected_id) {
    try {
      record_on_stream(pool.backend(), event, s, expected_id);
    } catch (...) {
      pool.put(event);
      throw;
    }
  }
  ~event_guard() { pool.put(event); }
  event_guard(const event_guard&) = delete;
  event_guard& operator=(const event_guard&) = delete;

  // An event recorded once (here) stays complete once it has completed: the first query that
  // says so is remembered, and the page heap's scans (under its lock) ask the driver only about
  // guards still pending (E2 on the simulated device, 16 threads: 185 k queries instead of 249 k).
  bool complete() const {
    if (done_.load(std::memory_order_acquire)) return true;
    if (!pool.backend().event_query(event)) return false;
    done_.store(true, std::memory_order_release);
    return true;
  }
  // Stream order already covers work on the guard's own stream (s_id: stream_id of s): no wait
  // needed there.  The same stream, not the same handle: a recycled handle is another stream.
  bool ready_for(stream_view s, std::uint64_t s_id) const {
    return (stream == s && same_stream(stream_id, s_id)) || complete();
  }
  // Whether this event completes no earlier than `o`: recorded after it on the same stream by
  // the same host thread (program order is record order), so waiting on this one covers both.
  bool supersedes(const event_guard& o) const {
    return stream == o.stream && same_stream(stream_id, o.stream_id) && thread == o.thread &&
           sequence > o.sequence;
  }

  event_pool& pool;
  void* event;
  stream_view stream;       // where the event was recorded
  std::uint64_t stream_id;  // and that stream's id
  std::thread::id thread = std::this_thread::get_id();
  std::uint64_t sequence = next_sequence();

 private:
  mutable std::atomic<bool> done_{false};
  static std::uint64_t next_sequence() noexcept {
    thread_local std::uint64_t n = 0;
    return ++n;
  }
};

using guard_ptr = std::shared_ptr<event_guard>;
using guard_list = std::vector<guard_ptr>;

// Orders stream s after every guard in `guards` that has not completed yet.
inline void wait_for(device_backend& backend, const guard_list& guards, stream_view s) {
  if (guards.empty()) return;
  const std::uint64_t id = backend.stream_id(s);
  for (const guard_ptr& g : guards)
    if (!g->ready_for(s, id)) backend.stream_wait_event(s, g->event);
}

// Appends `more` to `into`, dropping duplicates; past a handful it drops completed guards so
// the list of a long-lived free range stays short.
inline void merge_guards(guard_list& into, const guard_list& more) {
  for (const guard_ptr& g : more) {
    bool seen = false;
    for (const guard_ptr& h : into) seen = seen || h == g;
    if (!seen) into.push_back(g);
  }
  if (into.size() > 8) {
    guard_list kept;
    for (guard_ptr& g : into)
      if (!g->complete()) kept.push_back(std::move(g));
    into = std::move(kept);
  }
}

}  // namespace strata::gpu::detail
