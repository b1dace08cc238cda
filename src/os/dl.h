// Loading shared libraries at run time (dlopen, dlsym): the GPU layer loads the CUDA driver
// through these, and the preload libraries find the libstdc++ a program loaded after them
// (override.cpp, operator new's failure path), so that src/os/ stays the only code that calls
// dlopen.  Plain C types and
// noexcept, so the file also builds with the core allocator's flags (-fno-exceptions, linked
// without libstdc++).
#pragma once
#include <cstddef>

namespace strata::os {

// dlopen(name, RTLD_NOW | RTLD_LOCAL).  nullptr on failure; then, when `why` is not null, it
// holds dlerror's message (cut to why_size - 1 characters, always terminated).  A loaded
// library stays loaded for the life of the process.
void* load_library(const char* name, char* why, size_t why_size) noexcept;

// The library already in the process under `name` (dlopen with RTLD_NOLOAD: never loads one,
// whether it was opened RTLD_LOCAL or not), or nullptr.  A handle to dlclose or keep.
void* loaded_library(const char* name) noexcept;
void close_library(void* library) noexcept;

// dlsym(library, symbol): the entry point's address, or nullptr when the library lacks it.
void* find_symbol(void* library, const char* symbol) noexcept;

}  // namespace strata::os
