// growth_options: how a pooling resource (pool, arena, strata) takes memory from its upstream.
// Each resource's options struct derives from it and adds its own fields.
#pragma once

#include <cstddef>
#include <limits>

namespace strata::gpu {

struct growth_options {
  std::size_t initial_size = std::size_t{64} << 20;  // first chunk, taken at construction (0: lazily)
  std::size_t maximum_size = std::numeric_limits<std::size_t>::max();  // total reserved cap
  std::size_t min_growth = std::size_t{32} << 20;  // smallest later chunk
};

}  // namespace strata::gpu
