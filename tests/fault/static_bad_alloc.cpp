// A C++ program linked -static with libstrata.a: operator new out of memory must throw
// std::bad_alloc (after the new-handler loop), as it does in a dynamic link.  override.cpp reaches
// libstdc++'s thrower through a weak reference, which a static link leaves null when nothing
// else pulls in its object file: operator new then trapped (SIGILL) in a program that caught
// bad_alloc.  Not a GoogleTest: GoogleTest's libraries need not exist as static archives.
#include <cstdint>
#include <cstdio>
#include <new>

namespace {
int handler_calls;
void handler() {
  if (++handler_calls == 3) std::set_new_handler(nullptr);
}

// volatile: the compiler must not fold the impossible size.
volatile size_t impossible = SIZE_MAX / 2;

template <class F>
bool throws_bad_alloc(const char* what, F allocate) {
  try {
    void* p = allocate();
    std::printf("FAIL: %s returned %p\n", what, p);
  } catch (const std::bad_alloc&) {
    return true;
  }
  return false;
}
}  // namespace

int main() {
  bool ok = throws_bad_alloc("operator new", [] { return ::operator new(impossible); });
  ok &= throws_bad_alloc("operator new[]", [] { return ::operator new[](impossible); });
  ok &= throws_bad_alloc("aligned operator new", [] { return ::operator new(impossible, std::align_val_t{64}); });
  std::set_new_handler(handler);
  ok &= throws_bad_alloc("operator new with a new-handler", [] { return ::operator new(impossible); });
  if (handler_calls != 3) {
    std::printf("FAIL: the new-handler was called %d times, not 3\n", handler_calls);
    ok = false;
  }
  std::puts(ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
