// H60: randomized stress of strata's cross-thread paths, through strata_* (strata_api).
// Usage: h60_stress SEED THREADS ROUNDS [OPS_PER_THREAD]
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

struct blk {
  unsigned char* p;
  size_t size;
};

std::atomic<uint64_t> n_alloc{0}, n_free{0};
std::mutex live_mu;
std::map<uintptr_t, size_t> live;  // address -> usable size

void die(const char* what, const void* p, size_t n) {
  fprintf(stderr, "FAIL: %s p=%p n=%zu\n", what, p, n);
  fflush(stderr);
  abort();
}

void track_add(void* p, size_t n) {
  size_t u = strata_usable_size(p);
  if (u < n) die("usable below request", p, n);
  std::lock_guard<std::mutex> g(live_mu);
  uintptr_t a = (uintptr_t)p;
  auto it = live.lower_bound(a);
  if (it != live.end() && it->first < a + u) die("overlap (next)", p, n);
  if (it != live.begin()) {
    auto pr = std::prev(it);
    if (pr->first + pr->second > a) die("overlap (prev)", p, n);
  }
  live.emplace(a, u);
  n_alloc.fetch_add(1, std::memory_order_relaxed);
}

void track_del(void* p) {
  std::lock_guard<std::mutex> g(live_mu);
  auto it = live.find((uintptr_t)p);
  if (it == live.end()) die("free of untracked", p, 0);
  live.erase(it);
  n_free.fetch_add(1, std::memory_order_relaxed);
}

inline uint64_t pat(uintptr_t a, size_t n, size_t i) { return (a * 0x9E3779B97F4A7C15ull) ^ (n << 20) ^ i; }

// Fill: words at the start and end fully for sizes up to 64 KiB, sampled beyond.
void fill(unsigned char* p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  size_t words = n / 8;
  uint64_t* w = (uint64_t*)p;
  if (n <= 65536) {
    for (size_t i = 0; i < words; i++) w[i] = pat(a, n, i);
  } else {
    for (size_t i = 0; i < 512; i++) w[i] = pat(a, n, i);
    for (size_t i = words - 512; i < words; i++) w[i] = pat(a, n, i);
    for (size_t i = 512; i < words - 512; i += 509) w[i] = pat(a, n, i);
  }
  for (size_t i = words * 8; i < n; i++) p[i] = (unsigned char)(a + i);
}

void verify(const unsigned char* p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  size_t words = n / 8;
  const uint64_t* w = (const uint64_t*)p;
  auto chk = [&](size_t i) {
    if (w[i] != pat(a, n, i)) {
      fprintf(stderr, "corrupt word %zu of %p (n=%zu): %" PRIx64 " want %" PRIx64 "\n", i, p, n, w[i], pat(a, n, i));
      die("pattern", p, n);
    }
  };
  if (n <= 65536) {
    for (size_t i = 0; i < words; i++) chk(i);
  } else {
    for (size_t i = 0; i < 512; i++) chk(i);
    for (size_t i = words - 512; i < words; i++) chk(i);
    for (size_t i = 512; i < words - 512; i += 509) chk(i);
  }
  for (size_t i = words * 8; i < n; i++)
    if (p[i] != (unsigned char)(a + i)) die("pattern tail", p, n);
}

size_t pick_size(std::mt19937_64& r) {
  unsigned k = r() % 100;
  if (k < 55) return 1 + r() % 256;
  if (k < 80) return 1 + r() % 2048;
  if (k < 90) return 1 + r() % 32768;
  if (k < 96) return 32768 + r() % (131072 + 65536);  // around the one-block boundary
  if (k < 99) return 131073 + r() % (2u << 20);       // loose one-block pages
  return (2u << 20) + 1 + r() % (1u << 20);           // huge
}

blk do_alloc(std::mt19937_64& r) {
  size_t n = pick_size(r);
  void* p = nullptr;
  unsigned how = r() % 10;
  if (how < 6) {
    p = strata_malloc(n);
  } else if (how < 8) {
    size_t cnt = 1 + r() % 4;
    size_t each = (n + cnt - 1) / cnt;
    n = cnt * each;
    p = strata_calloc(cnt, each);
    if (p) {
      const unsigned char* c = (const unsigned char*)p;
      size_t lim = n < 65536 ? n : 65536;
      for (size_t i = 0; i < lim; i++)
        if (c[i]) die("calloc not zero", p, n);
      for (size_t i = n - lim; i < n; i++)
        if (c[i]) die("calloc not zero (end)", p, n);
    }
  } else {
    size_t al = size_t(16) << (r() % 10);  // 16 .. 8 KiB
    if (r() % 8 == 0) al = size_t(1) << (14 + r() % 8);  // up to 2 MiB
    if (strata_posix_memalign(&p, al, n) != 0) die("posix_memalign", nullptr, n);
    if ((uintptr_t)p % al) die("misaligned", p, al);
  }
  if (!p) die("alloc null", nullptr, n);
  track_add(p, n);
  fill((unsigned char*)p, n);
  return {(unsigned char*)p, n};
}

void do_free(blk b, std::mt19937_64& r) {
  verify(b.p, b.size);
  track_del(b.p);
  if (r() % 4 == 0)
    strata_free_sized(b.p, b.size);
  else
    strata_free(b.p);
}

blk do_realloc(blk b, std::mt19937_64& r) {
  verify(b.p, b.size);
  size_t n = pick_size(r);
  track_del(b.p);
  unsigned char* q = (unsigned char*)strata_realloc(b.p, n);
  if (!q) die("realloc null", b.p, n);
  // The kept prefix: check the first words that survived.
  size_t keep = b.size < n ? b.size : n;
  size_t kw = keep / 8;
  if (kw > 256) kw = 256;
  uintptr_t a = (uintptr_t)b.p;
  for (size_t i = 0; i < kw; i++)
    if (((uint64_t*)q)[i] != pat(a, b.size, i)) die("realloc lost prefix", q, n);
  track_add(q, n);
  fill(q, n);
  return {q, n};
}

// ---- the shared queue of batches ---------------------------------------------------------------
std::mutex q_mu;
std::condition_variable q_cv;
std::deque<std::vector<blk>> queue;
std::atomic<int> producers_left{0};
size_t queue_blocks = 0;

void push_batch(std::vector<blk>&& v) {
  std::lock_guard<std::mutex> g(q_mu);
  queue_blocks += v.size();
  queue.push_back(std::move(v));
  q_cv.notify_one();
}

bool pop_batch(std::vector<blk>& out, bool wait) {
  std::unique_lock<std::mutex> g(q_mu);
  while (queue.empty()) {
    if (!wait || producers_left.load() == 0) return false;
    q_cv.wait_for(g, std::chrono::milliseconds(2));
  }
  out = std::move(queue.front());
  queue.pop_front();
  queue_blocks -= out.size();
  return true;
}

struct cfg {
  uint64_t seed;
  int threads;
  int rounds;
  uint64_t ops;
};

void producer(uint64_t seed, uint64_t ops) {
  std::mt19937_64 r(seed);
  std::vector<blk> mine;
  for (uint64_t i = 0; i < ops; i++) {
    unsigned k = r() % 100;
    if (k < 40 || mine.empty()) {
      mine.push_back(do_alloc(r));
    } else if (k < 60) {
      size_t j = r() % mine.size();
      do_free(mine[j], r);
      mine[j] = mine.back();
      mine.pop_back();
    } else if (k < 65) {
      size_t j = r() % mine.size();
      mine[j] = do_realloc(mine[j], r);
    } else if (k < 85) {
      size_t take = 1 + r() % (mine.size() < 64 ? mine.size() : 64);
      std::vector<blk> b;
      for (size_t t = 0; t < take; t++) {
        b.push_back(mine.back());
        mine.pop_back();
      }
      push_batch(std::move(b));
    } else if (k < 86) {
      strata_collect(r() % 2);
    } else {
      std::vector<blk> b;
      if (pop_batch(b, false))
        for (auto& x : b) {
          if (r() % 3 == 0)
            mine.push_back(x);
          else
            do_free(x, r);
        }
    }
    if (mine.size() > 2000) {
      while (mine.size() > 500) {
        do_free(mine.back(), r);
        mine.pop_back();
      }
    }
  }
  // Exit with half of what is left handed to others (they free it after this thread is gone).
  std::vector<blk> b;
  for (auto& x : mine) {
    if (r() % 2)
      b.push_back(x);
    else
      do_free(x, r);
  }
  if (!b.empty()) push_batch(std::move(b));
  if (r() % 4 == 0 && !strata_heap_check()) die("heap_check (producer exit)", nullptr, 0);
}

// Frees only for a while (a frees_only heap), then allocates too.
void consumer(uint64_t seed, uint64_t ops) {
  std::mt19937_64 r(seed);
  uint64_t frees_first = r() % (ops + 1);
  uint64_t freed = 0;
  std::vector<blk> mine;
  std::vector<blk> b;
  for (uint64_t i = 0; i < ops * 4; i++) {
    if (!pop_batch(b, true)) break;
    for (auto& x : b) {
      if (freed >= frees_first && r() % 3 == 0)
        mine.push_back(r() % 4 == 0 ? do_realloc(x, r) : x);
      else
        do_free(x, r);
      freed++;
    }
    if (r() % 50 == 0) strata_collect(r() % 2);
    if (freed >= frees_first) {
      int n = r() % 8;
      for (int k = 0; k < n; k++) mine.push_back(do_alloc(r));
      if (mine.size() > 32 && r() % 2) {
        std::vector<blk> out;
        for (int k = 0; k < 16; k++) {
          out.push_back(mine.back());
          mine.pop_back();
        }
        push_batch(std::move(out));
      }
      while (mine.size() > 256) {
        size_t j = r() % mine.size();
        do_free(mine[j], r);
        mine[j] = mine.back();
        mine.pop_back();
      }
    }
    if (r() % 200 == 0) break;  // exit early, leaving blocks to others
  }
  if (!mine.empty()) push_batch(std::move(mine));
}

}  // namespace

int main(int argc, char** argv) {
  cfg c{argc > 1 ? strtoull(argv[1], 0, 10) : 1, argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 20,
        argc > 4 ? strtoull(argv[4], 0, 10) : 20000};
  std::mt19937_64 r(c.seed);
  std::vector<blk> held;  // the main thread's blocks, kept across rounds
  for (int i = 0; i < 50; i++) held.push_back(do_alloc(r));
  strata_stats_t s0;
  strata_collect(true);
  strata_stats_get(&s0);
  uint64_t committed_first = 0;
  for (int round = 0; round < c.rounds; round++) {
    std::vector<std::thread> ts;
    int np = 1 + r() % (c.threads > 1 ? c.threads - 1 : 1);
    producers_left = np;
    for (int t = 0; t < c.threads; t++) {
      uint64_t s = r();
      uint64_t ops = c.ops / 2 + r() % c.ops;
      if (t < np)
        ts.emplace_back([s, ops] {
          producer(s, ops);
          producers_left--;
        });
      else
        ts.emplace_back([s, ops] { consumer(s, ops); });
    }
    // The main thread frees some of the batches too, hands some of its own, and collects.
    for (int k = 0; k < 20; k++) {
      if (r() % 3 == 0 && held.size() > 10) {
        std::vector<blk> out;
        for (int j = 0; j < 5; j++) {
          size_t i = r() % held.size();
          out.push_back(held[i]);
          held[i] = held.back();
          held.pop_back();
        }
        push_batch(std::move(out));
      }
      if (r() % 3 == 0) held.push_back(do_alloc(r));
      std::vector<blk> b;
      if (pop_batch(b, false))
        for (auto& x : b) do_free(x, r);
      if (r() % 4 == 0) strata_collect(r() % 2);
      usleep(200);
    }
    for (auto& t : ts) t.join();
    std::vector<blk> b;
    while (pop_batch(b, false))
      for (auto& x : b) {
        if (r() % 10 == 0 && held.size() < 200)
          held.push_back(x);
        else
          do_free(x, r);
      }
    while (held.size() > 100) {
      size_t i = r() % held.size();
      do_free(held[i], r);
      held[i] = held.back();
      held.pop_back();
    }
    for (auto& x : held) verify(x.p, x.size);
    strata_collect(true);
    if (!strata_heap_check()) die("heap_check (main, quiescent)", nullptr, 0);
    strata_stats_t s;
    strata_stats_get(&s);
    uint64_t held_bytes = 0;
    {
      std::lock_guard<std::mutex> g(live_mu);
      for (auto& kv : live) held_bytes += kv.second;
      if (live.size() != held.size()) die("live count", nullptr, live.size());
    }
    if (round == 2) committed_first = s.committed_bytes;
    printf("round %d: np=%d in_use=%" PRIu64 " held=%" PRIu64 " committed=%" PRIu64 " abandoned=%" PRIu64
           " threads=%" PRIu64 " segments=%" PRIu64 " bad=%" PRIu64 " allocs=%" PRIu64 " frees=%" PRIu64 "\n",
           round, np, s.in_use_bytes, held_bytes, s.committed_bytes, s.abandoned_segments, s.threads, s.segments,
           s.bad_free_count, n_alloc.load(), n_free.load());
    fflush(stdout);
    if (s.in_use_bytes > held_bytes + (8u << 20) || s.in_use_bytes < held_bytes)
      fprintf(stderr, "WARN round %d: in_use %" PRIu64 " vs held %" PRIu64 "\n", round, s.in_use_bytes, held_bytes);
    if (s.bad_free_count) die("bad frees", nullptr, s.bad_free_count);
    if (s.threads > 1) fprintf(stderr, "WARN round %d: threads=%" PRIu64 "\n", round, s.threads);
  }
  strata_stats_t s;
  strata_stats_get(&s);
  printf("end: committed=%" PRIu64 " (round 2: %" PRIu64 ") peak=%" PRIu64 "\n", s.committed_bytes, committed_first,
         s.committed_peak);
  for (auto& x : held) do_free(x, r);
  strata_collect(true);
  strata_stats_get(&s);
  printf("final: in_use=%" PRIu64 " committed=%" PRIu64 " segments=%" PRIu64 " abandoned=%" PRIu64 "\n", s.in_use_bytes,
         s.committed_bytes, s.segments, s.abandoned_segments);
  if (s.in_use_bytes != 0) fprintf(stderr, "FAIL final in_use %" PRIu64 "\n", s.in_use_bytes);
  if (s.abandoned_segments != 0) fprintf(stderr, "FAIL final abandoned %" PRIu64 "\n", s.abandoned_segments);
  if (s.committed_bytes > (2u << 20)) fprintf(stderr, "FAIL final committed %" PRIu64 "\n", s.committed_bytes);
  if (!strata_heap_check()) die("heap_check (final)", nullptr, 0);
  return 0;
}
