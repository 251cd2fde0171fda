#include "core/parallel.h"

#include <string>

#include "core/blas.h"
#include "core/error.h"

namespace qkv {
namespace {
int g_threads = 0;  // 0: not set yet, use the OpenMP default
}

void set_num_threads(int n) {
  if (n < 1) throw Error("set_num_threads: need at least 1 thread, got " + std::to_string(n));
  g_threads = n;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  blas_set_num_threads(n);
}

int get_num_threads() {
#ifdef _OPENMP
  if (g_threads == 0) g_threads = omp_get_max_threads();
  return g_threads;
#else
  return 1;
#endif
}

}  // namespace qkv
