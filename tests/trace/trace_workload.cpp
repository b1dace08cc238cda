// A program of known allocations for the trace tests (trace_test.py), run under
// LD_PRELOAD=libstrata.so with STRATA_TRACE set.  Prints what it did as one JSON line.
//   trace_workload threads N   N blocks made by the main thread, the odd ones freed by a worker,
//                              the even ones by the main thread; reallocs, calloc, aligned, new
//   trace_workload fork N      the child allocates and frees N blocks, then exits
//   trace_workload kill N      allocates N blocks and kills itself (SIGKILL) before freeing them
//   trace_workload quickexit N allocates N blocks and leaves through quick_exit(0)
//   trace_workload sigexit N   malloc/free pairs until SIGTERM, whose handler calls exit(3) (the
//                              test's FIFO is never read: the thread waits in its own write)
//   trace_workload forkexit N  forks (children _exit at once) until SIGTERM, whose handler calls
//                              exit(3): the signal usually comes inside fork, with fork's locks held
//   trace_workload pause N     allocates N blocks, sleeps 300 ms, frees them
//   trace_workload forkexec N  allocates N blocks, runs /bin/true (fork and exec), frees them
//   trace_workload closeall N  closes every descriptor, opens files up to number 899 and its data
//                              file (DATA_FILE), allocates N blocks, writes "data" there
//   trace_workload fsize N     N blocks under a file size limit of 300 kB (a full disk), then,
//                              the limit lifted, 4 threads allocate and exit
//   trace_workload stdoutclosed N  N blocks, a line written to descriptor 1 (exit status 0 if
//                              that failed: started without stdout), N blocks
//   trace_workload fsizestderr N  closes descriptor 2 and opens its data file (DATA_FILE) there,
//                              writes "data", then N blocks under the file size limit of fsize
//   trace_workload daemonfds N  N blocks, then a child that closes descriptors 0-2 (a daemon)
//                              writes to its data file (DATA_FILE) how many of its descriptors are
//                              still open on the stderr the program started with
//   trace_workload unseenfork N  N blocks (the writer thread started), then a child made without
//                              fork's handlers (SYS_clone: as _Fork) allocates and frees N blocks
//                              and exits with exit(); the parent frees its blocks
//   trace_workload handoff N   a producer allocates N blocks (each after a malloc and free of its
//                              own) and hands them through a ring to a consumer that frees them
//   trace_workload api N       every allocation call once (realloc to 0 and from NULL, large
//                              alignments, malloc(0), free_sized if present), and N allocations the
//                              allocator refuses: calloc overflow, malloc(SIZE_MAX / 2),
//                              posix_memalign with alignment 24, nothrow new aligned to 48
//   trace_workload threadchurn N  N threads one after another, each allocating and freeing 100
//                              blocks; prints how much the address space grew (KiB)
//   trace_workload lateround N  N threads one after another, each with a key whose destructor
//                              sets it again (every round of key destructors runs) and allocates
//                              and frees a block in each round; prints how much the address
//                              space grew (KiB)
//   trace_workload latetogether N  N threads alive at once, each with lateround's key: no thread
//                              starts after them to take over the buffers their last rounds
//                              left, which exit() writes
//   trace_workload busy N      64 threads alive at once, each making N malloc/free pairs; prints
//                              the resident memory (KiB) while all of them are still alive
//   trace_workload exitrace N  a thread allocates N blocks and waits; the main thread prints its
//                              line and calls exit(), and the thread exits 300 ms later, while the
//                              exit handlers may still be writing (trace_test.py reads the FIFO
//                              only after a pause)
//   trace_workload mainexit N  N malloc/free pairs (the writer thread starts), then a thread makes
//                              N more and the main thread calls pthread_exit: the process ends
//                              when that thread does
//   trace_workload smallstack N  a thread made with PTHREAD_STACK_MIN, 6 KiB deep in its own
//                              frames (glibc's fork and exit() allow 7), forks (the child
//                              allocates and frees N blocks and exits), waits for the child,
//                              allocates N blocks and calls exit(0)
//   trace_workload eintr N     N malloc/free pairs and N posix_memalign with every other writev
//                              the recorder makes failing with EINTR (as a signal handler installed
//                              without SA_RESTART makes a write to a full pipe fail); prints how
//                              many calls changed errno
//   trace_workload fifoexit N  N malloc/free pairs (the writer thread starts), the line printed,
//                              then a thread allocates and frees N / 2 blocks and exits while
//                              the main thread makes N more pairs (the writer writes its area)
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

// eintr: while set, every other writev fails with EINTR before writing anything.  The recorder's
// calls come here (this executable is first in the lookup order: its link exports writev).
static std::atomic<bool> interrupt_writes{false};
static std::atomic<long> writes_interrupted{0};
extern "C" ssize_t writev(int fd, const struct iovec* v, int count) {
  static std::atomic<long> calls{0};
  if (interrupt_writes.load() && calls.fetch_add(1) % 2 == 0) {
    writes_interrupted.fetch_add(1);
    errno = EINTR;
    return -1;
  }
  return syscall(SYS_writev, fd, v, count);
}

// smallstack: fork (the child allocates and exits), then allocate and exit(0).
static int small_n;
static void fork_and_exit() {
  pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < small_n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("{\"pid\": %d, \"child\": %d, \"child_status\": %d, \"mallocs\": %d}\n", getpid(), child, status, small_n);
  fflush(stdout);
  for (int i = 0; i < small_n; i++) {
    void* volatile p = malloc(24);
    (void)p;
  }
  exit(0);
}

// 1 KiB of frame per level, `levels` deep, then `then`.
__attribute__((noinline)) static void deep_then(int levels, void (*then)()) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(levels);
  if (levels > 1)
    deep_then(levels - 1, then);
  else
    then();
  pad[1] = pad[0];  // no tail call: every level keeps its frame
}

static void* small_stack_thread(void*) {
  deep_then(6, fork_and_exit);
  return nullptr;
}

// A field of /proc/self/status in KiB (its name with the colon), or -1.
static long status_kib(const char* field) {
  long kib = -1;
  if (FILE* f = fopen("/proc/self/status", "r")) {
    char line[256];
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
      if (strncmp(line, field, n) == 0) kib = atol(line + n);
    fclose(f);
  }
  return kib;
}

// A thread key whose destructor frees the value, allocates another and sets the key again, in
// every round of key destructors (PTHREAD_DESTRUCTOR_ITERATIONS), freeing the last one: a thread
// records after the recorder's own destructor has run.
pthread_key_t key_allocating_in_every_round() {
  static pthread_key_t key;
  pthread_key_create(&key, [](void* v) {
    static thread_local int rounds = 0;
    free(v);
    void* p = malloc(100);
    if (++rounds < PTHREAD_DESTRUCTOR_ITERATIONS) pthread_setspecific(key, p);
    else free(p);
  });
  return key;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  int n = atoi(argv[2]);
  std::vector<void*> blocks(n);
  if (strcmp(argv[1], "threads") == 0) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(16 + i % 200);
    std::thread worker([&] {
      for (int i = 1; i < n; i += 2) free(blocks[i]);
    });
    worker.join();
    int reallocs = 0, aligned = 0;
    for (int i = 0; i < n; i += 2) {
      if (i % 10 == 0) {
        blocks[i] = realloc(blocks[i], 1000);
        reallocs++;
      }
      free(blocks[i]);
    }
    for (int i = 0; i < 100; i++) {
      void* p = nullptr;
      if (posix_memalign(&p, 256, 100) == 0) aligned++;
      free(p);
      void* volatile c = calloc(10, 10);  // volatile: the compiler may not drop the pair
      free(c);
      int* volatile q = new int(i);
      delete q;
    }
    printf("{\"mallocs\": %d, \"cross_thread_frees\": %d, \"reallocs\": %d, \"aligned\": %d, \"callocs\": 100}\n",
           n, n / 2, reallocs, aligned);
    return 0;
  }
  if (strcmp(argv[1], "fork") == 0) {
    pid_t child = fork();
    if (child == 0) {
      for (int i = 0; i < n; i++) blocks[i] = malloc(32);
      for (int i = 0; i < n; i++) free(blocks[i]);
      exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("{\"child\": %d, \"mallocs\": %d}\n", child, n);
    return 0;
  }
  if (strcmp(argv[1], "pause") == 0) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(48);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int i = 0; i < n; i++) free(blocks[i]);
    printf("{\"mallocs\": %d}\n", n);
    return 0;
  }
  if (strcmp(argv[1], "churn") == 0) {  // many events, one small block live at a time
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    printf("{\"mallocs\": %d}\n", n);
    return 0;
  }
  if (strcmp(argv[1], "threadchurn") == 0) {
    std::thread([] { free(malloc(16)); }).join();  // the first thread's buffer and the writer
    long before = status_kib("VmSize:");
    for (int t = 0; t < n; t++)
      std::thread([] {
        void* b[100];
        for (int i = 0; i < 100; i++) b[i] = malloc(16 + i);
        for (int i = 0; i < 100; i++) free(b[i]);
      }).join();
    printf("{\"threads\": %d, \"vm_growth_kib\": %ld}\n", n, status_kib("VmSize:") - before);
    return 0;
  }
  if (strcmp(argv[1], "lateround") == 0) {
    // After the recorder's own destructor in the last round: nothing follows to give its buffer back.
    static pthread_key_t late = key_allocating_in_every_round();
    auto body = [] { pthread_setspecific(late, malloc(50)); };
    std::thread(body).join();  // the first thread's buffer and the writer
    long before = status_kib("VmSize:");
    for (int t = 0; t < n; t++) std::thread(body).join();
    printf("{\"threads\": %d, \"vm_growth_kib\": %ld}\n", n, status_kib("VmSize:") - before);
    return 0;
  }
  if (strcmp(argv[1], "latetogether") == 0) {
    static pthread_key_t late = key_allocating_in_every_round();
    std::vector<pthread_t> threads(n);
    for (auto& t : threads)
      pthread_create(&t, nullptr, [](void*) -> void* {
        pthread_setspecific(late, malloc(50));
        return nullptr;
      }, nullptr);
    for (auto& t : threads) pthread_join(t, nullptr);
    printf("{\"threads\": %d, \"mallocs\": %d}\n", n, n * PTHREAD_DESTRUCTOR_ITERATIONS + n);
    return 0;
  }
  if (strcmp(argv[1], "busy") == 0) {
    constexpr int threads = 64;
    pthread_barrier_t done, measured;
    pthread_barrier_init(&done, nullptr, threads + 1);
    pthread_barrier_init(&measured, nullptr, threads + 1);
    std::vector<std::thread> busy;
    for (int t = 0; t < threads; t++)
      busy.emplace_back([&] {
        for (int i = 0; i < n; i++) {
          void* volatile p = malloc(16 + (i & 63) * 8);
          free(p);
        }
        pthread_barrier_wait(&done);
        pthread_barrier_wait(&measured);
      });
    pthread_barrier_wait(&done);
    long kib = status_kib("VmRSS:");
    pthread_barrier_wait(&measured);
    for (auto& t : busy) t.join();
    printf("{\"threads\": %d, \"rss_kib\": %ld}\n", threads, kib);
    return 0;
  }
  if (strcmp(argv[1], "api") == 0) {
    void* volatile p = realloc(malloc(100), 0);
    free(p);
    free(realloc(nullptr, 200));
    void* a64k = aligned_alloc(65536, 1000);
    void* a2m = aligned_alloc(size_t{2} << 20, 3000);
    void* m = memalign(4096, 10);
    void* v = valloc(10);
    void* pv = pvalloc(10);
    void* z = malloc(0);
    bool misaligned = reinterpret_cast<uintptr_t>(a64k) % 65536 || reinterpret_cast<uintptr_t>(a2m) % (2 << 20);
    using sized = void (*)(void*, size_t);
    if (auto fs = reinterpret_cast<sized>(dlsym(RTLD_DEFAULT, "free_sized"))) fs(malloc(77), 77);
    int failed = 0;
    for (int i = 0; i < n; i++) {
      volatile size_t huge = SIZE_MAX / 2;
      failed += calloc(huge, 3) == nullptr;
      failed += malloc(huge) == nullptr;
      void* q = nullptr;
      failed += posix_memalign(&q, 24, 100) != 0;
      // An alignment no power of two (undefined in C++): refused traced as untraced (the
      // recorder's memalign rounded it up and served it).
      failed += ::operator new(100, std::align_val_t{48}, std::nothrow) == nullptr;
    }
    for (void* b : {a64k, a2m, m, v, pv, z}) free(b);
    printf("{\"failed\": %d, \"misaligned\": %d}\n", failed, int(misaligned));
    return 0;
  }
  if (strcmp(argv[1], "handoff") == 0) {
    constexpr int ring_size = 64;
    void* ring[ring_size];
    std::atomic<int> made{0}, taken{0};
    std::thread consumer([&] {
      for (int i = 0; i < n; i++) {
        while (made.load(std::memory_order_acquire) == i) {
        }
        void* p = ring[i % ring_size];
        taken.store(i + 1, std::memory_order_release);
        free(p);
      }
    });
    for (int i = 0; i < n; i++) {
      void* volatile own = malloc(100);
      free(own);
      void* p = malloc(64);
      while (i - taken.load(std::memory_order_acquire) >= ring_size) {
      }
      ring[i % ring_size] = p;
      made.store(i + 1, std::memory_order_release);
    }
    consumer.join();
    printf("{\"cross_thread_frees\": %d}\n", n);
    return 0;
  }
  if (strcmp(argv[1], "unseenfork") == 0) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(32);
    pid_t child = static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr));
    if (child == 0) {
      for (int i = 0; i < n; i++) {
        void* volatile p = malloc(48);
        free(p);
      }
      exit(0);
    }
    int status = -1;
    waitpid(child, &status, 0);
    for (int i = 0; i < n; i++) free(blocks[i]);
    printf("{\"mallocs\": %d, \"child_status\": %d}\n", n, status);
    return 0;
  }
  if (strcmp(argv[1], "forkexec") == 0) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(32);
    pid_t child = fork();
    if (child == 0) {
      execl("/bin/true", "true", static_cast<char*>(nullptr));
      _exit(127);
    }
    waitpid(child, nullptr, 0);
    for (int i = 0; i < n; i++) free(blocks[i]);
    printf("{\"mallocs\": %d}\n", n);
    return 0;
  }
  if (strcmp(argv[1], "closeall") == 0) {
    syscall(SYS_close_range, 3u, ~0u, 0u);
    for (;;) {
      int fd = open("/dev/null", O_RDONLY);
      if (fd < 0 || fd >= 899) break;
    }
    int data = open(getenv("DATA_FILE"), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    if (write(data, "data", 4) != 4) return 1;
    printf("{\"data_fd\": %d}\n", data);
    return 0;
  }
  if (strcmp(argv[1], "stdoutclosed") == 0) {  // started with descriptor 1 closed
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    bool refused = write(1, "output\n", 7) < 0;  // EBADF: no stdout
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    return refused ? 0 : 1;
  }
  if (strcmp(argv[1], "daemonfds") == 0) {
    struct stat err {};
    if (fstat(2, &err) != 0) return 1;
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    pid_t child = fork();
    if (child == 0) {
      close(0);
      close(1);
      close(2);
      int left = 0;
      if (DIR* d = opendir("/proc/self/fd")) {
        while (dirent* e = readdir(d)) {
          int fd = atoi(e->d_name);
          struct stat st {};
          if (e->d_name[0] != '.' && fd != dirfd(d) && fstat(fd, &st) == 0 && st.st_dev == err.st_dev &&
              st.st_ino == err.st_ino)
            left++;
        }
        closedir(d);
      }
      int out = open(getenv("DATA_FILE"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dprintf(out, "%d", left);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("{\"child_exited\": %d}\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : 0);
    return 0;
  }
  if (strcmp(argv[1], "fsizestderr") == 0) {  // fsize's failure, with the program's file on 2
    close(2);
    int data = open(getenv("DATA_FILE"), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (data != 2 || write(data, "data", 4) != 4) return 1;
    signal(SIGXFSZ, SIG_IGN);
    rlimit small{};
    getrlimit(RLIMIT_FSIZE, &small);
    small.rlim_cur = 300000;
    setrlimit(RLIMIT_FSIZE, &small);
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    printf("{\"data_fd\": %d}\n", data);
    return 0;
  }
  // fsize ignores SIGXFSZ; fsizedefault leaves it at its default action (ending the process).
  if (strcmp(argv[1], "fsize") == 0 || strcmp(argv[1], "fsizedefault") == 0) {
    if (strcmp(argv[1], "fsize") == 0) signal(SIGXFSZ, SIG_IGN);
    rlimit old{}, small{};
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    // fsizedefault: below the first area's chunk, which the thread writes itself (no writer yet).
    small.rlim_cur = strcmp(argv[1], "fsize") == 0 ? 300000 : 100000;
    setrlimit(RLIMIT_FSIZE, &small);
    for (int i = 0; i < n; i++) {
      void* volatile p = malloc(32);
      free(p);
    }
    setrlimit(RLIMIT_FSIZE, &old);  // room again
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
      threads.emplace_back([] {
        for (int i = 0; i < 1000; i++) {
          void* volatile p = malloc(64);
          free(p);
        }
      });
    for (auto& t : threads) t.join();
    printf("{\"mallocs\": %d}\n", n);
    return 0;
  }
  if (strcmp(argv[1], "exitrace") == 0) {
    std::atomic<bool> made{false};
    std::thread([&] {
      for (int i = 0; i < n; i++) blocks[i] = malloc(24);
      made.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }).detach();
    while (!made.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    printf("{\"mallocs\": %d}\n", n);
    fflush(stdout);
    exit(0);
  }
  if (strcmp(argv[1], "mainexit") == 0) {
    static int count = n;
    auto pairs = [] {
      for (int i = 0; i < count; i++) {
        void* volatile p = malloc(32);
        free(p);
      }
    };
    pairs();
    std::thread(pairs).detach();
    printf("{\"mallocs\": %d}\n", 2 * n);
    fflush(stdout);
    pthread_exit(nullptr);
  }
  if (strcmp(argv[1], "fifoexit") == 0) {
    auto pairs = [](int count) {
      for (int i = 0; i < count; i++) {
        void* volatile p = malloc(32);
        free(p);
      }
    };
    pairs(n);
    printf("{\"mallocs\": %d}\n", 2 * n + n / 2);
    fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::thread exiting([&] {
      for (int i = 0; i < n / 2; i++) blocks[i] = malloc(24);
      for (int i = 0; i < n / 2; i++) free(blocks[i]);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pairs(n);
    exiting.join();
    return 0;
  }
  if (strcmp(argv[1], "sigexit") == 0) {
    signal(SIGTERM, [](int) { exit(3); });
    printf("{\"mallocs\": %d}\n", n);
    fflush(stdout);
    for (;;) {
      void* volatile p = malloc(32);
      free(p);
    }
  }
  if (strcmp(argv[1], "forkexit") == 0) {
    signal(SIGTERM, [](int) { exit(3); });
    signal(SIGCHLD, SIG_IGN);  // no zombies, no wait: the loop is almost all fork
    printf("{\"mallocs\": %d}\n", n);
    fflush(stdout);
    for (;;) {
      void* volatile p = malloc(32);
      free(p);
      if (fork() == 0) _exit(0);
    }
  }
  if (strcmp(argv[1], "smallstack") == 0) {
    small_n = n;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN) != 0) return 3;
    pthread_t t;
    if (pthread_create(&t, &attr, small_stack_thread, nullptr) != 0) return 4;
    pthread_join(t, nullptr);
    return 5;  // not reached: the thread calls exit()
  }
  if (strcmp(argv[1], "eintr") == 0) {
    // Through volatile pointers: the compiler takes free to keep errno (glibc's does) and would
    // not read it again after the call.
    void* (*volatile malloc_call)(size_t) = malloc;
    void (*volatile free_call)(void*) = free;
    int (*volatile memalign_call)(void**, size_t, size_t) = posix_memalign;
    interrupt_writes = true;
    int changed = 0;
    for (int i = 0; i < n; i++) {
      errno = EDOM;
      void* p = malloc_call(16 + i % 200);
      changed += errno != EDOM;
      errno = EDOM;
      free_call(p);
      changed += errno != EDOM;
      errno = EDOM;
      void* q = nullptr;
      changed += memalign_call(&q, 64, 100) != 0 || errno != EDOM;
      free_call(q);
      changed += errno != EDOM;
    }
    interrupt_writes = false;
    printf("{\"mallocs\": %d, \"errno_changed\": %d, \"writes_interrupted\": %ld}\n", n, changed,
           writes_interrupted.load());
    return 0;
  }
  if (strcmp(argv[1], "quickexit") == 0) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(24);
    printf("{\"mallocs\": %d}\n", n);
    fflush(stdout);
    quick_exit(0);
  }
  if (strcmp(argv[1], "kill") == 0) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(24);
    printf("{\"mallocs\": %d}\n", n);
    fflush(stdout);
    raise(SIGKILL);
  }
  return 2;
}
