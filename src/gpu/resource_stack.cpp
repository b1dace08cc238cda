#include <strata/gpu/resource_stack.hpp>

#include <strata/gpu/arena_resource.hpp>
#include <strata/gpu/async_resource.hpp>
#include <strata/gpu/cuda_resource.hpp>
#include <strata/gpu/pool_resource.hpp>
#include <strata/gpu/strata_resource.hpp>

#include <stdexcept>

namespace strata::gpu {

resource_stack::resource_stack(std::string_view name, std::shared_ptr<device_backend> backend,
                               stack_options o)
    : name_(name) {
  if (name == "cuda") {
    layers_.push_back(std::make_unique<cuda_resource>(backend));
  } else if (name == "async") {
    layers_.push_back(std::make_unique<async_resource>(backend));
  } else if (name == "pool" || name == "arena" || name == "strata") {
    layers_.push_back(std::make_unique<cuda_resource>(backend));
    auto& up = *layers_.back();
    auto sized = [&](auto options) {
      options.initial_size = o.initial_size;
      options.maximum_size = o.maximum_size;
      return options;
    };
    if (name == "pool")
      layers_.push_back(std::make_unique<pool_resource>(up, sized(pool_options{})));
    else if (name == "arena")
      layers_.push_back(std::make_unique<arena_resource>(up, sized(arena_options{})));
    else
      layers_.push_back(std::make_unique<strata_resource>(up, sized(o.strata)));
  } else {
    throw std::invalid_argument("unknown device resource '" + std::string(name) +
                                "' (expected cuda, async, pool, arena or strata)");
  }
}

resource_stack::~resource_stack() {
  while (!layers_.empty()) layers_.pop_back();  // top first: each layer returns to the one below
}

resource_stack::resource_stack(resource_stack&&) noexcept = default;

const std::vector<std::string>& resource_stack::names() {
  static const std::vector<std::string> all{"cuda", "async", "pool", "arena", "strata"};
  return all;
}

}  // namespace strata::gpu
