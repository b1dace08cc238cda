// NUMA placement of strata's memory (STRATA_NUMA / strata_numa_*).  Part of the platform layer:
// the only code that calls mbind/get_mempolicy.
#pragma once
#include <cstddef>

namespace strata::os {
// Reads STRATA_NUMA once at start-up (a bad value warns, naming the variable, leaves no policy
// and resets the option, so that strata_options_json shows it unset).
void numa_init() noexcept;
// Applies the current policy to a range strata has just mapped (no-op without a policy).
void numa_place(void* addr, size_t bytes) noexcept;
}  // namespace strata::os
