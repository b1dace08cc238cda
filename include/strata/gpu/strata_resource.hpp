// strata_resource: strata's own device resource, built for many threads and many streams.
//
// Glossary:
//   heap      one per (thread, stream): size-classed free stacks owned by that thread.  A heap
//             is found through a thread-local cache, so allocate/deallocate on the fast path
//             take no shared lock: the heap's own spin lock is only ever contended by a steal.
//   class     a request size rounded up (256 B steps to 1 KiB, then 4 classes per power of
//             two); a block keeps its class for life, so freed blocks never need coalescing.
//   slab      a run of device memory cut into blocks of one small class (<= 64 KiB): at least
//             8 blocks and 64 KiB, at most slab_size.  Larger classes are single blocks.
//   page heap the global, coalescing store of device memory (one lock, rarely taken): it
//             hands out slabs and large blocks, each free range guarded by the events of the
//             streams that last released it.
//
// Order of attempts on a heap miss, cheapest first and nothing that orders one stream after
// another while the upstream still gives memory: refill from a page-heap range that needs no
// wait; steal a batch of the class from another heap on the same stream; grow the page heap.
// Only when maximum_size or the upstream refuses growth: refill from a guarded range (waiting on
// its events); steal from a heap on another stream (event-guarded); defragment (synchronise,
// flush every heap's cached blocks and empty slabs back into the page heap); and only then
// out_of_memory_error.  Like the driver's stream-ordered pool, it reserves rather than wait:
// set maximum_size to bound it.
//
// Upstream ownership: a reference; the upstream must outlive the resource.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/growth_options.hpp>

#include <cstddef>
#include <memory>

namespace strata::gpu {

struct strata_options : growth_options {  // chunks feed the page heap
  std::size_t slab_size = std::size_t{2} << 20;  // power of two; the largest slab
  // Bytes of large blocks one heap may keep cached; beyond it blocks go back to the page heap.
  std::size_t heap_cache_bytes = std::size_t{32} << 20;
};

class strata_resource final : public device_memory_resource {
 public:
  strata_resource(device_memory_resource& upstream, strata_options options = {});
  ~strata_resource() override;

  // Synchronises the device, flushes every heap and returns wholly free chunks upstream.
  void release();

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
