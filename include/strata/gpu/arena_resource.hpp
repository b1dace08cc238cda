// arena_resource: per-thread / per-stream arenas of superblocks carved from one global arena
// (RAPIDS "Arena").
//
// The global arena holds upstream memory as superblock-sized units and hands whole superblocks
// to arenas.  Each arena (one per non-default stream, one per thread on the default stream)
// sub-allocates best-fit inside its superblocks under its own lock.  Requests larger than half
// a superblock go straight to the global arena.  A block freed on a stream other than its
// arena's is returned after synchronising the freeing stream.  A superblock that becomes empty
// goes back to the global arena guarded by an event on the arena's stream.  When the global
// arena is exhausted the resource defragments (synchronises the device, pulls every empty
// superblock back, merges) and retries before growing or raising out_of_memory_error.
//
// Upstream ownership: a reference; the upstream must outlive the arena resource.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/growth_options.hpp>

#include <cstddef>
#include <memory>

namespace strata::gpu {

struct arena_options : growth_options {  // chunks feed the global arena
  std::size_t superblock_size = std::size_t{1} << 20;  // power of two, >= 64 KiB
};

class arena_resource final : public device_memory_resource {
 public:
  arena_resource(device_memory_resource& upstream, arena_options options = {});
  ~arena_resource() override;

  // Synchronises the device, pulls empty superblocks back and returns free chunks upstream.
  void release();

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override;
  resource_info do_info() const override;
  std::string_view do_name() const noexcept override { return "arena"; }

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
