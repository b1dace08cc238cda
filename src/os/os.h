// The platform layer: the only code that talks to the kernel about memory (mmap, munmap,
// madvise, mremap).  Every call is counted for the statistics.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

namespace strata::os {

// Holds off thread cancellation for its scope, as glibc's malloc does with its *_nocancel calls.
// POSIX lets no cancellation point into malloc, free or malloc_stats, and a program relies on
// that: it holds a mutex across malloc without a cleanup handler.  A deferred cancel pending on
// a thread acted at the first getrandom, write, writev or open strata made for it (a hardened
// thread's first carve, a bad free's report, malloc_stats, the recorder's writes): the thread
// unwound out of malloc, leaving the program's mutex locked, or strata's own state half-updated
// (a page whose capacity counted blocks on no list: strata_heap_check failed).
class no_cancel {
 public:
  no_cancel() noexcept { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_); }
  ~no_cancel() { pthread_setcancelstate(old_, &old_); }
  no_cancel(const no_cancel&) = delete;
  no_cancel& operator=(const no_cancel&) = delete;

 private:
  int old_ = PTHREAD_CANCEL_ENABLE;
};

// Maps `size` bytes (a multiple of the page size) of read-write anonymous memory whose address is
// a multiple of `alignment` (a power of two >= the page size).  Returns nullptr on failure with
// errno left as mmap set it.  The memory is reserved and committed lazily by the kernel.
// `backed`: the whole range will be used (a huge block), so it is mapped as glibc maps one,
// without MAP_NORESERVE: the kernel's overcommit policy refuses a request no memory could back
// (malloc(2^45) is NULL and ENOMEM, as under glibc, not a lazy mapping the program's writes then
// run out of memory in).  Otherwise address space reserved ahead of use (segments), which the
// policy must not weigh whole.
void* map_aligned(size_t size, size_t alignment, bool backed = false) noexcept;
// Resizes a mapping from map_aligned, keeping its pages (and their contents) without copying:
// in place when it can, else moved to a new address that is a multiple of `alignment` (a range
// the program split into several kernel mappings, by mprotect of part of it, moved piece by
// piece).  Returns the mapping's address, or nullptr (the old mapping untouched) when there is
// no address space.
void* remap_aligned(void* p, size_t old_size, size_t new_size, size_t alignment) noexcept;
// Maps `size` bytes of read-write address space for a sparse table (MAP_NORESERVE; untouched
// pages cost nothing and read as zero).  Not counted as reserved memory.  nullptr on failure.
void* map_sparse(size_t size) noexcept;
// The same, read-only: untouched pages read as zero; protect_rw makes parts of it writable.
void* map_sparse_readonly(size_t size) noexcept;
// Replaces the pages of [p, p+size) (page-aligned, inside a map_sparse_readonly table) with fresh
// read-write ones that read as zero (MAP_FIXED): for where mprotect is refused for good (a seccomp
// filter) and mmap is not.  False when the kernel refuses (the old pages then stay).
bool map_sparse_writable_at(void* p, size_t size) noexcept;
// Unmaps a range returned by map_aligned (the whole range).
void unmap(void* p, size_t size) noexcept;
// Gives the physical pages of [p, p+size) back to the OS; the range stays mapped and reads as
// zero afterwards (MADV_DONTNEED).  False when the kernel refused (EINVAL for pages the program
// locked: mlock, mlockall(MCL_FUTURE)): then the pages and their contents stay as they were.
bool purge(void* p, size_t size) noexcept;
// Asks the kernel to back [p, p+size) with transparent huge pages where it can (MADV_HUGEPAGE):
// one fault per 2 MiB instead of 512.  Returns false where the kernel refuses (no THP).
bool advise_huge_pages(void* p, size_t size) noexcept;
// Faults [p, p+size) in writable now, in one call (MADV_POPULATE_WRITE, Linux 5.14): no fault per
// page later, and no read fault mapping the shared zero page that a write must then replace (a
// copy-on-write fault that flushes the page from every CPU the process runs on).  False where
// the kernel has no such advice (remembered: later calls return false at once) or out of memory.
bool populate_write(void* p, size_t size) noexcept;
// Of the pages of [p, p+size) (page-aligned), how many are resident (mincore: mapped, written or
// read), over how many looked at: all of them up to 16 MiB, else four windows of 4 MiB spread
// over the range.  {0, 0} where the kernel refuses.
struct residency {
  size_t resident, sampled;
};
residency resident_sample(void* p, size_t size) noexcept;
// Makes [p, p+size) inaccessible (PROT_NONE): a guard page.  False when the kernel refuses.
bool protect_none(void* p, size_t size) noexcept;
bool protect_rw(void* p, size_t size) noexcept;
size_t page_size() noexcept;
// Whether memory and swap together hold at least `bytes` (sysinfo, read again only when a request
// is over the figure last read; true where the kernel refuses to say): no single mapping larger
// than that can be backed under the kernel's default overcommit rules.
bool memory_could_back(size_t bytes) noexcept;
// Milliseconds of a coarse monotonic clock (cheap: vDSO).
int64_t now_ms() noexcept;
// A random 64-bit value for canaries (getrandom, falling back to a keyed hash of the time and
// addresses under the kernel's AT_RANDOM bytes).  Not a cancellation point (no_cancel).
uint64_t random_seed() noexcept;
// SipHash-2-4 (Aumasson and Bernstein) of the n little-endian words m under the 16-byte key k: a
// keyed function whose outputs say nothing of the key.
uint64_t siphash(const uint8_t* k, const uint64_t* m, size_t n) noexcept;
// True when the program runs with privileges its caller lacks (setuid or setgid, file
// capabilities: the kernel's AT_SECURE), where the caller's environment must not steer it.
bool secure_execution() noexcept;

struct counters {
  std::atomic<uint64_t> mmap_calls{0}, munmap_calls{0}, madvise_calls{0}, mremap_calls{0};
  std::atomic<int64_t> reserved{0};   // bytes mapped
  std::atomic<int64_t> committed{0};  // bytes mapped and not purged (an upper bound on RSS)
  std::atomic<int64_t> committed_peak{0};
  std::atomic<uint64_t> released{0};  // bytes given back so far (purged or unmapped): malloc_trim's answer
};
extern counters stats;
// Committed-byte accounting, done by the core, which knows what is committed again on reuse.
void commit_add(int64_t bytes) noexcept;

}  // namespace strata::os
