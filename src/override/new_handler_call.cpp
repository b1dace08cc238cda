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

}  // namespace strata::detail
