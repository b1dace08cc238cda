/* A plug-in that carries its own copy of strata (libstrata.a linked in), for shared_library_test:
 * the program opens it with dlopen, uses strata through it and closes it. */
#include <stddef.h>

#include "strata/strata.h"

void* plugin_malloc(size_t size) { return strata_malloc(size); }
void plugin_free(void* p) { strata_free(p); }
