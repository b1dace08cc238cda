// NUMA placement of the memory strata maps: the policy (STRATA_NUMA=local|interleave[:<nodes>]|
// bind:<nodes>, strata_numa_set_policy) and its application to each new mapping, over the
// system calls of os/numa.h.
#pragma once
#include <cstddef>

namespace strata::detail {
// Reads STRATA_NUMA once at start-up (a bad value warns, naming the variable, leaves no policy
// and resets the option, so that strata_options_json shows it unset).
void numa_init() noexcept;
// Applies the current policy to a range strata has just mapped (no-op without a policy).
void numa_place(void* addr, size_t bytes) noexcept;
}  // namespace strata::detail
