// The C++ half of late_cxx_main.c: every form of operator new out of memory, in code (and a
// libstdc++) the program loaded after strata.  Returns the number of forms that went wrong.
#include <cstdint>
#include <cstdio>
#include <new>

namespace {
int handler_calls = 0;
void handler() {
  if (++handler_calls == 2) std::set_new_handler(nullptr);  // then operator new throws
}
constexpr size_t impossible = SIZE_MAX / 2;  // no allocator serves it

template <typename F>
int expect_bad_alloc(const char* form, F f) {
  try {
    void* volatile p = f();
    std::fprintf(stderr, "%s returned %p\n", form, p);
  } catch (const std::bad_alloc&) {
    return 0;
  }
  return 1;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int late_cxx_run() {
  int failures = 0;
  failures += expect_bad_alloc("operator new", [] { return ::operator new(impossible); });
  failures += expect_bad_alloc("operator new(align_val_t)", [] { return ::operator new(impossible, std::align_val_t{64}); });
  std::set_new_handler(handler);
  failures += expect_bad_alloc("operator new[] with a new-handler", [] { return ::operator new[](impossible); });
  if (handler_calls != 2) {
    std::fprintf(stderr, "the new-handler was called %d times, not 2\n", handler_calls);
    ++failures;
  }
  void* volatile q = ::operator new(impossible, std::nothrow);
  if (q != nullptr) {
    std::fprintf(stderr, "nothrow operator new returned %p\n", q);
    ++failures;
  }
  return failures;
}
