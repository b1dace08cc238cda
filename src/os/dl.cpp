#include "os/dl.h"

#include <dlfcn.h>

namespace strata::os {

void* load_library(const char* name, char* why, size_t why_size) noexcept {
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr && why != nullptr && why_size > 0) {
    const char* msg = dlerror();
    if (msg == nullptr) msg = "dlopen failed";
    size_t i = 0;
    for (; i + 1 < why_size && msg[i] != '\0'; ++i) why[i] = msg[i];
    why[i] = '\0';
  }
  return lib;
}

void* loaded_library(const char* name) noexcept { return dlopen(name, RTLD_NOW | RTLD_NOLOAD); }
void close_library(void* library) noexcept { dlclose(library); }

void* find_symbol(void* library, const char* symbol) noexcept { return dlsym(library, symbol); }

}  // namespace strata::os
