/* strata::pool's C API and strata::static's malloc from a C program: both link and work. */
#include <strata/pool.h>
#include <strata/strata.h>

#include <stdio.h>
#include <stdlib.h>

struct node {
  struct node* next;
  double value;
};

int main(void) {
  strata_stats_t before, after;
  strata_stats_get(&before);
  void* block = malloc(100);
  strata_stats_get(&after);
  int malloc_ok = block != NULL && after.malloc_count > before.malloc_count;
  free(block);

  int pool_ok = 0;
  strata_pool_t* pool = strata_pool_create(sizeof(struct node), _Alignof(struct node), 64,
                                           STRATA_POOL_CONCURRENT | STRATA_POOL_CHECKED);
  struct node* n = pool ? strata_pool_alloc(pool) : NULL;
  if (n) {
    n->next = NULL;
    n->value = 1.5;
    strata_pool_stats_t stats;
    strata_pool_get_stats(pool, &stats);
    pool_ok = stats.live == 1;
    strata_pool_free(pool, n);
  }
  strata_pool_destroy(pool);
  printf("{\"malloc\": %s, \"pool\": %s}\n", malloc_ok ? "true" : "false", pool_ok ? "true" : "false");
  return malloc_ok && pool_ok ? 0 : 1;
}
