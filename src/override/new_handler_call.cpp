// The nothrow forms of operator new (override.cpp) call the new-handler until an allocation
// succeeds, and a handler may end that by throwing std::bad_alloc: the standard's way for a
// handler that can free nothing more.  Those forms then return a null pointer, as libstdc++'s do
// (they call the throwing form inside try/catch).  Called from the library's noexcept code, built
// without exceptions, the throw ended the program in std::terminate (session 39's probe).  This
// file alone is compiled with exceptions, to catch it.  The C++ runtime's symbols it needs are
// weak, as override.cpp's are: a handler can throw only where libstdc++ is loaded, and the
// preload library keeps no libstdc++ dependency.
// (The personality routine is named by the unwind tables the compiler writes, not by a
// declaration, so its weak binding is given to the assembler directly.)
__asm__(".weak __gxx_personality_v0");
#pragma weak __cxa_begin_catch
#pragma weak __cxa_end_catch
extern "C" {
void* __cxa_begin_catch(void*) noexcept;
void __cxa_end_catch();
}

#include <cstddef>

// Where operator new's reference to std::__throw_bad_alloc stays null (a static link pulls a
// library member for strong references only, and a program that catches bad_alloc need not link
// libstdc++'s functexcept.o), throw_bad_alloc throws one by the C++ ABI's calls, from the pieces
// such a program holds: its catch clause links the typeinfo (whose object file has the vtable and
// destructor), its runtime the throw.  Not `throw std::bad_alloc()`: without RTTI the compiler
// emits a typeinfo of its own, a strong reference to libstdc++ in the preload library.
extern "C" {
void* strata_cxa_allocate_exception(size_t) noexcept __asm__("__cxa_allocate_exception") __attribute__((weak));
[[noreturn]] void strata_cxa_throw(void*, const void*, void (*)(void*)) __asm__("__cxa_throw") __attribute__((weak));
extern const char strata_bad_alloc_typeinfo[] __asm__("_ZTISt9bad_alloc") __attribute__((weak));
extern void* const strata_bad_alloc_vtable[] __asm__("_ZTVSt9bad_alloc") __attribute__((weak));
void strata_bad_alloc_destructor(void*) __asm__("_ZNSt9bad_allocD1Ev") __attribute__((weak));
}

#include "override/new_handler_call.h"

namespace strata::detail {

bool call_new_handler_nothrow(void (*handler)()) noexcept {
  try {
    handler();
  } catch (...) {
    return false;
  }
  return true;
}

void throw_bad_alloc() {
  if (strata_cxa_allocate_exception && strata_cxa_throw && strata_bad_alloc_typeinfo &&
      strata_bad_alloc_vtable && strata_bad_alloc_destructor) {
    // A std::bad_alloc is its virtual table pointer: the table's address past its offset-to-top
    // and typeinfo entries.
    void* e = strata_cxa_allocate_exception(sizeof(void*));
    *static_cast<void* const**>(e) = strata_bad_alloc_vtable + 2;
    strata_cxa_throw(e, strata_bad_alloc_typeinfo, strata_bad_alloc_destructor);
  }
  __builtin_trap();
}

}  // namespace strata::detail
