// The C API of strata/pool.h: one small type-erased wrapper over the four pool variants
// (single-thread or concurrent, checked or not), chosen once at creation.
#include "strata/pool.h"

#include <cerrno>
#include <new>

#include "strata/concurrent_object_pool.hpp"
#include "strata/object_pool.hpp"

namespace {

using strata::malloc_upstream;
using strata::detail::basic_concurrent_pool;
using strata::detail::basic_pool;

struct pool_ops {
  void* (*alloc)(void*);
  void (*free)(void*, void*);
  size_t (*shrink)(void*);
  strata::pool_stats (*stats)(const void*);
  void (*destroy)(void*);
};

template <class Core>
constexpr pool_ops ops_for = {
    [](void* c) { return static_cast<Core*>(c)->allocate(); },
    [](void* c, void* p) { static_cast<Core*>(c)->deallocate(p); },
    [](void* c) { return static_cast<Core*>(c)->shrink(); },
    [](const void* c) { return static_cast<const Core*>(c)->stats(); },
    [](void* c) { delete static_cast<Core*>(c); },
};

template <class Core>
void* make(size_t size, size_t align, size_t capacity) noexcept {
  auto* core = new (std::nothrow) Core(size, align);
  if (core == nullptr) return nullptr;
  bool ok = false;
  try {
    ok = core->reserve(capacity);
  } catch (...) {
  }
  if (!ok) {
    delete core;
    return nullptr;
  }
  return core;
}

}  // namespace

struct strata_pool {
  const pool_ops* ops;
  void* core;
};

extern "C" strata_pool_t* strata_pool_create(size_t object_size, size_t alignment,
                                             size_t capacity, unsigned flags) {
  if (alignment == 0) alignment = object_size >= 16 ? 16 : object_size >= 8 ? 8 : 4;
  if (object_size == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096 ||
      object_size > (size_t(1) << 30) || (flags & ~3u) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pool = new (std::nothrow) strata_pool;
  if (pool == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  switch (flags) {
    case 0:
      pool->ops = &ops_for<basic_pool<malloc_upstream, false>>;
      pool->core = make<basic_pool<malloc_upstream, false>>(object_size, alignment, capacity);
      break;
    case STRATA_POOL_CHECKED:
      pool->ops = &ops_for<basic_pool<malloc_upstream, true>>;
      pool->core = make<basic_pool<malloc_upstream, true>>(object_size, alignment, capacity);
      break;
    case STRATA_POOL_CONCURRENT:
      pool->ops = &ops_for<basic_concurrent_pool<malloc_upstream, false>>;
      pool->core =
          make<basic_concurrent_pool<malloc_upstream, false>>(object_size, alignment, capacity);
      break;
    default:
      pool->ops = &ops_for<basic_concurrent_pool<malloc_upstream, true>>;
      pool->core =
          make<basic_concurrent_pool<malloc_upstream, true>>(object_size, alignment, capacity);
      break;
  }
  if (pool->core == nullptr) {
    delete pool;
    errno = ENOMEM;
    return nullptr;
  }
  return pool;
}

extern "C" void strata_pool_destroy(strata_pool_t* pool) {
  if (pool == nullptr) return;
  pool->ops->destroy(pool->core);
  delete pool;
}

// A NULL pool is a bad argument like a bad size at creation (EINVAL), not a crash: the functions
// that return something say so with errno; free, like free(NULL), ignores a NULL object.
extern "C" void* strata_pool_alloc(strata_pool_t* pool) {
  if (pool == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  void* p = nullptr;
  try {
    p = pool->ops->alloc(pool->core);
  } catch (...) {
  }
  if (p == nullptr) errno = ENOMEM;
  return p;
}

extern "C" void strata_pool_free(strata_pool_t* pool, void* p) {
  if (p == nullptr) return;
  if (pool == nullptr) {
    errno = EINVAL;
    return;
  }
  pool->ops->free(pool->core, p);
}

extern "C" size_t strata_pool_shrink(strata_pool_t* pool) {
  if (pool == nullptr) {
    errno = EINVAL;
    return 0;
  }
  return pool->ops->shrink(pool->core);
}

extern "C" void strata_pool_get_stats(const strata_pool_t* pool, strata_pool_stats_t* out) {
  if (pool == nullptr || out == nullptr) {
    if (out != nullptr) *out = strata_pool_stats_t{};
    errno = EINVAL;
    return;
  }
  strata::pool_stats s = pool->ops->stats(pool->core);
  out->live = s.live;
  out->free = s.free;
  out->capacity = s.capacity;
  out->high_water = s.high_water;
  out->allocations = s.allocations;
  out->hits = s.hits;
  out->refills = s.refills;
  out->depot_trips = s.depot_trips;
  out->bytes_reserved = s.bytes_reserved;
  out->bytes_released = s.bytes_released;
}
