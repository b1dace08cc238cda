// A litmus of the hint protocol (README.md, section 2): the owner clears a class hint and sets
// remote_any, then collect_remote_all races page_push_remote of one block of that class, round by
// round; a hint left set with remote_any clear is counted as stranded.
//   g++ -std=c++20 -O2 -Isrc -Iinclude -Ibuild/include sb_test.cpp build/lib/libstrata_api.a -lpthread
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include "core/heap.h"
#include "core/page.h"
#include "core/segment.h"
#include "strata/strata.h"
using namespace strata::detail;
int main(int argc, char** argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 200000;
  std::atomic<long> go{-1}, done_p{-1}, done_o{-1};
  heap* h = nullptr;
  page* pg = nullptr;
  void* b = nullptr;
  size_t cls = 0;
  long bad = 0, collected = 0;
  std::thread o([&] {
    strata_free(strata_malloc(64));
    h = tl_heap;
    for (long r = 0; r < rounds; ++r) {
      b = strata_malloc(64);
      pg = page_lookup(b);
      cls = pg->size_class;
      h->remote_hint[cls].store(0);
      h->remote_any.store(1);
      go.store(r);
      for (unsigned k = (r * 2654435761u >> 7) % 64; k-- > 0;) asm volatile("pause");
      collect_remote_all(h);
      done_o.store(r);
      while (done_p.load() != r) {}
      bool hint = h->remote_hint[cls].load(), any = h->remote_any.load();
      if (hint && !any) ++bad;
      if (!hint) ++collected;
      h->remote_any.store(1);
      collect_remote_all(h);
    }
  });
  std::thread p([&] {
    for (long r = 0; r < rounds; ++r) {
      while (go.load() != r) {}
      page_push_remote(pg, static_cast<block*>(b), static_cast<block*>(b), 1);
      done_p.store(r);
      while (done_o.load() != r) {}
    }
  });
  o.join(); p.join();
  printf("rounds %ld stranded %ld collected-in-round %ld\n", rounds, bad, collected);
  return bad != 0;
}
