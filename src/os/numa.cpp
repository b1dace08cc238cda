#include "os/numa.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace strata::os {
namespace {
// From <linux/mempolicy.h>.
enum : int { MPOL_PREFERRED = 1, MPOL_BIND = 2, MPOL_INTERLEAVE = 3, MPOL_LOCAL = 4 };
constexpr unsigned long MPOL_F_MEMS_ALLOWED = 1ul << 2;
constexpr unsigned MPOL_MF_MOVE = 1u << 1;
// The kernel reads maxnode - 1 bits (the historical off-by-one libnuma also compensates for).
constexpr unsigned long mask_maxnode = numa_max_nodes + 1;
}  // namespace

bool numa_online_text(char* buf, size_t len) noexcept {
  int saved = errno;
  ssize_t n = -1;
  int fd = open("/sys/devices/system/node/online", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, buf, len - 1);
    close(fd);
  }
  errno = saved;
  if (n <= 0) return false;
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) --n;
  buf[n] = '\0';
  return true;
}

bool numa_allowed(node_mask& mask) noexcept {
  int saved = errno;
  mask.clear();
  bool ok = syscall(SYS_get_mempolicy, nullptr, mask.words, mask_maxnode, nullptr, MPOL_F_MEMS_ALLOWED) == 0;
  errno = saved;
  return ok && !mask.empty();
}

int numa_bind(void* addr, size_t bytes, numa_mode mode, const node_mask& nodes) noexcept {
  long r = 0;
  switch (mode) {
    case numa_mode::local:
      r = syscall(SYS_mbind, addr, bytes, MPOL_LOCAL, nullptr, 0ul, MPOL_MF_MOVE);
      if (r != 0 && errno == EINVAL)  // kernels before 3.8: preferred with no node means local
        r = syscall(SYS_mbind, addr, bytes, MPOL_PREFERRED, nullptr, 0ul, MPOL_MF_MOVE);
      break;
    case numa_mode::interleave:
      r = syscall(SYS_mbind, addr, bytes, MPOL_INTERLEAVE, nodes.words, mask_maxnode, MPOL_MF_MOVE);
      break;
    case numa_mode::bind:
      r = syscall(SYS_mbind, addr, bytes, MPOL_BIND, nodes.words, mask_maxnode, MPOL_MF_MOVE);
      break;
  }
  return r == 0 ? 0 : -1;
}

int numa_node_of(const void* p) noexcept {
  long page = sysconf(_SC_PAGESIZE);
  void* addr = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(static_cast<uintptr_t>(page) - 1));
  int status = -1;
  long r = syscall(SYS_move_pages, 0, 1ul, &addr, nullptr, &status, 0);
  if (r == 0) {
    if (status >= 0) return status;
    errno = -status;  // ENOENT: not backed yet; EFAULT: unmapped or the shared zero page
    return -1;
  }
  if (errno != ENOSYS) return -1;
  // A kernel without NUMA (or migration) support has one node: report whether the page is backed.
  unsigned char resident = 0;
  if (mincore(addr, static_cast<size_t>(page), &resident) != 0) return -1;
  if ((resident & 1) == 0) {
    errno = ENOENT;
    return -1;
  }
  return 0;
}

}  // namespace strata::os
