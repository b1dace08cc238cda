// Process-wide start-up: options, the canary secret, the thread-exit key, fork handlers, and the
// statistics printed at exit.  Runs once, on the first allocation that needs a heap.
#pragma once
#include <pthread.h>

namespace strata::detail {
void global_init() noexcept;
// The key whose destructor gives a thread's heap back at its exit; false when none could be made
// (every one of PTHREAD_KEYS_MAX taken before strata initialised): then no heap is registered.
bool thread_key(pthread_key_t* out) noexcept;
}  // namespace strata::detail
