// strata-bench-patterns: classic multithreaded allocator workloads, written from their published
// descriptions (not from their code), each timed for a fixed duration and printing one JSON object.
//
//   larson         server simulation (Larson & Krishnan): each thread replaces random objects in
//                  its slot array; at every epoch the arrays move to the next thread, so objects
//                  are freed by a thread other than the one that allocated them.
//   prodcon        producer/consumer pairs over a lock-free ring: every free is remote.
//   cache-thrash   active false sharing (Hoard's cache-thrash): each thread allocates a small
//                  object and writes it repeatedly; an allocator that hands neighbouring bytes to
//                  different threads makes the cores fight over one cache line.
//   cache-scratch  passive false sharing (Hoard's cache-scratch): the main thread allocates the
//                  small objects and hands one to each thread, which frees it and then allocates
//                  and writes its own; an allocator that reuses the freed block keeps the sharing.
//   mstress        threads created and destroyed while objects migrate (mimalloc-bench's mstress
//                  idea): short-lived threads swap objects in a shared array, freeing objects
//                  allocated by threads that have already exited.
//   pareto         small sizes from a Pareto distribution (many tiny, a heavy tail), random
//                  replacement in a per-thread working set.
//   realloc        buffers grown by realloc in small random steps up to a limit, then freed.
//
// Usage: strata-bench-patterns --pattern NAME [--threads N] [--seconds S] [--seed N] [--smoke]
// Output: {"workload":"patterns","pattern":..,"threads":..,"seconds":..,"ops":..,"ops_per_sec":..,
//          "peak_rss_kb":..}

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "proc_status.hpp"
#include "rng.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string pattern;
  int threads = 1;
  double seconds = 1.0;
  uint64_t seed = 42;
  bool smoke = false;
};

using strata::bench::rng;

void* must_malloc(size_t n) {
  void* p = std::malloc(n);
  if (!p) {
    std::fprintf(stderr, "malloc(%zu) failed\n", n);
    std::abort();
  }
  return p;
}

// Runs body(thread_index) on n threads and joins them.
void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> ts;
  ts.reserve(n);
  for (int i = 0; i < n; ++i) ts.emplace_back(body, i);
  for (auto& t : ts) t.join();
}

struct result {
  uint64_t ops = 0;
  int threads = 0;
  std::string extra;  // additional JSON members, each preceded by a comma
};

// ---------------------------------------------------------------------------------------------
result larson(const options& o) {
  const size_t slots = o.smoke ? 256 : 4096, per_epoch = o.smoke ? 2000 : 20000;
  const size_t min_size = 16, max_size = 512;
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::vector<std::vector<void*>> arrays(o.threads, std::vector<void*>(slots));
  for (int t = 0; t < o.threads; ++t) {
    rng r(o.seed + t);
    for (auto& p : arrays[t]) p = must_malloc(r.range(min_size, max_size));
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, epochs{0};
  // The completion step runs once per epoch, after every thread arrived: one decision for all.
  auto on_epoch = [&]() noexcept {
    epochs.fetch_add(1, std::memory_order_relaxed);
    if (clock_type::now() >= deadline) stop.store(true, std::memory_order_relaxed);
    std::rotate(arrays.begin(), arrays.begin() + 1, arrays.end());  // hand the objects over
  };
  std::barrier sync(o.threads, on_epoch);
  run_threads(o.threads, [&](int t) {
    rng r(o.seed * 7 + t);
    uint64_t mine = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      auto& a = arrays[t];
      for (size_t i = 0; i < per_epoch; ++i) {
        size_t k = r.next() % slots;
        std::free(a[k]);
        size_t n = r.range(min_size, max_size);
        auto* p = static_cast<char*>(must_malloc(n));
        p[0] = char(i);
        p[n - 1] = char(i);
        a[k] = p;
      }
      mine += per_epoch;
      sync.arrive_and_wait();
    }
    ops.fetch_add(mine);
  });
  for (auto& a : arrays)
    for (void* p : a) std::free(p);
  return {ops.load(), o.threads, ",\"epochs\":" + std::to_string(epochs.load())};
}

// ---------------------------------------------------------------------------------------------
// Single-producer single-consumer ring of pointers.
struct ring {
  static constexpr size_t cap = 4096;
  alignas(64) std::atomic<size_t> head{0};  // next slot the consumer reads
  alignas(64) std::atomic<size_t> tail{0};  // next slot the producer writes
  alignas(64) void* slot[cap];
  bool push(void* p) {
    size_t t = tail.load(std::memory_order_relaxed);
    if (t - head.load(std::memory_order_acquire) == cap) return false;
    slot[t % cap] = p;
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
  void* pop() {
    size_t h = head.load(std::memory_order_relaxed);
    if (h == tail.load(std::memory_order_acquire)) return nullptr;
    void* p = slot[h % cap];
    head.store(h + 1, std::memory_order_release);
    return p;
  }
};

result prodcon(const options& o) {
  const int pairs = std::max(1, o.threads / 2);
  std::vector<ring> rings(pairs);
  std::atomic<int> producers_left{pairs};
  std::atomic<uint64_t> freed{0};
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  run_threads(2 * pairs, [&](int t) {
    ring& q = rings[t / 2];
    if (t % 2 == 0) {  // producer
      rng r(o.seed + t);
      uint64_t n = 0;
      while (true) {
        if ((n & 1023) == 0 && clock_type::now() >= deadline) break;
        size_t sz = r.range(16, 256);
        auto* p = static_cast<char*>(must_malloc(sz));
        p[0] = 1;
        while (!q.push(p)) std::this_thread::yield();
        ++n;
      }
      producers_left.fetch_sub(1);
    } else {  // consumer: frees everything its producer made (remote frees only)
      uint64_t n = 0;
      while (true) {
        void* p = q.pop();
        if (p) {
          std::free(p);
          ++n;
        } else if (producers_left.load() == 0 && q.head.load() == q.tail.load()) {
          break;
        } else {
          std::this_thread::yield();
        }
      }
      freed.fetch_add(n);
    }
  });
  return {freed.load(), 2 * pairs, ",\"pairs\":" + std::to_string(pairs)};
}

// ---------------------------------------------------------------------------------------------
result false_sharing(const options& o, bool passive) {
  const size_t obj = 8, writes = o.smoke ? 200 : 2000;
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::vector<char*> handed(o.threads, nullptr);
  if (passive)  // allocated together by one thread: likely neighbours on one cache line
    for (auto& p : handed) p = static_cast<char*>(must_malloc(obj));
  std::atomic<uint64_t> total{0};
  run_threads(o.threads, [&](int t) {
    if (passive) std::free(handed[t]);  // the next malloc of this size may get it back
    uint64_t n = 0;
    for (uint64_t iter = 0;; ++iter) {
      if ((iter & 63) == 0 && clock_type::now() >= deadline) break;
      // volatile: every write must reach the cache line, as in the original benchmarks.
      auto* p = static_cast<volatile char*>(must_malloc(obj));
      for (size_t w = 0; w < writes; ++w) p[w % obj] = char(w);
      std::free(const_cast<char*>(p));
      n += writes;
    }
    total.fetch_add(n);
  });
  return {total.load(), o.threads, ",\"object_size\":" + std::to_string(obj)};
}

// ---------------------------------------------------------------------------------------------
result mstress(const options& o) {
  const size_t slots = o.smoke ? 512 : 8192, per_thread = o.smoke ? 2000 : 50000;
  std::vector<std::atomic<void*>> shared(slots);
  for (auto& s : shared) s.store(nullptr);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  uint64_t ops = 0, created = 0, generation = 0;
  do {
    run_threads(o.threads, [&](int t) {
      rng r(o.seed + generation * 131 + t);
      for (size_t i = 0; i < per_thread; ++i) {
        size_t n = r.range(16, 2048);
        auto* p = static_cast<char*>(must_malloc(n));
        p[0] = char(i);
        // The old object was usually allocated by another thread, often one that has exited.
        void* old = shared[r.next() % slots].exchange(p, std::memory_order_acq_rel);
        std::free(old);
      }
    });
    ops += per_thread * o.threads;
    created += o.threads;
    ++generation;
  } while (clock_type::now() < deadline);
  for (auto& s : shared) std::free(s.load());
  return {ops, o.threads, ",\"threads_created\":" + std::to_string(created)};
}

// ---------------------------------------------------------------------------------------------
result pareto(const options& o) {
  const size_t slots = o.smoke ? 256 : 8192;
  const double xm = 8, alpha = 1.2, cap = 16384;
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::atomic<uint64_t> total{0}, bytes{0};
  run_threads(o.threads, [&](int t) {
    rng r(o.seed + t);
    auto draw = [&]() {  // inverse-CDF sampling of Pareto(xm, alpha), capped
      double u = 1.0 - r.unit();
      return size_t(std::min(cap, xm / std::pow(u, 1.0 / alpha)));
    };
    std::vector<void*> ws(slots, nullptr);
    uint64_t n = 0, b = 0;
    for (uint64_t iter = 0;; ++iter) {
      if ((iter & 1023) == 0 && clock_type::now() >= deadline) break;
      size_t k = r.next() % slots, sz = draw();
      std::free(ws[k]);
      auto* p = static_cast<char*>(must_malloc(sz));
      p[0] = p[sz - 1] = char(iter);
      ws[k] = p;
      ++n;
      b += sz;
    }
    for (void* p : ws) std::free(p);
    total.fetch_add(n);
    bytes.fetch_add(b);
  });
  uint64_t n = total.load();
  char extra[96];
  std::snprintf(extra, sizeof extra, ",\"mean_size\":%.1f", n ? double(bytes.load()) / n : 0.0);
  return {n, o.threads, extra};
}

// ---------------------------------------------------------------------------------------------
result realloc_growth(const options& o) {
  const size_t buffers = 8, limit = o.smoke ? 16384 : 262144;
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::atomic<uint64_t> total{0};
  run_threads(o.threads, [&](int t) {
    rng r(o.seed + t);
    std::vector<char*> buf(buffers, nullptr);
    std::vector<size_t> len(buffers, 0);
    uint64_t n = 0;
    for (uint64_t iter = 0;; ++iter) {
      if ((iter & 1023) == 0 && clock_type::now() >= deadline) break;
      size_t k = iter % buffers;  // round robin: neighbours grow too, so in-place is not free
      size_t grown = len[k] + r.range(16, 512);
      if (grown > limit) {
        std::free(buf[k]);
        buf[k] = nullptr;
        len[k] = 0;
        continue;
      }
      auto* p = static_cast<char*>(std::realloc(buf[k], grown));
      if (!p) {
        std::fprintf(stderr, "realloc(%zu) failed\n", grown);
        std::abort();
      }
      p[grown - 1] = char(iter);
      buf[k] = p;
      len[k] = grown;
      ++n;
    }
    for (char* p : buf) std::free(p);
    total.fetch_add(n);
  });
  return {total.load(), o.threads, ",\"limit\":" + std::to_string(limit)};
}

constexpr const char* kUsage =
    "usage: strata-bench-patterns --pattern "
    "larson|prodcon|cache-thrash|cache-scratch|mstress|pareto|realloc "
    "[--threads N] [--seconds S] [--seed N] [--smoke]";

}  // namespace

int main(int argc, char** argv) {
  options o;
  strata::bench::arg_parser args(argc, argv, "strata-bench-patterns", kUsage);
  while (args.next()) {
    if (args.is("--pattern")) o.pattern = args.value();
    else if (args.is("--threads")) o.threads = args.value<int>();
    else if (args.is("--seconds")) o.seconds = args.value<double>();
    else if (args.is("--seed")) o.seed = args.value<uint64_t>();
    else if (args.is("--smoke")) o.smoke = true;
    else args.unknown();
  }
  if (o.threads < 1 || o.threads > 1024) args.fail("--threads must be 1..1024");
  if (!(o.seconds > 0)) args.fail("--seconds must be positive");
  if (o.smoke) o.seconds = std::min(o.seconds, 0.05);

  const auto t0 = clock_type::now();
  result r;
  if (o.pattern == "larson") r = larson(o);
  else if (o.pattern == "prodcon") r = prodcon(o);
  else if (o.pattern == "cache-thrash") r = false_sharing(o, false);
  else if (o.pattern == "cache-scratch") r = false_sharing(o, true);
  else if (o.pattern == "mstress") r = mstress(o);
  else if (o.pattern == "pareto") r = pareto(o);
  else if (o.pattern == "realloc") r = realloc_growth(o);
  else args.fail("unknown pattern '" + o.pattern + "'");
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();

  std::printf("{\"workload\":\"patterns\",\"pattern\":\"%s\",\"threads\":%d,\"seconds\":%.6f,"
              "\"ops\":%llu,\"ops_per_sec\":%.1f,\"peak_rss_kb\":%ld%s}\n",
              o.pattern.c_str(), r.threads, secs, (unsigned long long)r.ops,
              secs > 0 ? double(r.ops) / secs : 0.0, strata::bench::status_kb("VmHWM:"), r.extra.c_str());
  return 0;
}
