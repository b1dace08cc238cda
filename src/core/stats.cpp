#include "core/stats.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fcntl.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/heap.h"
#include "core/options.h"
#include "core/report.h"
#include "core/segment.h"
#include "os/file.h"
#include "os/os.h"

namespace strata::detail {

void stats_sum(strata_stats_t* out, class_counts& counts) noexcept {
  *out = strata_stats_t{};
  uint64_t* allocs = counts.allocs;
  uint64_t* frees = counts.frees;
  uint64_t remote;
  {
    // g_retired and the heaps read under the lock that a heap's retirement takes (heap.h).
    heap_registry_held registry;
    // Every free first, then every allocation: a block's free is counted after its allocation
    // (by the thread that made both, or by one the block was handed to), so each free read here
    // has its allocation read below, and no class reads more frees than allocations.  Read in
    // one pass, heap by heap, the frees a running thread made after its allocations were read
    // were counted without them (free_count > malloc_count, a class's live count below 0).
    remote = g_retired.remote_frees.load(std::memory_order_relaxed);
    for (size_t c = 0; c < size_class_count; ++c) frees[c] = g_retired.free_count[c].load(std::memory_order_relaxed);
    for (heap* h = registry.first(); h; h = h->next_in_registry) {
      for (size_t c = 0; c < size_class_count; ++c) frees[c] += h->free_count[c].get();
      remote += h->remote_frees.get();
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    for (size_t c = 0; c < size_class_count; ++c) allocs[c] = g_retired.alloc_count[c].load(std::memory_order_relaxed);
    for (heap* h = registry.first(); h; h = h->next_in_registry) {
      if (h->alive.load(std::memory_order_relaxed) && !heap_is_orphan(h)) out->threads++;
      for (size_t i = 0; i < small_slots; ++i) allocs[small_classes.cls[i]] += h->alloc_small[i].get();
      for (size_t c = 0; c < size_class_count; ++c) allocs[c] += h->alloc_count[c].get();
    }
  }
  // Local frees are counted in their page until a slow path adds them to the heap's counters;
  // the calling thread's own pages are read here (outside the lock: only this thread moves
  // those counts), so its view is exact.  Another running thread's counts may lag by the frees
  // its pages hold.
  if (heap* h = tl_heap; h != &empty_heap) {
    for (size_t c = 0; c < size_class_count; ++c)
      for (const page_list* l : {&h->queue[c], &h->full[c]})
        for (const page* pg = l->first; pg; pg = pg->next) frees[c] += pg->frees;
  }
  // A live block's bytes are its stride, what malloc_usable_size answers: 64 more than the class
  // size in the classes that space their blocks a colour apart (size_class.h, block_stride).  By
  // the class size, in_use_bytes read 64 B a block below the usable sizes of those blocks.
  int64_t in_use = 0;
  for (size_t c = 0; c < size_class_count; ++c) {
    out->malloc_count += allocs[c];
    out->free_count += frees[c];
    in_use += static_cast<int64_t>(allocs[c] - frees[c]) * static_cast<int64_t>(block_stride(c));
  }
  segment_totals seg = segment_stats();
  // Huge blocks, counted apart from the classes' (segment.cpp, huge_count).
  out->malloc_count += seg.huge_allocs;
  out->free_count += seg.huge_frees;
  out->in_use_bytes = static_cast<uint64_t>(in_use > 0 ? in_use : 0) + seg.huge_bytes;
  out->huge_count = seg.huge_count;
  out->segments = seg.segments;
  out->abandoned_segments = seg.abandoned;
  out->reclaimed_segments = seg.reclaimed;
  out->remote_free_count = remote;
  out->committed_bytes = static_cast<uint64_t>(os::stats.committed.load(std::memory_order_relaxed));
  // A thread that commits raises committed, then the peak (os::commit_add): read between the
  // two, the peak was below the committed bytes just read, which it always covers.
  uint64_t peak = static_cast<uint64_t>(os::stats.committed_peak.load(std::memory_order_relaxed));
  out->committed_peak = peak > out->committed_bytes ? peak : out->committed_bytes;
  out->reserved_bytes = static_cast<uint64_t>(os::stats.reserved.load(std::memory_order_relaxed));
  out->mmap_calls = os::stats.mmap_calls.load(std::memory_order_relaxed);
  out->munmap_calls = os::stats.munmap_calls.load(std::memory_order_relaxed);
  out->madvise_calls = os::stats.madvise_calls.load(std::memory_order_relaxed);
  out->bad_free_count = bad_free_count();
}

static size_t stats_json(char* buf, size_t len, class_counts& counts) noexcept {
  strata_stats_t s;
  stats_sum(&s, counts);
  const uint64_t* allocs = counts.allocs;
  const uint64_t* frees = counts.frees;
  report::json_writer w(buf, len);
  w.open();
  w.field_text("allocator", "strata");
  w.field_text("version", STRATA_VERSION_STRING);
  w.field_uint("in_use_bytes", s.in_use_bytes);
  w.field_uint("committed_bytes", s.committed_bytes);
  w.field_uint("committed_peak", s.committed_peak);
  w.field_uint("reserved_bytes", s.reserved_bytes);
  w.field_double("fragmentation",
                 s.committed_bytes ? 1.0 - static_cast<double>(s.in_use_bytes) / static_cast<double>(s.committed_bytes) : 0.0);
  w.field_uint("malloc_count", s.malloc_count);
  w.field_uint("free_count", s.free_count);
  w.field_uint("remote_free_count", s.remote_free_count);
  w.field_uint("huge_count", s.huge_count);
  w.field_uint("segments", s.segments);
  w.field_uint("abandoned_segments", s.abandoned_segments);
  w.field_uint("reclaimed_segments", s.reclaimed_segments);
  w.field_uint("threads", s.threads);
  w.field_uint("bad_free_count", s.bad_free_count);
  w.open_object("os");
  w.field_uint("mmap", s.mmap_calls);
  w.field_uint("munmap", s.munmap_calls);
  w.field_uint("madvise", s.madvise_calls);
  w.close();
  w.open_array("size_classes");
  for (size_t c = 0; c < size_class_count; ++c) {
    if (allocs[c] == 0 && frees[c] == 0) continue;
    w.array_object();
    w.field_uint("block_size", block_stride(c));
    w.field_uint("allocs", allocs[c]);
    w.field_uint("frees", frees[c]);
    w.close();
  }
  w.close_array();
  w.close();
  return w.finish();
}

static void stats_print_to(int fd, class_counts& counts) noexcept {
  strata_stats_t s;
  stats_sum(&s, counts);
  const uint64_t* allocs = counts.allocs;
  const uint64_t* frees = counts.frees;
  auto mib = [](uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  report::to_fd(fd, "strata %s statistics (pid %d)\n", STRATA_VERSION_STRING, static_cast<int>(getpid()));
  report::to_fd(fd, "  in use     %10.2f MiB   committed %10.2f MiB (peak %.2f MiB)   reserved %.2f MiB\n",
                mib(s.in_use_bytes), mib(s.committed_bytes), mib(s.committed_peak), mib(s.reserved_bytes));
  report::to_fd(fd, "  mallocs    %10llu       frees     %10llu (remote %llu)   bad frees %llu\n",
                static_cast<unsigned long long>(s.malloc_count), static_cast<unsigned long long>(s.free_count),
                static_cast<unsigned long long>(s.remote_free_count), static_cast<unsigned long long>(s.bad_free_count));
  report::to_fd(fd, "  segments   %10llu       huge      %10llu   abandoned %llu   reclaimed %llu   threads %llu\n",
                static_cast<unsigned long long>(s.segments), static_cast<unsigned long long>(s.huge_count),
                static_cast<unsigned long long>(s.abandoned_segments), static_cast<unsigned long long>(s.reclaimed_segments),
                static_cast<unsigned long long>(s.threads));
  report::to_fd(fd, "  os calls   mmap %llu   munmap %llu   madvise %llu\n",
                static_cast<unsigned long long>(s.mmap_calls), static_cast<unsigned long long>(s.munmap_calls),
                static_cast<unsigned long long>(s.madvise_calls));
  report::to_fd(fd, "  %10s %14s %14s %14s\n", "block", "allocs", "frees", "live");
  for (size_t c = 0; c < size_class_count; ++c) {
    if (allocs[c] == 0) continue;
    report::to_fd(fd, "  %10zu %14llu %14llu %14lld\n", block_stride(c), static_cast<unsigned long long>(allocs[c]),
                  static_cast<unsigned long long>(frees[c]), static_cast<long long>(allocs[c] - frees[c]));
  }
}

namespace {
// STRATA_SHOW_STATS prints at exit, after the program's own exit handlers: by then many programs
// have closed stderr (coreutils' close_stdout: `STRATA_SHOW_STATS=1 ls` printed nothing), and
// one that closed it earlier and opened a file of its own got strata's statistics written into
// that file, which took descriptor 2.  So stderr as it was at start-up is kept on a copy, and the
// statistics go to whichever of the copy and descriptor 2 is still that file, else nowhere.
// STRATA_STATS_FILE's warnings at exit go the same way: they went to descriptor 2 as it was then,
// into the program's own file; and so do STRATA_TRACE's (a trace whose write failed: "recording
// stopped" went into the program's file), but without a copy when only they need it (below).
int start_stderr = -1;
uint64_t start_stderr_device = 0, start_stderr_inode = 0;

bool is_start_stderr(int fd) noexcept { return os::file_is(fd, start_stderr_device, start_stderr_inode); }
}  // namespace

int startup_stderr() noexcept {
  if (is_start_stderr(start_stderr)) return start_stderr;
  if (is_start_stderr(2)) return 2;
  return -1;
}

void stats_drop_stderr_copy() noexcept {
  if (start_stderr >= 0) close(start_stderr);
  start_stderr = -1;
}

namespace {

// strerrordesc_np, unlike strerror, neither translates nor allocates: this runs inside the
// allocator at exit.
void stats_file_failed(const char* what, const char* path, int err) noexcept {
  const int fd = startup_stderr();
  if (fd < 0) return;
  const char* why = strerrordesc_np(err);
  if (why != nullptr)
    report::to_fd(fd, "strata: warning: STRATA_STATS_FILE=%.*s%s cannot be %s: %s\n", report::quote_len(path), path,
                  report::quote_cut(path), what, why);
  else
    report::to_fd(fd, "strata: warning: STRATA_STATS_FILE=%.*s%s cannot be %s: errno %d\n", report::quote_len(path),
                  path, report::quote_cut(path), what, err);
}
}  // namespace

void stats_keep_stderr() noexcept {
  const char* stats_file = options::get_text(option::stats_file);
  const bool at_exit = options::get(option::show_stats) || stats_file != nullptr;
  const bool needed = at_exit || options::get_text(option::trace) != nullptr;
  if (start_stderr >= 0) close(start_stderr);  // called again (tests): no copy leaks
  start_stderr = -1;
  start_stderr_device = start_stderr_inode = 0;
  if (!needed || !os::file_identity(2, start_stderr_device, start_stderr_inode)) return;
  // The copy only for what is written at exit: a copy holds the caller's pipe open in every child
  // the program forks, and a traced daemon (fork, close 0-2, the parent exits) kept `out=$(prog)`
  // waiting until it ended (0.22 s untraced, 4.46 s traced).  STRATA_TRACE's messages go to
  // descriptor 2 while it is still the start-up stderr, and nowhere once it is not.
  if (at_exit) start_stderr = os::file_dup_high(2);
}

namespace {
// The expanded STRATA_STATS_FILE path and its document: static, not on the stack.  exit() runs
// this on the stack of whichever thread calls it, and as locals (20 KiB, reserved at the
// function's entry whether or not an option was set) they overflowed the stack of a thread made
// with a small one (PTHREAD_STACK_MIN, 16 KiB; anything under about 28 KiB): its exit() was a
// SIGSEGV under strata and not under glibc.  The handler runs once (atexit).
char exit_path[4096];
char exit_doc[16384];
// The classes' counts (1.6 KiB) too: as stats_sum's locals, and again as the printout's, they
// took 3.2 KiB of such a thread's stack.  With STRATA_SHOW_STATS, exit() from a PTHREAD_STACK_MIN
// thread 4 KiB deep in its own frames was a SIGSEGV (glibc's exit() allows 7 KiB; now 5).
class_counts exit_counts;
}  // namespace

void stats_report_at_exit() noexcept {
  // open, write and close are cancellation points; a thread calling exit() may be cancelled.
  os::no_cancel hold;
  // A printout or warning to a stderr whose reader has gone (`program 2>&1 | head`) is lost, not
  // a SIGPIPE that ends a program which wrote nothing there itself (exit status 141).
  os::file_signals_hold signals;
  if (options::get(option::show_stats)) {
    if (const int fd = startup_stderr(); fd >= 0) stats_print_to(fd, exit_counts);
  }
  if (const char* pattern = options::get_text(option::stats_file)) {
    char* path = exit_path;
    if (!os::expand_path(pattern, path, sizeof exit_path)) {
      if (const int fd = startup_stderr(); fd >= 0)
        report::to_fd(fd, "strata: warning: STRATA_STATS_FILE is too long once expanded\n");
      return;
    }
    char* doc = exit_doc;
    size_t n = stats_json(doc, sizeof exit_doc, exit_counts);
    if (n >= sizeof exit_doc) n = sizeof exit_doc - 1;
    // Every failure says so, naming the path: a statistics file that is silently missing or
    // truncated (STRATA_STATS_FILE=/dev/full, a full disk, a quota) misleads whoever reads it.
    int fd = os::file_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
    if (fd < 0) {
      stats_file_failed("opened", path, errno);
      return;
    }
    // file_write2 (under the hold): a FIFO whose reader has gone or a file size limit is a
    // warning too, not a SIGPIPE or SIGXFSZ that ends the process in its exit handler.
    if (!os::file_write2(fd, doc, n, nullptr, 0)) {
      stats_file_failed("written", path, errno);
      close(fd);
      return;
    }
    if (close(fd) != 0 && errno != EINTR) stats_file_failed("written (close failed)", path, errno);
  }
}

}  // namespace strata::detail

using namespace strata::detail;

STRATA_EXPORT void strata_stats_get(strata_stats_t* out) {
  class_counts counts;
  stats_sum(out, counts);
}
STRATA_EXPORT void strata_stats_print(void) {
  class_counts counts;
  stats_print_to(2, counts);
}
STRATA_EXPORT size_t strata_stats_json(char* buf, size_t len) {
  class_counts counts;
  return stats_json(buf, len, counts);
}
STRATA_EXPORT size_t strata_options_json(char* buf, size_t len) { return strata::options::to_json(buf, len); }
STRATA_EXPORT const char* strata_version(void) { return STRATA_VERSION_STRING; }
