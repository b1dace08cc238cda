#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/errors.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace strata::gpu {

namespace {
std::string oom_message(const std::string& resource, std::size_t requested, std::size_t free_total,
                        double fragmentation) {
  char frag[32];
  if (fragmentation != fragmentation)
    std::snprintf(frag, sizeof frag, "unknown");
  else
    std::snprintf(frag, sizeof frag, "%.3f", fragmentation);
  return resource + ": out of device memory: requested " + std::to_string(requested) +
         " bytes, " + std::to_string(free_total) + " bytes free, fragmentation " + frag;
}
}  // namespace

out_of_memory_error::out_of_memory_error(std::string resource, std::size_t requested,
                                         std::size_t free_total, double fragmentation)
    : resource_(std::move(resource)),
      requested_(requested),
      free_total_(free_total),
      fragmentation_(fragmentation),
      message_(oom_message(resource_, requested, free_total, fragmentation)) {}

device_memory_resource::device_memory_resource(std::shared_ptr<device_backend> backend)
    : backend_(std::move(backend)) {
  if (!backend_) throw std::invalid_argument("device_memory_resource: null device backend");
}

void device_memory_resource::check_alignment(std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("alignment " + std::to_string(alignment) +
                                " is not a power of two");
  if (alignment > max_alignment)
    throw std::invalid_argument("alignment " + std::to_string(alignment) + " exceeds the maximum " +
                                std::to_string(max_alignment));
}

void device_memory_resource::throw_out_of_memory(std::size_t bytes) const {
  const resource_info i = info();
  throw out_of_memory_error(std::string(name()), bytes, i.free_bytes, i.fragmentation());
}

}  // namespace strata::gpu
