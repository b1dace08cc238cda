/* Compiled as C: the header must be valid C, and the API usable from it. */
#include "strata/pool.h"

#include <string.h>

struct node {
  struct node* next;
  long value;
};

int strata_pool_c_smoke(void) {
  strata_pool_t* pool = strata_pool_create(sizeof(struct node), _Alignof(struct node), 10, 0);
  if (pool == NULL) return 1;
  struct node* head = NULL;
  for (long i = 0; i < 1000; ++i) {
    struct node* n = strata_pool_alloc(pool);
    if (n == NULL) return 2;
    n->value = i;
    n->next = head;
    head = n;
  }
  long expect = 999;
  for (struct node* n = head; n != NULL; n = n->next, --expect)
    if (n->value != expect) return 3;
  strata_pool_stats_t s;
  memset(&s, 0, sizeof s);
  strata_pool_get_stats(pool, &s);
  if (s.live != 1000) return 4;
  while (head != NULL) {
    struct node* next = head->next;
    strata_pool_free(pool, head);
    head = next;
  }
  strata_pool_get_stats(pool, &s);
  if (s.live != 0) return 5;
  strata_pool_destroy(pool);
  return 0;
}
