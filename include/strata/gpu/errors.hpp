// Errors raised by the device memory resources.
//
//   out_of_memory_error  a request could not be satisfied; carries the request, the free total
//                        the resource still held and its fragmentation at that moment.
//   driver_error         the device backend failed for another reason (no driver, no device,
//                        a driver call returned an error); the message names the reason.
#pragma once

#include <cmath>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace strata::gpu {

class out_of_memory_error : public std::bad_alloc {
 public:
  // fragmentation = 1 - largest free block / free total; NaN when the resource cannot know
  // its largest free block (memory managed inside the driver).
  out_of_memory_error(std::string resource, std::size_t requested, std::size_t free_total,
                      double fragmentation);

  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& resource() const noexcept { return resource_; }
  std::size_t requested() const noexcept { return requested_; }
  std::size_t free_total() const noexcept { return free_total_; }
  double fragmentation() const noexcept { return fragmentation_; }
  bool fragmentation_known() const noexcept { return !std::isnan(fragmentation_); }

 private:
  std::string resource_;
  std::size_t requested_;
  std::size_t free_total_;
  double fragmentation_;
  std::string message_;
};

class driver_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace strata::gpu
