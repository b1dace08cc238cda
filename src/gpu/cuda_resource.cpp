#include <strata/gpu/cuda_resource.hpp>

#include "gpu/detail/overaligned.hpp"

#include <algorithm>
#include <atomic>
#include <limits>

namespace strata::gpu {

struct cuda_resource::impl {
  std::atomic<std::size_t> allocated{0};
  std::atomic<std::size_t> peak{0};
  detail::overaligned_table overaligned;
};

cuda_resource::cuda_resource(std::shared_ptr<device_backend> backend)
    : device_memory_resource(std::move(backend)), impl_(std::make_unique<impl>()) {}

cuda_resource::~cuda_resource() = default;

void* cuda_resource::do_allocate(std::size_t bytes, stream_view, std::size_t alignment) {
  const std::size_t size = detail::round_up(detail::padded_size(bytes, alignment), detail::native);
  void* p = backend().mem_alloc(size);
  if (!p) {
    const memory_info m = backend().mem_info();
    // The driver does not say how its free memory is laid out: fragmentation unknown.
    throw out_of_memory_error("cuda", bytes, m.free_bytes, std::numeric_limits<double>::quiet_NaN());
  }
  const std::size_t now = impl_->allocated.fetch_add(size) + size;
  std::size_t peak = impl_->peak.load();
  while (now > peak && !impl_->peak.compare_exchange_weak(peak, now)) {
  }
  return alignment > detail::native ? impl_->overaligned.align(p, alignment) : p;
}

void cuda_resource::do_deallocate(void* p, std::size_t bytes, stream_view,
                                  std::size_t alignment) noexcept {
  const std::size_t size = detail::round_up(detail::padded_size(bytes, alignment), detail::native);
  if (alignment > detail::native) p = impl_->overaligned.base(p);
  backend().mem_free(p, size);
  impl_->allocated.fetch_sub(size);
}

resource_info cuda_resource::do_info() const {
  resource_info i;
  i.reserved_bytes = i.allocated_bytes = impl_->allocated.load();
  // An allocation adds its bytes before it raises the peak: a count read in between is a peak
  // not yet recorded, and counts as one.
  i.peak_reserved_bytes = std::max(impl_->peak.load(), i.reserved_bytes);
  i.free_bytes = 0;
  i.largest_free_block = 0;  // holds nothing free: every free goes straight back to the driver
  return i;
}

}  // namespace strata::gpu
