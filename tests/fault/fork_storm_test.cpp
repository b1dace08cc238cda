// fork storms with libstrata.a replacing malloc (issue 13): 200 forks from a process whose other
// threads allocate and free all the while, each child allocating (every size band, a thread of
// its own now and then), freeing blocks its parent's threads made, checking its inherited
// blocks, and exiting.  A child that does not finish within child_deadline is taken as hung
// (a lock held across fork by a thread that does not exist in the child) and fails the test; the
// whole storm has four times that before SIGALRM ends the process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

using clock_type = std::chrono::steady_clock;
// Generous for a loaded 2-core machine: a child does a few milliseconds of work.
constexpr auto child_deadline = std::chrono::seconds(60);
constexpr int forks = 200;
constexpr int children_at_once = 8;

size_t random_size(std::mt19937_64& rng) {
  switch (rng() % 16) {
    case 0: return 1024 + rng() % (31 << 10);
    case 1: return (64 << 10) + rng() % (960 << 10);
    case 2: return rng() % 8 == 0 ? (4 << 20) + rng() % (4 << 20) : 16 + rng() % 48;
    default: return 1 + rng() % 256;
  }
}

unsigned char stamp_of(const void* p) { return static_cast<unsigned char>(reinterpret_cast<uintptr_t>(p) >> 4); }

void* make_block(std::mt19937_64& rng, size_t* size_out = nullptr) {
  size_t size = random_size(rng);
  auto* p = static_cast<unsigned char*>(malloc(size));
  if (p == nullptr) return nullptr;
  memset(p, stamp_of(p), size < 512 ? size : 512);
  if (size_out) *size_out = size;
  return p;
}

bool block_intact(const void* p, size_t size) {
  auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < (size < 512 ? size : 512); ++i)
    if (c[i] != stamp_of(p)) return false;
  return true;
}

// Blocks the allocating threads make and hand to whoever takes them (the parent's frees are
// cross-thread; a child frees the ones it inherited, whose owners do not exist in it).
struct handoff {
  std::mutex lock;
  std::vector<std::pair<void*, size_t>> blocks;
};

void allocator_thread(std::atomic<bool>& stop, handoff& shared, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<void*, size_t>> mine;
  while (!stop.load(std::memory_order_relaxed)) {
    size_t size = 0;
    void* p = make_block(rng, &size);
    if (p == nullptr) continue;
    if (rng() % 4 == 0) {
      std::lock_guard<std::mutex> g(shared.lock);
      if (shared.blocks.size() < 4096) {
        shared.blocks.emplace_back(p, size);
        p = nullptr;
      }
    }
    if (p) mine.emplace_back(p, size);
    if (mine.size() > 512 || rng() % 8 == 0) {
      size_t n = rng() % (mine.size() + 1);
      for (size_t i = 0; i < n; ++i) {
        free(mine.back().first);
        mine.pop_back();
      }
    }
    if (rng() % 64 == 0) {
      void* q = realloc(malloc(64), 1 + rng() % (256 << 10));
      free(q);
    }
  }
  for (auto& [p, size] : mine) free(p);
}

// The child's work: returns its exit status (0: all well).
int child_main(unsigned seed, std::vector<std::pair<void*, size_t>> inherited) {
  std::mt19937_64 rng(seed);
  for (auto& [p, size] : inherited) {
    if (!block_intact(p, size)) return 2;
    free(p);
  }
  std::vector<std::pair<void*, size_t>> mine;
  for (int i = 0; i < 2000; ++i) {
    size_t size = 0;
    void* p = make_block(rng, &size);
    if (p == nullptr) return 3;
    mine.emplace_back(p, size);
    if (rng() % 3 == 0) {
      size_t j = rng() % mine.size();
      if (!block_intact(mine[j].first, mine[j].second)) return 4;
      free(mine[j].first);
      mine[j] = mine.back();
      mine.pop_back();
    }
  }
  if (seed % 8 == 0) {
    // A thread in the child: a new heap, and frees of the main thread's blocks.
    std::thread t([&] {
      for (auto& [p, size] : mine) free(p);
      mine.clear();
      std::mt19937_64 r2(seed + 1);
      for (int i = 0; i < 1000; ++i) free(make_block(r2));
    });
    t.join();
  }
  for (auto& [p, size] : mine) {
    if (!block_intact(p, size)) return 5;
    free(p);
  }
  strata_stats_t s;
  strata_stats_get(&s);
  return s.bad_free_count == 0 ? 0 : 6;
}

struct child {
  pid_t pid;
  clock_type::time_point started;
};

// Waits for one child; returns what went wrong ("" if nothing).
std::string reap(const child& c) {
  for (;;) {
    int status = 0;
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) {
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) return "child " + std::to_string(c.pid) + " hung (its alarm went off)";
      if (WIFSIGNALED(status)) return "child " + std::to_string(c.pid) + " died of signal " + strsignal(WTERMSIG(status));
      if (WEXITSTATUS(status) != 0) return "child " + std::to_string(c.pid) + " exited " + std::to_string(WEXITSTATUS(status));
      return "";
    }
    if (r < 0) return "waitpid: " + std::string(strerror(errno));
    if (clock_type::now() - c.started > child_deadline) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      return "child " + std::to_string(c.pid) + " hung (killed after " +
             std::to_string(std::chrono::seconds(child_deadline).count()) + " s)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// `forkers` threads fork forks/forkers times each while `allocators` threads allocate.
void fork_storm(int forkers, int allocators) {
  // The parent's own bound: a fork that deadlocks here ends the process (SIGALRM), a failure.
  alarm(static_cast<unsigned>(std::chrono::seconds(4 * child_deadline).count()));
  std::atomic<bool> stop{false};
  handoff shared;
  std::vector<std::thread> busy;
  for (int i = 0; i < allocators; ++i) busy.emplace_back(allocator_thread, std::ref(stop), std::ref(shared), 100 + i);

  std::mutex failures_lock;
  std::vector<std::string> failures;
  auto forker = [&](int index) {
    std::mt19937_64 rng(7 + index);
    std::vector<child> running;
    for (int n = 0; n < forks / forkers; ++n) {
      // Blocks of this thread and of the allocating threads, for the child to check and free.
      std::vector<std::pair<void*, size_t>> inherited;
      for (int i = 0; i < 16; ++i) {
        size_t size = 0;
        if (void* p = make_block(rng, &size)) inherited.emplace_back(p, size);
      }
      {
        std::lock_guard<std::mutex> g(shared.lock);
        for (int i = 0; i < 16 && !shared.blocks.empty(); ++i) {
          inherited.push_back(shared.blocks.back());
          shared.blocks.pop_back();
        }
      }
      unsigned seed = static_cast<unsigned>(index * 1000 + n);
      pid_t pid = fork();
      if (pid == 0) {
        // Bounded before anything can take a lock: a hung child ends itself (SIGALRM) and dies
        // with its parent, rather than spinning on after the test.
        alarm(static_cast<unsigned>(std::chrono::seconds(child_deadline).count()));
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(child_main(seed, std::move(inherited)));
      }
      if (pid < 0) {
        std::lock_guard<std::mutex> g(failures_lock);
        failures.push_back("fork: " + std::string(strerror(errno)));
        break;
      }
      running.push_back({pid, clock_type::now()});
      for (auto& [p, size] : inherited) free(p);  // the parent's copies, cross-thread for some
      if (running.size() >= children_at_once) {
        std::string why = reap(running.front());
        running.erase(running.begin());
        if (!why.empty()) {
          std::lock_guard<std::mutex> g(failures_lock);
          failures.push_back(why);
        }
      }
    }
    for (auto& c : running) {
      std::string why = reap(c);
      if (!why.empty()) {
        std::lock_guard<std::mutex> g(failures_lock);
        failures.push_back(why);
      }
    }
  };
  std::vector<std::thread> forkers_running;
  for (int i = 0; i < forkers; ++i) forkers_running.emplace_back(forker, i);
  for (auto& t : forkers_running) t.join();
  stop = true;
  for (auto& t : busy) t.join();
  for (auto& [p, size] : shared.blocks) free(p);
  alarm(0);

  std::string all;
  for (auto& f : failures) all += f + "\n";
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << forks << " children failed:\n" << all;
  strata_stats_t s;
  strata_stats_get(&s);
  EXPECT_EQ(s.bad_free_count, 0u);
}

TEST(ForkStorm, TwoHundredForksWhileThreeThreadsAllocate) { fork_storm(1, 3); }

TEST(ForkStorm, TwoThreadsForkingAtOnceWhileTwoAllocate) { fork_storm(2, 2); }

}  // namespace
