// Symbol exports only: the C and C++ allocation entry points a program can reach, each
// forwarding to strata's implementation (the fast paths are inlined from core/alloc.h), or,
// when STRATA_TRACE is set, to the recorder (trace/trace.h), which allocates through strata and
// records the event: one test of a flag that is written only at load, exit and fork.
// No libstdc++ at run time: std::get_new_handler and std::__throw_bad_alloc are weak
// references, present whenever the program itself uses libstdc++.
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <climits>
#include <cstdio>
#include <malloc.h>
#include <new>

#include "core/alloc.h"
#include "override/new_handler_call.h"
#include "core/segment.h"
#include "os/dl.h"
#include "os/os.h"
#include "strata/strata.h"
#include "trace/trace.h"

using namespace strata::detail;
namespace trace = strata::trace;

// With STRATA_TRACE unset, `trace::active` stays false and these are the fast paths plus one
// predicted branch.
#define STRATA_TRACED(call) \
  if (STRATA_UNLIKELY(trace::active)) return trace::call

namespace {
inline void* malloc_any(size_t size) noexcept {
  STRATA_TRACED(malloc(size));
  return malloc_inline(size);
}
inline void* aligned_any(size_t alignment, size_t size) noexcept {
  // aligned_alloc, not memalign: memalign rounds an alignment that is no power of two up, and a
  // traced program's operator new served the ones the untraced program refuses.
  STRATA_TRACED(aligned_alloc(alignment, size));
  return alloc_aligned(alignment, size);
}
inline void free_any(void* p) noexcept {
  STRATA_TRACED(free(p));
  free_inline(p);
}
inline void free_sized_any(void* p, size_t size) noexcept {
  STRATA_TRACED(free_sized(p, size));
  free_inline(p);
}
}  // namespace

extern "C" {
STRATA_EXPORT void* malloc(size_t size) { return malloc_any(size); }
STRATA_EXPORT void free(void* p) { free_any(p); }
STRATA_EXPORT void* calloc(size_t n, size_t size) {
  STRATA_TRACED(calloc(n, size));
  return strata_calloc(n, size);
}
STRATA_EXPORT void* realloc(void* p, size_t size) {
  STRATA_TRACED(realloc(p, size));
  return strata_realloc(p, size);
}
// Through the process's realloc (a call the loader binds, as glibc's reallocarray makes): an
// allocator preloaded before strata that has no reallocarray of its own (jemalloc, tcmalloc) or
// a tracing wrapper that defines realloc only then serves it.  Served here, strata's block went
// to the other allocator's free (`ls` and `sort` under LD_PRELOAD="libjemalloc.so.2
// libstrata.so": SIGSEGV in jemalloc, tcmalloc's abort), one of that allocator's was refused as
// foreign, and the wrapper never saw the call.  Recorded as the realloc it is (STRATA_TRACE).
STRATA_EXPORT void* reallocarray(void* p, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) return strata_reallocarray(p, n, size);  // ENOMEM
  return realloc(p, bytes);
}
STRATA_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) {
  STRATA_TRACED(posix_memalign(out, alignment, size));
  return strata_posix_memalign(out, alignment, size);
}
STRATA_EXPORT void* aligned_alloc(size_t alignment, size_t size) {
  STRATA_TRACED(aligned_alloc(alignment, size));
  return strata_aligned_alloc(alignment, size);
}
STRATA_EXPORT void* memalign(size_t alignment, size_t size) {
  STRATA_TRACED(memalign(alignment, size));
  return strata_memalign(alignment, size);
}
STRATA_EXPORT void* valloc(size_t size) {
  STRATA_TRACED(valloc(size));
  return strata_valloc(size);
}
STRATA_EXPORT void* pvalloc(size_t size) {
  STRATA_TRACED(pvalloc(size));
  return strata_pvalloc(size);
}
STRATA_EXPORT size_t malloc_usable_size(void* p) { return strata_usable_size(p); }
STRATA_EXPORT void free_sized(void* p, size_t size) { free_sized_any(p, size); }
STRATA_EXPORT void free_aligned_sized(void* p, size_t, size_t size) { free_sized_any(p, size); }
STRATA_EXPORT void cfree(void* p) { free_any(p); }
// glibc's contract: 1 if memory went back to the OS, 0 if there was none to give back (a
// program may trim until it says 0).  It always said 1.  Other threads' releases during the call
// count too.
STRATA_EXPORT int malloc_trim(size_t) {
  uint64_t before = strata::os::stats.released.load(std::memory_order_relaxed);
  strata_collect(true);
  return strata::os::stats.released.load(std::memory_order_relaxed) != before;
}

// glibc's heap statistics, answered from strata's (a program that watches its heap with
// mallinfo2 would otherwise read glibc's heap, which holds almost nothing under the preload),
// split as glibc splits them: hblks / hblkhd = the live huge mappings and their bytes; arena =
// what the OS backs for strata now (committed) less those; uordblks = bytes in live blocks
// (size-class rounded) less those; fordblks = arena - uordblks (free blocks, empty pages and
// spans not yet purged); usmblks = the peak of committed memory.  The chunk counts (ordblks,
// smblks), fsmblks and keepcost have no meaning here: 0.
extern "C++" {
namespace {
// Either struct, its fields converted by `field` (size_t, or int for the old form).
template <class Info, class Field>
Info heap_info(Field field) noexcept {
  strata_stats_t s;
  strata_stats_get(&s);
  segment_totals seg = segment_stats();
  auto less_huge = [&](uint64_t v) { return v > seg.huge_bytes ? v - seg.huge_bytes : 0; };
  size_t arena = less_huge(s.committed_bytes), used = less_huge(s.in_use_bytes);
  Info m = {};
  m.arena = field(arena);
  m.uordblks = field(used);
  m.fordblks = field(arena > used ? arena - used : 0);
  m.hblks = field(seg.huge_count);
  m.hblkhd = field(seg.huge_bytes);
  m.usmblks = field(s.committed_peak);
  return m;
}
}  // namespace
}
STRATA_EXPORT struct mallinfo2 mallinfo2() {
  return heap_info<struct mallinfo2>([](size_t v) { return v; });
}
// The old form's fields are int: values over INT_MAX are clamped (glibc wraps them).
STRATA_EXPORT struct mallinfo mallinfo() {
  return heap_info<struct mallinfo>([](size_t v) { return v > INT_MAX ? INT_MAX : static_cast<int>(v); });
}
STRATA_EXPORT void malloc_stats() { strata_stats_print(); }

// mallopt and malloc_info are strata's too: in a static link (-static with libstrata.a) glibc's
// live in the object file that defines its malloc, and a program that called either failed to
// link ("multiple definition of `malloc'"); preloaded, glibc's described or tuned a heap that holds
// almost nothing.  mallopt tunes nothing here: it answers as glibc 2.36 does, 1 for every
// parameter and value except an M_MXFAST outside 0..80 * sizeof(size_t) / 4 (0).  malloc_info
// writes glibc's XML with mallinfo2's numbers: one heap, no free-chunk size table.
STRATA_EXPORT int mallopt(int param, int value) {
  return param == M_MXFAST ? value >= 0 && static_cast<size_t>(value) <= 80 * sizeof(size_t) / 4 : 1;
}
STRATA_EXPORT int malloc_info(int options, FILE* fp) {
  if (options != 0) return EINVAL;  // glibc: returned, errno untouched
  struct mallinfo2 m = mallinfo2();
  auto totals = [&](bool with_mmap) {
    fprintf(fp,
            "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
            "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n",
            m.fordblks);
    if (with_mmap) fprintf(fp, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n", m.hblks, m.hblkhd);
    fprintf(fp,
            "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
            "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n",
            m.arena, m.usmblks, m.arena, m.arena);
  };
  fputs("<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n</sizes>\n", fp);
  totals(false);
  fputs("</heap>\n", fp);
  totals(true);  // the whole process: the huge mappings too
  fputs("</malloc>\n", fp);
  return 0;
}

// glibc's own names for its allocator, which some programs and libraries call directly (a
// malloc wrapper forwarding to __libc_malloc, a library built to bypass interposition): the
// blocks they get must be strata's, or the program's free() of one is a bad free (and glibc's
// free of one of strata's a crash).  mimalloc and tcmalloc take them over as well.
// Aliases: the same functions under a second name (recorded alike when STRATA_TRACE is set).
STRATA_EXPORT void* __libc_malloc(size_t) __attribute__((alias("malloc"), copy(malloc)));
STRATA_EXPORT void* __libc_calloc(size_t, size_t) __attribute__((alias("calloc"), copy(calloc)));
STRATA_EXPORT void* __libc_realloc(void*, size_t) __attribute__((alias("realloc"), copy(realloc)));
STRATA_EXPORT void __libc_free(void*) __attribute__((alias("free"), copy(free)));
STRATA_EXPORT void* __libc_memalign(size_t, size_t) __attribute__((alias("memalign"), copy(memalign)));
STRATA_EXPORT void* __libc_valloc(size_t) __attribute__((alias("valloc"), copy(valloc)));
STRATA_EXPORT void* __libc_pvalloc(size_t) __attribute__((alias("pvalloc"), copy(pvalloc)));
STRATA_EXPORT struct mallinfo __libc_mallinfo() __attribute__((alias("mallinfo"), copy(mallinfo)));
STRATA_EXPORT int __libc_mallopt(int, int) __attribute__((alias("mallopt"), copy(mallopt)));

// Weak: resolved only when libstdc++ is in the process.
using new_handler_fn = void (*)();
new_handler_fn strata_get_new_handler() __asm__("_ZSt15get_new_handlerv") __attribute__((weak));
[[noreturn]] void strata_throw_bad_alloc() __asm__("_ZSt17__throw_bad_allocv") __attribute__((weak));
}

namespace {
// libstdc++'s std::get_new_handler and std::__throw_bad_alloc, for operator new's failure.  The
// weak references above are bound at load (-z now): a C program (CPython, say) that loads C++
// code later, a module and the libstdc++ it needs opened RTLD_LOCAL, left them null for good, so
// operator new out of memory trapped (SIGILL) instead of throwing std::bad_alloc, and ignored
// std::set_new_handler.  The preload libraries then ask the loader for the libstdc++ already in
// the process (RTLD_NOLOAD: never loads it), on this failure path only; the handle is kept, so
// the functions stay mapped.  libstrata.a is linked into the program, whose own references bind
// the weak ones when it uses libstdc++ at all, and does not reference the loader (a static link).
struct cxx_runtime {
  new_handler_fn (*get_new_handler)();
  void (*throw_bad_alloc)();
};
#if defined(STRATA_PRELOAD)
std::atomic<void*> libstdcxx{nullptr};
#endif
cxx_runtime cxx_runtime_now() noexcept {
  if (strata_get_new_handler) return {strata_get_new_handler, strata_throw_bad_alloc};
#if defined(STRATA_PRELOAD)
  void* lib = libstdcxx.load(std::memory_order_acquire);
  if (lib == nullptr) {
    lib = strata::os::loaded_library("libstdc++.so.6");
    if (lib == nullptr) return {nullptr, nullptr};
    void* expected = nullptr;
    if (!libstdcxx.compare_exchange_strong(expected, lib, std::memory_order_acq_rel)) {
      strata::os::close_library(lib);  // another thread kept one
      lib = expected;
    }
  }
  return {reinterpret_cast<new_handler_fn (*)()>(strata::os::find_symbol(lib, "_ZSt15get_new_handlerv")),
          reinterpret_cast<void (*)()>(strata::os::find_symbol(lib, "_ZSt17__throw_bad_allocv"))};
#else
  return {nullptr, nullptr};
#endif
}

[[noreturn]] void bad_alloc_now(const cxx_runtime& rt) {
  if (rt.throw_bad_alloc) rt.throw_bad_alloc();
  strata::detail::throw_bad_alloc();  // a static link: libstdc++'s thrower not linked in
}

// operator new's contract: call the new-handler until it succeeds or there is none, then throw
// std::bad_alloc (or return nullptr for the nothrow forms).
__attribute__((noinline)) void* new_failed(size_t size, size_t alignment, bool nothrow) {
  for (;;) {
    cxx_runtime rt = cxx_runtime_now();
    new_handler_fn handler = rt.get_new_handler ? rt.get_new_handler() : nullptr;
    if (handler == nullptr) {
      if (nothrow) return nullptr;
      bad_alloc_now(rt);
    }
    if (!nothrow) {
      handler();
    } else if (!strata::detail::call_new_handler_nothrow(handler)) {
      return nullptr;  // it threw (std::bad_alloc): the nothrow forms' null pointer
    }
    void* p = alignment ? aligned_any(alignment, size) : malloc_any(size);
    if (p) return p;
  }
}

// An alignment that is no power of two (undefined in C++) is refused at once, as libstdc++
// refuses it: no new-handler can make that request succeed, and one that returned was called
// again and again (a handler that never gives up: a hang).
__attribute__((noinline)) void* new_aligned_failed(size_t size, size_t alignment, bool nothrow) {
  if (std::has_single_bit(alignment)) return new_failed(size, alignment, nothrow);
  if (nothrow) return nullptr;
  bad_alloc_now(cxx_runtime_now());
}

inline void* new_impl(size_t size) {
  void* p = malloc_any(size);
  return STRATA_LIKELY(p != nullptr) ? p : new_failed(size, 0, false);
}
inline void* new_nothrow(size_t size) noexcept {
  void* p = malloc_any(size);
  return STRATA_LIKELY(p != nullptr) ? p : new_failed(size, 0, true);
}
inline void* new_aligned(size_t size, std::align_val_t al) {
  auto a = static_cast<size_t>(al);
  void* p = aligned_any(a, size);
  return STRATA_LIKELY(p != nullptr) ? p : new_aligned_failed(size, a, false);
}
inline void* new_aligned_nothrow(size_t size, std::align_val_t al) noexcept {
  auto a = static_cast<size_t>(al);
  void* p = aligned_any(a, size);
  return STRATA_LIKELY(p != nullptr) ? p : new_aligned_failed(size, a, true);
}
}  // namespace

#define STRATA_CXX __attribute__((visibility("default")))
STRATA_CXX void* operator new(size_t size) { return new_impl(size); }
STRATA_CXX void* operator new[](size_t size) { return new_impl(size); }
STRATA_CXX void* operator new(size_t size, const std::nothrow_t&) noexcept { return new_nothrow(size); }
STRATA_CXX void* operator new[](size_t size, const std::nothrow_t&) noexcept { return new_nothrow(size); }
STRATA_CXX void* operator new(size_t size, std::align_val_t al) { return new_aligned(size, al); }
STRATA_CXX void* operator new[](size_t size, std::align_val_t al) { return new_aligned(size, al); }
STRATA_CXX void* operator new(size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_aligned_nothrow(size, al);
}
STRATA_CXX void* operator new[](size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_aligned_nothrow(size, al);
}
STRATA_CXX void operator delete(void* p) noexcept { free_any(p); }
STRATA_CXX void operator delete[](void* p) noexcept { free_any(p); }
STRATA_CXX void operator delete(void* p, const std::nothrow_t&) noexcept { free_any(p); }
STRATA_CXX void operator delete[](void* p, const std::nothrow_t&) noexcept { free_any(p); }
STRATA_CXX void operator delete(void* p, size_t size) noexcept { free_sized_any(p, size); }
STRATA_CXX void operator delete[](void* p, size_t size) noexcept { free_sized_any(p, size); }
STRATA_CXX void operator delete(void* p, std::align_val_t) noexcept { free_any(p); }
STRATA_CXX void operator delete[](void* p, std::align_val_t) noexcept { free_any(p); }
STRATA_CXX void operator delete(void* p, size_t size, std::align_val_t) noexcept { free_sized_any(p, size); }
STRATA_CXX void operator delete[](void* p, size_t size, std::align_val_t) noexcept { free_sized_any(p, size); }
STRATA_CXX void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { free_any(p); }
STRATA_CXX void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { free_any(p); }
