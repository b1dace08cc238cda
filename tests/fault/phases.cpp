// A program that goes through phases of different size classes, each touching most of a memory
// limit with two threads and freeing it (half by the thread that allocated, half by the other),
// run under LD_PRELOAD=libstrata.so inside a cgroup by cgroup_test.py.  It prints one JSON line
// per phase with strata's statistics (and the cgroup's own count of charged bytes, when the path
// of that file is in STRATA_FAULT_CGROUP_USAGE): committed at the phase's peak, right after the
// frees, and before the next phase, after what each thread does between phases:
//   none   nothing: the next phase starts at once;
//   idle   sleeps past the purge delay, then strata_collect(false);
//   force  strata_collect(true).
//
// Usage: phases <limit-bytes> <fill-fraction> none|idle|force
// Blocks are kept on intrusive lists (each block's first word links the next), so that the
// bookkeeping costs no memory beside the blocks themselves.
#include <malloc.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "strata/strata.h"

// Resolved by libstrata.so when it is preloaded; null otherwise.
#pragma weak strata_stats_get
#pragma weak strata_collect

namespace {

constexpr size_t phase_sizes[] = {24, 200, 1500, 12000, 100000, 700000, 6 << 20};
constexpr int threads = 2;

struct block {
  block* next;
};

uint64_t committed() {
  strata_stats_t s;
  strata_stats_get(&s);
  return s.committed_bytes;
}

long long cgroup_usage() {
  const char* path = getenv("STRATA_FAULT_CGROUP_USAGE");
  if (path == nullptr) return -1;
  std::ifstream f(path);
  long long v = -1;
  f >> v;
  return v;
}

unsigned char fill_byte(int phase, int thread) { return static_cast<unsigned char>(0x40 + phase * 4 + thread); }

// Allocates `budget` usable bytes in blocks of about `size` (jittered by up to a quarter), every
// usable byte written; returns them as a list.
block* allocate_phase(size_t size, size_t budget, unsigned char value, unsigned seed) {
  block* list = nullptr;
  size_t used = 0;
  while (used < budget) {
    seed = seed * 1103515245 + 12345;
    size_t n = size - size / 4 + (seed >> 8) % (size / 4 + 1);
    auto* b = static_cast<block*>(malloc(n));
    if (b == nullptr) {
      fprintf(stderr, "phases: malloc(%zu) returned NULL after %zu bytes\n", n, used);
      exit(3);
    }
    size_t usable = malloc_usable_size(b);
    memset(b, value, usable);
    b->next = list;
    list = b;
    used += usable;
  }
  return list;
}

// Frees a list, checking each block's second word still holds the fill (the first is the link).
void free_list(block* list, unsigned char value) {
  uint64_t want;
  memset(&want, value, sizeof want);
  while (list) {
    block* next = list->next;
    uint64_t got;
    memcpy(&got, reinterpret_cast<char*>(list) + 8, 8);
    if (got != want) {
      fprintf(stderr, "phases: block %p lost its fill\n", static_cast<void*>(list));
      exit(4);
    }
    free(list);
    list = next;
  }
}

// Splits a list in two halves (alternate blocks).
void split(block* list, block** a, block** b) {
  *a = *b = nullptr;
  for (bool first = true; list; first = !first) {
    block* next = list->next;
    block** to = first ? a : b;
    list->next = *to;
    *to = list;
    list = next;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: phases <limit-bytes> <fill-fraction> none|idle|force\n");
    return 2;
  }
  if (strata_stats_get == nullptr || strata_collect == nullptr) {
    fprintf(stderr, "phases: not running under strata (LD_PRELOAD=libstrata.so)\n");
    return 2;
  }
  const size_t limit = strtoull(argv[1], nullptr, 10);
  const double fraction = atof(argv[2]);
  const std::string between = argv[3];
  if (between != "none" && between != "idle" && between != "force") {
    fprintf(stderr, "phases: between phases: none, idle or force, not %s\n", argv[3]);
    return 2;
  }
  const size_t per_thread = static_cast<size_t>(limit * fraction) / threads;
  constexpr int phases = sizeof phase_sizes / sizeof phase_sizes[0];

  block* kept[threads];     // each thread's own half
  block* handed[threads];   // the half the other thread frees
  std::barrier sync(threads + 1);
  auto work = [&](int t) {
    for (int ph = 0; ph < phases; ++ph) {
      sync.arrive_and_wait();  // start
      block* list = allocate_phase(phase_sizes[ph], per_thread, fill_byte(ph, t), 7 + t * 31 + ph);
      split(list, &kept[t], &handed[t]);
      sync.arrive_and_wait();  // all allocated: main reads the peak
      sync.arrive_and_wait();
      free_list(kept[t], fill_byte(ph, t));
      free_list(handed[1 - t], fill_byte(ph, 1 - t));
      sync.arrive_and_wait();  // all freed: main reads what is still committed
      sync.arrive_and_wait();
      if (between == "idle") {
        // Past the purge delay: an emptied page's memory goes back two to four delays after its
        // last free, and the delay (40 ms) is scaled up to 16x when purged memory is refaulted.
        std::this_thread::sleep_for(std::chrono::milliseconds(4 * 16 * 40 + 50));
        strata_collect(false);
      } else if (between == "force") {
        strata_collect(true);
      }
      sync.arrive_and_wait();  // ready for the next phase
    }
  };
  std::thread workers[threads] = {std::thread(work, 0), std::thread(work, 1)};
  for (int ph = 0; ph < phases; ++ph) {
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    uint64_t at_peak = committed();
    long long cg_peak = cgroup_usage();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    uint64_t after_free = committed();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    uint64_t before_next = committed();
    printf("{\"phase\": %d, \"size\": %zu, \"touched\": %zu, \"committed_peak\": %llu, "
           "\"committed_after_free\": %llu, \"committed_before_next\": %llu, "
           "\"cgroup_at_peak\": %lld, \"cgroup_before_next\": %lld}\n",
           ph, phase_sizes[ph], per_thread * threads, static_cast<unsigned long long>(at_peak),
           static_cast<unsigned long long>(after_free), static_cast<unsigned long long>(before_next), cg_peak,
           cgroup_usage());
    fflush(stdout);
  }
  for (auto& w : workers) w.join();
  return 0;
}
