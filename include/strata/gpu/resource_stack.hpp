// resource_stack: builds a resource by name over a backend and owns every layer.
//
//   "cuda"   cuda_resource
//   "async"  async_resource (release threshold: unlimited)
//   "pool"   pool_resource   over cuda_resource
//   "arena"  arena_resource  over cuda_resource
//   "strata" strata_resource over cuda_resource
//
// Used by the conformance suite and the E2 benchmark so both build resources the same way.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/strata_resource.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::gpu {

struct stack_options {
  std::size_t initial_size = std::size_t{64} << 20;  // pool, arena, strata: first chunk
  std::size_t maximum_size = ~std::size_t{0};        // pool, arena, strata: reserved cap
  strata_options strata;  // strata's own options (its initial and maximum size: the two above)
};

class resource_stack {
 public:
  // Throws std::invalid_argument for an unknown name, driver_error when the backend cannot.
  resource_stack(std::string_view name, std::shared_ptr<device_backend> backend,
                 stack_options options = {});
  ~resource_stack();
  resource_stack(resource_stack&&) noexcept;

  device_memory_resource& top() const noexcept { return *layers_.back(); }
  const std::string& name() const noexcept { return name_; }

  static const std::vector<std::string>& names();  // every name above, in that order

 private:
  std::string name_;
  std::vector<std::unique_ptr<device_memory_resource>> layers_;  // upstream first
};

}  // namespace strata::gpu
