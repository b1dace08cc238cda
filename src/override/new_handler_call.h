// new_handler_call.cpp: the one piece of the library built with exceptions.
#pragma once

namespace strata::detail {

// Calls a new-handler for a nothrow operator new: true when it returned, false when it threw.
bool call_new_handler_nothrow(void (*handler)()) noexcept;

}  // namespace strata::detail
