// strata::api, strata::pool and strata::gpu from an installed prefix: each links and works.
#include <strata/gpu/device_backend.hpp>
#include <strata/pool.h>
#include <strata/strata.h>

#include <cstdio>

int main() {
  void* p = strata_malloc(100);
  bool api_ok = p && strata_usable_size(p) >= 100;
  strata_free(p);
  strata_pool_t* pool = strata_pool_create(48, 16, 64, 0);
  void* q = pool ? strata_pool_alloc(pool) : nullptr;
  bool pool_ok = q != nullptr;
  if (q) strata_pool_free(pool, q);
  if (pool) strata_pool_destroy(pool);
  auto backend = strata::gpu::make_sim_backend();
  bool gpu_ok = backend && backend->name() == "sim";
  std::printf("{\"api\": %s, \"pool\": %s, \"gpu\": %s}\n", api_ok ? "true" : "false",
              pool_ok ? "true" : "false", gpu_ok ? "true" : "false");
  return api_ok && pool_ok && gpu_ok ? 0 : 1;
}
