// NUMA placement of the memory strata maps: STRATA_NUMA=local|interleave[:<nodes>]|bind:<nodes>
// and strata_numa_set_policy/node_of/node_count.
//
// Contract with the kernel (raw syscalls, no libnuma):
//   mbind(addr, len, mode, nodemask, maxnode, MPOL_MF_MOVE)  on every range strata maps, right
//     after mmap (numa_place).  The pages are placed when first touched; MOVE also migrates any
//     page already touched (the segment header), so the whole range follows the policy.
//   move_pages(0, 1, &page, NULL, &status, 0)  reports where a page sits without faulting it in
//     (status -ENOENT: not backed yet; -EFAULT: not mapped, or the shared zero page).
//   get_mempolicy(..., MPOL_F_MEMS_ALLOWED)  the nodes this process's cpuset allows.
//   /sys/devices/system/node/online  the nodes that exist.
// A policy naming a node that does not exist (or that the cpuset forbids) is rejected with
// EINVAL and a message: mbind would fail on every segment, silently leaving pages unplaced.
//
// Runs inside malloc: no allocation, no libstdc++ at run time, errno preserved on success paths.
#include "os/numa.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/lock.h"
#include "core/options.h"
#include "core/report.h"
#include "strata/strata.h"

namespace strata::os {
namespace {

// From <linux/mempolicy.h>.
enum : int { MPOL_DEFAULT = 0, MPOL_PREFERRED = 1, MPOL_BIND = 2, MPOL_INTERLEAVE = 3, MPOL_LOCAL = 4 };
constexpr unsigned long MPOL_F_MEMS_ALLOWED = 1ul << 2;
constexpr unsigned MPOL_MF_MOVE = 1u << 1;

constexpr int max_nodes = 1024;
constexpr int bits_per_word = 64;
constexpr int mask_words = max_nodes / bits_per_word;
// The kernel reads maxnode - 1 bits (the historical off-by-one libnuma also compensates for).
constexpr unsigned long mask_maxnode = max_nodes + 1;

struct node_mask {
  uint64_t words[mask_words];
  void clear() noexcept { memset(words, 0, sizeof words); }
  void set(int n) noexcept { words[n / bits_per_word] |= uint64_t{1} << (n % bits_per_word); }
  bool has(int n) const noexcept { return (words[n / bits_per_word] >> (n % bits_per_word)) & 1; }
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

enum class policy_kind : int { none, local, interleave, bind };

struct policy {
  policy_kind kind;
  node_mask nodes;  // interleave / bind
};

detail::spin_lock policy_lock;
policy current{};  // guarded by policy_lock
std::atomic<int> current_kind{static_cast<int>(policy_kind::none)};  // lock-free "no policy" test

// ---- node lists ------------------------------------------------------------------------------

// Parses "0,2-3" into mask.  Returns false on any syntax error.  end: one past the text.
bool parse_node_list(const char* s, const char* end, node_mask& mask, int& bad_node) noexcept {
  mask.clear();
  bad_node = -1;
  if (s == end) return false;
  while (s < end) {
    auto number = [&](long& out) {
      if (s == end || *s < '0' || *s > '9') return false;
      out = 0;
      while (s < end && *s >= '0' && *s <= '9') {
        out = out * 10 + (*s++ - '0');
        if (out > 1000000) return false;
      }
      return true;
    };
    long lo = 0, hi = 0;
    if (!number(lo)) return false;
    hi = lo;
    if (s < end && *s == '-') {
      ++s;
      if (!number(hi) || hi < lo) return false;
    }
    if (hi >= max_nodes) {
      bad_node = static_cast<int>(hi);
      return false;
    }
    for (long n = lo; n <= hi; ++n) mask.set(static_cast<int>(n));
    if (s < end) {
      if (*s != ',') return false;
      ++s;
      if (s == end) return false;  // trailing comma
    }
  }
  return true;
}

// Formats mask as "0-1,3" into buf.
void format_node_list(const node_mask& mask, char* buf, size_t len) noexcept {
  size_t pos = 0;
  buf[0] = '\0';
  for (int n = 0; n < max_nodes;) {
    if (!mask.has(n)) {
      ++n;
      continue;
    }
    int m = n;
    while (m + 1 < max_nodes && mask.has(m + 1)) ++m;
    char item[32];
    int k = m == n ? snprintf(item, sizeof item, "%s%d", pos ? "," : "", n)
                   : snprintf(item, sizeof item, "%s%d-%d", pos ? "," : "", n, m);
    if (k > 0 && pos + static_cast<size_t>(k) < len) {
      memcpy(buf + pos, item, static_cast<size_t>(k) + 1);
      pos += static_cast<size_t>(k);
    }
    n = m + 1;
  }
}

// The nodes that exist: /sys/devices/system/node/online, or node 0 alone without sysfs (a kernel
// without NUMA has exactly one node).
void online_nodes(node_mask& mask) noexcept {
  int saved = errno;
  char buf[512];
  ssize_t n = -1;
  int fd = open("/sys/devices/system/node/online", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
  }
  int bad = -1;
  bool ok = false;
  if (n > 0) {
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) --n;
    ok = parse_node_list(buf, buf + n, mask, bad);
  }
  if (!ok || mask.empty()) {
    mask.clear();
    mask.set(0);
  }
  errno = saved;
}

// The nodes the cpuset lets this process use; all online nodes if the kernel cannot say.
void allowed_nodes(const node_mask& online, node_mask& mask) noexcept {
  int saved = errno;
  mask.clear();
  if (syscall(SYS_get_mempolicy, nullptr, mask.words, mask_maxnode, nullptr, MPOL_F_MEMS_ALLOWED) !=
          0 ||
      mask.empty())
    mask = online;
  errno = saved;
}

// ---- specs -------------------------------------------------------------------------------------

// Parses a policy spec.  On failure writes the reason into why and returns false.
bool parse_spec(const char* spec, policy& out, char* why, size_t why_len) noexcept {
  out.kind = policy_kind::none;
  out.nodes.clear();
  if (spec == nullptr || *spec == '\0' || strcmp(spec, "none") == 0 || strcmp(spec, "default") == 0)
    return true;
  const char* colon = strchr(spec, ':');
  size_t name_len = colon ? static_cast<size_t>(colon - spec) : strlen(spec);
  auto is = [&](const char* name) { return strlen(name) == name_len && memcmp(spec, name, name_len) == 0; };
  const char* usage = "expected local, interleave, interleave:<nodes> or bind:<nodes> "
                      "(nodes like 0,2-3)";
  if (is("local")) {
    if (colon) {
      snprintf(why, why_len, "\"local\" takes no node list; %s", usage);
      return false;
    }
    out.kind = policy_kind::local;
    return true;
  }
  if (!is("interleave") && !is("bind")) {
    snprintf(why, why_len, "unknown policy; %s", usage);
    return false;
  }
  out.kind = is("bind") ? policy_kind::bind : policy_kind::interleave;

  node_mask online, allowed;
  online_nodes(online);
  allowed_nodes(online, allowed);
  char existing[256];
  format_node_list(online, existing, sizeof existing);

  if (colon == nullptr) {
    if (out.kind == policy_kind::bind) {
      snprintf(why, why_len, "bind needs a node list (bind:0 or bind:0-1); %s", usage);
      return false;
    }
    for (int n = 0; n < max_nodes; ++n)  // interleave over every node we may use
      if (online.has(n) && allowed.has(n)) out.nodes.set(n);
    return true;
  }
  int bad = -1;
  const char* list = colon + 1;
  if (!parse_node_list(list, list + strlen(list), out.nodes, bad)) {
    if (bad >= 0)
      snprintf(why, why_len, "node %d does not exist (this machine has node%s %s)", bad,
               online.count() == 1 ? "" : "s", existing);
    else
      snprintf(why, why_len, "malformed node list \"%s\"; %s", list, usage);
    return false;
  }
  for (int n = 0; n < max_nodes; ++n) {
    if (!out.nodes.has(n)) continue;
    if (!online.has(n)) {
      snprintf(why, why_len, "node %d does not exist (this machine has node%s %s)", n,
               online.count() == 1 ? "" : "s", existing);
      return false;
    }
    if (!allowed.has(n)) {
      snprintf(why, why_len, "node %d exists but this process's cpuset does not allow it", n);
      return false;
    }
  }
  return true;
}

void install(const policy& p) noexcept {
  detail::lock_guard g(policy_lock);
  current = p;
  current_kind.store(static_cast<int>(p.kind), std::memory_order_release);
}

}  // namespace

void numa_init() noexcept {
  const char* spec = options::get_text(option::numa);
  if (spec == nullptr) return;
  policy p;
  char why[512];
  if (!parse_spec(spec, p, why, sizeof why)) {
    report::message("strata: warning: STRATA_NUMA=\"%s\" ignored: %s; no NUMA policy applied\n",
                    spec, why);
    options::reset(option::numa);  // strata_options_json shows what is in effect: unset
    return;
  }
  install(p);
}

void numa_place(void* addr, size_t bytes) noexcept {
  if (current_kind.load(std::memory_order_acquire) == static_cast<int>(policy_kind::none)) return;
  policy p;
  {
    detail::lock_guard g(policy_lock);
    p = current;
  }
  int saved = errno;
  long r = 0;
  switch (p.kind) {
    case policy_kind::none:
      break;
    case policy_kind::local:
      r = syscall(SYS_mbind, addr, bytes, MPOL_LOCAL, nullptr, 0ul, MPOL_MF_MOVE);
      if (r != 0 && errno == EINVAL)  // kernels before 3.8: preferred with no node means local
        r = syscall(SYS_mbind, addr, bytes, MPOL_PREFERRED, nullptr, 0ul, MPOL_MF_MOVE);
      break;
    case policy_kind::interleave:
      r = syscall(SYS_mbind, addr, bytes, MPOL_INTERLEAVE, p.nodes.words, mask_maxnode, MPOL_MF_MOVE);
      break;
    case policy_kind::bind:
      r = syscall(SYS_mbind, addr, bytes, MPOL_BIND, p.nodes.words, mask_maxnode, MPOL_MF_MOVE);
      break;
  }
  if (r != 0) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true, std::memory_order_relaxed))
      report::message("strata: warning: mbind failed (errno %d): NUMA policy not applied to %zu "
                      "bytes at %p (further failures not reported)\n",
                      errno, bytes, addr);
  }
  errno = saved;
}

}  // namespace strata::os

using namespace strata::os;

extern "C" __attribute__((visibility("default"))) int strata_numa_set_policy(const char* spec) {
  policy p;
  char why[512];
  if (!parse_spec(spec, p, why, sizeof why)) {
    strata::report::message("strata: NUMA policy \"%s\" rejected: %s\n", spec, why);
    errno = EINVAL;
    return -1;
  }
  install(p);
  return 0;
}

extern "C" __attribute__((visibility("default"))) int strata_numa_node_of(const void* p) {
  long page = sysconf(_SC_PAGESIZE);
  void* addr = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) &
                                       ~(static_cast<uintptr_t>(page) - 1));
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

extern "C" __attribute__((visibility("default"))) int strata_numa_node_count(void) {
  node_mask online;
  online_nodes(online);
  return online.count();
}
