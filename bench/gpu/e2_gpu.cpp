// strata-bench-e2-gpu: experiment E2 (docs/gpu.md) - multithreaded fragmentation of device memory
// resources.  Each thread has its own stream and launches a spin kernel between allocations.
//
//   baseline    timed: the reference workload W
//   (fragment)  untimed: interleaved small/large blocks, large ones freed out of order, small
//               ones pinned until the end of the cell
//   fragmented  timed: W again
//   (churn)     untimed: long_factor x iterations of mixed allocate/free, some blocks pinned
//   long_term   timed: W again
//
// Two bounds on what the workload itself can hold at once, from dry runs of the same scripts
// (same seeds, no kernels) against a resource that only counts, are reported with every cell:
//   concurrent  every thread at its own peak at once (the sum of the threads' peaks): no
//               schedule can hold more;
//   serial      the threads' steps run one thread after another (pinned blocks stay): what a
//               resource that makes the threads take turns lets the workload hold.
// Where between the two a run's live peak falls depends on how the resource schedules the
// threads (its locks and cross-stream waits), not on the workload alone.
//
// --fragment-in-turns makes the workload itself take the fragment step (where the live peak is)
// one thread at a time, so every resource sees about the serial bound: reserved bytes compare at
// equal live bytes.  The timed phases still run together.
//
// --cap-factor F runs every cell on a simulated device of F x the cell's concurrent bound (with
// --cap-basis serial, F x its serial bound).  Above the concurrent bound no schedule can need
// more, so every resource should finish; --device-mib N sets the device's size directly instead.
//
// W per thread: `iterations` times { allocate a log-uniform size, launch a spin kernel, free
// the oldest of the last 8 blocks on the thread's stream }, then synchronise the stream.
// Every W uses the same seeds, so the three timed phases do identical work.
//
// One JSON document on stdout (schema in docs/gpu.md); --table adds a text table on stderr.
// --replay trace.csv replays a logging_adaptor trace against each resource instead.
#include <strata/gpu/gpu.hpp>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "output.hpp"

using namespace strata::gpu;
using clk = std::chrono::steady_clock;

namespace {

struct config {
  std::string backend = "sim";
  std::vector<std::string> resources;  // empty: all
  std::vector<int> threads{1, 4, 8, 16};
  bool smoke = false;
  bool table = false;
  std::size_t iterations = 2000;
  std::size_t long_factor = 10;
  std::uint64_t kernel_ns = 20000;
  std::size_t min_size = 256;
  std::size_t max_size = std::size_t{4} << 20;
  std::size_t pool_bytes = std::size_t{1} << 30;  // initial size of pool/arena/strata
  std::size_t sim_capacity = std::size_t{16} << 30;  // --device-mib: the simulated device's memory
  bool capped = false;
  double cap_factor = 0;  // > 0: device = cap_factor x each cell's live bound (cap_basis)
  bool cap_serial = false;  // the bound is the serial one (one thread after another)
  bool fragment_in_turns = false;  // the threads take the fragment step one at a time
  bool strata_wait = false;  // strata_options::wait_before_growth
  std::size_t strata_cache = strata_options{}.cache_bytes;  // strata_options::cache_bytes
  std::uint64_t seed = 20240601;
  std::string replay;
  std::string trace;
};

// A bad command line: why, and the usage, on stderr, exit status 2; --help: the usage on stdout,
// exit status 0.
[[noreturn]] void usage(const std::string& why, bool help = false) {
  std::fprintf(help ? stdout : stderr,
               "%s%s"
               "usage: strata-bench-e2-gpu [--backend sim|cuda] [--resource NAME[,NAME..]|all]\n"
               "         [--threads 1,4,8,16] [--smoke] [--iterations 1..10^7] [--long-factor K]\n"
               "         [--kernel-ns NS (<= 10^9)] [--max-size BYTES] [--pool-mib MIB] [--seed S]\n"
               "         [--device-mib MIB | --cap-factor F [--cap-basis concurrent|serial]]\n"
               "         [--fragment-in-turns] [--strata-wait-before-growth]\n"
               "         [--strata-cache-mib MIB] [--table] [--trace OUT.csv]\n"
               "         [--replay TRACE.csv]\n"
               "resources: cuda async pool arena strata\n",
               help ? "" : "strata-bench-e2-gpu: ", help ? "" : (why + "\n").c_str());
  std::exit(help ? 0 : 2);
}

// s as an unsigned number in base 10 or 16 (an optional 0x), or nothing: digits only and no
// overflow, where strtoull would take "-5" as 2^64 - 5 and clamp what is too large.
std::optional<std::uint64_t> to_u64(const std::string& s, int base) {
  if (s.empty() || !(base == 16 ? std::isxdigit(static_cast<unsigned char>(s[0]))
                                : std::isdigit(static_cast<unsigned char>(s[0]))))
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(s.c_str(), &end, base);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return n;
}

// A comma-separated list given on the command line (--threads, --resource): every item must be
// there.  split() dropped empty items, so "1,,2" ran 1 and 2, "--threads ," ran no cell at all
// (exit 0, no results) and "--resource ," ran every resource.
std::vector<std::string> list_items(const std::string& flag, const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (out.back().empty()) usage(flag + " has an empty item: '" + s + "'");
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

// The JSON document on stdout is the result (output.hpp; it exited 0 when lost).
bool result_written() { return strata::bench::stdout_written("strata-bench-e2-gpu", "results"); }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) out.push_back(x);
  return out;
}

config parse(int argc, char** argv) {
  config c;
  bool iterations_set = false, factor_set = false, kernel_set = false, pool_set = false;
  bool device_set = false, cap_basis_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + a);
      return argv[++i];
    };
    auto number = [&]() -> std::uint64_t {
      const std::string v = value();
      const auto n = to_u64(v, 10);
      if (!n) usage(a + " needs a number from 0 to 2^64 - 1, not '" + v + "'");
      return *n;
    };
    auto mib = [&]() -> std::size_t {  // MiB as bytes
      const std::string v = value();
      const auto n = to_u64(v, 10);
      if (!n || *n > (SIZE_MAX >> 20)) usage(a + " needs a number of MiB below 2^44, not '" + v + "'");
      return static_cast<std::size_t>(*n) << 20;
    };
    if (a == "--backend") c.backend = value();
    else if (a == "--resource") {
      const std::string v = value();
      if (v != "all") c.resources = list_items(a, v);
    } else if (a == "--threads") {
      c.threads.clear();
      for (auto& t : list_items(a, value())) {
        const auto n = to_u64(t, 10);  // atoi read "2x" as 2
        if (!n || *n < 1 || *n > 1024) usage("bad thread count: " + t);
        // "1,1" ran the cell twice: two results of the same resource and thread count
        if (std::find(c.threads.begin(), c.threads.end(), int(*n)) != c.threads.end())
          usage("--threads gives " + t + " twice");
        c.threads.push_back(static_cast<int>(*n));
      }
    } else if (a == "--smoke") c.smoke = true;
    else if (a == "--table") c.table = true;
    else if (a == "--iterations") c.iterations = number(), iterations_set = true;
    else if (a == "--long-factor") c.long_factor = number(), factor_set = true;
    else if (a == "--kernel-ns") c.kernel_ns = number(), kernel_set = true;
    else if (a == "--max-size") c.max_size = number();
    else if (a == "--pool-mib") c.pool_bytes = mib(), pool_set = true;
    else if (a == "--seed") c.seed = number();
    else if (a == "--device-mib") c.sim_capacity = mib(), c.capped = true, device_set = true;
    else if (a == "--cap-factor") {
      const std::string v = value();
      char* end = nullptr;
      c.cap_factor = std::strtod(v.c_str(), &end);
      // inf passed the >= 1 test, and F x the bound past SIZE_MAX made a device of 0 bytes
      if (v.empty() || *end || !(c.cap_factor >= 1.0) || !std::isfinite(c.cap_factor))
        usage("--cap-factor needs a finite number >= 1: " + v);
      c.capped = true;
    }
    else if (a == "--cap-basis") {
      const std::string v = value();
      if (v != "concurrent" && v != "serial") usage("--cap-basis is concurrent or serial: " + v);
      c.cap_serial = v == "serial";
      cap_basis_set = true;
    }
    else if (a == "--fragment-in-turns") c.fragment_in_turns = true;
    else if (a == "--strata-wait-before-growth") c.strata_wait = true;
    else if (a == "--strata-cache-mib") c.strata_cache = mib();
    else if (a == "--replay") c.replay = value();
    else if (a == "--trace") c.trace = value();
    else if (a == "-h" || a == "--help") usage("", true);
    else usage("unknown option " + a);
  }
  if (c.backend != "sim" && c.backend != "cuda") usage("unknown backend " + c.backend);
  if (c.smoke) {  // small enough for CI on two cores, still every phase and resource
    if (!iterations_set) c.iterations = 40;
    if (!factor_set) c.long_factor = 2;
    if (!kernel_set) c.kernel_ns = 2000;
    if (!pool_set) c.pool_bytes = std::size_t{256} << 20;
  }
  if (c.resources.empty()) c.resources = resource_stack::names();
  for (auto& r : c.resources) {
    const auto& n = resource_stack::names();
    if (std::find(n.begin(), n.end(), r) == n.end()) usage("unknown resource " + r);
    if (std::count(c.resources.begin(), c.resources.end(), r) > 1) usage("--resource gives " + r + " twice");
  }
  if (c.min_size > c.max_size) usage("--max-size below the minimum size");
  // No bound made --iterations 2^64 - 1 (or --long-factor) run for ever, iterations x long factor
  // wrap, and a --kernel-ns past 2^63 wrap to a negative sleep in the simulated device (kernels
  // of no time) while one of 10^18 slept for 31 years.  The lab's iterations parameter takes
  // 1..10^7; a phase's kernels on one stream are kept within 10 minutes.
  constexpr std::uint64_t max_iterations = 10'000'000, max_steps = 100'000'000;
  constexpr std::uint64_t max_kernel_ns = 1'000'000'000, max_phase_kernel_ns = 600'000'000'000;
  if (c.iterations < 1 || c.iterations > max_iterations)
    usage("--iterations must be 1..10000000, not " + std::to_string(c.iterations));
  if (c.long_factor > max_steps / c.iterations)
    usage("--long-factor " + std::to_string(c.long_factor) + " x --iterations " +
          std::to_string(c.iterations) + " is more than 10^8 churn steps");
  if (c.kernel_ns > max_kernel_ns || c.kernel_ns * c.iterations > max_phase_kernel_ns)
    usage("--kernel-ns " + std::to_string(c.kernel_ns) + " must be at most 10^9 (1 s), and x --iterations " +
          std::to_string(c.iterations) + " at most 600 s of kernels per phase");
  // Larger requests are refused by every resource (the dry run's counter too: it threw out of
  // main), and sizes near 2^64 do not survive the log-uniform draw's doubles.
  if (c.max_size > device_memory_resource::max_request)
    usage("--max-size above 2^62 bytes, more than any device: " + std::to_string(c.max_size));
  if (device_set && c.cap_factor > 0) usage("--device-mib and --cap-factor exclude each other");
  // Without a cap factor there is no bound to multiply: --cap-basis serial ran uncapped.
  if (cap_basis_set && !(c.cap_factor > 0)) usage("--cap-basis needs --cap-factor");
  if (c.capped && c.backend != "sim") usage("--device-mib and --cap-factor cap the simulated device only");
  if (c.capped && !pool_set) c.pool_bytes = 0;  // resources grow as needed: the cap decides
  return c;
}

// ---- the workload --------------------------------------------------------------------------
struct phase_result {
  double time_ms = 0;
  std::uint64_t alloc_ns = 0;
  std::uint64_t operations = 0;
  std::optional<std::uint64_t> lock_wait_ns;
  double fragmentation = 0;
  std::size_t peak_reserved = 0;
  std::size_t live_peak = 0;       // since the cell began
  std::size_t step_live_peak = 0;  // within this step
};

// Bytes the workload holds (requested sizes) across all threads, and its high-water mark: the
// least any resource could have reserved, if threads overlapped as they did in this run.
struct live_bytes {
  std::atomic<std::size_t> now{0}, peak{0};
  void add(std::size_t n) {
    const std::size_t v = now.fetch_add(n, std::memory_order_relaxed) + n;
    std::size_t p = peak.load(std::memory_order_relaxed);
    while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {}
  }
  void sub(std::size_t n) { now.fetch_sub(n, std::memory_order_relaxed); }
};

// A step's own live peak, with the cell's: the step starts its high-water mark from what is
// live when it begins.
struct step_live {
  std::size_t cell_peak = 0;
  void begin(live_bytes& l) {
    cell_peak = std::max(cell_peak, l.peak.load());
    l.peak.store(l.now.load());
  }
  std::size_t end(live_bytes& l) {
    cell_peak = std::max(cell_peak, l.peak.load());
    return l.peak.load();
  }
};

struct thread_timer {
  std::uint64_t ns = 0, ops = 0;
  clk::time_point start{}, end{};  // this thread's part of the phase
  void* allocate(device_memory_resource& mr, std::size_t n, stream_view s) {
    const auto t0 = clk::now();
    void* p = mr.allocate(n, s);
    ns += static_cast<std::uint64_t>((clk::now() - t0).count());
    ++ops;
    return p;
  }
  void deallocate(device_memory_resource& mr, void* p, std::size_t n, stream_view s) {
    const auto t0 = clk::now();
    mr.deallocate(p, n, s);
    ns += static_cast<std::uint64_t>((clk::now() - t0).count());
    ++ops;
  }
};

std::size_t log_uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {
  std::uniform_real_distribution<double> d(std::log2(double(lo)), std::log2(double(hi)));
  return std::max<std::size_t>(lo, static_cast<std::size_t>(std::exp2(d(rng))));
}

struct block {
  void* p;
  std::size_t n;
  // What the block was allocated with, for a free that has no trace line of its own (a replay's
  // blocks still live at its end): a block aligned past the default freed with the default
  // alignment handed the resource its aligned pointer, not the one it had made.
  std::size_t alignment = device_memory_resource::native_alignment;
  stream_view s{};
};

// One thread's part of a cell: its stream, its timer and the blocks it pins until the cell ends.
struct worker {
  device_memory_resource& mr;
  device_backend& dev;
  stream_view s;
  const config& c;
  live_bytes& live;
  thread_timer tm;
  std::vector<block> pinned;

  block allocate(std::size_t n) {
    block b{tm.allocate(mr, n, s), n};
    live.add(n);
    return b;
  }
  void free(const block& b) {
    live.sub(b.n);
    tm.deallocate(mr, b.p, b.n, s);
  }
  void kernel() {
    if (c.kernel_ns) dev.launch_spin(s, c.kernel_ns);
  }
  // Frees every block of `blocks` in order, then waits for the stream: the end of every step.
  void free_all_and_sync(const std::vector<block>& blocks) {
    for (const block& b : blocks) free(b);
    dev.stream_synchronize(s);
  }

  // W: allocate, launch a kernel, free the oldest of the last `window` blocks.
  void workload(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    constexpr std::size_t window = 8;
    std::vector<block> ring;
    ring.reserve(window);
    std::size_t oldest = 0;
    for (std::size_t i = 0; i < c.iterations; ++i) {
      const block b = allocate(log_uniform(rng, c.min_size, c.max_size));
      kernel();
      if (ring.size() < window) {
        ring.push_back(b);
      } else {
        free(ring[oldest]);
        ring[oldest] = b;
        oldest = (oldest + 1) % window;
      }
    }
    free_all_and_sync(ring);
  }

  // Interleaved small (pinned) and large blocks; the large ones freed out of order.
  void fragment(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<block> large;
    const std::size_t count = std::max<std::size_t>(16, c.iterations / 2);
    for (std::size_t i = 0; i < count; ++i) {
      if (i % 2 == 0)
        pinned.push_back(allocate(log_uniform(rng, c.min_size, 16 << 10)));
      else
        large.push_back(allocate(log_uniform(rng, std::min<std::size_t>(256 << 10, c.max_size), c.max_size)));
    }
    kernel();
    std::shuffle(large.begin(), large.end(), rng);  // out of order
    free_all_and_sync(large);
  }

  // Random allocate/free with at most 32 live blocks; every 64th small block is pinned.
  void churn(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<block> live;
    const std::size_t steps = c.iterations * c.long_factor;
    for (std::size_t i = 0; i < steps; ++i) {
      if (live.size() < 32 && (live.empty() || rng() % 2)) {
        const block b = allocate(log_uniform(rng, c.min_size, c.max_size));
        if (i % 64 == 0 && b.n <= (64 << 10)) pinned.push_back(b);  // long-lived survivors
        else live.push_back(b);
        if (i % 4 == 0) kernel();
      } else {
        const std::size_t k = rng() % live.size();
        free(live[k]);
        live[k] = live.back();
        live.pop_back();
      }
    }
    free_all_and_sync(live);
  }

  // Step k of a cell's script: 0 baseline, 1 fragment, 2 fragmented, 3 churn, 4 long_term.
  void step(int k, std::uint64_t seed) {
    if (k == 1) fragment(seed + 1);
    else if (k == 3) churn(seed + 3);
    else workload(seed);
  }
};
constexpr int script_steps = 5;

std::uint64_t worker_seed(const config& c, int t) { return c.seed + 7919 * std::uint64_t(t); }

// Hands out address ranges it never backs, so a dry run can count a script's live bytes.
class counting_resource final : public device_memory_resource {
 public:
  using device_memory_resource::device_memory_resource;

 private:
  void* do_allocate(std::size_t bytes, stream_view, std::size_t) override {
    return reinterpret_cast<void*>(next_.fetch_add((bytes + 255) / 256 * 256 + 256));
  }
  void do_deallocate(void*, std::size_t, stream_view, std::size_t) noexcept override {}
  resource_info do_info() const override { return {}; }
  std::string_view do_name() const noexcept override { return "counting"; }
  std::atomic<std::uintptr_t> next_{std::uintptr_t{1} << 40};
};

// The cell's two live bounds (see the top of this file), from dry runs with no kernels.
struct live_bounds {
  std::size_t concurrent = 0, serial = 0;
};

live_bounds dry_run(const config& c, int nthreads) {
  config dry = c;
  dry.kernel_ns = 0;
  sim_options so;
  so.check_reuse = false;
  auto dev = make_sim_backend(so);
  counting_resource counter(dev);
  const stream_view s = dev->stream_create();
  live_bounds b;
  for (int t = 0; t < nthreads; ++t) {  // each thread alone: its own peak
    live_bytes own;
    worker w{counter, *dev, s, dry, own, {}, {}};
    for (int k = 0; k < script_steps; ++k) w.step(k, worker_seed(c, t));
    b.concurrent += own.peak.load();
  }
  live_bytes shared;  // step k of thread 0, 1, .., n - 1, then step k + 1; pinned blocks stay
  std::vector<worker> ws;
  ws.reserve(nthreads);
  for (int t = 0; t < nthreads; ++t) ws.push_back(worker{counter, *dev, s, dry, shared, {}, {}});
  for (int k = 0; k < script_steps; ++k)
    for (int t = 0; t < nthreads; ++t) ws[t].step(k, worker_seed(c, t));
  b.serial = shared.peak.load();
  dev->stream_destroy(s);
  return b;
}

// ---- one cell: resource x thread count -------------------------------------------------------
struct cell_result {
  std::string resource;
  int threads = 0;
  std::string error;  // empty: ok
  std::map<std::string, phase_result> phases;  // the timed steps
  std::map<std::string, phase_result> setup;   // the untimed ones (time, live and reserved only)
};

const char* const phase_names[] = {"baseline", "fragmented", "long_term"};
const char* const step_names[] = {"baseline", "fragment", "fragmented", "churn", "long_term"};

cell_result run_cell(const std::string& name, int nthreads, const config& c,
                     std::shared_ptr<device_backend> dev, bool trace_this) {
  cell_result out;
  out.resource = name;
  out.threads = nthreads;
  try {
    stack_options so;
    so.initial_size = c.pool_bytes;
    so.strata.wait_before_growth = c.strata_wait;
    so.strata.cache_bytes = c.strata_cache;
    resource_stack stack(name, dev, so);
    std::unique_ptr<logging_adaptor> logger;
    if (trace_this) logger = std::make_unique<logging_adaptor>(stack.top(), c.trace);
    device_memory_resource& mr = logger ? static_cast<device_memory_resource&>(*logger) : stack.top();

    std::vector<stream_view> streams;
    for (int t = 0; t < nthreads; ++t) streams.push_back(dev->stream_create());
    live_bytes live;
    std::vector<worker> workers;
    workers.reserve(nthreads);
    for (int t = 0; t < nthreads; ++t) workers.push_back(worker{mr, *dev, streams[t], c, live, {}, {}});
    std::atomic<bool> failed{false};
    std::string failure;
    std::mutex failure_m;
    std::mutex turns;  // --fragment-in-turns

    constexpr int steps = script_steps;
    std::barrier sync(nthreads + 1);
    std::vector<std::thread> pool;
    for (int t = 0; t < nthreads; ++t) {
      pool.emplace_back([&, t] {
        const std::uint64_t wseed = worker_seed(c, t);
        for (int k = 0; k < steps; ++k) {
          sync.arrive_and_wait();  // start
          if (!failed.load()) {
            try {
              worker& w = workers[t];
              std::unique_lock turn(turns, std::defer_lock);
              if (k == 1 && c.fragment_in_turns) turn.lock();
              w.tm.start = clk::now();
              w.step(k, wseed);
              w.tm.end = clk::now();
            } catch (const std::exception& e) {
              std::lock_guard lock(failure_m);
              if (!failed.exchange(true)) failure = e.what();
            }
          }
          sync.arrive_and_wait();  // done
        }
      });
    }
    step_live step_peak;
    for (int k = 0; k < steps; ++k) {
      for (auto& w : workers) w.tm = {};
      const auto wait_before = mr.info().lock_wait_ns;
      step_peak.begin(live);  // the workers wait at the start barrier
      sync.arrive_and_wait();
      sync.arrive_and_wait();
      // first thread's start to last thread's end (the workers' clocks, not this thread's
      // wake-ups: on a loaded machine the main thread can be scheduled late)
      clk::time_point first = clk::time_point::max(), last = clk::time_point::min();
      for (auto& w : workers) first = std::min(first, w.tm.start), last = std::max(last, w.tm.end);
      const double ms = last > first ? std::chrono::duration<double, std::milli>(last - first).count() : 0.0;
      phase_result r;
      r.time_ms = ms;
      for (auto& w : workers) r.alloc_ns += w.tm.ns, r.operations += w.tm.ops;
      const resource_info info = mr.info();
      if (info.lock_wait_ns && wait_before) r.lock_wait_ns = *info.lock_wait_ns - *wait_before;
      r.fragmentation = info.fragmentation();
      r.peak_reserved = info.peak_reserved_bytes;
      r.step_live_peak = step_peak.end(live);
      r.live_peak = step_peak.cell_peak;
      (k % 2 == 1 ? out.setup : out.phases)[step_names[k]] = r;  // odd steps are setup
    }
    for (auto& th : pool) th.join();
    for (auto& w : workers)
      for (auto& b : w.pinned) mr.deallocate(b.p, b.n, w.s);
    dev->device_synchronize();
    for (auto s : streams) dev->stream_destroy(s);
    if (logger) logger->flush();  // a trace that lost lines (full disk) fails the cell
    if (failed) out.error = failure;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

// ---- replay ----------------------------------------------------------------------------------
struct trace_op {
  bool alloc;
  std::uint64_t ptr, stream;
  std::size_t bytes, alignment;
};

std::vector<trace_op> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "strata-bench-e2-gpu: cannot read trace %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<trace_op> ops;
  std::string line;
  std::getline(in, line);
  if (line != logging_adaptor::header) {
    std::fprintf(stderr, "strata-bench-e2-gpu: %s is not a logging_adaptor trace\n", path.c_str());
    std::exit(2);
  }
  for (std::size_t line_no = 2; std::getline(in, line); ++line_no) {
    auto f = split(line);
    if (f.size() != 7 || f[0] == "oom") continue;
    auto field = [&](std::size_t i, const char* name, int base) {
      const auto n = to_u64(f[i], base);
      if (!n) {
        std::fprintf(stderr, "strata-bench-e2-gpu: %s:%zu: %s is not a number below 2^64: '%s'\n",
                     path.c_str(), line_no, name, f[i].c_str());
        std::exit(2);
      }
      return *n;
    };
    ops.push_back({f[0] == "alloc", field(3, "ptr", 16), field(5, "stream", 16),
                   field(4, "bytes", 10), field(6, "alignment", 10)});
  }
  return ops;
}

std::string json_number(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else o += ch;
  }
  return o + "\"";
}

int replay(const config& c, std::shared_ptr<device_backend> dev) {
  const auto ops = read_trace(c.replay);
  std::printf("{\n  \"schema\": \"strata.e2-gpu.replay/1\",\n  \"backend\": %s,\n  \"trace\": %s,\n"
              "  \"operations\": %zu,\n  \"results\": [",
              json_string(c.backend).c_str(), json_string(c.replay).c_str(), ops.size());
  bool first = true, any_failed = false;
  for (const auto& name : c.resources) {
    std::string error;
    double ms = 0, frag = 0;
    std::uint64_t alloc_ns = 0;
    std::size_t peak = 0, failed = 0;
    try {
      stack_options so;
      so.initial_size = c.pool_bytes;
      resource_stack stack(name, dev, so);
      auto& mr = stack.top();
      std::map<std::uint64_t, stream_view> streams;
      std::map<std::uint64_t, block> live;
      auto stream_for = [&](std::uint64_t id) {
        if (id == 0) return stream_view{};
        auto it = streams.find(id);
        if (it == streams.end()) it = streams.emplace(id, dev->stream_create()).first;
        return it->second;
      };
      thread_timer tm;
      const auto t0 = clk::now();
      for (const auto& op : ops) {
        const stream_view s = stream_for(op.stream);
        if (op.alloc) {
          try {
            const auto t1 = clk::now();
            void* p = mr.allocate(op.bytes, s, op.alignment);
            tm.ns += static_cast<std::uint64_t>((clk::now() - t1).count());
            live[op.ptr] = block{p, op.bytes, op.alignment, s};
          } catch (const std::bad_alloc&) {
            ++failed;
          }
        } else if (auto it = live.find(op.ptr); it != live.end()) {
          const auto t1 = clk::now();
          mr.deallocate(it->second.p, op.bytes, s, op.alignment);
          tm.ns += static_cast<std::uint64_t>((clk::now() - t1).count());
          live.erase(it);
        }
      }
      dev->device_synchronize();
      ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
      alloc_ns = tm.ns;
      const auto info = mr.info();
      frag = info.fragmentation();
      peak = info.peak_reserved_bytes;
      for (auto& [k, b] : live) mr.deallocate(b.p, b.n, b.s, b.alignment);
      dev->device_synchronize();
      for (auto& [id, s] : streams) dev->stream_destroy(s);
    } catch (const std::exception& e) {
      error = e.what();
      any_failed = true;
    }
    std::printf("%s\n    {\"resource\": %s, \"status\": %s", first ? "" : ",", json_string(name).c_str(),
                error.empty() ? "\"ok\"" : "\"error\"");
    if (!error.empty()) std::printf(", \"error\": %s}", json_string(error).c_str());
    else
      std::printf(", \"time_ms\": %s, \"alloc_ns_total\": %llu, \"failed_allocations\": %zu, "
                  "\"fragmentation\": %s, \"peak_reserved_bytes\": %zu}",
                  json_number(ms).c_str(), static_cast<unsigned long long>(alloc_ns), failed,
                  json_number(frag).c_str(), peak);
    first = false;
  }
  std::printf("\n  ]\n}\n");
  if (!result_written()) return 4;
  return any_failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  std::shared_ptr<device_backend> dev;
  try {
    if (c.backend == "sim") {
      sim_options so;
      so.capacity_bytes = c.sim_capacity;
      so.check_reuse = false;  // the checker serialises every call; the tests run it instead
      dev = make_sim_backend(so);
    } else {
      dev = make_cuda_backend(0);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench-e2-gpu: cannot use the %s backend: %s\n", c.backend.c_str(), e.what());
    return 3;
  }
  if (!c.replay.empty()) return replay(c, dev);

  std::printf("{\n  \"schema\": \"strata.e2-gpu/1\",\n  \"backend\": %s,\n  \"device\": %s,\n"
              "  \"smoke\": %s,\n",
              json_string(c.backend).c_str(), json_string(dev->description()).c_str(),
              c.smoke ? "true" : "false");
  std::printf("  \"config\": {\"iterations\": %zu, \"long_factor\": %zu, \"kernel_ns\": %llu, "
              "\"min_size\": %zu, \"max_size\": %zu, \"initial_pool_bytes\": %zu, \"seed\": %llu, "
              "\"window\": 8, \"fragment_in_turns\": %s, \"strata_wait_before_growth\": %s, \"strata_cache_bytes\": %s, \"device_bytes\": %s, \"cap_factor\": %s, \"cap_basis\": %s, \"threads\": [",
              c.iterations, c.long_factor, static_cast<unsigned long long>(c.kernel_ns), c.min_size,
              c.max_size, c.pool_bytes, static_cast<unsigned long long>(c.seed),
              c.fragment_in_turns ? "true" : "false", c.strata_wait ? "true" : "false",
              c.strata_cache == strata_options{}.cache_bytes ? "null" : std::to_string(c.strata_cache).c_str(),
              c.capped && c.cap_factor == 0 ? std::to_string(c.sim_capacity).c_str() : "null",
              c.cap_factor > 0 ? json_number(c.cap_factor).c_str() : "null",
              c.cap_factor > 0 ? (c.cap_serial ? "\"serial\"" : "\"concurrent\"") : "null");
  for (std::size_t i = 0; i < c.threads.size(); ++i) std::printf("%s%d", i ? ", " : "", c.threads[i]);
  std::printf("]},\n  \"phases\": [\"baseline\", \"fragmented\", \"long_term\"],\n  \"results\": [");
  std::fflush(stdout);

  std::vector<cell_result> all;
  std::map<int, live_bounds> bounds;
  for (int t : c.threads) bounds[t] = dry_run(c, t);
  bool first = true, traced = false;
  for (const auto& name : c.resources) {
    for (int t : c.threads) {
      const bool trace_this = !c.trace.empty() && !traced;
      traced = traced || trace_this;
      std::shared_ptr<device_backend> cell_dev = dev;
      std::size_t device_bytes = c.sim_capacity;
      if (c.cap_factor > 0) {  // a device of its own, cap_factor x this cell's live bound
        const std::size_t bound = c.cap_serial ? bounds[t].serial : bounds[t].concurrent;
        // no more than any device has (2^62), so the product stays a size
        const double want = std::min(c.cap_factor * double(bound), double(device_memory_resource::max_request));
        device_bytes = (static_cast<std::size_t>(want) + (1 << 20) - 1) >> 20 << 20;
        sim_options so;
        so.capacity_bytes = device_bytes;
        so.check_reuse = false;
        cell_dev = make_sim_backend(so);
      }
      cell_result r = run_cell(name, t, c, cell_dev, trace_this);
      std::printf("%s\n    {\"resource\": %s, \"threads\": %d, \"status\": %s", first ? "" : ",",
                  json_string(r.resource).c_str(), r.threads, r.error.empty() ? "\"ok\"" : "\"error\"");
      if (c.capped) std::printf(", \"device_bytes\": %zu", device_bytes);
      std::printf(", \"live_bound_bytes\": %zu, \"serial_live_bound_bytes\": %zu",
                  bounds[t].concurrent, bounds[t].serial);
      if (!r.error.empty()) std::printf(", \"error\": %s", json_string(r.error).c_str());
      if (r.phases.size() == 3) {
        std::printf(", \"phases\": {");
        const double base = r.phases["baseline"].time_ms;
        for (int k = 0; k < 3; ++k) {
          const auto& p = r.phases[phase_names[k]];
          std::printf("%s\n      %s: {\"time_ms\": %s, \"change_pct\": %s, \"alloc_ns_total\": %llu, "
                      "\"operations\": %llu, \"lock_wait_ns\": %s, \"fragmentation\": %s, "
                      "\"peak_reserved_bytes\": %zu, \"live_peak_bytes\": %zu, "
                      "\"step_live_peak_bytes\": %zu}",
                      k ? "," : "", json_string(phase_names[k]).c_str(), json_number(p.time_ms).c_str(),
                      json_number(base > 0 ? 100.0 * (p.time_ms - base) / base : 0.0).c_str(),
                      static_cast<unsigned long long>(p.alloc_ns), static_cast<unsigned long long>(p.operations),
                      p.lock_wait_ns ? std::to_string(*p.lock_wait_ns).c_str() : "null",
                      json_number(p.fragmentation).c_str(), p.peak_reserved, p.live_peak,
                      p.step_live_peak);
        }
        std::printf("}, \"setup\": {");
        bool first_step = true;
        for (const auto& [step, p] : r.setup) {
          std::printf("%s\n      %s: {\"time_ms\": %s, \"peak_reserved_bytes\": %zu, "
                      "\"step_live_peak_bytes\": %zu}",
                      first_step ? "" : ",", json_string(step).c_str(), json_number(p.time_ms).c_str(),
                      p.peak_reserved, p.step_live_peak);
          first_step = false;
        }
        std::printf("}");
      }
      std::printf("}");
      std::fflush(stdout);
      first = false;
      all.push_back(std::move(r));
    }
  }
  std::printf("\n  ]\n}\n");
  if (!result_written()) return 4;

  bool any_failed = false;
  for (auto& r : all) any_failed = any_failed || !r.error.empty();
  if (c.table) {
    std::fprintf(stderr, "E2 on %s (%s)%s\n", c.backend.c_str(), dev->description().c_str(),
                 c.smoke ? " - smoke mode" : "");
    std::fprintf(stderr, "%-7s %3s  %10s %10s %8s %10s %8s  %9s %9s %7s %9s\n", "res", "thr",
                 "base ms", "frag ms", "frag %", "long ms", "long %", "alloc ms", "lock ms", "frag",
                 "peak MiB");
    for (auto& r : all) {
      if (!r.error.empty()) {
        std::fprintf(stderr, "%-7s %3d  error: %s\n", r.resource.c_str(), r.threads, r.error.c_str());
        continue;
      }
      auto& b = r.phases["baseline"];
      auto& f = r.phases["fragmented"];
      auto& l = r.phases["long_term"];
      char lock[32] = "-";
      if (l.lock_wait_ns) std::snprintf(lock, sizeof lock, "%.2f", *l.lock_wait_ns / 1e6);
      std::fprintf(stderr, "%-7s %3d  %10.2f %10.2f %+7.1f%% %10.2f %+7.1f%%  %9.2f %9s %7.3f %9.1f\n",
                   r.resource.c_str(), r.threads, b.time_ms, f.time_ms,
                   100.0 * (f.time_ms - b.time_ms) / b.time_ms, l.time_ms,
                   100.0 * (l.time_ms - b.time_ms) / b.time_ms, l.alloc_ns / 1e6, lock,
                   std::isnan(l.fragmentation) ? -1.0 : l.fragmentation, l.peak_reserved / 1048576.0);
    }
  }
  return any_failed ? 1 : 0;
}
