// Every device resource and adaptor (include what you use; this is for convenience).
#pragma once

#include <strata/gpu/arena_resource.hpp>
#include <strata/gpu/async_resource.hpp>
#include <strata/gpu/cuda_resource.hpp>
#include <strata/gpu/device_backend.hpp>
#include <strata/gpu/device_memory_resource.hpp>
#include <strata/gpu/growth_options.hpp>
#include <strata/gpu/limiting_adaptor.hpp>
#include <strata/gpu/logging_adaptor.hpp>
#include <strata/gpu/pool_resource.hpp>
#include <strata/gpu/statistics_adaptor.hpp>
#include <strata/gpu/strata_resource.hpp>
#include <strata/gpu/tracking_adaptor.hpp>
#include <strata/gpu/resource_stack.hpp>
