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
// Shapes of programs strata lost on (issue 10), written from the descriptions. Unlike the
// patterns above, each does a fixed amount of work (--ops, in the pattern's own unit; the default
// takes roughly 0.2-0.5 s under glibc on one core) and --seconds only bounds it: "work_fraction"
// says how much was done (1 when the bound did not cut it short), and ops_per_sec stays comparable
// either way.
//   prodcon-batch        a ring of threads: each fills a batch of 64 B blocks, hands it to the next
//                        thread's queue and takes a batch from its own queue, frees it whole and
//                        refills it. Nearly every free is remote, in bursts. --ops: batches (total).
//   prodcon-batch-mixed  the same with sizes 8 B-2 KiB (log-uniform: many small).
//   prodcon-split        producers that only allocate and consumers that only free (--threads N:
//                        N/2 of each, at least one): a producer fills a batch of 4096 blocks of
//                        64 B, writing up to 128 B of each, in a container it also allocates
//                        (32 KiB), and pushes it on one shared stack (a mutex, at most 100 batches
//                        waiting, the last pushed taken first); a consumer pops a batch and frees
//                        its blocks and the container. --ops: batches (total).
//   prodcon-split-mixed  the same with sizes drawn uniformly from 17 classes of 8 B-2 KiB.
//   churn                short-lived threads: --threads lanes each start thread after thread; each
//                        allocates a mix from 8 B to 5 MiB (mostly small), touching every page,
//                        keeps a small working set, hands some blocks to later generations through
//                        a shared table and exits; blocks outlive the thread that made them.
//                        --ops: threads started (total).
//   generations          threads started in generations: --threads at once, joined, then the next;
//                        each makes calloc'd blocks of 8 B-5 MiB (powers of two, one in 50 100-10000
//                        times larger), writes every word and checks it at free, keeps a third of
//                        them (half as many as the others) until it exits and swaps a quarter of the
//                        others with a shared table of 1000 slots,
//                        about half of which the main thread frees between generations (blocks
//                        outlive their thread; mimalloc's stress test's shape). --ops: generations.
//   bigbuf               one thread replaces random entries of a table of 20 buffers with new
//                        5-25 MiB buffers that it zero-fills (memset). --ops: replacements.
//   bigcalloc            each thread works in rounds: 16 buffers of 2-6 MiB from calloc, each
//                        filled (a byte of each 4 KiB page read, which must be zero, then
//                        written), then all freed in random order (a batch of big buffers per
//                        request, per frame, per file). --ops: buffers (total).
//   randsize             each thread replaces random entries of its working set with blocks of
//                        uniform random size 8 B-16 KiB; 10 % of the replaced blocks go to another
//                        thread, which frees them. --ops: replacements (total, split over threads).
//                        Also reports ops_per_cpu_sec (ops per CPU-second of the process over
//                        the pattern, its start-up left out).
//   fill                 each thread keeps a working set of 4096 blocks of 64 B and replaces a
//                        random one, freed first, then allocated: the live blocks stay as many as
//                        they were, so an allocator whose pages they fill has one free block, the
//                        one just freed, at each malloc (a server's steady state; larson's at its
//                        smallest). --ops: replacements (total, split over threads).
//   pool                 the same with 2000 buffers of 4000 B per thread (a buffer pool, a page
//                        cache), their first and last byte written: a table several times the
//                        cache, pages kept nearly full, the buffer freed last the warmest one.
//                        --ops: replacements (total, split over threads).
//   rebuild              each thread builds a table (std::map of string keys and values, 16-120 B)
//                        by random inserts, one erase to three inserts, then tears it down whole,
//                        4 rounds: what a round frees, the next takes back over its whole length
//                        (a compiler's per-file tables, a server's per-batch index), so memory
//                        given back between rounds is faulted in again. --ops: inserts (total).
//
// Usage: strata-bench-patterns --pattern NAME [--threads N] [--seconds S] [--ops N] [--seed N] [--smoke]
// Output: {"workload":"patterns","pattern":..,"threads":..,"seconds":..,"ops":..,"ops_per_sec":..,
//          "peak_rss_kb":..}

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

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
  uint64_t ops = 0;  // fixed-work patterns: the amount of work (0: the pattern's default)
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

void* must_calloc(size_t n) {
  void* p = std::calloc(1, n);
  if (!p) {
    std::fprintf(stderr, "calloc(1, %zu) failed\n", n);
    std::abort();
  }
  return p;
}

void* must_realloc(void* p, size_t n) {
  void* q = std::realloc(p, n);
  if (!q) {
    std::fprintf(stderr, "realloc(%zu) failed\n", n);
    std::abort();
  }
  return q;
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
      auto* p = static_cast<char*>(must_realloc(buf[k], grown));
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

// ---------------------------------------------------------------------------------------------
// Fixed-work patterns (issue 10's shapes).  Every loop is bounded by its work count and, checked
// at least every few milliseconds, by the --seconds deadline.

// The fixed amount of work: --ops, else the pattern's default (smaller in --smoke mode).
uint64_t work_amount(const options& o, uint64_t normal, uint64_t smoke) {
  return o.ops ? o.ops : (o.smoke ? smoke : normal);
}

std::string work_json(uint64_t done, uint64_t planned) {
  char buf[96];
  std::snprintf(buf, sizeof buf, ",\"work_planned\":%llu,\"work_fraction\":%.6g",
                (unsigned long long)planned, planned ? double(done) / double(planned) : 1.0);
  return buf;
}

// A size in [lo, hi] whose logarithm is uniform: as many blocks of 8-16 B as of 1-2 KiB.
size_t log_uniform(rng& r, size_t lo, size_t hi) {
  double x = double(lo) * std::exp(r.unit() * std::log(double(hi) / double(lo)));
  return std::clamp(size_t(x), lo, hi);
}

// Writes one byte in every 4 KiB of a block (and its last byte), so its pages are really used.
void touch_pages(char* p, size_t n, char v) {
  for (size_t i = 0; i < n; i += 4096) p[i] = v;
  p[n - 1] = v;
}

// A batch of blocks travelling between threads: the container is reused, only the blocks are
// allocated and freed.
struct batch {
  size_t count = 0;
  void** blocks = nullptr;
};

// A thread's queue of batches: a fixed ring under a mutex (one lock per batch of hundreds of
// blocks, so it costs little beside the allocations).
struct batch_queue {
  std::mutex m;
  std::vector<batch*> ring;
  size_t head = 0, size = 0;
  void push(batch* b) {
    std::lock_guard<std::mutex> g(m);
    ring[(head + size++) % ring.size()] = b;
  }
  batch* pop() {
    std::lock_guard<std::mutex> g(m);
    if (size == 0) return nullptr;
    batch* b = ring[head];
    head = (head + 1) % ring.size();
    --size;
    return b;
  }
};

result prodcon_batch(const options& o, bool mixed) {
  const int n = o.threads;
  const size_t per_batch = o.smoke ? 64 : 1000, depth = 4;  // blocks per batch, batches in flight per thread
  const uint64_t planned = work_amount(o, mixed ? 4000 : 10000, 40);  // batches, all threads
  const uint64_t per_thread = std::max<uint64_t>(1, planned / n);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::vector<batch> batches(size_t(n) * depth);
  std::vector<void*> slots(batches.size() * per_batch);
  std::vector<batch_queue> queues(n);
  for (auto& q : queues) q.ring.resize(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    batches[i].blocks = &slots[i * per_batch];
    queues[i % n].push(&batches[i]);  // each thread starts with `depth` empty batches
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, done{0};
  run_threads(n, [&](int t) {
    rng r(o.seed + t);
    batch_queue& mine = queues[t];
    batch_queue& next = queues[(t + 1) % n];  // with one thread: its own queue (local frees)
    uint64_t k = 0, freed = 0;
    for (; k < per_thread; ++k) {
      if (clock_type::now() >= deadline) stop.store(true, std::memory_order_relaxed);
      if (stop.load(std::memory_order_relaxed)) break;
      batch* b = nullptr;
      while (!(b = mine.pop()) && !stop.load(std::memory_order_relaxed)) std::this_thread::yield();
      if (!b) break;
      for (size_t i = 0; i < b->count; ++i) std::free(b->blocks[i]);  // a burst of remote frees
      freed += b->count;
      for (size_t i = 0; i < per_batch; ++i) {
        size_t sz = mixed ? log_uniform(r, 8, 2048) : 64;
        auto* p = static_cast<char*>(must_malloc(sz));
        p[0] = p[sz - 1] = char(i);
        b->blocks[i] = p;
      }
      b->count = per_batch;
      next.push(b);
    }
    ops.fetch_add(k * per_batch + freed);
    done.fetch_add(k);
  });
  for (auto& b : batches)
    for (size_t i = 0; i < b.count; ++i) std::free(b.blocks[i]);
  return {ops.load(), n,
          ",\"batch_blocks\":" + std::to_string(per_batch) + work_json(done.load(), per_thread * n)};
}

// prodcon-split: the batches of pure producers and pure consumers (a consumer never allocates, so
// every block it frees goes back to a thread that only allocates).
struct split_batch {
  static constexpr size_t blocks = 4096;
  void* block[blocks];
};

result prodcon_split(const options& o, bool mixed) {
  static constexpr size_t sizes[] = {8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
  const int pairs = std::max(1, o.threads / 2);
  const size_t per_batch = o.smoke ? 64 : split_batch::blocks, most_waiting = 100;
  const uint64_t planned = work_amount(o, mixed ? 600 : 2000, 40);  // batches, all producers
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::mutex m;
  std::condition_variable can_pop, can_push;
  std::vector<split_batch*> waiting;  // a stack: the batch pushed last goes first
  std::atomic<uint64_t> claimed{0}, made{0}, freed{0};
  int producers_left = pairs;
  run_threads(2 * pairs, [&](int t) {
    if (t % 2 == 0) {  // producer
      rng r(o.seed + t);
      while (claimed.fetch_add(1) < planned && clock_type::now() < deadline) {
        auto* b = static_cast<split_batch*>(must_malloc(sizeof(split_batch)));
        for (size_t i = 0; i < per_batch; ++i) {
          size_t sz = mixed ? sizes[r.next() % std::size(sizes)] : 64;
          b->block[i] = must_malloc(sz);
          std::memset(b->block[i], int(i), std::min<size_t>(sz, 128));
        }
        std::unique_lock<std::mutex> g(m);
        can_push.wait(g, [&] { return waiting.size() < most_waiting; });
        waiting.push_back(b);
        made.fetch_add(1);
        can_pop.notify_one();
      }
      std::lock_guard<std::mutex> g(m);
      if (--producers_left == 0) can_pop.notify_all();
    } else {  // consumer: frees every batch it takes, until the producers are done and none waits
      uint64_t n = 0;
      for (;;) {
        split_batch* b;
        {
          std::unique_lock<std::mutex> g(m);
          can_pop.wait(g, [&] { return !waiting.empty() || producers_left == 0; });
          if (waiting.empty()) break;
          b = waiting.back();
          waiting.pop_back();
          can_push.notify_one();
        }
        for (size_t i = 0; i < per_batch; ++i) std::free(b->block[i]);
        std::free(b);
        n += per_batch;
      }
      freed.fetch_add(n);
    }
  });
  return {freed.load(), 2 * pairs,
          ",\"pairs\":" + std::to_string(pairs) + work_json(made.load(), planned)};
}

// ---------------------------------------------------------------------------------------------
// Sizes of the churn workers: mostly small, a few medium, a rare one of several MiB.
size_t churn_size(rng& r) {
  double u = r.unit();
  if (u < 0.90) return log_uniform(r, 8, 512);
  if (u < 0.99) return log_uniform(r, 512, 64 << 10);
  return log_uniform(r, 64 << 10, 5 << 20);
}

result churn(const options& o) {
  const int lanes = o.threads;
  const size_t allocs = o.smoke ? 200 : 2000;  // per short-lived thread
  const size_t local = 128, handed = 32;       // its working set; blocks it leaves to later ones
  const size_t shared_slots = o.smoke ? 128 : 1024;
  const uint64_t planned = work_amount(o, 384, 4);  // threads started, over all lanes
  const uint64_t per_lane = std::max<uint64_t>(1, planned / lanes);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::vector<std::atomic<void*>> shared(shared_slots);
  for (auto& s : shared) s.store(nullptr);
  std::atomic<uint64_t> ops{0}, started{0};
  auto worker = [&](uint64_t id) {
    rng r(o.seed * 31 + id);
    std::vector<void*> ws(local, nullptr);  // allocated by this thread: part of the work
    uint64_t n = 0;
    for (size_t i = 0; i < allocs; ++i) {
      size_t k = r.next() % local, sz = churn_size(r);
      std::free(ws[k]);
      auto* p = static_cast<char*>(must_malloc(sz));
      touch_pages(p, sz, char(i));
      ws[k] = p;
      n += 2;
    }
    // Leave some blocks to the threads after this one; what they displace was made by a thread
    // that has usually exited already.
    for (size_t i = 0; i < handed; ++i) {
      void* old = shared[r.next() % shared_slots].exchange(ws[i], std::memory_order_acq_rel);
      std::free(old);
      ws[i] = nullptr;
    }
    for (void* p : ws) std::free(p);
    ops.fetch_add(n);
  };
  run_threads(lanes, [&](int lane) {
    for (uint64_t g = 0; g < per_lane && clock_type::now() < deadline; ++g) {
      std::thread(worker, uint64_t(lane) * per_lane + g).join();
      started.fetch_add(1);
    }
  });
  for (auto& s : shared) std::free(s.load());
  return {ops.load(), lanes,
          ",\"threads_started\":" + std::to_string(started.load()) + work_json(started.load(), per_lane * lanes)};
}

// ---------------------------------------------------------------------------------------------
// generations: the words of a block (8 bytes each): a power of two up to 2^(max_shift-1); one block
// in 50 is large: mostly 100 times that, one in 9 of those 1000 times, one in 50 10000 times
// (5 MiB at most).
size_t generation_words(rng& r, unsigned max_shift) {
  size_t words = size_t{1} << (r.next() % max_shift);
  if (r.next() % 50 == 0) {
    uint64_t u = r.next() % 450;
    words *= u < 9 ? 10000 : u < 59 ? 1000 : 100;
  }
  return words;
}

// The pattern generation_alloc writes: word i of a block of n words holds (n - i) ^ cookie.
constexpr uint64_t generation_cookie = 0x9e3779b97f4a7c15ull;

// calloc'd, checked zero at both ends, then every word written with a pattern that
// generation_free checks (a block handed between threads must come back as it was left).
void* generation_alloc(size_t words) {
  auto* p = static_cast<uint64_t*>(must_calloc(words * sizeof(uint64_t)));
  if (p[0] != 0 || p[words - 1] != 0) {
    std::fprintf(stderr, "calloc(1, %zu) returned a block that is not zero\n", words * sizeof(uint64_t));
    std::abort();
  }
  for (size_t i = 0; i < words; ++i) p[i] = (words - i) ^ generation_cookie;
  return p;
}

void generation_free(void* block) {
  if (block == nullptr) return;
  auto* p = static_cast<uint64_t*>(block);
  size_t words = p[0] ^ generation_cookie;
  for (size_t i = 0; i < words; ++i)
    if ((p[i] ^ generation_cookie) != words - i) {
      std::fprintf(stderr, "block %p of %zu words changed at word %zu\n", block, words, i);
      std::abort();
    }
  std::free(block);
}

result generations(const options& o) {
  const uint64_t planned = work_amount(o, 25, 2);  // generations
  const size_t base = o.smoke ? 200 : 5000;        // allocations of a generation's first thread
  constexpr size_t table_slots = 1000;
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::vector<std::atomic<void*>> table(table_slots);
  for (auto& s : table) s.store(nullptr);
  std::atomic<uint64_t> allocated{0};
  uint64_t done = 0;
  rng main_rng(o.seed);
  for (; done < planned && clock_type::now() < deadline; ++done) {
    run_threads(o.threads, [&](int t) {
      rng r(o.seed * 1009 + done * 97 + t);
      size_t allocs = base * (t % 8 + 1), keep = allocs / 2;  // some threads do more
      // The thread's short-lived blocks, in an array grown by realloc as programs do.
      size_t cap = 0, top = 0;
      void** data = nullptr;
      auto** kept = static_cast<void**>(must_calloc(keep * sizeof(void*)));
      size_t kept_top = 0;
      uint64_t n = 0;
      while (allocs > 0 || keep > 0) {
        if (keep == 0 || (allocs > 0 && r.next() % 100 < 51)) {
          --allocs;
          if (top == cap) {
            cap += 100000;
            data = static_cast<void**>(must_realloc(data, cap * sizeof(void*)));
          }
          data[top++] = generation_alloc(generation_words(r, 5));
        } else {
          kept[kept_top++] = generation_alloc(generation_words(r, 7));  // lives until the thread ends
          --keep;
        }
        ++n;
        if (top > 0 && r.next() % 100 < 67) {
          size_t k = r.next() % top;
          generation_free(data[k]);
          data[k] = nullptr;
        }
        if (top > 0 && r.next() % 100 < 26) {  // swapped with a block another thread left
          size_t k = r.next() % top;
          data[k] = table[r.next() % table_slots].exchange(data[k], std::memory_order_acq_rel);
        }
      }
      for (size_t i = 0; i < kept_top; ++i) generation_free(kept[i]);
      for (size_t i = 0; i < top; ++i) generation_free(data[i]);
      std::free(kept);
      std::free(data);
      allocated.fetch_add(n);
    });
    // Half of what the generation left in the table outlives it.
    for (auto& s : table)
      if (main_rng.next() % 100 < 51) generation_free(s.exchange(nullptr));
  }
  for (auto& s : table) generation_free(s.exchange(nullptr));
  return {allocated.load(), o.threads,
          ",\"generations\":" + std::to_string(done) + work_json(done, planned)};
}

// ---------------------------------------------------------------------------------------------
result bigcalloc(const options& o) {
  constexpr size_t batch = 16;
  const size_t lo = o.smoke ? 64 << 10 : (2 << 20) + 1, hi = o.smoke ? 256 << 10 : 6 << 20;
  const uint64_t planned = work_amount(o, 3200, 64);
  const uint64_t rounds = std::max<uint64_t>(1, planned / batch / o.threads);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::atomic<uint64_t> done{0}, nonzero{0};
  run_threads(o.threads, [&](int t) {
    rng r(o.seed * 13 + t);
    char* bufs[batch];
    uint64_t k = 0;
    for (uint64_t round = 0; round < rounds && clock_type::now() < deadline; ++round) {
      for (auto& p : bufs) {
        size_t sz = r.range(lo, hi);
        p = static_cast<char*>(must_calloc(sz));
        bool zero = p[sz - 1] == 0;
        for (size_t i = 0; i < sz; i += 4096) {
          zero &= p[i] == 0;
          p[i] = char(k | 1);
        }
        p[sz - 1] = char(k | 1);
        if (!zero) nonzero.fetch_add(1);
        ++k;
      }
      for (size_t i = batch; i > 1; --i) std::swap(bufs[i - 1], bufs[r.next() % i]);  // freed in random order
      for (char* p : bufs) std::free(p);
    }
    done.fetch_add(k);
  });
  if (nonzero.load() != 0) {
    std::fprintf(stderr, "bigcalloc: %llu buffers from calloc were not zero\n", (unsigned long long)nonzero.load());
    std::exit(1);
  }
  return {done.load(), o.threads, work_json(done.load(), rounds * batch * o.threads)};
}

// ---------------------------------------------------------------------------------------------
result bigbuf(const options& o) {
  const size_t entries = 20;
  const size_t lo = o.smoke ? 64 << 10 : 5 << 20, hi = o.smoke ? 256 << 10 : 25 << 20;
  const uint64_t planned = work_amount(o, 300, 20);  // replacements
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  rng r(o.seed);
  std::vector<void*> table(entries, nullptr);
  uint64_t bytes = 0, done = 0;
  auto fill = [&](size_t k) {
    size_t sz = r.range(lo, hi);
    std::free(table[k]);
    void* p = must_malloc(sz);
    // The program zero-fills its buffers itself. The empty asm hides where p came from, or the
    // compiler would turn malloc + memset into calloc, which may skip the zeroing of fresh pages.
    asm volatile("" : "+r"(p));
    std::memset(p, 0, sz);
    table[k] = p;
    bytes += sz;
  };
  for (size_t k = 0; k < entries; ++k) fill(k);
  for (; done < planned && clock_type::now() < deadline; ++done) fill(r.next() % entries);
  for (void* p : table) std::free(p);
  char extra[64];
  std::snprintf(extra, sizeof extra, ",\"mean_size_mib\":%.2f",
                double(bytes) / double(entries + done) / double(1 << 20));
  return {done, 1, extra + work_json(done, planned)};
}

// ---------------------------------------------------------------------------------------------
// A thread's inbox of blocks other threads hand it to free: a lock-free stack threaded through
// the blocks themselves (every block is at least 8 bytes); only the owner takes, all at once.
struct alignas(64) inbox {
  std::atomic<void*> head{nullptr};
  void push(void* p) {
    void* h = head.load(std::memory_order_relaxed);
    do {
      std::memcpy(p, &h, sizeof h);
    } while (!head.compare_exchange_weak(h, p, std::memory_order_release, std::memory_order_relaxed));
  }
  uint64_t free_all() {
    void* p = head.exchange(nullptr, std::memory_order_acquire);
    uint64_t n = 0;
    while (p) {
      void* next;
      std::memcpy(&next, p, sizeof next);
      std::free(p);
      p = next;
      ++n;
    }
    return n;
  }
};

// The CPU the process has used so far, user and system, in seconds.
double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

result randsize(const options& o) {
  // The process's CPU from here on: its start-up (the loader, the preloaded allocator's and the
  // C++ runtime's initialisation, 2-4 ms) is not the pattern's, and was about a tenth of strata's CPU
  // over the 750,000 replacements of make bench's cell.
  const double cpu_before = process_cpu_seconds();
  const int n = o.threads;
  const size_t slots = o.smoke ? 256 : 2048;  // per-thread working set (~16 MiB at 8 KiB average)
  const uint64_t planned = work_amount(o, 3000000, 2000);  // replacements, over all threads
  const uint64_t per_thread = std::max<uint64_t>(1, planned / n);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::vector<inbox> inboxes(n);
  std::atomic<uint64_t> ops{0}, remote{0}, done{0};
  std::atomic<int> running{n};
  run_threads(n, [&](int t) {
    rng r(o.seed + t);
    std::vector<void*> ws(slots, nullptr);
    uint64_t k = 0, handed = 0, freed_for_others = 0;
    for (; k < per_thread; ++k) {
      if ((k & 1023) == 0) {
        if (clock_type::now() >= deadline) break;
        freed_for_others += inboxes[t].free_all();
      }
      size_t i = r.next() % slots, sz = r.range(8, 16384);
      if (void* old = ws[i]) {
        if (n > 1 && r.next() % 10 == 0) {  // 10 %: another thread frees it
          int to = int((t + 1 + r.next() % (n - 1)) % n);
          inboxes[to].push(old);
          ++handed;
        } else {
          std::free(old);
        }
      }
      auto* p = static_cast<char*>(must_malloc(sz));
      p[0] = p[sz - 1] = char(k);
      ws[i] = p;
    }
    for (void* p : ws) std::free(p);
    running.fetch_sub(1);
    // Blocks may still arrive until every thread has stopped handing them over.
    while (running.load() > 0) {
      freed_for_others += inboxes[t].free_all();
      std::this_thread::yield();
    }
    freed_for_others += inboxes[t].free_all();
    ops.fetch_add(k);
    remote.fetch_add(handed);
    done.fetch_add(k);
  });
  for (auto& b : inboxes) b.free_all();  // none left: every thread drained its own at the end
  const double cpu = process_cpu_seconds() - cpu_before;
  char extra[128];
  std::snprintf(extra, sizeof extra, ",\"remote_frees\":%llu,\"cpu_seconds\":%.6f,\"ops_per_cpu_sec\":%.1f",
                (unsigned long long)remote.load(), cpu, cpu > 0 ? double(ops.load()) / cpu : 0.0);
  return {ops.load(), n, extra + work_json(done.load(), per_thread * n)};
}

// ---------------------------------------------------------------------------------------------
// fill and pool: each thread replaces random entries of a table of `slots` blocks of `size`.
result fill(const options& o, size_t slots, size_t size, uint64_t full_work) {
  const int n = o.threads;
  const uint64_t planned = work_amount(o, full_work, 20000);  // replacements, over all threads
  const uint64_t per_thread = std::max<uint64_t>(1, planned / n);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::atomic<uint64_t> done{0};
  run_threads(n, [&](int t) {
    rng r(o.seed + t);
    std::vector<void*> ws(slots);
    for (auto& p : ws) p = must_malloc(size);
    uint64_t k = 0;
    for (; k < per_thread; ++k) {
      if ((k & 4095) == 0 && clock_type::now() >= deadline) break;
      size_t i = r.next() % slots;
      std::free(ws[i]);
      auto* p = static_cast<char*>(must_malloc(size));
      p[0] = char(k);
      if (size > 64) p[size - 1] = char(k);  // fill's 64 B blocks are one line each
      ws[i] = p;
    }
    for (void* p : ws) std::free(p);
    done.fetch_add(k);
  });
  return {done.load(), n, work_json(done.load(), per_thread * n)};
}

result rebuild(const options& o) {
  const int n = o.threads, rounds = 4;
  const uint64_t planned = work_amount(o, 600000, 4000);  // inserts, over all threads
  const uint64_t per_round = std::max<uint64_t>(1, planned / n / rounds);
  const uint64_t keys = std::max<uint64_t>(1, per_round * 2 / 3);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(o.seconds);
  std::atomic<uint64_t> done{0}, live{0};
  run_threads(n, [&](int t) {
    rng r(o.seed + t);
    // Keys past 15 characters and values of 16 B or more: each string is a block of its own.
    auto key = [&] { return std::to_string(r.next() % keys) + "-a-key-long-enough"; };
    uint64_t k = 0, in_table = 0;
    for (int round = 0; round < rounds; ++round) {
      std::map<std::string, std::string> table;
      for (uint64_t i = 0; i < per_round; ++i, ++k) {
        if ((k & 1023) == 0 && clock_type::now() >= deadline) break;
        table[key()] = std::string(16 + r.next() % 105, char('a' + i % 26));
        if (i % 3 == 2) table.erase(key());
      }
      in_table += table.size();
      if (clock_type::now() >= deadline) break;
    }
    done.fetch_add(k);
    live.fetch_add(in_table);
  });
  return {done.load(), n, ",\"entries\":" + std::to_string(live.load()) + work_json(done.load(), per_round * rounds * n)};
}

constexpr const char* kUsage =
    "usage: strata-bench-patterns --pattern "
    "larson|prodcon|cache-thrash|cache-scratch|mstress|pareto|realloc|"
    "prodcon-batch|prodcon-batch-mixed|prodcon-split|prodcon-split-mixed|churn|generations|bigbuf|bigcalloc|randsize|fill|pool|rebuild "
    "[--threads N] [--seconds S] [--ops N] [--seed N] [--smoke]";

}  // namespace

int main(int argc, char** argv) {
  options o;
  strata::bench::arg_parser args(argc, argv, "strata-bench-patterns", kUsage);
  while (args.next()) {
    if (args.is("--pattern")) o.pattern = args.value();
    else if (args.is("--threads")) o.threads = args.value<int>();
    else if (args.is("--seconds")) o.seconds = args.value<double>();
    else if (args.is("--seed")) o.seed = args.value<uint64_t>();
    else if (args.is("--ops")) o.ops = args.value<uint64_t>();
    else if (args.is("--smoke")) o.smoke = true;
    else args.unknown();
  }
  if (o.threads < 1 || o.threads > 1024) args.fail("--threads must be 1..1024");
  if (!(o.seconds > 0)) args.fail("--seconds must be positive");
  // --smoke shortens the timed patterns; the fixed-work ones shrink their work instead and keep
  // --seconds as the bound, so a loaded machine cannot cut a smoke run short.
  const bool fixed_work = o.pattern == "prodcon-batch" || o.pattern == "prodcon-batch-mixed" ||
                          o.pattern == "prodcon-split" || o.pattern == "prodcon-split-mixed" ||
                          o.pattern == "churn" || o.pattern == "generations" || o.pattern == "bigbuf" ||
                          o.pattern == "bigcalloc" || o.pattern == "randsize" || o.pattern == "fill" ||
                          o.pattern == "pool" || o.pattern == "rebuild";
  if (o.smoke && !fixed_work) o.seconds = std::min(o.seconds, 0.05);

  const auto t0 = clock_type::now();
  result r;
  if (o.pattern == "larson") r = larson(o);
  else if (o.pattern == "prodcon") r = prodcon(o);
  else if (o.pattern == "cache-thrash") r = false_sharing(o, false);
  else if (o.pattern == "cache-scratch") r = false_sharing(o, true);
  else if (o.pattern == "mstress") r = mstress(o);
  else if (o.pattern == "pareto") r = pareto(o);
  else if (o.pattern == "realloc") r = realloc_growth(o);
  else if (o.pattern == "prodcon-batch") r = prodcon_batch(o, false);
  else if (o.pattern == "prodcon-batch-mixed") r = prodcon_batch(o, true);
  else if (o.pattern == "prodcon-split") r = prodcon_split(o, false);
  else if (o.pattern == "prodcon-split-mixed") r = prodcon_split(o, true);
  else if (o.pattern == "churn") r = churn(o);
  else if (o.pattern == "generations") r = generations(o);
  else if (o.pattern == "bigbuf") r = bigbuf(o);
  else if (o.pattern == "bigcalloc") r = bigcalloc(o);
  else if (o.pattern == "randsize") r = randsize(o);
  else if (o.pattern == "fill") r = fill(o, 4096, 64, 20000000);
  else if (o.pattern == "pool") r = fill(o, 2000, 4000, 10000000);
  else if (o.pattern == "rebuild") r = rebuild(o);
  else args.fail("unknown pattern '" + o.pattern + "'");
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();

  std::printf("{\"workload\":\"patterns\",\"pattern\":\"%s\",\"threads\":%d,\"seconds\":%.6f,"
              "\"ops\":%llu,\"ops_per_sec\":%.1f,\"peak_rss_kb\":%ld%s}\n",
              o.pattern.c_str(), r.threads, secs, (unsigned long long)r.ops,
              secs > 0 ? double(r.ops) / secs : 0.0, strata::bench::status_kb("VmHWM:"), r.extra.c_str());
  return 0;
}
