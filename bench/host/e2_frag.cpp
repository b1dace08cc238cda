// strata-bench-e2-frag: E2's three-phase fragmentation experiment on host malloc.
//
// Every thread runs the same timed probe three times (allocate a batch of mixed sizes, touch,
// free; repeated): once on a fresh heap (baseline), once after a fragmentation phase that
// allocates interleaved sizes and frees every other one in random order, keeping the survivors
// live (fragmented), and once more after a long churn of random replacements in that surviving
// set (long term).  A phase's time is the slowest thread's probe time, all threads starting
// together; an untimed short probe first takes the first-touch page faults out of the baseline.
// The point is how much an allocator slows down, and how much memory it keeps, once
// its heap is no longer fresh: reported as % change against baseline and RSS after each phase.
//
// Usage: strata-bench-e2-frag [--threads N] [--scale X] [--seed N] [--smoke]
// --scale multiplies the work and the memory: at 1, the fragmentation phase keeps about 110 MiB
// per thread resident at its peak.  A scale whose peak (threads x scale x that) exceeds the
// machine's physical memory is refused, as is a scale that is not a finite number above 0.
// Output: {"workload":"e2","threads":..,"baseline_ms":..,"fragmented_ms":..,"longterm_ms":..,
//          "fragmented_change_pct":..,"longterm_change_pct":..,"probe_ms":..,
//          "rss_baseline_kb":..,"rss_fragmented_kb":..,"rss_longterm_kb":..,"peak_rss_kb":..}

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>

#include "args.hpp"
#include "output.hpp"
#include "proc_status.hpp"
#include "rng.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

using strata::bench::rng;
using strata::bench::status_kb;

char* must_malloc(size_t n) {
  auto* p = static_cast<char*>(std::malloc(n));
  if (!p) {
    std::fprintf(stderr, "malloc(%zu) failed\n", n);
    std::abort();
  }
  p[0] = 1;  // touch both ends: the pages are really used
  p[n - 1] = 1;
  return p;
}

// Mixed sizes: the probe and the churn draw from the same spread (32 B .. 64 KiB).
constexpr size_t kSizes[] = {32, 48, 96, 160, 256, 512, 1200, 4000, 8192, 20000, 65536};
constexpr size_t kNumSizes = sizeof kSizes / sizeof kSizes[0];
constexpr double kFragmentObjects = 40000;  // per thread at scale 1

// What the fragmentation phase keeps resident at once per thread at scale 1: every object is
// live before half of them are freed (fragment() cycles through kSizes), and must_malloc touches
// both ends of an object, so a large one costs about two pages.
double fragment_peak_bytes(double page) {
  double sum = 0;
  for (size_t s : kSizes) sum += std::min(double(s), 2 * page);
  return sum / kNumSizes * kFragmentObjects;
}

struct options {
  int threads = 1;
  double scale = 1.0;
  uint64_t seed = 7;
  bool smoke = false;
};

struct thread_state {
  std::vector<char*> survivors;  // live across phases: what fragments the heap
  double probe_ms[3] = {0, 0, 0};
};

// The timed probe: `batches` times, allocate a batch of mixed sizes then free it.
double probe(size_t batches, size_t batch, rng& r) {
  std::vector<char*> live(batch);
  auto t0 = clock_type::now();
  for (size_t b = 0; b < batches; ++b) {
    for (size_t i = 0; i < batch; ++i) live[i] = must_malloc(kSizes[r.next() % kNumSizes]);
    for (size_t i = batch; i-- > 0;) std::free(live[i]);
  }
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

void fragment(thread_state& st, size_t objects, rng& r) {
  std::vector<char*> all(objects);
  for (size_t i = 0; i < objects; ++i) all[i] = must_malloc(kSizes[(i * 5) % kNumSizes]);
  // Free every other object, in a random order: holes everywhere, survivors pin the pages.
  std::vector<size_t> odd;
  for (size_t i = 1; i < objects; i += 2) odd.push_back(i);
  for (size_t i = odd.size(); i > 1; --i) std::swap(odd[i - 1], odd[r.next() % i]);
  for (size_t i : odd) std::free(all[i]);
  for (size_t i = 0; i < objects; i += 2) st.survivors.push_back(all[i]);
}

void churn(thread_state& st, size_t iterations, rng& r) {
  auto& s = st.survivors;
  for (size_t i = 0; i < iterations; ++i) {
    size_t k = r.next() % s.size();
    std::free(s[k]);
    s[k] = must_malloc(kSizes[r.next() % kNumSizes]);
  }
}

constexpr const char* kUsage =
    "usage: strata-bench-e2-frag [--threads N] [--scale X] [--seed N] [--smoke]";

}  // namespace

int main(int argc, char** argv) {
  options o;
  strata::bench::arg_parser args(argc, argv, "strata-bench-e2-frag", kUsage);
  while (args.next()) {
    if (args.is("--threads")) o.threads = args.value<int>();
    else if (args.is("--scale")) o.scale = args.value<double>();
    else if (args.is("--seed")) o.seed = args.value<uint64_t>();
    else if (args.is("--smoke")) o.smoke = true;
    else args.unknown();
  }
  if (o.threads < 1 || o.threads > 1024) args.fail("--threads must be 1..1024");
  // inf passed `> 0`, and a scale past what size_t holds converted to garbage (1e300 ran a tiny
  // workload and reported scale 1e+300; 1e6 asked for a 320 GB vector first).
  char why[200];
  if (!(o.scale > 0) || !std::isfinite(o.scale)) {
    std::snprintf(why, sizeof why, "--scale must be a finite number above 0, not %g", o.scale);
    args.fail(why);
  }
  if (o.smoke) o.scale = std::min(o.scale, 0.02);
  const double page = double(sysconf(_SC_PAGESIZE));
  const double peak = fragment_peak_bytes(page) * o.scale * o.threads;
  const double ram = double(sysconf(_SC_PHYS_PAGES)) * page;
  if (ram > 0 && peak > ram) {
    std::snprintf(why, sizeof why, "--scale %g with --threads %d needs about %.3g MiB at its peak, "
                  "more than this machine's %.0f MiB", o.scale, o.threads, peak / 1048576, ram / 1048576);
    args.fail(why);
  }
  auto scaled = [&](double n) { return std::max<size_t>(1, size_t(n * o.scale)); };
  const size_t batches = scaled(1500), batch = 256, objects = scaled(kFragmentObjects),
               iterations = scaled(400000);

  std::vector<thread_state> st(o.threads);
  std::barrier sync(o.threads);
  long rss[3] = {0, 0, 0};
  auto t_start = clock_type::now();
  {
    std::vector<std::thread> ts;
    for (int t = 0; t < o.threads; ++t)
      ts.emplace_back([&, t] {
        rng r(o.seed * 1000 + t);
        probe(std::max<size_t>(1, batches / 10), batch, r);  // untimed: first-touch faults
        sync.arrive_and_wait();
        st[t].probe_ms[0] = probe(batches, batch, r);
        sync.arrive_and_wait();
        if (t == 0) rss[0] = status_kb("VmRSS:");
        fragment(st[t], objects, r);
        sync.arrive_and_wait();
        st[t].probe_ms[1] = probe(batches, batch, r);
        sync.arrive_and_wait();
        if (t == 0) rss[1] = status_kb("VmRSS:");
        churn(st[t], iterations, r);
        sync.arrive_and_wait();
        st[t].probe_ms[2] = probe(batches, batch, r);
        sync.arrive_and_wait();
        if (t == 0) rss[2] = status_kb("VmRSS:");
      });
    for (auto& t : ts) t.join();
  }
  double total_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_start).count();
  double phase[3] = {0, 0, 0};
  for (auto& s : st)
    for (int p = 0; p < 3; ++p) phase[p] = std::max(phase[p], s.probe_ms[p]);
  for (auto& s : st)
    for (char* p : s.survivors) std::free(p);
  auto pct = [&](double x) { return (x - phase[0]) / phase[0] * 100.0; };
  std::printf("{\"workload\":\"e2\",\"threads\":%d,\"scale\":%g,\"baseline_ms\":%.3f,"
              "\"fragmented_ms\":%.3f,\"longterm_ms\":%.3f,\"fragmented_change_pct\":%.2f,"
              "\"longterm_change_pct\":%.2f,\"probe_ms\":%.3f,\"total_ms\":%.3f,"
              "\"rss_baseline_kb\":%ld,\"rss_fragmented_kb\":%ld,\"rss_longterm_kb\":%ld,"
              "\"peak_rss_kb\":%ld}\n",
              o.threads, o.scale, phase[0], phase[1], phase[2], pct(phase[1]), pct(phase[2]),
              phase[0] + phase[1] + phase[2], total_ms, rss[0], rss[1], rss[2], status_kb("VmHWM:"));
  return strata::bench::stdout_written("strata-bench-e2-frag", "results") ? 0 : 1;
}
