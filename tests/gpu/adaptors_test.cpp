// statistics, limiting, tracking and logging adaptors.
#include <strata/gpu/gpu.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <ios>
#include <ostream>
#include <streambuf>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace strata::gpu;

namespace {

struct adaptors : ::testing::Test {
  std::shared_ptr<sim_backend> dev = make_sim_backend();
  cuda_resource upstream{dev};
};

TEST_F(adaptors, statistics_counts_current_peak_and_total) {
  statistics_adaptor stats(upstream);
  void* a = stats.allocate(1000);
  void* b = stats.allocate(3000);
  stats.deallocate(a, 1000);
  void* c = stats.allocate(500);
  auto k = stats.counts();
  EXPECT_EQ(k.current_bytes, 3500);
  EXPECT_EQ(k.peak_bytes, 4000);
  EXPECT_EQ(k.total_bytes, 4500);
  EXPECT_EQ(k.current_count, 2);
  EXPECT_EQ(k.peak_count, 2);
  EXPECT_EQ(k.total_count, 3);
  stats.deallocate(b, 3000);
  stats.deallocate(c, 500);
  EXPECT_EQ(stats.counts().current_bytes, 0);
}

TEST_F(adaptors, statistics_is_exact_under_threads) {
  statistics_adaptor stats(upstream);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 200; ++i) stats.deallocate(stats.allocate(256), 256);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(stats.counts().total_count, 800);
  EXPECT_EQ(stats.counts().current_bytes, 0);
}

// Hands out distinct addresses it never backs, as fast as it can (for the adaptors' counters).
class counting_resource final : public device_memory_resource {
 public:
  using device_memory_resource::device_memory_resource;

 private:
  void* do_allocate(std::size_t, stream_view, std::size_t) override {
    return reinterpret_cast<void*>(next_.fetch_add(1, std::memory_order_relaxed) * 256);
  }
  void do_deallocate(void*, std::size_t, stream_view, std::size_t) noexcept override {}
  resource_info do_info() const override { return {}; }
  std::string_view do_name() const noexcept override { return "counting"; }
  std::atomic<std::uintptr_t> next_{1};
};

// A snapshot taken while other threads allocate never shows more in use than its high-water
// mark: counts() read the peak after a thread had added its bytes and before it raised the
// peak (136 of 2.6 million snapshots in a probe; strata_gpu_get_stats's bytes_in_use above
// peak_bytes_in_use).
TEST_F(adaptors, statistics_snapshot_never_shows_more_in_use_than_its_peak) {
  counting_resource fake(dev);
  statistics_adaptor stats(fake);
  std::atomic<bool> done{false};
  std::thread writer([&] {  // every allocation a new peak (the fake needs no frees)
    for (int i = 0; i < 2000000; ++i) stats.allocate(256);
    done = true;
  });
  long bytes_over = 0, count_over = 0;
  while (!done.load()) {
    const allocation_counts c = stats.counts();
    bytes_over += c.current_bytes > c.peak_bytes;
    count_over += c.current_count > c.peak_count;
  }
  writer.join();
  EXPECT_EQ(bytes_over, 0) << "snapshots with current_bytes above peak_bytes";
  EXPECT_EQ(count_over, 0) << "snapshots with current_count above peak_count";
}

TEST_F(adaptors, limiting_refuses_past_the_limit_with_the_remaining_budget) {
  limiting_adaptor limit(upstream, 1 << 20);
  void* a = limit.allocate(768 << 10);
  try {
    limit.allocate(512 << 10);
    FAIL() << "over the limit";
  } catch (const out_of_memory_error& e) {
    EXPECT_EQ(e.requested(), std::size_t{512} << 10);
    EXPECT_EQ(e.free_total(), std::size_t{256} << 10);
    EXPECT_EQ(e.fragmentation(), 0.0);
  }
  EXPECT_EQ(limit.used(), std::size_t{768} << 10);
  limit.deallocate(a, 768 << 10);
  void* b = limit.allocate(1 << 20);  // the whole budget again
  limit.deallocate(b, 1 << 20);
  EXPECT_EQ(limit.used(), 0u);
}

TEST_F(adaptors, limiting_gives_back_the_charge_when_upstream_fails) {
  limiting_adaptor limit(upstream, ~std::size_t{0} >> 1);
  EXPECT_THROW(limit.allocate(std::size_t{1} << 40), out_of_memory_error);  // device refuses
  EXPECT_EQ(limit.used(), 0u);
}

TEST_F(adaptors, tracking_reports_outstanding_and_mismatched_frees) {
  tracking_adaptor track(upstream);
  stream_view s = dev->stream_create();
  void* a = track.allocate(100, s);
  void* b = track.allocate(200);
  auto live = track.outstanding();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[a].bytes, 100u);
  EXPECT_EQ(live[a].stream, s);
  EXPECT_EQ(track.outstanding_bytes(), 300u);
  track.deallocate(b, 999);  // wrong size: counted, not forwarded
  EXPECT_EQ(track.mismatched_deallocations(), 1u);
  EXPECT_EQ(track.outstanding().size(), 2u);
  int x;
  track.deallocate(&x, 4);  // never allocated here
  EXPECT_EQ(track.mismatched_deallocations(), 2u);
  track.deallocate(b, 200);
  track.deallocate(a, 100, s);
  EXPECT_EQ(track.outstanding_bytes(), 0u);
  EXPECT_EQ(upstream.info().allocated_bytes, 0u);
  dev->stream_destroy(s);
}

TEST_F(adaptors, logging_writes_a_replayable_csv_trace) {
  std::ostringstream out;
  stream_view s = dev->stream_create();
  void* a;
  {
    logging_adaptor log(upstream, out);
    a = log.allocate(4096, s);
    log.deallocate(a, 4096, s);
    EXPECT_THROW(log.allocate(std::size_t{1} << 40), out_of_memory_error);
  }
  std::istringstream in(out.str());
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << out.str();
  EXPECT_EQ(lines[0], logging_adaptor::header);
  auto fields = [](const std::string& l) {
    std::vector<std::string> f;
    std::stringstream ss(l);
    std::string x;
    while (std::getline(ss, x, ',')) f.push_back(x);
    return f;
  };
  auto alloc = fields(lines[1]), free = fields(lines[2]), oom = fields(lines[3]);
  ASSERT_EQ(alloc.size(), 7u);
  EXPECT_EQ(alloc[0], "alloc");
  EXPECT_EQ(free[0], "free");
  EXPECT_EQ(oom[0], "oom");
  EXPECT_EQ(std::stoull(alloc[3], nullptr, 16), reinterpret_cast<std::uintptr_t>(a));
  EXPECT_EQ(alloc[3], free[3]);
  EXPECT_EQ(alloc[4], "4096");
  EXPECT_EQ(std::stoull(alloc[5], nullptr, 16), s.id());
  EXPECT_EQ(alloc[6], "256");
  EXPECT_EQ(alloc[1], free[1]);                             // same thread
  EXPECT_LE(std::stoll(alloc[2]), std::stoll(free[2]));     // time never runs backwards
  EXPECT_EQ(oom[3], "0x0");
  dev->stream_destroy(s);
}

// A stream buffer that takes `room` characters (the header, say) and then refuses every write,
// or that refuses only to sync (flush).
class failing_buf final : public std::streambuf {
 public:
  explicit failing_buf(std::size_t room, bool sync_fails = false)
      : room_(room), sync_fails_(sync_fails) {}
  std::string taken;

 private:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto k = std::min<std::streamsize>(n, static_cast<std::streamsize>(room_ - taken.size()));
    taken.append(s, static_cast<std::size_t>(k));
    return k;
  }
  int_type overflow(int_type c) override {
    if (taken.size() >= room_ || traits_type::eq_int_type(c, traits_type::eof()))
      return traits_type::eof();
    taken.push_back(traits_type::to_char_type(c));
    return c;
  }
  int sync() override { return sync_fails_ ? -1 : 0; }
  std::size_t room_;
  bool sync_fails_;
};

// An alloc line that cannot be written (a caller's stream with exceptions() set) failed the
// allocate after the upstream had handed out the block: the caller never saw the pointer, so
// the block was lost (4096 bytes still allocated upstream), and an oom line that could not be
// written replaced the out_of_memory_error with std::ios_base::failure.
TEST_F(adaptors, logging_a_failed_write_loses_no_block_and_keeps_the_out_of_memory_error) {
  failing_buf buf(std::string(logging_adaptor::header).size() + 1);
  std::ostream out(&buf);
  out.exceptions(std::ios::badbit);
  {
    logging_adaptor log(upstream, out);
    EXPECT_THROW(log.allocate(4096), std::ios_base::failure);
    EXPECT_EQ(upstream.info().allocated_bytes, 0u) << "the block the trace could not record leaked";
    EXPECT_THROW(log.allocate(std::size_t{1} << 40), out_of_memory_error);
  }
  EXPECT_EQ(buf.taken, std::string(logging_adaptor::header) + "\n");
}

// ~logging_adaptor flushes; a flush that throws (sync fails, exceptions() set) ended the program
// with std::terminate from the destructor.
TEST_F(adaptors, logging_destructor_survives_a_flush_that_throws) {
  failing_buf buf(1 << 20, /*sync_fails=*/true);
  std::ostream out(&buf);
  out.exceptions(std::ios::badbit);
  {
    logging_adaptor log(upstream, out);
    log.deallocate(log.allocate(4096), 4096);
  }  // before: terminate called after throwing an instance of 'std::ios_base::failure'
  EXPECT_TRUE(out.bad());
  EXPECT_EQ(upstream.info().allocated_bytes, 0u);
  EXPECT_NE(buf.taken.find("free,"), std::string::npos) << buf.taken;
}

// A trace that could not be written (here /dev/full: the file opens, every write fails) was lost
// in silence: flush() and the destructor said nothing, and strata-bench-e2-gpu --trace reported
// success with an empty file.
TEST_F(adaptors, logging_flush_reports_a_trace_that_could_not_be_written) {
  if (!std::ofstream("/dev/full")) GTEST_SKIP() << "no /dev/full";
  logging_adaptor log(upstream, "/dev/full");
  void* p = log.allocate(4096);
  log.deallocate(p, 4096);
  EXPECT_THROW(log.flush(), std::runtime_error);
  EXPECT_EQ(upstream.info().allocated_bytes, 0u);
}

TEST_F(adaptors, logging_flush_succeeds_when_the_whole_trace_was_written) {
  std::ostringstream out;
  logging_adaptor log(upstream, out);
  log.deallocate(log.allocate(4096), 4096);
  EXPECT_NO_THROW(log.flush());
  EXPECT_NE(out.str().find("\nfree,"), std::string::npos) << out.str();
}

}  // namespace
