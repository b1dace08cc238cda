// Lost wake-up probe: a remote push whose owner load (page_push_remote) saw the exiting owner or
// no owner, landing after the adopter collected the page: the page waits on the adopter's full
// list (or as a loose page) with thread_free set and no hint.  Counts such stranded pages.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>
#include "core/heap.h"
#include "core/page.h"
#include "core/segment.h"
#include "core/types.h"
#include "strata/strata.h"
using namespace strata::detail;

static std::atomic<int> phase{0};
static std::vector<void*> blocks;
static std::atomic<size_t> next_idx{0};
static std::atomic<int> done_freers{0};

static long stranded_in(heap* h) {
  long n = 0;
  for (segment* seg = h->segments; seg; seg = seg->next)
    for_each_page(seg, [&](page* pg) {
      if (remote_head(pg->thread_free.load()) == nullptr) return;
      uint8_t f = flags_of(pg);
      if ((f & page_flag::in_full) && !h->remote_hint[pg->size_class].load()) { ++n; fprintf(stderr, "full: cls=%d reserved=%d used=%u pending=%u any=%d flags=%x\n", pg->size_class, pg->reserved, pg->used, remote_count(pg->thread_free.load()), h->remote_any.load(), f); }
      if ((f & page_flag::loose)) {
        size_t idx = slice_index(seg, pg);
        if (!(seg->loose_remote[idx / 64].load() >> (idx % 64) & 1) || !h->remote_loose.load()) { ++n; fprintf(stderr, "loose: cls=%d bit=%d hint=%d\n", pg->size_class, int(seg->loose_remote[idx / 64].load() >> (idx % 64) & 1), h->remote_loose.load()); }
      }
    });
  return n;
}
int main(int argc, char** argv) {
  int secs = argc > 1 ? atoi(argv[1]) : 20;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
  long rounds = 0, stranded = 0, max_stranded = 0;
  std::atomic<bool> stop{false};
  std::mutex am;
  // The adopter: allocates spans so that it takes the abandoned segments over.
  std::atomic<long> adopt_check{0};
  std::thread adopter([&] {
    std::vector<void*> mine;
    while (!stop) {
      for (int i = 0; i < 8; ++i) mine.push_back(strata_malloc(i & 1 ? 300 * 1024 : 48));
      if (mine.size() % 16 == 0 && (rand() & 1)) strata_collect(true);  // adopts every abandoned segment
      if (mine.size() > 64) { for (void* p : mine) strata_free(p); mine.clear(); }
      if (adopt_check.load() == 1) {
        for (void* p : mine) strata_free(p);
        mine.clear();
        long s = stranded_in(tl_heap);
        stranded += s; if (s > max_stranded) max_stranded = s;
        adopt_check = 2;
      }
    }
    for (void* p : mine) strata_free(p);
  });
  while (std::chrono::steady_clock::now() < end) {
    blocks.assign(600, nullptr);
    next_idx = 0; done_freers = 0;
    std::atomic<bool> go{false};
    std::vector<std::thread> freers;
    for (int i = 0; i < 3; ++i)
      freers.emplace_back([&, i] {
        if (i) strata_free(strata_malloc(16));  // freer 0 has no heap until its first free
        while (!go) std::this_thread::yield();
        for (size_t k; (k = next_idx++) < blocks.size();) strata_free(blocks[k]);
        strata_collect(false);  // flushes its batches and foreign cache
        done_freers++;
        while (done_freers < 4) std::this_thread::yield();
      });
    std::thread producer([&] {
      for (size_t k = 0; k < blocks.size(); ++k) blocks[k] = strata_malloc(k % 3 == 0 ? 256 * 1024 : 64 + (k % 40) * 16);
      go = true;  // and exit at once: frees race with the abandon
    });
    producer.join();
    while (done_freers < 3) std::this_thread::yield();
    adopt_check = 1;
    while (adopt_check != 2) std::this_thread::yield();
    adopt_check = 0;
    done_freers++;
    for (auto& t : freers) t.join();
    ++rounds;
  }
  stop = true;
  adopter.join();
  strata_stats_t st; strata_stats_get(&st);
  printf("reclaimed=%llu ", (unsigned long long)st.reclaimed_segments);
  printf("rounds=%ld stranded pages seen=%ld (max in one round %ld)\n", rounds, stranded, max_stranded);
  return stranded != 0;
}
