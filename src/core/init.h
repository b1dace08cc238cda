// Process-wide start-up: options, the canary secret, the thread-exit key, fork handlers, and the
// statistics printed at exit.  Runs once, on the first allocation that needs a heap.
#pragma once
#include <pthread.h>

namespace strata::detail {
void global_init() noexcept;
pthread_key_t thread_key() noexcept;
}  // namespace strata::detail
