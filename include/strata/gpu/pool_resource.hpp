// pool_resource: a coalescing best-fit pool behind one lock (RAPIDS "Pool").
//
// Memory comes from the upstream resource in chunks.  Each stream has its own address-ordered
// free list; a block freed on stream S goes back on S's list (merged with its free neighbours
// from the same chunk) and is reused at once for work on S.  When S's list has no fit the pool
// takes another stream T's whole list, guarded by an event: it records an event on T, makes S
// wait on it, and merges T's blocks into S's list.  Only then does it grow from the upstream
// (growth policy below), and when the upstream refuses it synchronises every stream, merges
// all lists, returns wholly free chunks and tries once more before raising out_of_memory_error.
//
// Upstream ownership: the pool keeps a reference; the upstream must outlive the pool.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/growth_options.hpp>

#include <cstddef>
#include <memory>

namespace strata::gpu {

struct pool_options : growth_options {
  // Growth: a new chunk is max(request, min_growth, growth_factor * reserved so far), capped by
  // maximum_size - reserved.  A finite number >= 0, else the constructor throws
  // std::invalid_argument.
  double growth_factor = 1.0;
};

class pool_resource final : public device_memory_resource {
 public:
  pool_resource(device_memory_resource& upstream, pool_options options = {});
  ~pool_resource() override;

  // Synchronises all streams the pool has seen, then returns every wholly free chunk upstream.
  void release();

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override;
  resource_info do_info() const override;
  std::string_view do_name() const noexcept override { return "pool"; }

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
