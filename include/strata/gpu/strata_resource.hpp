// strata_resource: strata's own device resource, built for many threads and many streams.
//
// Glossary:
//   heap      one per (thread, stream): size-classed free stacks owned by that thread.  A heap
//             is found through a thread-local cache, so allocate/deallocate on the fast path
//             take no shared lock: the heap's own spin lock is only ever contended by a steal.
//   class     a request size rounded up (256 B steps to 1 KiB, then 4 classes per power of
//             two to 64 KiB, 8 above); a block keeps its class for life, so freed blocks never
//             need coalescing.
//   slab      a run of device memory cut into blocks of one small class (<= 64 KiB): at least
//             8 blocks and 64 KiB, at most slab_size.  Larger classes are single blocks.
//   page heap the global, coalescing store of device memory (one lock, rarely taken): it
//             hands out slabs and large blocks, each free range guarded by the events of the
//             streams that last released it.
//
// Order of attempts on a heap miss, cheapest first and nothing that orders one stream after
// another while the upstream still gives memory: refill from a page-heap range that needs no
// wait; steal a batch of the class from another heap on the same stream; take back what idle
// heaps hold; grow the page heap.
// Only when maximum_size or the upstream refuses growth: take back what idle heaps hold (heaps
// whose stream has finished all its work: no wait); refill from a guarded range (waiting on its
// events); steal from a heap on another stream (event-guarded); defragment (synchronise, flush
// every heap's cached blocks and empty slabs back into the page heap); then wait, up to
// pressure_wait, for other threads to free memory, retrying each step; and only then
// out_of_memory_error, whose message says how much was free and how fragmented.  Like the
// driver's stream-ordered pool, it reserves rather than wait: set maximum_size to bound it.
//
// Lean: each heap caches at most heap_cache_bytes of large blocks, and the heaps together about
// cache_bytes (beyond, they go back to the page heap behind an event); a miss takes back what idle heaps hold before it grows; when a
// block goes back to the page heap and more than release_threshold bytes are reserved, chunks
// that are wholly free with no pending event go back upstream, as a cudaMemPool's release
// threshold does; trim(keep) synchronises and gives back down to keep.
//
// Upstream ownership: a reference; the upstream must outlive the resource.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/growth_options.hpp>

#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>

namespace strata::gpu {

struct strata_options : growth_options {  // chunks feed the page heap
  std::size_t slab_size = std::size_t{2} << 20;  // power of two; the largest slab
  // Bytes of large blocks one heap may keep cached; beyond it blocks go back to the page heap.
  // At 32 MiB, E2's fragment step (each thread frees ~170 MiB of large blocks at once) sent most
  // of them there, and each later miss scanned ranges other streams had freed, asking the
  // driver about each one's event under the page heap's lock (docs/gpu.md, E2).
  std::size_t heap_cache_bytes = std::size_t{128} << 20;
  // Bytes of large blocks all heaps together may keep cached: with n heaps each keeps at most
  // cache_bytes / n.  Unlimited by default: at 128 MiB, E2's 16 threads spent about 3x as long
  // in allocate and deallocate for 10-20 % less reserved (docs/gpu.md).
  std::size_t cache_bytes = std::numeric_limits<std::size_t>::max();
  // Before growing, take a range another stream freed and make this stream wait on its event
  // (as pool_resource does).  Reserves about what pool does, and runs the streams one after
  // another as pool does (E2, 16 threads: about 12x slower baseline); off by default.
  bool wait_before_growth = false;
  // Reserved bytes kept: past them, chunks that become wholly free (no pending event) go back
  // upstream.  Releasing costs a cuMemFree, which synchronises the device.
  std::size_t release_threshold = std::numeric_limits<std::size_t>::max();
  // When growth is refused: how long to wait for other threads' frees before failing.
  std::chrono::milliseconds pressure_wait{200};
};

class strata_resource final : public device_memory_resource {
 public:
  strata_resource(device_memory_resource& upstream, strata_options options = {});
  ~strata_resource() override;

  // Synchronises the device, flushes every heap and returns wholly free chunks upstream.
  void release();
  // Synchronises the device, flushes every heap and returns wholly free chunks upstream until
  // at most keep_bytes stay reserved.
  void trim(std::size_t keep_bytes);

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override;
  resource_info do_info() const override;
  std::string_view do_name() const noexcept override { return "strata"; }

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
