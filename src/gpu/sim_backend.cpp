// The simulated device: host memory, streams that really run in order, and a reuse checker.
//
// A stream is a worker thread draining a queue of operations (spin, wait-for-event).  Every
// enqueued operation takes a ticket (1, 2, ...); `completed` counts the operations the worker has
// finished, so work enqueued before ticket t is done once completed >= t.  An event records
// (stream, ticket) and is complete when that stream has completed the ticket.
//
// Reuse checker.  note_release(p, n, S) remembers that [p, p+n) was released on S after
// `enqueued(S)` operations.  note_reuse(p, n, S') flags the range unless one of these holds:
//   * S' == S (same stream: stream order protects it),
//   * S has completed that ticket (the host waited, or the work simply finished),
//   * S' waited on an event covering it, directly or through a chain of waits (each stream keeps
//     a vector clock `waited` of the tickets it is known to run after).
//
// Handles.  Like the driver, stream_destroy returns at once (the stream's worker drains what was
// enqueued, then ends) and the next stream_create hands the destroyed stream's handle value out
// again: a handle names a slot, and a slot names the stream created last in it.  Everything the
// device and the checker remember (events, waits, releases, pool blocks) names the stream
// object itself, which lives as long as the backend, so a recycled handle is a different stream
// to them, as it is to the driver; stream_id gives each stream its own serial number.
#include <strata/gpu/device_backend.hpp>
#include <strata/gpu/errors.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace strata::gpu {
namespace {

struct sim_stream;

struct sim_gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
};

struct sim_op {
  std::uint64_t spin_ns = 0;
  sim_gate* gate = nullptr;  // wait until the host opens it
  sim_stream* wait_on = nullptr;  // wait until wait_on->completed >= wait_ticket
  std::uint64_t wait_ticket = 0;
};

struct sim_stream {
  std::mutex m;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::deque<sim_op> queue;
  std::atomic<std::uint64_t> enqueued{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<bool> destroyed{false};  // by stream_destroy: the handle is no longer valid
  void* handle = nullptr;              // its slot's handle value (nullptr: the default stream)
  std::uint64_t serial = 0;            // stream_id: never reused
  bool stop = false;
  std::thread worker;
  // Vector clock (guarded by the backend's check mutex): for each other stream, the ticket this
  // stream's later work is known to run after.
  std::unordered_map<const sim_stream*, std::uint64_t> waited;

  void run() {
    for (;;) {
      sim_op op;
      {
        std::unique_lock lock(m);
        work_cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        op = queue.front();
      }
      if (op.spin_ns) std::this_thread::sleep_for(std::chrono::nanoseconds(op.spin_ns));
      if (op.gate) {
        std::unique_lock lock(op.gate->m);
        op.gate->cv.wait(lock, [&] { return op.gate->open; });
      }
      if (op.wait_on) {
        std::unique_lock lock(op.wait_on->m);
        op.wait_on->done_cv.wait(lock, [&] {
          return op.wait_on->completed.load(std::memory_order_acquire) >= op.wait_ticket;
        });
      }
      {
        std::lock_guard lock(m);
        queue.pop_front();
        completed.fetch_add(1, std::memory_order_release);
      }
      done_cv.notify_all();
    }
  }

  void enqueue(const sim_op& op) {
    {
      std::lock_guard lock(m);
      queue.push_back(op);
      enqueued.fetch_add(1, std::memory_order_release);
    }
    work_cv.notify_one();
  }

  void synchronize_to(std::uint64_t ticket) {
    std::unique_lock lock(m);
    done_cv.wait(lock, [&] { return completed.load(std::memory_order_acquire) >= ticket; });
  }

  void synchronize() { synchronize_to(enqueued.load(std::memory_order_acquire)); }

  // The worker finishes what is enqueued, then ends.
  void request_stop() {
    {
      std::lock_guard lock(m);
      stop = true;
    }
    work_cv.notify_one();
  }

  void shut_down() {
    request_stop();
    if (worker.joinable()) worker.join();
  }

  // After request_stop: joins the worker if its queue is drained already (it ends at once then).
  void join_if_drained() {
    if (completed.load(std::memory_order_acquire) == enqueued.load(std::memory_order_acquire) && worker.joinable())
      worker.join();
  }
};

struct sim_event {
  std::mutex m;
  sim_stream* stream = nullptr;  // nullptr: never recorded (complete)
  std::uint64_t ticket = 0;
  std::vector<std::pair<const sim_stream*, std::uint64_t>> clock;  // the stream's waits then
};

struct sim_pool {
  struct cached {
    void* p;
    std::size_t size;
    sim_stream* stream;
    std::uint64_t ticket;
  };
  std::mutex m;
  std::size_t release_threshold = 0;
  std::multimap<std::size_t, cached> cache;
  std::unordered_map<void*, std::size_t> sizes;  // live blocks
  std::size_t reserved = 0, reserved_high = 0, used = 0;
};

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) & ~(a - 1); }

class sim_backend_impl final : public sim_backend {
 public:
  explicit sim_backend_impl(sim_options options) : options_(options) {
    checks_reuse_ = options.check_reuse;
    default_stream_ = new_stream(nullptr);
  }

  ~sim_backend_impl() override {
    for (auto& g : gates_) gate_open(g.get());  // never leave a worker parked at a gate
    for (auto& s : streams_) s->shut_down();
    std::lock_guard lock(mem_m_);
    for (auto& [p, n] : live_) std::free(p);
  }

  std::string_view name() const noexcept override { return "sim"; }
  std::string description() const override {
    return "simulated device (host memory, " + std::to_string(options_.capacity_bytes >> 20) +
           " MiB, one worker thread per stream)";
  }

  // ---- memory ------------------------------------------------------------------------------
  void* mem_alloc(std::size_t bytes) override {
    if (options_.mem_alloc_latency_ns)
      std::this_thread::sleep_for(std::chrono::nanoseconds(options_.mem_alloc_latency_ns));
    return raw_alloc(bytes);
  }
  void mem_free(void* p, std::size_t) noexcept override {
    if (!p) return;
    device_synchronize();  // cuMemFree waits for the device
    raw_free(p);
  }
  memory_info mem_info() override {
    std::lock_guard lock(mem_m_);
    return {options_.capacity_bytes - used_, options_.capacity_bytes};
  }

  // ---- streams and events --------------------------------------------------------------------
  stream_view stream_create(int) override {
    std::size_t slot;
    {
      std::lock_guard lock(streams_m_);
      if (free_slots_.empty() && next_slot_ == max_streams)
        throw driver_error("sim device: more than " + std::to_string(max_streams) + " live streams");
      if (free_slots_.empty()) {
        slot = next_slot_++;
      } else {  // the handle destroyed last comes back first, as from the driver
        slot = free_slots_.back();
        free_slots_.pop_back();
      }
    }
    // The slot's last stream was destroyed: once its worker has drained its queue, it ends at
    // once; join it here so a stream-per-task program does not keep a parked thread per task.
    if (sim_stream* old = slots_[slot].load(std::memory_order_acquire)) old->join_if_drained();
    return stream_view{new_stream(handle_of(slot))->handle};
  }
  // Returns at once, as cuStreamDestroy does: the work enqueued so far still runs.  The object
  // stays (events, the checker and pool blocks may still name it); its slot is free for reuse.
  void stream_destroy(stream_view s) noexcept override {
    if (s.is_default()) return;
    sim_stream* st = get(s);
    if (st == nullptr || st->destroyed.exchange(true, std::memory_order_acq_rel)) return;
    st->request_stop();
    // Drained already (a stream synchronised before its destroy, the usual case): its worker
    // ends at once and is joined here, before the slot can be handed out (stream_create joins a
    // busy one's when it reuses the slot).  Left unjoined in a backend that lives to the end of
    // the program (the plug-in's), every such thread was a leak at exit (ThreadSanitizer).
    st->join_if_drained();
    std::lock_guard lock(streams_m_);
    free_slots_.push_back(slot_of(s.handle()));
  }
  std::uint64_t stream_id(stream_view s) noexcept override {
    const sim_stream* st = get(s);
    return st ? st->serial : 0;
  }
  void stream_synchronize(stream_view s) override { live(s)->synchronize(); }
  void* event_create() override { return new sim_event; }
  void event_destroy(void* ev) noexcept override { delete static_cast<sim_event*>(ev); }
  void event_record(void* ev, stream_view s) override {
    auto* e = static_cast<sim_event*>(ev);
    sim_stream* st = live(s);
    std::vector<std::pair<const sim_stream*, std::uint64_t>> clock;
    {
      std::lock_guard lock(check_m_);
      clock.assign(st->waited.begin(), st->waited.end());
    }
    std::lock_guard lock(e->m);
    e->stream = st;
    e->ticket = st->enqueued.load(std::memory_order_acquire);
    e->clock = std::move(clock);
  }
  bool event_query(void* ev) override {
    auto* e = static_cast<sim_event*>(ev);
    std::lock_guard lock(e->m);
    return e->stream == nullptr || e->stream->completed.load(std::memory_order_acquire) >= e->ticket;
  }
  void event_synchronize(void* ev) override {
    auto* e = static_cast<sim_event*>(ev);
    sim_stream* st;
    std::uint64_t t;
    {
      std::lock_guard lock(e->m);
      st = e->stream;
      t = e->ticket;
    }
    if (st) st->synchronize_to(t);
  }
  void stream_wait_event(stream_view s, void* ev) override {
    auto* e = static_cast<sim_event*>(ev);
    sim_stream* st = live(s);
    sim_stream* src;
    std::uint64_t t;
    std::vector<std::pair<const sim_stream*, std::uint64_t>> clock;
    {
      std::lock_guard lock(e->m);
      src = e->stream;
      t = e->ticket;
      clock = e->clock;
    }
    if (src == nullptr || src == st) return;
    {
      std::lock_guard lock(check_m_);
      auto raise = [&](const sim_stream* k, std::uint64_t v) {
        auto& w = st->waited[k];
        w = std::max(w, v);
      };
      raise(src, t);
      for (auto& [k, v] : clock) raise(k, v);
    }
    st->enqueue(sim_op{0, nullptr, src, t});
  }
  void device_synchronize() override {
    std::vector<sim_stream*> all;
    {
      std::lock_guard lock(streams_m_);
      for (auto& s : streams_) all.push_back(s.get());
    }
    for (sim_stream* s : all) s->synchronize();
  }
  void launch_spin(stream_view s, std::uint64_t ns) override { live(s)->enqueue(sim_op{ns, nullptr, nullptr, 0}); }

  // ---- stream-ordered pool (the driver's cudaMallocAsync, emulated) --------------------------
  bool supports_async_pool() const noexcept override { return true; }
  void* pool_create(std::size_t release_threshold) override {
    auto* p = new sim_pool;
    p->release_threshold = release_threshold;
    return p;
  }
  void pool_destroy(void* pool) noexcept override {
    auto* p = static_cast<sim_pool*>(pool);
    device_synchronize();
    for (auto& [size, c] : p->cache) raw_free(c.p);
    for (auto& [ptr, size] : p->sizes) raw_free(ptr);
    delete p;
  }
  void* pool_alloc_async(void* pool, std::size_t bytes, stream_view s) override {
    auto* p = static_cast<sim_pool*>(pool);
    sim_stream* st = live(s);
    if (bytes > options_.capacity_bytes) return nullptr;
    const std::size_t size = round_up(bytes, 512);
    std::lock_guard lock(p->m);
    // Reuse a cached block the driver would consider safe: same stream, completed, or ordered
    // by an event dependency.  Blocks up to twice the request are used whole.
    for (auto it = p->cache.lower_bound(size); it != p->cache.end() && it->first <= 2 * size; ++it) {
      const auto& c = it->second;
      if (c.stream == st || c.stream->completed.load(std::memory_order_acquire) >= c.ticket ||
          waited_on(st, c.stream, c.ticket)) {
        void* out = c.p;
        p->sizes[out] = c.size;
        p->used += c.size;
        p->cache.erase(it);
        return out;
      }
    }
    void* out = raw_alloc(size);
    if (!out) {
      release_completed(*p, 0);
      out = raw_alloc(size);
      if (!out) return nullptr;
    }
    p->sizes[out] = size;
    p->used += size;
    p->reserved += size;
    p->reserved_high = std::max(p->reserved_high, p->reserved);
    return out;
  }
  void pool_free_async(void* pool, void* ptr, stream_view s) override {
    auto* p = static_cast<sim_pool*>(pool);
    sim_stream* st = live(s);
    std::lock_guard lock(p->m);
    auto it = p->sizes.find(ptr);
    if (it == p->sizes.end()) return;
    const std::size_t size = it->second;
    p->sizes.erase(it);
    p->used -= size;
    p->cache.emplace(size, sim_pool::cached{ptr, size, st, st->enqueued.load(std::memory_order_acquire)});
    if (p->reserved - p->used > p->release_threshold) release_completed(*p, p->release_threshold);
  }
  void pool_trim(void* pool, std::size_t keep) override {
    auto* p = static_cast<sim_pool*>(pool);
    device_synchronize();
    std::lock_guard lock(p->m);
    release_completed(*p, keep);
  }
  pool_usage pool_query(void* pool) override {
    auto* p = static_cast<sim_pool*>(pool);
    std::lock_guard lock(p->m);
    return {p->reserved, p->reserved_high, p->used};
  }

  // ---- reuse checker -------------------------------------------------------------------------
  void note_release(const void* p, std::size_t bytes, stream_view s) noexcept override {
    sim_stream* st = get(s);
    if (st == nullptr) return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(check_m_);
    carve(a, a + bytes);
    released_.emplace(a, release_record{a + bytes, st, st->enqueued.load(std::memory_order_acquire)});
  }

  void note_reuse(const void* p, std::size_t bytes, stream_view s) noexcept override {
    sim_stream* st = get(s);
    if (st == nullptr) return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const auto b = a + bytes;
    std::lock_guard lock(check_m_);
    auto it = released_.upper_bound(a);
    if (it != released_.begin()) --it;
    for (; it != released_.end() && it->first < b; ++it) {
      const release_record& r = it->second;
      if (r.end <= a) continue;
      const bool safe = r.stream == st ||
                        r.stream->completed.load(std::memory_order_acquire) >= r.ticket ||
                        waited_locked(st, r.stream, r.ticket);
      if (!safe) {
        violations_.push_back(reuse_violation{std::max(a, it->first), std::min(b, r.end) - std::max(a, it->first),
                                              reinterpret_cast<std::uintptr_t>(r.stream->handle),
                                              reinterpret_cast<std::uintptr_t>(st->handle), r.ticket,
                                              r.stream->serial, st->serial});
        violation_count_.fetch_add(1, std::memory_order_relaxed);
        if (options_.abort_on_violation) {
          std::fprintf(stderr, "strata sim device: block %p reused on another stream before the "
                               "event guarding it completed\n", p);
          std::abort();
        }
      }
    }
    carve(a, b);
  }

  std::vector<reuse_violation> violations() const override {
    std::lock_guard lock(check_m_);
    return violations_;
  }
  std::size_t violation_count() const noexcept override {
    return violation_count_.load(std::memory_order_relaxed);
  }
  void clear_violations() noexcept override {
    std::lock_guard lock(check_m_);
    violations_.clear();
    violation_count_.store(0, std::memory_order_relaxed);
  }
  std::uint64_t completed_ops(stream_view s) const override {
    const sim_stream* st = get(s);
    if (st == nullptr) throw driver_error("sim device: no stream " + std::to_string(s.id()));
    return st->completed.load(std::memory_order_acquire);
  }
  void* gate_enqueue(stream_view s) override {
    sim_gate* g;
    {
      std::lock_guard lock(streams_m_);
      gates_.push_back(std::make_unique<sim_gate>());
      g = gates_.back().get();
    }
    live(s)->enqueue(sim_op{0, g, nullptr, 0});
    return g;
  }
  void gate_open(void* gate) override {
    auto* g = static_cast<sim_gate*>(gate);
    {
      std::lock_guard lock(g->m);
      g->open = true;
    }
    g->cv.notify_all();
  }

 private:
  struct release_record {
    std::uintptr_t end;
    const sim_stream* stream;
    std::uint64_t ticket;
  };

  // Handle values: slot i is (i + 1) * 16, aligned like the driver's pointers, never nullptr.
  static void* handle_of(std::size_t slot) noexcept { return reinterpret_cast<void*>((slot + 1) << 4); }
  static std::size_t slot_of(void* handle) noexcept { return (reinterpret_cast<std::uintptr_t>(handle) >> 4) - 1; }

  // A stream for `handle` (nullptr: the default stream), which its slot names from now on.
  sim_stream* new_stream(void* handle) {
    auto s = std::make_unique<sim_stream>();
    sim_stream* raw = s.get();
    raw->handle = handle;
    raw->serial = next_serial_.fetch_add(1, std::memory_order_relaxed);
    raw->worker = std::thread([raw] { raw->run(); });
    std::lock_guard lock(streams_m_);
    streams_.push_back(std::move(s));
    if (handle) slots_[slot_of(handle)].store(raw, std::memory_order_release);
    return raw;
  }

  // The stream a handle names now; nullptr for a value no stream_create returned.
  sim_stream* get(stream_view s) const noexcept {
    if (s.is_default()) return default_stream_;
    const auto h = s.id();
    if ((h & 15) != 0 || (h >> 4) - 1 >= max_streams) return nullptr;
    return slots_[slot_of(s.handle())].load(std::memory_order_acquire);
  }

  // A stream that work is enqueued on, or an event recorded on: a destroyed one is an invalid
  // handle, as the driver reports (once the handle is recycled, it names the new stream).
  sim_stream* live(stream_view s) const {
    sim_stream* st = get(s);
    if (st == nullptr)
      throw driver_error("sim device: no stream " + std::to_string(s.id()) + " (CUDA_ERROR_INVALID_HANDLE)");
    if (st->destroyed.load(std::memory_order_acquire))
      throw driver_error("sim device: stream " + std::to_string(s.id()) +
                         " was destroyed (CUDA_ERROR_INVALID_HANDLE)");
    return st;
  }

  bool waited_locked(const sim_stream* on, const sim_stream* src, std::uint64_t ticket) const {
    auto it = on->waited.find(src);
    return it != on->waited.end() && it->second >= ticket;
  }
  bool waited_on(const sim_stream* on, const sim_stream* src, std::uint64_t ticket) {
    std::lock_guard lock(check_m_);
    return waited_locked(on, src, ticket);
  }

  // Removes [a, b) from the release records, keeping the parts outside it.
  void carve(std::uintptr_t a, std::uintptr_t b) {
    auto it = released_.upper_bound(a);
    if (it != released_.begin()) --it;
    while (it != released_.end() && it->first < b) {
      const std::uintptr_t start = it->first;
      const release_record r = it->second;
      if (r.end <= a) {
        ++it;
        continue;
      }
      it = released_.erase(it);
      if (start < a) released_.emplace(start, release_record{a, r.stream, r.ticket});
      if (r.end > b) it = released_.emplace(b, release_record{r.end, r.stream, r.ticket}).first;
    }
  }

  void* raw_alloc(std::size_t bytes) {
    const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), 256);
    if (bytes > options_.capacity_bytes) return nullptr;
    std::lock_guard lock(mem_m_);
    if (used_ + size > options_.capacity_bytes) return nullptr;
    void* p = std::aligned_alloc(256, size);
    if (!p) return nullptr;
    used_ += size;
    live_.emplace(p, size);
    return p;
  }

  void raw_free(void* p) noexcept {
    std::lock_guard lock(mem_m_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }

  // Frees cached pool blocks whose frees have completed until reserved <= keep.
  void release_completed(sim_pool& p, std::size_t keep) {
    for (auto it = p.cache.begin(); it != p.cache.end() && p.reserved > keep;) {
      const auto& c = it->second;
      if (c.stream->completed.load(std::memory_order_acquire) >= c.ticket) {
        p.reserved -= c.size;
        raw_free(c.p);
        it = p.cache.erase(it);
      } else {
        ++it;
      }
    }
  }

  const sim_options options_;
  mutable std::mutex streams_m_;
  std::vector<std::unique_ptr<sim_stream>> streams_;
  std::vector<std::unique_ptr<sim_gate>> gates_;
  static constexpr std::size_t max_streams = std::size_t{1} << 14;  // live at once
  std::unique_ptr<std::atomic<sim_stream*>[]> slots_{new std::atomic<sim_stream*>[max_streams]()};
  std::size_t next_slot_ = 0;             // guarded by streams_m_, as is free_slots_
  std::vector<std::size_t> free_slots_;   // destroyed streams' slots, the last destroyed at the back
  std::atomic<std::uint64_t> next_serial_{1};
  sim_stream* default_stream_ = nullptr;

  std::mutex mem_m_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;

  mutable std::mutex check_m_;
  std::map<std::uintptr_t, release_record> released_;
  std::vector<reuse_violation> violations_;
  std::atomic<std::size_t> violation_count_{0};
};

}  // namespace

std::shared_ptr<sim_backend> make_sim_backend(sim_options options) {
  return std::make_shared<sim_backend_impl>(options);
}

}  // namespace strata::gpu
