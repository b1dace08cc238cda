#include <strata/gpu/async_resource.hpp>

#include "gpu/detail/overaligned.hpp"

#include <limits>

namespace strata::gpu {

struct async_resource::impl {
  void* pool = nullptr;
  detail::overaligned_table overaligned;
};

async_resource::async_resource(std::shared_ptr<device_backend> backend, async_options options)
    : device_memory_resource(std::move(backend)), impl_(std::make_unique<impl>()) {
  if (!this->backend().supports_async_pool())
    throw driver_error("async_resource: the device does not support stream-ordered memory pools");
  impl_->pool = this->backend().pool_create(options.release_threshold);
}

async_resource::~async_resource() { backend().pool_destroy(impl_->pool); }

void async_resource::trim(std::size_t keep_bytes) { backend().pool_trim(impl_->pool, keep_bytes); }

void* async_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  void* p = backend().pool_alloc_async(impl_->pool, detail::padded_size(bytes, alignment), stream);
  if (!p) {
    const auto u = backend().pool_query(impl_->pool);
    throw out_of_memory_error("async", bytes, u.reserved - u.used,
                              std::numeric_limits<double>::quiet_NaN());
  }
  return alignment > detail::native ? impl_->overaligned.align(p, alignment) : p;
}

void async_resource::do_deallocate(void* p, std::size_t, stream_view stream,
                                   std::size_t alignment) noexcept {
  if (alignment > detail::native) p = impl_->overaligned.base(p);
  try {
    backend().pool_free_async(impl_->pool, p, stream);
  } catch (...) {
    // A failing cuMemFreeAsync leaves the block to the pool's destruction; nothing else to do
    // from a noexcept path.
  }
}

resource_info async_resource::do_info() const {
  const auto u = backend().pool_query(impl_->pool);
  resource_info i;
  i.reserved_bytes = u.reserved;
  i.peak_reserved_bytes = u.reserved_high;
  i.allocated_bytes = u.used;
  i.free_bytes = u.reserved > u.used ? u.reserved - u.used : 0;
  return i;  // no lock of ours, no view of the driver's free list
}

}  // namespace strata::gpu
