// NUMA system calls (raw, no libnuma): the platform half of NUMA placement.  The policies
// (STRATA_NUMA, strata_numa_*) are core's (core/numa.cpp).
//
// Contract with the kernel:
//   mbind(addr, len, mode, nodemask, maxnode, MPOL_MF_MOVE)  numa_bind, on a range strata has
//     just mapped.  The pages are placed when first touched; MOVE also migrates any page already
//     touched (a segment header), so the whole range follows the policy.
//   move_pages(0, 1, &page, NULL, &status, 0)  numa_node_of: where a page sits, without faulting
//     it in (status -ENOENT: not backed yet; -EFAULT: not mapped, or the shared zero page).
//   get_mempolicy(..., MPOL_F_MEMS_ALLOWED)  numa_allowed: the nodes this process's cpuset allows.
//   /sys/devices/system/node/online  numa_online_text: the nodes that exist.
// Each preserves errno except where it says it sets it; none allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata::os {

constexpr int numa_max_nodes = 1024;

// A set of NUMA nodes, laid out as the kernel's nodemask.
struct node_mask {
  uint64_t words[numa_max_nodes / 64];
  void clear() noexcept { memset(words, 0, sizeof words); }
  void set(int n) noexcept { words[n / 64] |= uint64_t{1} << (n % 64); }
  bool has(int n) const noexcept { return (words[n / 64] >> (n % 64)) & 1; }
  bool empty() const noexcept {
    for (uint64_t w : words)
      if (w != 0) return false;
    return true;
  }
  int count() const noexcept {
    int c = 0;
    for (uint64_t w : words) c += __builtin_popcountll(w);
    return c;
  }
};

enum class numa_mode { local, interleave, bind };

// The text of /sys/devices/system/node/online ("0-1,3"), trailing whitespace trimmed, into buf;
// false when it cannot be read (a kernel without NUMA sysfs).
bool numa_online_text(char* buf, size_t len) noexcept;
// The nodes this process's cpuset allows; false when the kernel cannot say.
bool numa_allowed(node_mask& mask) noexcept;
// Applies `mode` (over `nodes` for interleave and bind) to [addr, addr + bytes): 0, or -1 with
// errno set.
int numa_bind(void* addr, size_t bytes, numa_mode mode, const node_mask& nodes) noexcept;
// The node the page holding p sits on, or -1 with errno set (ENOENT: not backed yet).  Without
// move_pages (a kernel without NUMA): 0 when the page is backed.
int numa_node_of(const void* p) noexcept;

}  // namespace strata::os
