// The preload library opened with dlopen (not preloaded: RTLD_LOCAL, the test's own malloc stays
// glibc's), used through its strata_* API, then closed.  Each scenario runs in a child process
// (a death test's fork): before the fix, a thread that exited after the dlclose called strata's
// pthread key destructor in unmapped code and the child died of SIGSEGV.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

using alloc_fn = void* (*)(size_t);
using free_fn = void (*)(void*);

// Exits with a code that says which step failed (the death test checks for 0).
[[noreturn]] void fail(int code, const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::_Exit(code);
}

// A thread allocates through the library and waits; the library is closed; the thread then
// frees nothing more and exits (its heap's key destructor runs), and the process forks.
[[noreturn]] void thread_outlives_dlclose(const char* path, const char* alloc_name = "strata_malloc",
                                          const char* free_name = "strata_free") {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail(2, dlerror());
  auto alloc = reinterpret_cast<alloc_fn>(dlsym(lib, alloc_name));
  auto release = reinterpret_cast<free_fn>(dlsym(lib, free_name));
  if (alloc == nullptr || release == nullptr) fail(3, "dlsym");
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;
  std::thread t([&] {
    void* p = alloc(100);
    if (p == nullptr) fail(4, "strata_malloc");
    release(p);
    std::unique_lock<std::mutex> g(m);
    phase = 1;
    cv.notify_all();
    cv.wait(g, [&] { return phase == 2; });
  });
  {
    std::unique_lock<std::mutex> g(m);
    cv.wait(g, [&] { return phase == 1; });
  }
  if (dlclose(lib) != 0) fail(5, dlerror());
  {
    std::lock_guard<std::mutex> g(m);
    phase = 2;
  }
  cv.notify_all();
  t.join();
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) fail(6, "fork");
  std::_Exit(0);
}

// Session 42's probe: every pthread key taken (PTHREAD_KEYS_MAX) before the library is opened.
// Its pthread_key_create failed unchecked and left its key 0, another owner's key: a thread's
// first allocation set that key to the thread's heap, and at the thread's exit that key's
// destructor was called with the heap.  No key of the program's may change.
int foreign_destructor_calls = 0;
void count_destructor_call(void*) { ++foreign_destructor_calls; }

[[noreturn]] void every_key_taken(const char* path) {
  pthread_key_t k;
  while (pthread_key_create(&k, count_destructor_call) == 0) {
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail(2, dlerror());
  auto alloc = reinterpret_cast<alloc_fn>(dlsym(lib, "strata_malloc"));
  auto release = reinterpret_cast<free_fn>(dlsym(lib, "strata_free"));
  if (alloc == nullptr || release == nullptr) fail(3, "dlsym");
  std::thread t([&] {
    void* before[PTHREAD_KEYS_MAX];
    for (unsigned i = 0; i < PTHREAD_KEYS_MAX; ++i) before[i] = pthread_getspecific(i);
    void* p = alloc(100);
    if (p == nullptr) fail(4, "strata_malloc");
    release(p);
    for (unsigned i = 0; i < PTHREAD_KEYS_MAX; ++i)
      if (pthread_getspecific(i) != before[i]) fail(5, "a key of the program's was set");
  });
  t.join();
  if (foreign_destructor_calls != 0) fail(6, "a destructor of the program's was called with strata's value");
  std::_Exit(0);
}

TEST(SharedLibrary, OpenedWithEveryThreadKeyTakenLeavesTheProgramsKeysAlone) {
  EXPECT_EXIT(every_key_taken(STRATA_SHARED_LIB), testing::ExitedWithCode(0), "");
}

TEST(SharedLibrary, AThreadExitsAfterTheLibraryIsClosed) {
  EXPECT_EXIT(thread_outlives_dlclose(STRATA_SHARED_LIB), testing::ExitedWithCode(0), "");
}

TEST(SharedLibrary, AThreadExitsAfterTheHardenedLibraryIsClosed) {
  EXPECT_EXIT(thread_outlives_dlclose(STRATA_SECURE_SHARED_LIB), testing::ExitedWithCode(0), "");
}

// Session 45: strata linked into a plug-in (libstrata.a), which its user does not link -z nodelete:
// the plug-in is unmapped at its dlclose, and the key destructor it left killed the next thread
// to exit (SIGSEGV), as the preload library's did before session 40.
TEST(SharedLibrary, AThreadExitsAfterAPluginCarryingStrataIsClosed) {
  EXPECT_EXIT(thread_outlives_dlclose(STRATA_IN_PLUGIN, "plugin_malloc", "plugin_free"), testing::ExitedWithCode(0), "");
}

}  // namespace
