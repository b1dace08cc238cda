// The simulated device: stream order, events, cross-stream waits and the reuse checker.
// Work is held pending with gates (opened by the test), never with timing.
#include <strata/gpu/device_backend.hpp>
#include <strata/gpu/errors.hpp>

#include <gtest/gtest.h>

#include <vector>

using namespace strata::gpu;

namespace {

struct sim : ::testing::Test {
  std::shared_ptr<sim_backend> dev = make_sim_backend();
  stream_view a = dev->stream_create();
  stream_view b = dev->stream_create();
  void TearDown() override {
    dev->device_synchronize();
    dev->stream_destroy(a);
    dev->stream_destroy(b);
  }
};

TEST_F(sim, operations_run_in_stream_order) {
  void* gate = dev->gate_enqueue(a);
  dev->launch_spin(a, 0);
  dev->launch_spin(a, 0);
  void* ev = dev->event_create();
  dev->event_record(ev, a);
  EXPECT_FALSE(dev->event_query(ev));  // the gate holds everything behind it
  EXPECT_EQ(dev->completed_ops(a), 0u);
  dev->gate_open(gate);
  dev->event_synchronize(ev);
  EXPECT_TRUE(dev->event_query(ev));
  EXPECT_EQ(dev->completed_ops(a), 3u);
  dev->event_destroy(ev);
}

TEST_F(sim, event_recorded_on_idle_stream_is_complete) {
  void* ev = dev->event_create();
  EXPECT_TRUE(dev->event_query(ev));  // never recorded
  dev->event_record(ev, a);
  EXPECT_TRUE(dev->event_query(ev));  // nothing enqueued before it
  dev->event_destroy(ev);
}

TEST_F(sim, stream_wait_event_orders_other_stream) {
  void* gate = dev->gate_enqueue(a);
  void* on_a = dev->event_create();
  dev->event_record(on_a, a);
  dev->stream_wait_event(b, on_a);
  dev->launch_spin(b, 0);
  void* on_b = dev->event_create();
  dev->event_record(on_b, b);
  EXPECT_FALSE(dev->event_query(on_b));  // b waits for a, which waits for the gate
  dev->gate_open(gate);
  dev->event_synchronize(on_b);
  EXPECT_GE(dev->completed_ops(a), 1u);
  EXPECT_TRUE(dev->event_query(on_a));
  dev->event_destroy(on_a);
  dev->event_destroy(on_b);
}

TEST_F(sim, independent_streams_do_not_wait_for_each_other) {
  void* gate = dev->gate_enqueue(a);
  dev->launch_spin(b, 0);
  dev->stream_synchronize(b);  // would hang if b were ordered after a
  EXPECT_EQ(dev->completed_ops(b), 1u);
  EXPECT_EQ(dev->completed_ops(a), 0u);
  dev->gate_open(gate);
}

TEST_F(sim, memory_capacity_is_enforced) {
  sim_options o;
  o.capacity_bytes = 1 << 20;
  auto small = make_sim_backend(o);
  void* p = small->mem_alloc(768 << 10);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(small->mem_alloc(512 << 10), nullptr);
  EXPECT_EQ(small->mem_info().free_bytes, std::size_t{256} << 10);
  small->mem_free(p, 768 << 10);
  EXPECT_EQ(small->mem_info().free_bytes, std::size_t{1} << 20);
}

// The checker itself: each way of making cross-stream reuse safe, and the violation.
TEST_F(sim, reuse_checker_flags_reuse_before_the_guarding_event) {
  std::vector<char> block(4096);
  void* gate = dev->gate_enqueue(a);  // work on a stays pending
  dev->note_release(block.data(), block.size(), a);
  dev->note_reuse(block.data(), block.size(), b);  // b does not wait for a: violation
  ASSERT_EQ(dev->violation_count(), 1u);
  auto v = dev->violations();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].address, reinterpret_cast<std::uintptr_t>(block.data()));
  EXPECT_EQ(v[0].bytes, block.size());
  EXPECT_EQ(v[0].released_on, a.id());
  EXPECT_EQ(v[0].reused_on, b.id());
  dev->gate_open(gate);
}

TEST_F(sim, reuse_checker_flags_overlapping_part_only) {
  std::vector<char> block(4096);
  void* gate = dev->gate_enqueue(a);
  dev->note_release(block.data(), 1024, a);
  dev->note_reuse(block.data() + 512, 2048, b);
  auto v = dev->violations();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].address, reinterpret_cast<std::uintptr_t>(block.data() + 512));
  EXPECT_EQ(v[0].bytes, 512u);
  dev->gate_open(gate);
}

TEST_F(sim, reuse_checker_accepts_same_stream_event_wait_and_completion) {
  std::vector<char> block(4096);
  void* gate = dev->gate_enqueue(a);
  // same stream: stream order protects it
  dev->note_release(block.data(), 4096, a);
  dev->note_reuse(block.data(), 4096, a);
  // other stream, after waiting on an event recorded after the release
  dev->note_release(block.data(), 4096, a);
  void* ev = dev->event_create();
  dev->event_record(ev, a);
  dev->stream_wait_event(b, ev);
  dev->note_reuse(block.data(), 4096, b);
  EXPECT_EQ(dev->violation_count(), 0u);
  // an event recorded BEFORE the release does not cover it
  stream_view c = dev->stream_create();
  dev->event_record(ev, a);
  dev->stream_wait_event(c, ev);
  dev->launch_spin(a, 0);
  dev->note_release(block.data(), 4096, a);
  dev->note_reuse(block.data(), 4096, c);
  EXPECT_EQ(dev->violation_count(), 1u);
  // completion: the host waited for a
  dev->gate_open(gate);
  dev->note_release(block.data(), 4096, a);
  dev->stream_synchronize(a);
  dev->note_reuse(block.data(), 4096, c);
  EXPECT_EQ(dev->violation_count(), 1u);
  dev->event_destroy(ev);
  dev->stream_synchronize(c);
  dev->stream_destroy(c);
}

TEST_F(sim, reuse_checker_follows_chains_of_waits) {
  std::vector<char> block(256);
  stream_view c = dev->stream_create();
  void* gate = dev->gate_enqueue(a);
  dev->note_release(block.data(), 256, a);
  void* ev = dev->event_create();
  dev->event_record(ev, a);
  dev->stream_wait_event(b, ev);  // b after a
  void* ev2 = dev->event_create();
  dev->event_record(ev2, b);
  dev->stream_wait_event(c, ev2);  // c after b, hence after a
  dev->note_reuse(block.data(), 256, c);
  EXPECT_EQ(dev->violation_count(), 0u);
  dev->gate_open(gate);
  dev->device_synchronize();
  dev->event_destroy(ev);
  dev->event_destroy(ev2);
  dev->stream_destroy(c);
}

TEST_F(sim, async_pool_reuses_only_safe_blocks) {
  void* pool = dev->pool_create(~std::size_t{0});
  void* gate = dev->gate_enqueue(a);
  void* p = dev->pool_alloc_async(pool, 4096, a);
  ASSERT_NE(p, nullptr);
  dev->pool_free_async(pool, p, a);
  EXPECT_EQ(dev->pool_alloc_async(pool, 4096, a), p);  // same stream: reused at once
  dev->pool_free_async(pool, p, a);
  void* q = dev->pool_alloc_async(pool, 4096, b);  // a's free is pending: not for b
  EXPECT_NE(q, p);
  dev->pool_free_async(pool, q, b);
  dev->gate_open(gate);
  dev->stream_synchronize(a);
  auto u = dev->pool_query(pool);
  EXPECT_EQ(u.used, 0u);
  EXPECT_GE(u.reserved, 8192u);
  dev->pool_trim(pool, 0);
  EXPECT_EQ(dev->pool_query(pool).reserved, 0u);
  dev->pool_destroy(pool);
}

// The driver returns from cuStreamDestroy while the stream's work still runs, and hands the
// handle value to the next stream created (rapidsai/rmm #649); the simulated device does both,
// and its checker tells the two streams behind one handle apart.
TEST_F(sim, destroyed_streams_handle_is_recycled_as_a_new_stream) {
  stream_view c = dev->stream_create();
  void* gate = dev->gate_enqueue(c);
  dev->launch_spin(c, 0);
  const std::uint64_t c_id = dev->stream_id(c);
  EXPECT_NE(c_id, 0u);
  EXPECT_NE(c_id, dev->stream_id(a));
  dev->stream_destroy(c);  // returns with c's work pending
  EXPECT_EQ(dev->completed_ops(c), 0u);
  EXPECT_THROW(dev->launch_spin(c, 0), driver_error);  // invalid until recycled
  stream_view d = dev->stream_create();
  EXPECT_EQ(d, c);
  EXPECT_NE(dev->stream_id(d), c_id);
  EXPECT_NO_THROW(dev->launch_spin(d, 0));
  dev->stream_synchronize(d);  // d's own work only: c's is still held by the gate
  EXPECT_EQ(dev->completed_ops(d), 1u);
  dev->gate_open(gate);
  dev->device_synchronize();  // covers the destroyed stream's work too
  dev->stream_destroy(d);
}

TEST_F(sim, reuse_checker_keys_streams_by_identity_not_handle) {
  std::vector<char> block(4096);
  stream_view c = dev->stream_create();
  void* gate = dev->gate_enqueue(c);
  dev->note_release(block.data(), block.size(), c);
  const std::uint64_t c_id = dev->stream_id(c);
  dev->stream_destroy(c);
  stream_view d = dev->stream_create();
  ASSERT_EQ(d, c);
  dev->note_reuse(block.data(), block.size(), d);  // same handle, no order: violation
  auto v = dev->violations();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].released_on, v[0].reused_on);
  EXPECT_EQ(v[0].released_stream_id, c_id);
  EXPECT_EQ(v[0].reused_stream_id, dev->stream_id(d));
  dev->gate_open(gate);
  dev->stream_destroy(d);
}

}  // namespace
