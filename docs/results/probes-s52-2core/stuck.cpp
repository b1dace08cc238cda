#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "core/segment.h"
#include "strata/strata.h"
#include "test_support.h"
using namespace strata::detail;
static void make_heap() { strata_free(strata_malloc(16)); }
static void show(const char* when, page* p) {
  uintptr_t w = p->thread_free.load();
  printf("%-28s bs=%u in_use=%d spare=%d used=%u chain=%u free=%d local=%d\n", when, p->block_size, !!(flags_of(p) & page_flag::in_use),
         !!(flags_of(p) & page_flag::spare), p->used, remote_count(w), p->free != nullptr, p->local_free != nullptr);
}
int main() {
  strata_test::worker owner;
  std::vector<void*> s1, rest, big;
  page* p1 = nullptr;
  owner.run([&] {
    void* first = strata_malloc(64);
    p1 = page_lookup(first);
    s1.push_back(first);
    for (;;) {
      void* q = strata_malloc(64);
      if (page_lookup(q) == p1) s1.push_back(q); else { rest.push_back(q); break; }
    }
    for (int i = 0; i < 100; ++i) rest.push_back(strata_malloc(64));
    printf("page of %zu blocks\n", s1.size());
    show("filled", p1);
    strata_free(s1[0]);  // local_free
    show("owner freed one", p1);
  });
  size_t half = s1.size() / 2;
  std::thread([&] { make_heap(); for (size_t i = 1; i < half; ++i) strata_free(s1[i]); }).join();
  owner.run([&] { big.push_back(strata_malloc(1 << 20)); show("after 1st collect", p1); });
  std::thread([&] { make_heap(); for (size_t i = half; i + 1 < s1.size(); ++i) strata_free(s1[i]); }).join();
  owner.run([&] { big.push_back(strata_malloc(1 << 20)); show("after 2nd collect", p1); });
  owner.run([&] { strata_free(s1.back()); show("owner freed its last", p1); });
  owner.run([&] {
    // moves on: other sizes, purge passes
    for (int r = 0; r < 200; ++r) {
      std::vector<void*> v;
      for (int i = 0; i < 500; ++i) v.push_back(strata_malloc(1000 + (i % 7) * 300));
      for (void* q : v) strata_free(q);
      big.push_back(strata_malloc((2 + r % 3) << 20));
      strata_free(big.back()); big.pop_back();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    show("after moving on 1 s", p1);
    printf("heap_check %d\n", strata_heap_check());
  });
  return 0;
}
