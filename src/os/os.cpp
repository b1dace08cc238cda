#include "os/os.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/sysinfo.h>
#include <unistd.h>

namespace strata::os {

counters stats;

bool memory_could_back(size_t bytes) noexcept {
  // Read once, and again only for a request over it (swap may have been added since): most
  // requests are far under it and cost no system call.
  static std::atomic<size_t> known{0};
  if (bytes <= known.load(std::memory_order_relaxed)) return true;
  int saved = errno;
  struct sysinfo si {};
  bool ok = sysinfo(&si) == 0;
  errno = saved;
  if (!ok) return true;
  unsigned __int128 units = static_cast<unsigned __int128>(si.totalram) + si.totalswap;
  unsigned __int128 total = units * (si.mem_unit ? si.mem_unit : 1);
  size_t now = total > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(total);
  known.store(now, std::memory_order_relaxed);
  return bytes <= now;
}

size_t page_size() noexcept {
  // Threads may race to fill it; they all store the same value (relaxed: no other data rides on it).
  static std::atomic<size_t> cached{0};
  size_t v = cached.load(std::memory_order_relaxed);
  if (v == 0) {
    v = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    cached.store(v, std::memory_order_relaxed);
  }
  return v;
}

namespace {
bool protect(void* p, size_t size, int prot) noexcept {
  int saved = errno;
  bool ok = mprotect(p, size, prot) == 0;
  errno = saved;
  return ok;
}
}  // namespace

bool protect_none(void* p, size_t size) noexcept { return protect(p, size, PROT_NONE); }
bool protect_rw(void* p, size_t size) noexcept { return protect(p, size, PROT_READ | PROT_WRITE); }

void commit_add(int64_t bytes) noexcept {
  if (bytes < 0) stats.released.fetch_add(static_cast<uint64_t>(-bytes), std::memory_order_relaxed);
  int64_t now = stats.committed.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = stats.committed_peak.load(std::memory_order_relaxed);
  while (now > peak &&
         !stats.committed_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

namespace {
void* map_at(void* hint, size_t size, bool backed) noexcept {
  stats.mmap_calls.fetch_add(1, std::memory_order_relaxed);
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (backed ? 0 : MAP_NORESERVE);
  void* p = mmap(hint, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap_raw(void* p, size_t size) noexcept {
  stats.munmap_calls.fetch_add(1, std::memory_order_relaxed);
  munmap(p, size);
}
bool is_aligned(const void* p, size_t alignment) noexcept {
  return (reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0;
}
}  // namespace

void* map_aligned(size_t size, size_t alignment, bool backed) noexcept {
  // Try the exact size first: the kernel often hands out aligned addresses for large maps.
  void* p = map_at(nullptr, size, backed);
  if (p == nullptr) return nullptr;
  if (!is_aligned(p, alignment)) {
    // Then the aligned address just below, where the kernel's top-down search usually left room:
    // this needs no more address space than `size` (under `ulimit -v` an over-map fails up to
    // `alignment` bytes early).
    unmap_raw(p, size);
    void* hint = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(alignment - 1));
    p = map_at(hint, size, backed);
    if (p != nullptr && !is_aligned(p, alignment)) {
      unmap_raw(p, size);
      p = nullptr;
    }
  }
  if (p == nullptr) {
    // Otherwise over-map by the alignment and trim both ends.
    size_t over = size + alignment;
    if (over < size) return errno = ENOMEM, nullptr;
    void* raw = map_at(nullptr, over, backed);
    if (raw == nullptr) return nullptr;
    uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    uintptr_t aligned = (start + alignment - 1) & ~(alignment - 1);
    if (aligned > start) unmap_raw(raw, aligned - start);
    uintptr_t end = start + over, used_end = aligned + size;
    if (end > used_end) unmap_raw(reinterpret_cast<void*>(used_end), end - used_end);
    p = reinterpret_cast<void*>(aligned);
  }
  stats.reserved.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return p;
}

namespace {
// Moves [from, from + size) onto [to, to + size); returns how many bytes from the start moved.
// Before Linux 6.17 a move may not span two kernel mappings (VMAs: a program that changed the
// protection of part of a block made several of it): the kernel says EFAULT, and the halves go
// one at a time, whole 2 MiB runs kept together (a run aligned alike at both ends moves as one
// page-table entry).
size_t move_range(uint8_t* from, size_t size, uint8_t* to) noexcept {
  stats.mremap_calls.fetch_add(1, std::memory_order_relaxed);
  if (mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED) return size;
  size_t ps = page_size(), run = size_t{2} << 20;
  if (errno != EFAULT || size <= ps) return 0;
  size_t half = size / 2;
  half = half >= run ? half & ~(run - 1) : half & ~(ps - 1);  // size: 2 pages or more
  size_t moved = move_range(from, half, to);
  return moved < half ? moved : half + move_range(from + half, size - half, to + half);
}
}  // namespace

void* remap_aligned(void* p, size_t old_size, size_t new_size, size_t alignment) noexcept {
  int saved = errno;
  stats.mremap_calls.fetch_add(1, std::memory_order_relaxed);
  // In place first: always possible when shrinking, and when the address range above is free.
  void* q = mremap(p, old_size, new_size, 0);
  if (q == MAP_FAILED) {
    // EFAULT: a range of several kernel mappings (the program changed the protection of part of
    // it), which no kernel resizes.
    bool split = errno == EFAULT && new_size > old_size;
    // Elsewhere: reserve an aligned range, then move the pages there (no copy, no fault).
    void* target = map_aligned(new_size, alignment);
    if (target == nullptr) {
      errno = saved;
      return nullptr;
    }
    stats.reserved.fetch_sub(static_cast<int64_t>(new_size), std::memory_order_relaxed);
    if (!split) {
      stats.mremap_calls.fetch_add(1, std::memory_order_relaxed);
      q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    } else {
      // Growth of a split range: realloc returned NULL with memory to spare.  Its pages are
      // moved into the new range instead, a mapping at a time where the kernel wants that; what
      // a failure leaves behind (out of mappings, ENOMEM) is copied.  Not tried as one resize
      // and move first: before Linux 6.17 the kernel unmapped the destination before it said
      // EFAULT, and the grown block's tail past the moved pages was left unmapped (the
      // program's first write there faulted).
      auto* src = static_cast<uint8_t*>(p);
      auto* dst = static_cast<uint8_t*>(target);
      size_t moved = move_range(src, old_size, dst);
      if (moved < old_size) {
        memcpy(dst + moved, src + moved, old_size - moved);
        unmap_raw(src + moved, old_size - moved);
      }
      q = target;
    }
    if (q == MAP_FAILED) {
      unmap_raw(target, new_size);
      errno = saved;
      return nullptr;
    }
  }
  stats.reserved.fetch_add(static_cast<int64_t>(new_size) - static_cast<int64_t>(old_size), std::memory_order_relaxed);
  errno = saved;
  return q;
}

namespace {
void* map_sparse_with(size_t size, int prot) noexcept {
  stats.mmap_calls.fetch_add(1, std::memory_order_relaxed);
  int saved = errno;
  void* p = mmap(nullptr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  errno = saved;
  return p == MAP_FAILED ? nullptr : p;
}
}  // namespace

void* map_sparse(size_t size) noexcept { return map_sparse_with(size, PROT_READ | PROT_WRITE); }
void* map_sparse_readonly(size_t size) noexcept { return map_sparse_with(size, PROT_READ); }

bool map_sparse_writable_at(void* p, size_t size) noexcept {
  // Whole pages of this kernel only: with pages larger than the piece (64 KiB on some arm64 and
  // ppc64 kernels), MAP_FIXED would replace the neighbours' entries with zeros too.
  if ((reinterpret_cast<uintptr_t>(p) | size) & (page_size() - 1)) return false;
  stats.mmap_calls.fetch_add(1, std::memory_order_relaxed);
  int saved = errno;
  void* q = mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  errno = saved;
  return q == p;
}

void unmap(void* p, size_t size) noexcept {
  stats.munmap_calls.fetch_add(1, std::memory_order_relaxed);
  stats.reserved.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  int saved = errno;
  munmap(p, size);
  errno = saved;
}

bool purge(void* p, size_t size) noexcept {
  stats.madvise_calls.fetch_add(1, std::memory_order_relaxed);
  int saved = errno;
  bool ok = madvise(p, size, MADV_DONTNEED) == 0;
  errno = saved;
  return ok;
}

bool populate_write(void* p, size_t size) noexcept {
#ifdef MADV_POPULATE_WRITE
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return false;
  stats.madvise_calls.fetch_add(1, std::memory_order_relaxed);
  int saved = errno;
  bool ok = madvise(p, size, MADV_POPULATE_WRITE) == 0;
  if (!ok && errno == EINVAL) unsupported.store(true, std::memory_order_relaxed);
  errno = saved;
  return ok;
#else
  (void)p, (void)size;
  return false;
#endif
}

residency resident_sample(void* p, size_t size) noexcept {
  constexpr size_t window = 1024;  // pages per mincore call: its vector on the stack
  unsigned char vec[window];
  size_t ps = page_size(), pages = size / ps;
  size_t windows = pages <= 4 * window ? (pages + window - 1) / window : 4;
  size_t stride = windows > 1 ? (pages - window) / (windows - 1) : 0;
  residency r{0, 0};
  int saved = errno;
  for (size_t w = 0; w < windows; ++w) {
    size_t first = pages <= 4 * window ? w * window : w * stride;
    size_t n = pages - first < window ? pages - first : window;
    if (mincore(static_cast<char*>(p) + first * ps, n * ps, vec) != 0) break;
    for (size_t i = 0; i < n; ++i) r.resident += vec[i] & 1;
    r.sampled += n;
  }
  errno = saved;
  return r;
}

bool advise_huge_pages(void* p, size_t size) noexcept {
  stats.madvise_calls.fetch_add(1, std::memory_order_relaxed);
  int saved = errno;
  bool ok = madvise(p, size, MADV_HUGEPAGE) == 0;
  errno = saved;
  return ok;
}

int64_t now_ms() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

namespace {
inline uint64_t rotl(uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }
}  // namespace

uint64_t siphash(const uint8_t* k, const uint64_t* m, size_t n) noexcept {
  uint64_t k0, k1;
  memcpy(&k0, k, 8);
  memcpy(&k1, k + 8, 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  for (size_t i = 0; i < n; ++i) {
    v3 ^= m[i];
    round();
    round();
    v0 ^= m[i];
  }
  uint64_t last = static_cast<uint64_t>(n * 8) << 56;
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t random_seed() noexcept {
  uint64_t v = 0;
  int saved = errno;
  no_cancel hold;  // getrandom is a cancellation point; a hardened thread's first carve calls it
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
    // getrandom refused (a seccomp filter, a kernel before 3.17): the 16 random bytes the kernel
    // gave the process at exec (AT_RANDOM) as the key of SipHash over the time, the stack's
    // address, the process id and a count of the calls.  The time, address and pid alone left
    // about 47 bits to guess (session 51); the key is 128 bits the process has anyway, and the
    // hash keeps it hidden: glibc takes its stack protector's canary and pointer guard from those
    // bytes, and a secret that leaked (a canary read from a free block) must not give them away.
    static std::atomic<uint64_t> calls{0};
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t m[4] = {static_cast<uint64_t>(ts.tv_sec) << 32 ^ static_cast<uint64_t>(ts.tv_nsec),
                     reinterpret_cast<uintptr_t>(&v), static_cast<uint64_t>(getpid()),
                     calls.fetch_add(1, std::memory_order_relaxed)};
    uint8_t none[16] = {};
    auto* key = reinterpret_cast<const uint8_t*>(getauxval(AT_RANDOM));
    v = siphash(key != nullptr ? key : none, m, 4);
  }
  errno = saved;
  return v | 1;
}

bool secure_execution() noexcept { return getauxval(AT_SECURE) != 0; }

}  // namespace strata::os

