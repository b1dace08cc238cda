// cuda_resource: every allocate is a cuMemAlloc and every deallocate a cuMemFree.
//
// No caching, no lock of its own; the driver serialises and cuMemFree waits for the device.
// The stream argument is ignored (the calls are synchronous).  The baseline every pool beats.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <memory>

namespace strata::gpu {

class cuda_resource final : public device_memory_resource {
 public:
  explicit cuda_resource(std::shared_ptr<device_backend> backend);
  ~cuda_resource() override;

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override;
  resource_info do_info() const override;
  std::string_view do_name() const noexcept override { return "cuda"; }

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
