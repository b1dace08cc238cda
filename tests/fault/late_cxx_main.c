// A C program that loads C++ code later, as CPython loads a C++ extension module (RTLD_LOCAL, with
// the libstdc++ it needs): run preloaded with libstrata.so, operator new out of memory must throw
// std::bad_alloc and call the new-handler (it trapped with SIGILL and ignored the handler: the
// library's references to libstdc++ were bound at load, before libstdc++ was in the process).
// Prints "ok" and exits 0 when late_cxx_run (late_cxx_plugin.cpp) finds every form right.
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD) != NULL) {
    fprintf(stderr, "libstdc++ is in the process from the start: this test needs a program without it\n");
    return 2;
  }
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  int (*run)(void) = (int (*)(void))dlsym(plugin, "late_cxx_run");
  if (run == NULL) return 2;
  int failures = run();
  printf("%s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}
