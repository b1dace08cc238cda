// async_resource: the driver's stream-ordered allocator (cudaMallocAsync) on a pool of its own.
//
// Creates a memory pool (cuMemPoolCreate) with the given release threshold: the pool keeps up
// to that many bytes reserved across synchronisations instead of returning them to the driver.
// allocate/deallocate are cuMemAllocFromPoolAsync / cuMemFreeAsync on the caller's stream.
// The driver does the cross-stream bookkeeping; strata sees no lock and no free list, so
// info() reports reserved/used bytes from the pool's attributes and no largest free block.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <cstddef>
#include <limits>
#include <memory>

namespace strata::gpu {

struct async_options {
  // Bytes the pool may keep reserved after a synchronisation (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
  std::size_t release_threshold = std::numeric_limits<std::size_t>::max();
};

class async_resource final : public device_memory_resource {
 public:
  // Throws driver_error when the backend has no stream-ordered pool support.
  explicit async_resource(std::shared_ptr<device_backend> backend, async_options options = {});
  ~async_resource() override;

  // Returns reserved memory above keep_bytes to the driver (cuMemPoolTrimTo).
  void trim(std::size_t keep_bytes = 0);

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override;
  resource_info do_info() const override;
  std::string_view do_name() const noexcept override { return "async"; }

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
