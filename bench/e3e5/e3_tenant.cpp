// strata-bench-e3-tenant: one tenant process of experiment E3 (latency-critical vs best-effort).
//
// A tenant has S streams.  A stream is a worker thread with a queue, fed by a host thread that
// plays the application: it enqueues kernel k, waits for it to finish (like launch + stream
// synchronize on a GPU), thinks for a gap, then enqueues kernel k+1.  A kernel is a compute burst
// of fixed *work* (calibrated loop iterations, not wall time), so a kernel that gets preempted
// takes longer instead of silently doing less, and best-effort throughput measures real CPU share.
//
//   latency-critical (lc): short bursts with jittered gaps — requests arriving over time.
//   best-effort      (be): long bursts, no gap — throughput-bound.
//
// Launch latency = start - enqueue: the time from the host's enqueue until the worker thread runs
// the kernel, i.e. the scheduler's wake-up delay plus any queueing.  The CPU policy applied by the
// E3 suite is a Linux scheduling class per process (--sched idle for BE), which every thread of the
// process inherits; the threads report the class they actually ran under.
//
// Output: one CSV per process and round with E3's columns, and one JSON summary line on stdout.
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "output.hpp"

namespace {

// ---- time -----------------------------------------------------------------------------------
int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void sleep_until_ns(int64_t t) {
  timespec ts{time_t(t / 1000000000), long(t % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// ---- the compute kernel ---------------------------------------------------------------------
// A dependent integer chain the compiler cannot shorten; `iterations` fixes the work.
uint64_t compute_burst(uint64_t iterations, uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

// The same work in slices of 2^16 iterations (~0.1 ms), given up once CLOCK_MONOTONIC passes
// deadline_ns: false then.  --timeout-s was checked only between kernels, so one kernel of
// --burst-us 1e9 (or one slowed by a --work-per-us far above this machine's figure) ran up to
// 1000 s past it.  A clock read per slice costs nothing measurable.
bool compute_burst_until(uint64_t iterations, uint64_t seed, int64_t deadline_ns, uint64_t& out) {
  constexpr uint64_t slice = uint64_t(1) << 16;
  uint64_t x = seed;
  for (uint64_t left = iterations; left > 0;) {
    const uint64_t n = std::min(left, slice);
    x = compute_burst(n, x);
    left -= n;
    if (left > 0 && now_ns() > deadline_ns) return false;
  }
  out = x;
  return true;
}
std::atomic<uint64_t> g_sink{0};

// Loop iterations per microsecond on an idle core: the best of several timed trials, so a trial
// that got preempted does not lower the figure.
double calibrate_work_per_us() {
  const uint64_t iters = 2000000;
  double best_ns = 1e300;
  for (int trial = 0; trial < 15; ++trial) {
    int64_t t0 = now_ns();
    g_sink += compute_burst(iters, uint64_t(trial) + 1);
    best_ns = std::min(best_ns, double(now_ns() - t0));
  }
  return double(iters) / (best_ns / 1000.0);
}

// ---- options --------------------------------------------------------------------------------
struct options {
  std::string role = "lc";  // lc | be
  int streams = 4;
  int kernels = 50;
  double burst_us = 500;
  double gap_us = 0;
  double jitter = 0.5;         // gap drawn uniformly in [gap*(1-j), gap*(1+j)]
  std::string sched = "normal";  // normal | idle | batch | nice:N | fifo:N
  double work_per_us = 0;        // 0: calibrate in this process
  int64_t start_at_ns = 0;       // CLOCK_MONOTONIC; 0: now
  std::string out;               // CSV path ("" = none)
  uint64_t seed = 1;
  double timeout_s = 120;
  bool smoke = false;
  bool calibrate = false;
};

constexpr const char* kUsage =
    "usage: strata-bench-e3-tenant --role lc|be [--streams S] [--kernels K] [--burst-us B]\n"
    "         [--gap-us G] [--jitter J] [--sched normal|idle|batch|nice:N|fifo:N]\n"
    "         [--work-per-us W] [--start-at-ns T] [--out FILE.csv] [--seed N]\n"
    "         [--timeout-s S]\n"
    "       strata-bench-e3-tenant --calibrate | --smoke [--out FILE.csv]";

// --sched as apply_sched() reads it; N of nice:N and fifo:N a whole integer (atoi read "nice:5x"
// as 5 and "nice:x" as 0).
bool sched_ok(const std::string& s) {
  if (s == "normal" || s == "idle" || s == "batch") return true;
  if (s.rfind("nice:", 0) != 0 && s.rfind("fifo:", 0) != 0) return false;
  const char* v = s.c_str() + 5;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  return *v != 0 && !std::isspace(static_cast<unsigned char>(*v)) && *end == 0 && errno != ERANGE &&
         n >= INT_MIN && n <= INT_MAX;
}

// Empty, or why a kernel of burst_us at work_per_us loop iterations per microsecond would be one
// of no work: its iterations, uint64_t(burst_us * work_per_us), round down to 0.
std::string burst_too_small(double burst_us, double work_per_us) {
  if (burst_us * work_per_us >= 1) return "";
  char why[256];
  std::snprintf(why, sizeof why,
                "--burst-us %g is below the minimum %g: at --work-per-us %g (loop iterations per "
                "microsecond) its kernels would do no work",
                burst_us, 1.0 / work_per_us, work_per_us);
  return why;
}

options parse(int argc, char** argv) {
  options o;
  strata::bench::arg_parser args(argc, argv, "strata-bench-e3-tenant", kUsage);
  while (args.next()) {
    if (args.is("--role")) o.role = args.value();
    else if (args.is("--streams")) o.streams = args.value<int>();
    else if (args.is("--kernels")) o.kernels = args.value<int>();
    else if (args.is("--burst-us")) o.burst_us = args.value<double>();
    else if (args.is("--gap-us")) o.gap_us = args.value<double>();
    else if (args.is("--jitter")) o.jitter = args.value<double>();
    else if (args.is("--sched")) o.sched = args.value();
    else if (args.is("--work-per-us")) o.work_per_us = args.value<double>();
    else if (args.is("--start-at-ns")) o.start_at_ns = args.value<int64_t>();
    else if (args.is("--out")) o.out = args.value();
    else if (args.is("--seed")) o.seed = args.value<uint64_t>();
    else if (args.is("--timeout-s")) o.timeout_s = args.value<double>();
    else if (args.is("--smoke")) o.smoke = true;
    else if (args.is("--calibrate")) o.calibrate = true;
    else args.unknown();
  }
  if (o.role != "lc" && o.role != "be") args.fail("--role must be lc or be");
  if (!sched_ok(o.sched))
    args.fail("--sched must be normal, idle, batch, nice:N or fifo:N, not \"" + o.sched + "\"");
  if (o.streams < 1 || o.streams > 256) args.fail("--streams out of range 1..256");
  if (o.kernels < 1 || o.kernels > 1000000) args.fail("--kernels out of range");
  // Finite and bounded, so that the conversions to iterations and nanoseconds below fit their
  // integers.  Session 42's probe: args.hpp lets "nan" and "inf" through, and none of these
  // comparisons refused them: --burst-us nan or --work-per-us nan ran a kernel of 2^63 iterations
  // (past --timeout-s, which is checked between kernels), --burst-us inf one of none (exit 0),
  // --gap-us nan no gaps, and --timeout-s nan, inf or 1e10 timed out before the first kernel.
  auto in = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  if (!in(o.burst_us, 0, 1e9) || o.burst_us <= 0 || !in(o.gap_us, 0, 1e9) || !in(o.jitter, 0, 1))
    args.fail("bad burst/gap/jitter: --burst-us in (0, 1e9], --gap-us in [0, 1e9], --jitter in [0, 1]");
  // Nor so small that they round to nothing (session 43's probe: --burst-us 1e-9 ran kernels of
  // no work and exited 0): a gap and the timeout become whole nanoseconds, a burst whole loop
  // iterations (checked again in run() once a calibrated --work-per-us is known).
  if (o.gap_us > 0 && o.gap_us < 1e-3)
    args.fail("--gap-us " + std::to_string(o.gap_us) +
              " rounds to no gap: 0 (none) or at least 0.001 (1 ns)");
  if (!in(o.timeout_s, 1e-9, 1e6)) args.fail("--timeout-s must be in [1e-9, 1e6] (1 ns to 1e6 s)");
  if (!in(o.work_per_us, -1e9, 1e6)) args.fail("--work-per-us must be at most 1e6 (0: calibrate)");
  if (o.work_per_us > 0 && !o.smoke)
    if (std::string why = burst_too_small(o.burst_us, o.work_per_us); !why.empty()) args.fail(why);
  // A start instant further ahead than the run may last (a CLOCK_REALTIME figure, say) slept that
  // long, and INT64_MAX overflowed the deadline.
  if (o.start_at_ns > now_ns() + int64_t(o.timeout_s * 1e9))
    args.fail("--start-at-ns is more than --timeout-s ahead of CLOCK_MONOTONIC's now");
  return o;
}

// Applies the scheduling class to the calling thread; threads created afterwards inherit it.
bool apply_sched(const std::string& s, std::string& err) {
  sched_param p{};
  if (s == "normal") return true;
  if (s == "idle" || s == "batch") {
    if (sched_setscheduler(0, s == "idle" ? SCHED_IDLE : SCHED_BATCH, &p) == 0) return true;
  } else if (s.rfind("nice:", 0) == 0) {
    // nice is per thread on Linux; new threads inherit the creator's value.
    if (setpriority(PRIO_PROCESS, 0, std::atoi(s.c_str() + 5)) == 0) return true;
  } else if (s.rfind("fifo:", 0) == 0) {
    p.sched_priority = std::atoi(s.c_str() + 5);
    if (sched_setscheduler(0, SCHED_FIFO, &p) == 0) return true;
  } else {
    err = "unknown --sched " + s;
    return false;
  }
  err = "cannot apply --sched " + s + ": " + std::strerror(errno);
  return false;
}

std::string sched_name_of_this_thread() {
  int pol = sched_getscheduler(0);
  switch (pol) {
    case SCHED_OTHER: {
      errno = 0;
      int nice = getpriority(PRIO_PROCESS, 0);
      return nice == 0 ? "normal" : "nice:" + std::to_string(nice);
    }
    case SCHED_IDLE: return "idle";
    case SCHED_BATCH: return "batch";
    case SCHED_FIFO: {
      sched_param p{};
      sched_getparam(0, &p);
      return "fifo:" + std::to_string(p.sched_priority);
    }
    case SCHED_RR: return "rr";
    default: return "policy" + std::to_string(pol);
  }
}

// ---- streams --------------------------------------------------------------------------------
struct kernel_record {
  int64_t enqueue_ns = 0, start_ns = 0, end_ns = 0;
};

struct job {
  int kernel_id;
  int64_t enqueue_ns;
};

// One stream: a worker thread with a queue.  The host thread enqueues; the worker runs.
struct stream {
  std::mutex m;
  std::condition_variable work_cv;  // host -> worker: queue not empty / closed
  std::condition_variable done_cv;  // worker -> host: a kernel finished
  std::deque<job> queue;
  int completed = 0;
  bool closed = false;
  // One per kernel run, in kernel order (the host enqueues k + 1 only after k completed),
  // appended as they finish: sized up front, --streams 256 --kernels 1000000 (both in range)
  // allocated and zeroed 6 GB before the first kernel, and aborted on std::bad_alloc where the
  // memory was not there.  end_ns 0: given up at the deadline.
  std::vector<kernel_record> records;
  std::string worker_sched, host_sched;
};

struct splitmix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
};

void worker_main(stream& st, uint64_t iterations_per_kernel, int64_t deadline_ns) {
  st.worker_sched = sched_name_of_this_thread();
  for (;;) {
    job j;
    {
      std::unique_lock lk(st.m);
      st.work_cv.wait(lk, [&] { return st.closed || !st.queue.empty(); });
      if (st.queue.empty()) return;  // closed and drained
      j = st.queue.front();
      st.queue.pop_front();
    }
    int64_t start = now_ns();
    uint64_t x = 0;
    const bool finished =
        compute_burst_until(iterations_per_kernel, uint64_t(j.kernel_id) + 7, deadline_ns, x);
    g_sink.fetch_add(x, std::memory_order_relaxed);
    int64_t end = finished ? now_ns() : 0;
    {
      std::lock_guard lk(st.m);
      st.records.push_back({j.enqueue_ns, start, end});
      ++st.completed;  // given up or not: the host then sees the deadline passed and stops
    }
    st.done_cv.notify_one();
  }
}

// The application side of a stream: a closed loop of enqueue, wait, think.
void host_main(stream& st, const options& o, int stream_id, int64_t start_ns, int64_t deadline_ns,
               std::atomic<bool>& timed_out) {
  st.host_sched = sched_name_of_this_thread();
  splitmix rng{o.seed * 1000003 + uint64_t(stream_id) * 7919 + (o.role == "lc" ? 1 : 2)};
  auto draw_gap_ns = [&] {
    double g = o.gap_us * (1.0 - o.jitter + 2.0 * o.jitter * rng.uniform());
    return int64_t(g * 1000.0);
  };
  // Stagger the streams so LC requests do not all arrive in the same instant.
  int64_t next = start_ns + (o.gap_us > 0 ? int64_t(rng.uniform() * o.gap_us * 1000.0) : 0);
  for (int k = 0; k < o.kernels; ++k) {
    // Not past the deadline: a --gap-us of 1e9 slept up to 1000 s before noticing --timeout-s.
    sleep_until_ns(std::min(next, deadline_ns + 1));
    if (now_ns() > deadline_ns) {
      timed_out = true;
      break;
    }
    {
      std::lock_guard lk(st.m);
      st.queue.push_back({k, now_ns()});
    }
    st.work_cv.notify_one();
    bool given_up;
    {
      std::unique_lock lk(st.m);
      st.done_cv.wait(lk, [&] { return st.completed > k; });
      given_up = st.records.back().end_ns == 0;
    }
    if (given_up) {  // the worker stopped it at the deadline (the last kernel too)
      timed_out = true;
      break;
    }
    next = now_ns() + draw_gap_ns();
  }
  {
    std::lock_guard lk(st.m);
    st.closed = true;
  }
  st.work_cv.notify_one();
}

// E3's columns, in E3's order.
constexpr const char* k_csv_header =
    "stream_id,kernel_id,priority,kernel_type,enqueue_time_ms,start_time_ms,end_time_ms,"
    "duration_ms,launch_latency_ms,e2e_latency_ms";

bool write_csv(const std::string& path, const std::vector<stream>& streams, const options& o,
               int64_t t0) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "%s\n", k_csv_header);
  // priority follows CUDA's stream-priority convention (lower = more urgent) so CPU and GPU
  // results read the same way: lc -1, be 0.
  const int priority = o.role == "lc" ? -1 : 0;
  auto ms = [&](int64_t t) { return double(t - t0) / 1e6; };
  for (size_t s = 0; s < streams.size(); ++s) {
    for (size_t k = 0; k < streams[s].records.size(); ++k) {
      const kernel_record& r = streams[s].records[k];
      if (r.end_ns == 0) continue;  // never ran (timeout)
      std::fprintf(f, "%zu,%zu,%d,cpu_burst,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n", s, k, priority,
                   ms(r.enqueue_ns), ms(r.start_ns), ms(r.end_ns),
                   double(r.end_ns - r.start_ns) / 1e6, double(r.start_ns - r.enqueue_ns) / 1e6,
                   double(r.end_ns - r.enqueue_ns) / 1e6);
    }
  }
  return std::fclose(f) == 0;
}

// Reads a CSV back and checks its header and row count: the smoke mode's self-check.
bool validate_csv(const std::string& path, size_t expected_rows, std::string& err) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) {
    err = "cannot reopen " + path;
    return false;
  }
  char line[512];
  size_t rows = 0;
  bool ok = std::fgets(line, sizeof line, f) != nullptr;
  if (ok) {
    line[std::strcspn(line, "\n")] = 0;
    ok = std::strcmp(line, k_csv_header) == 0;
    if (!ok) err = std::string("bad header: ") + line;
  }
  while (ok && std::fgets(line, sizeof line, f)) {
    double v[6];
    int sid, kid, prio;
    char type[32];
    if (std::sscanf(line, "%d,%d,%d,%31[^,],%lf,%lf,%lf,%lf,%lf,%lf", &sid, &kid, &prio, type,
                    &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 10 ||
        !(v[0] <= v[1] && v[1] <= v[2] && v[4] >= 0)) {
      err = std::string("bad row: ") + line;
      ok = false;
    }
    ++rows;
  }
  std::fclose(f);
  if (ok && rows != expected_rows) {
    err = "expected " + std::to_string(expected_rows) + " rows, found " + std::to_string(rows);
    ok = false;
  }
  return ok;
}

// s as the inside of a JSON string.  The --out path went into the summary line verbatim: a path
// with a '"' or a backslash made the line invalid JSON, which the lab's driver could not read.
std::string json_escaped(const std::string& s) {
  std::string r;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += char(c);
    } else if (c < 0x20) {
      char u[8];
      std::snprintf(u, sizeof u, "\\u%04x", c);
      r += u;
    } else {
      r += char(c);
    }
  }
  return r;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * double(v.size() - 1);
  size_t lo = size_t(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

int run(options o) {
  if (o.smoke) {
    o.streams = 2;
    o.kernels = 5;
    o.burst_us = 200;
    o.gap_us = o.role == "lc" ? 300 : 0;
    o.timeout_s = 20;
  }
  // The smoke mode's own CSV, when no --out names one, is a memory file with no name anywhere:
  // a /tmp file was left behind when the run was killed (SIGTERM, SIGINT) before removing it.
  const bool temporary_csv = o.smoke && o.out.empty();
  int temporary_fd = -1;
  if (temporary_csv) {
    temporary_fd = memfd_create("strata-bench-e3-tenant-smoke.csv", MFD_CLOEXEC);
    if (temporary_fd < 0) {
      std::fprintf(stderr, "strata-bench-e3-tenant: cannot create the smoke CSV: %s\n", std::strerror(errno));
      return 4;
    }
    o.out = "/proc/self/fd/" + std::to_string(temporary_fd);
  }
  std::string err;
  if (!apply_sched(o.sched, err)) {
    std::fprintf(stderr, "strata-bench-e3-tenant: %s\n", err.c_str());
    return 3;
  }
  const bool calibrated_here = o.work_per_us <= 0;
  if (calibrated_here) o.work_per_us = calibrate_work_per_us();
  if (std::string why = burst_too_small(o.burst_us, o.work_per_us); !why.empty()) {
    std::fprintf(stderr, "strata-bench-e3-tenant: %s (calibrated here)\n", why.c_str());
    return 2;
  }
  const uint64_t iterations = uint64_t(o.burst_us * o.work_per_us);

  std::vector<stream> streams(size_t(o.streams));
  for (auto& st : streams) st.records.reserve(size_t(std::min(o.kernels, 4096)));
  const int64_t t0 = o.start_at_ns > 0 ? o.start_at_ns : now_ns();
  const int64_t deadline = t0 + int64_t(o.timeout_s * 1e9);
  std::atomic<bool> timed_out{false};

  std::vector<std::thread> threads;
  for (auto& st : streams) threads.emplace_back(worker_main, std::ref(st), iterations, deadline);
  for (int s = 0; s < o.streams; ++s)
    threads.emplace_back(host_main, std::ref(streams[size_t(s)]), std::cref(o), s, t0, deadline,
                         std::ref(timed_out));
  for (auto& t : threads) t.join();

  // Summary: what ran, under which classes, and the headline figures of this process.
  std::vector<double> launch;
  int64_t first_enqueue = INT64_MAX, last_end = 0;
  size_t done = 0;
  std::set<std::string> scheds;
  for (auto& st : streams) {
    scheds.insert(st.worker_sched);
    scheds.insert(st.host_sched);
    for (auto& r : st.records) {
      if (r.end_ns == 0) continue;
      ++done;
      launch.push_back(double(r.start_ns - r.enqueue_ns) / 1e6);
      first_enqueue = std::min(first_enqueue, r.enqueue_ns);
      last_end = std::max(last_end, r.end_ns);
    }
  }
  if (!o.out.empty() && !write_csv(o.out, streams, o, t0)) {
    std::fprintf(stderr, "strata-bench-e3-tenant: cannot write %s: %s\n", o.out.c_str(),
                 std::strerror(errno));
    return 4;
  }
  bool smoke_ok = true;
  if (o.smoke) smoke_ok = validate_csv(o.out, size_t(o.streams) * size_t(o.kernels), err);
  if (temporary_csv) {
    close(temporary_fd);
    o.out.clear();  // the summary names no file: none is left
  }

  const double span_s = done ? double(last_end - first_enqueue) / 1e9 : 0;
  std::string sched_list;
  for (auto& s : scheds) sched_list += (sched_list.empty() ? "" : ",") + ("\"" + s + "\"");
  std::printf(
      "{\"program\":\"strata-bench-e3-tenant\",\"pid\":%d,\"role\":\"%s\",\"sched_requested\":\"%s\","
      "\"sched_observed\":[%s],\"streams\":%d,\"kernels_per_stream\":%d,\"kernels_done\":%zu,"
      "\"burst_us\":%.6g,\"gap_us\":%.6g,\"work_per_us\":%.3f,\"calibrated_here\":%s,"
      "\"span_s\":%.6f,\"throughput_kps\":%.6f,\"launch_p50_ms\":%.6f,\"launch_p99_ms\":%.6f,"
      "\"timed_out\":%s,\"csv\":\"%s\"%s}\n",
      int(getpid()), o.role.c_str(), o.sched.c_str(), sched_list.c_str(), o.streams, o.kernels,
      done, o.burst_us, o.gap_us, o.work_per_us, calibrated_here ? "true" : "false", span_s,
      span_s > 0 ? double(done) / span_s / 1000.0 : 0.0, percentile(launch, 0.5),
      percentile(launch, 0.99), timed_out ? "true" : "false", json_escaped(o.out).c_str(),
      o.smoke ? (smoke_ok ? ",\"smoke\":\"ok\"" : ",\"smoke\":\"failed\"") : "");
  if (!strata::bench::stdout_written("strata-bench-e3-tenant", "summary")) return 4;
  if (!smoke_ok) std::fprintf(stderr, "strata-bench-e3-tenant: smoke check failed: %s\n", err.c_str());
  if (timed_out) {
    std::fprintf(stderr, "strata-bench-e3-tenant: timed out after %.1f s with %zu of %d kernels\n",
                 o.timeout_s, done, o.streams * o.kernels);
    return 5;
  }
  return smoke_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o = parse(argc, argv);
  if (o.calibrate) {
    std::printf("{\"program\":\"strata-bench-e3-tenant\",\"work_per_us\":%.3f}\n",
                calibrate_work_per_us());
    return strata::bench::stdout_written("strata-bench-e3-tenant", "figure") ? 0 : 4;
  }
  return run(o);
}
