/* A C program linked -static with libstrata.a that calls glibc's mallopt, malloc_info,
   __libc_mallopt and __libc_mallinfo.  glibc's live in libc.a's malloc.o beside its malloc, free
   and the rest, so a reference to any of them pulled that object in and the link failed with
   "multiple definition of `malloc'".  strata defines them (src/override/override.cpp); this
   program must link and get strata's answers. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mallinfo __libc_mallinfo(void);
int __libc_mallopt(int, int);

int main(void) {
  int failures = 0;
  size_t big = (size_t)48 << 20;
  void* h = malloc(big);
  char* xml = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&xml, &len);
  if (h == NULL || f == NULL) {
    puts("FAIL: no memory");
    return 1;
  }
  int rc = malloc_info(0, f);
  fclose(f);
  /* strata's malloc_info counts the huge block as glibc counts its mmapped chunks */
  const char* at = strstr(xml, "<total type=\"mmap\" count=\"");
  size_t count = 0, size = 0;
  if (rc != 0 || at == NULL || sscanf(at, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>", &count, &size) != 2 ||
      count < 1 || size < big) {
    printf("FAIL: malloc_info returned %d:\n%s", rc, xml);
    ++failures;
  }
  free(xml);
  if ((size_t)__libc_mallinfo().hblkhd < big) {
    puts("FAIL: __libc_mallinfo does not count the huge block");
    ++failures;
  }
  free(h);
  if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1 || mallopt(M_MXFAST, 1000) != 0 || __libc_mallopt(M_ARENA_MAX, 2) != 1) {
    puts("FAIL: mallopt's answers");
    ++failures;
  }
  if (failures == 0) puts("ok");
  return failures != 0;
}
