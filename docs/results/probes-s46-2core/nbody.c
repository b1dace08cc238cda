// n-body, direct O(N^2) forces, structure-of-arrays: a handful of allocations.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char** argv) {
  int n = atoi(argv[1]), steps = atoi(argv[2]);
  double *x = malloc(n * 8), *y = malloc(n * 8), *z = malloc(n * 8), *vx = malloc(n * 8), *vy = malloc(n * 8), *vz = malloc(n * 8), *m = malloc(n * 8);
  double *ax = malloc(n * 8), *ay = malloc(n * 8), *az = malloc(n * 8);
  srand(1);
  for (int i = 0; i < n; i++) { x[i] = rand() / (double)RAND_MAX; y[i] = rand() / (double)RAND_MAX; z[i] = rand() / (double)RAND_MAX; vx[i] = vy[i] = vz[i] = 0; m[i] = 1.0 / n; }
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < n; i++) {
      double fx = 0, fy = 0, fz = 0;
      for (int j = 0; j < n; j++) { double dx = x[j] - x[i], dy = y[j] - y[i], dz = z[j] - z[i]; double r2 = dx * dx + dy * dy + dz * dz + 1e-9; double inv = m[j] / (r2 * sqrt(r2)); fx += dx * inv; fy += dy * inv; fz += dz * inv; }
      ax[i] = fx; ay[i] = fy; az[i] = fz;
    }
    for (int i = 0; i < n; i++) { vx[i] += ax[i] * 1e-3; vy[i] += ay[i] * 1e-3; vz[i] += az[i] * 1e-3; x[i] += vx[i] * 1e-3; y[i] += vy[i] * 1e-3; z[i] += vz[i] * 1e-3; }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double e = 0; for (int i = 0; i < n; i++) e += x[i] + y[i] + z[i];
  printf("n %d  %.3f s  check %.6f  x%%4096=%lu y%%4096=%lu ax%%4096=%lu\n", n, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, e, (unsigned long)x % 4096, (unsigned long)y % 4096, (unsigned long)ax % 4096);
  return 0;
}
