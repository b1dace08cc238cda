// NUMA placement: strata_numa_* and STRATA_NUMA, verified by asking the kernel where pages sit
// (move_pages) and which policy covers them (get_mempolicy MPOL_F_ADDR), on whatever nodes this
// machine has.  On a single-node machine placement is trivially node 0, so the policy the
// kernel records for strata's mappings is what proves the policy was applied.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "core/options.h"
#include "strata/strata.h"

namespace {

constexpr int MPOL_DEFAULT = 0, MPOL_PREFERRED = 1, MPOL_BIND = 2, MPOL_INTERLEAVE = 3,
              MPOL_LOCAL = 4;
constexpr unsigned long MPOL_F_ADDR = 1ul << 1;
constexpr unsigned long maxnode = 1025;
constexpr std::size_t huge_bytes = 24u << 20;  // above large_max: a huge mapping

const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));

// The test's own reading of /sys, independent of strata's.
std::vector<int> online_nodes() {
  std::ifstream f("/sys/devices/system/node/online");
  std::string text;
  std::vector<int> nodes;
  if (!(f >> text)) return {0};
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    std::size_t dash = item.find('-');
    int lo = std::stoi(item.substr(0, dash));
    int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    for (int n = lo; n <= hi; ++n) nodes.push_back(n);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return nodes;
}

// Where each page of [p, p+bytes) sits, per the kernel (-errno for pages not backed).
std::vector<int> page_nodes(void* p, std::size_t bytes) {
  std::vector<void*> pages;
  for (std::size_t off = 0; off < bytes; off += page) pages.push_back(static_cast<char*>(p) + off);
  std::vector<int> status(pages.size(), -1);
  long r = syscall(SYS_move_pages, 0, pages.size(), pages.data(), nullptr, status.data(), 0);
  EXPECT_EQ(r, 0) << "move_pages: " << std::strerror(errno);
  return status;
}

struct vma_policy {
  int mode = -1;
  std::uint64_t mask[16] = {};
  bool has(int n) const { return (mask[n / 64] >> (n % 64)) & 1; }
  int count() const {
    int c = 0;
    for (std::uint64_t w : mask) c += __builtin_popcountll(w);
    return c;
  }
};
vma_policy policy_at(const void* p) {
  vma_policy v;
  long r = syscall(SYS_get_mempolicy, &v.mode, v.mask, maxnode, p, MPOL_F_ADDR);
  EXPECT_EQ(r, 0) << "get_mempolicy: " << std::strerror(errno);
  return v;
}

void touch(void* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += page) static_cast<volatile char*>(p)[off] = 1;
}

class Numa : public ::testing::Test {
 protected:
  // A freed huge mapping is kept for reuse with the policy it was mapped under (docs/pools-numa.md):
  // each test starts with none kept, so that its blocks are mapped under its own policy (the
  // tests after the first failed when run in one process).
  void SetUp() override { strata_collect(true); }
  void TearDown() override { EXPECT_EQ(strata_numa_set_policy(nullptr), 0); }
};

TEST_F(Numa, NodeCountIsTheNumberOfOnlineNodes) {
  EXPECT_EQ(strata_numa_node_count(), int(online_nodes().size()));
  EXPECT_GE(strata_numa_node_count(), 1);
  std::printf("this machine: %d NUMA node(s)\n", strata_numa_node_count());
}

TEST_F(Numa, NodeOfTellsBackedFromUnbackedPages) {
  void* m = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  char* c = static_cast<char*>(m);
  errno = 0;
  EXPECT_EQ(strata_numa_node_of(c), -1);  // never touched: no page yet
  EXPECT_EQ(errno, ENOENT);
  c[page + 5] = 1;
  int node = strata_numa_node_of(c + page + 100);  // any address inside the page
  std::vector<int> nodes = online_nodes();
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), node), nodes.end()) << node;
  EXPECT_EQ(node, page_nodes(c + page, page)[0]);
  ASSERT_EQ(munmap(m, 4 * page), 0);
  errno = 0;
  EXPECT_EQ(strata_numa_node_of(c), -1);  // unmapped
  EXPECT_NE(errno, 0);
}

TEST_F(Numa, MalformedSpecsAreEinval) {
  for (const char* spec : {"bogus", "bind", "bind:", "bind:x", "bind:0,", "bind:,0", "bind:1-0",
                           "bind:0--1", "bind:-1", "local:0", "interleave:", "interleave:a",
                           "Bind:0", "bind:0 ", " local", "bind:99999999999"}) {
    errno = 0;
    EXPECT_EQ(strata_numa_set_policy(spec), -1) << spec;
    EXPECT_EQ(errno, EINVAL) << spec;
  }
}

TEST_F(Numa, ANodeThatDoesNotExistIsAClearError) {
  std::vector<int> nodes = online_nodes();
  int missing = nodes.back() + 1;
  for (std::string spec : {"bind:" + std::to_string(missing), "interleave:0," + std::to_string(missing),
                           std::string("bind:1023"), std::string("bind:5000"),
                           // past the largest number the parser once read: "malformed" before
                           std::string("bind:1000000"), std::string("bind:1000001"),
                           std::string("bind:99999999999999999999999"), std::string("interleave:0-1000001")}) {
    ::testing::internal::CaptureStderr();
    errno = 0;
    int r = strata_numa_set_policy(spec.c_str());
    int err = errno;
    std::string out = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(r, -1) << spec;
    EXPECT_EQ(err, EINVAL) << spec;
    EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
    EXPECT_NE(out.find(spec), std::string::npos) << out;  // the message names the spec
  }
  // A rejected policy leaves the previous one in force (here: none).
  void* p = strata_malloc(huge_bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(policy_at(p).mode, MPOL_DEFAULT);
  strata_free(p);
}

TEST_F(Numa, BindPlacesEveryPageOnTheNode) {
  for (int node : online_nodes()) {
    ASSERT_EQ(strata_numa_set_policy(("bind:" + std::to_string(node)).c_str()), 0);
    void* p = strata_malloc(huge_bytes);
    ASSERT_NE(p, nullptr);
    vma_policy v = policy_at(p);
    EXPECT_EQ(v.mode, MPOL_BIND);
    EXPECT_TRUE(v.has(node));
    EXPECT_EQ(v.count(), 1);
    touch(p, huge_bytes);
    for (int n : page_nodes(p, huge_bytes)) ASSERT_EQ(n, node);
    strata_free(p);
  }
}

TEST_F(Numa, InterleaveSpreadsPagesOverAllNodes) {
  std::vector<int> nodes = online_nodes();
  ASSERT_EQ(strata_numa_set_policy("interleave"), 0);
  void* p = strata_malloc(huge_bytes);
  ASSERT_NE(p, nullptr);
  vma_policy v = policy_at(p);
  EXPECT_EQ(v.mode, MPOL_INTERLEAVE);
  for (int n : nodes) EXPECT_TRUE(v.has(n)) << n;
  EXPECT_EQ(v.count(), int(nodes.size()));
  touch(p, huge_bytes);
  std::vector<int> where = page_nodes(p, huge_bytes);
  for (int n : nodes) {
    std::size_t on_n = std::size_t(std::count(where.begin(), where.end(), n));
    EXPECT_GE(on_n, where.size() / (2 * nodes.size())) << "node " << n;  // about 1/N each
  }
  for (int n : where) ASSERT_NE(std::find(nodes.begin(), nodes.end(), n), nodes.end()) << n;
  strata_free(p);
}

TEST_F(Numa, LocalPlacesPagesOnTheNodeOfTheTouchingCpu) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  unsigned cpu = 0, node = 0;
  ASSERT_EQ(syscall(SYS_getcpu, &cpu, &node, nullptr), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // stay on that node while touching

  ASSERT_EQ(strata_numa_set_policy("local"), 0);
  void* p = strata_malloc(huge_bytes);
  ASSERT_NE(p, nullptr);
  vma_policy v = policy_at(p);
  // Kernels before 5.14 record "local" as preferred with no node.
  EXPECT_TRUE(v.mode == MPOL_LOCAL || (v.mode == MPOL_PREFERRED && v.count() == 0)) << v.mode;
  touch(p, huge_bytes);
  for (int n : page_nodes(p, huge_bytes)) ASSERT_EQ(n, int(node));
  strata_free(p);
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
}

TEST_F(Numa, ResettingThePolicyStopsApplyingIt) {
  ASSERT_EQ(strata_numa_set_policy("bind:0"), 0);
  ASSERT_EQ(strata_numa_set_policy("default"), 0);
  void* p = strata_malloc(huge_bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(policy_at(p).mode, MPOL_DEFAULT);
  strata_free(p);
}

// Segments (small and large blocks), in a fresh process so that no segment mapped before the
// policy is there to be reused.
TEST(NumaDeathTest, SegmentsForSmallBlocksFollowThePolicy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int node = online_nodes().back();
  EXPECT_EXIT(
      {
        if (strata_numa_set_policy(("bind:" + std::to_string(node)).c_str()) != 0) std::_Exit(2);
        std::vector<void*> blocks;
        for (int i = 0; i < 20000; ++i) {
          void* b = strata_malloc(64);
          touch(b, 64);
          blocks.push_back(b);
        }
        for (void* b : blocks) {
          vma_policy v = policy_at(b);
          if (v.mode != MPOL_BIND || !v.has(node) || v.count() != 1) std::_Exit(3);
          if (strata_numa_node_of(b) != node) std::_Exit(4);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// STRATA_NUMA is read at start-up: a valid value applies, a bad one warns and changes nothing.
TEST(NumaDeathTest, EnvironmentVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int node = online_nodes().front();
  std::string spec = "bind:" + std::to_string(node);
  setenv("STRATA_NUMA", spec.c_str(), 1);
  EXPECT_EXIT(
      {
        void* p = strata_malloc(huge_bytes);
        vma_policy v = policy_at(p);
        std::_Exit(v.mode == MPOL_BIND && v.has(node) && v.count() == 1 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
  std::string missing = "bind:" + std::to_string(online_nodes().back() + 1);
  setenv("STRATA_NUMA", missing.c_str(), 1);
  EXPECT_EXIT(
      {
        void* p = strata_malloc(huge_bytes);
        std::_Exit(policy_at(p).mode == MPOL_DEFAULT ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "STRATA_NUMA=\"" + missing + "\" ignored: node [0-9]+ does not exist");
  setenv("STRATA_NUMA", "sideways", 1);
  EXPECT_EXIT(
      {
        strata_free(strata_malloc(1));
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "STRATA_NUMA=\"sideways\" ignored: unknown policy");
  unsetenv("STRATA_NUMA");
}

}  // namespace
