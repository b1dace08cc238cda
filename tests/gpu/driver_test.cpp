// The real-driver backend without a driver: building a device resource must fail with a clear
// error naming the reason.  STRATA_CUDA_LIBRARY points the loader at a library that does not
// exist, so this holds on machines with a GPU too.
#include <strata/gpu/gpu.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace strata::gpu;

namespace {

TEST(driver, missing_driver_fails_with_a_clear_reason) {
  ::setenv("STRATA_CUDA_LIBRARY", "/nonexistent/strata-test-libcuda.so.1", 1);
  try {
    auto backend = make_cuda_backend(0);
    FAIL() << "created a CUDA backend without a driver";
  } catch (const driver_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot load the CUDA driver library"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/strata-test-libcuda.so.1"), std::string::npos) << what;
  }
  // and again: the failure is remembered, not retried into a crash
  EXPECT_THROW(make_backend("cuda"), driver_error);
}

TEST(driver, unknown_backend_and_resource_names_are_rejected) {
  EXPECT_THROW(make_backend("opencl"), std::invalid_argument);
  EXPECT_THROW(resource_stack("bogus", make_sim_backend()), std::invalid_argument);
  EXPECT_EQ(resource_stack::names().size(), 5u);
}

TEST(driver, null_backend_is_rejected) {
  EXPECT_THROW(cuda_resource(nullptr), std::invalid_argument);
}

}  // namespace
