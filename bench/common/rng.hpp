// strata::bench::rng — xorshift64*: cheap, one per thread, deterministic for a given seed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::bench {

struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  std::size_t range(std::size_t lo, std::size_t hi) { return lo + next() % (hi - lo + 1); }  // inclusive
  double unit() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
};

}  // namespace strata::bench
