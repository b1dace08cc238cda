// new_handler_call.cpp: the one piece of the library built with exceptions.
#pragma once

namespace strata::detail {

// Calls a new-handler for a nothrow operator new: true when it returned, false when it threw.
bool call_new_handler_nothrow(void (*handler)()) noexcept;

// Throws std::bad_alloc for operator new when libstdc++'s std::__throw_bad_alloc is not in the
// process (a -static link leaves that weak reference null); traps only where the C++ runtime's
// pieces for a throw are missing too.
[[noreturn]] void throw_bad_alloc();

}  // namespace strata::detail
