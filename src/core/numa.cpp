// NUMA policies (core/numa.h).  A policy naming a node that does not exist (or that the cpuset
// forbids) is rejected with EINVAL and a message: mbind would fail on every segment, silently
// leaving pages unplaced.
//
// Runs inside malloc: no allocation, no libstdc++ at run time, errno preserved on success paths.
#include "core/numa.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/lock.h"
#include "core/options.h"
#include "core/report.h"
#include "core/types.h"
#include "os/numa.h"
#include "strata/strata.h"

namespace strata::detail {
namespace {

using os::node_mask;
constexpr int max_nodes = os::numa_max_nodes;

enum class policy_kind : int { none, local, interleave, bind };

struct policy {
  policy_kind kind;
  node_mask nodes;  // interleave / bind
};

spin_lock policy_lock;
spin_lock set_policy_lock;  // strata_numa_set_policy: one call at a time
policy current{};  // guarded by policy_lock
std::atomic<int> current_kind{static_cast<int>(policy_kind::none)};  // lock-free "no policy" test

// ---- node lists ------------------------------------------------------------------------------

// Parses "0,2-3" into mask.  Returns false on any syntax error, and on a node past max_nodes:
// then bad_node is its text, [bad_begin, bad_end).  end: one past the text.  A number of any length
// is a node number (saturated, not accumulated past max_nodes): "bind:1000001" and above was
// "malformed" where "bind:1000000" was a node that "does not exist".
bool parse_node_list(const char* s, const char* end, node_mask& mask, const char*& bad_begin,
                     const char*& bad_end) noexcept {
  mask.clear();
  bad_begin = bad_end = nullptr;
  if (s == end) return false;
  while (s < end) {
    const char* begin = s;
    auto number = [&](long& out) {
      if (s == end || *s < '0' || *s > '9') return false;
      begin = s;
      out = 0;
      for (; s < end && *s >= '0' && *s <= '9'; ++s)
        if (out < max_nodes) out = out * 10 + (*s - '0');
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
      bad_begin = begin;
      bad_end = s;
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

// The nodes that exist, or node 0 alone without sysfs (a kernel without NUMA has exactly one).
void online_nodes(node_mask& mask) noexcept {
  char buf[512];
  const char *bad_begin = nullptr, *bad_end = nullptr;
  if (!os::numa_online_text(buf, sizeof buf) || !parse_node_list(buf, buf + strlen(buf), mask, bad_begin, bad_end) ||
      mask.empty()) {
    mask.clear();
    mask.set(0);
  }
}

// The nodes the cpuset lets this process use; all online nodes if the kernel cannot say.
void allowed_nodes(const node_mask& online, node_mask& mask) noexcept {
  if (!os::numa_allowed(mask)) mask = online;
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
  const char *bad_begin = nullptr, *bad_end = nullptr;
  const char* list = colon + 1;
  if (!parse_node_list(list, list + strlen(list), out.nodes, bad_begin, bad_end)) {
    if (bad_begin != nullptr)
      snprintf(why, why_len, "node %.*s%s does not exist (this machine has node%s %s)",
               static_cast<int>(std::min<size_t>(bad_end - bad_begin, report::quote_max)), bad_begin,
               bad_end - bad_begin > static_cast<ptrdiff_t>(report::quote_max) ? "..." : "",
               online.count() == 1 ? "" : "s", existing);
    else
      snprintf(why, why_len, "malformed node list \"%.*s%s\"; %s", report::quote_len(list), list,
               report::quote_cut(list), usage);
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
  lock_guard g(policy_lock);
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
    report::message("strata: warning: STRATA_NUMA=\"%.*s%s\" ignored: %s; no NUMA policy applied\n",
                    report::quote_len(spec), spec, report::quote_cut(spec), why);
    options::reset(option::numa);  // strata_options_json shows what is in effect: unset
    return;
  }
  if (p.kind == policy_kind::none) options::reset(option::numa);  // "none", "default": unset
  install(p);
}

void numa_place(void* addr, size_t bytes) noexcept {
  if (current_kind.load(std::memory_order_acquire) == static_cast<int>(policy_kind::none)) return;
  policy p;
  {
    lock_guard g(policy_lock);
    p = current;
  }
  if (p.kind == policy_kind::none) return;
  int saved = errno;
  auto mode = p.kind == policy_kind::local        ? os::numa_mode::local
              : p.kind == policy_kind::interleave ? os::numa_mode::interleave
                                                  : os::numa_mode::bind;
  if (os::numa_bind(addr, bytes, mode, p.nodes) != 0) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true, std::memory_order_relaxed))
      report::message("strata: warning: mbind failed (errno %d): NUMA policy not applied to %zu "
                      "bytes at %p (further failures not reported)\n",
                      errno, bytes, addr);
  }
  errno = saved;
}

}  // namespace strata::detail

using namespace strata::detail;

STRATA_EXPORT int strata_numa_set_policy(const char* spec) {
  policy p;
  char why[512];
  // strata_options_json lists the policy in effect, so a spec must fit where options keep text
  // (as STRATA_NUMA's own value must).
  if (spec != nullptr && strlen(spec) >= strata::options::text_capacity) {
    strata::report::message("strata: NUMA policy rejected: longer than %zu bytes\n",
                            strata::options::text_capacity - 1);
    errno = EINVAL;
    return -1;
  }
  if (!parse_spec(spec, p, why, sizeof why)) {
    strata::report::message("strata: NUMA policy \"%.*s%s\" rejected: %s\n", strata::report::quote_len(spec), spec,
                            strata::report::quote_cut(spec), why);
    errno = EINVAL;
    return -1;
  }
  lock_guard g(set_policy_lock);  // the listed spec and the installed policy change together
  strata::options::set_text(strata::option::numa, p.kind == policy_kind::none ? nullptr : spec);
  install(p);
  return 0;
}

STRATA_EXPORT int strata_numa_node_of(const void* p) { return strata::os::numa_node_of(p); }

STRATA_EXPORT int strata_numa_node_count(void) {
  node_mask online;
  online_nodes(online);
  return online.count();
}
