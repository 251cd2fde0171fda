// Runs a function once on each thread of a 2-thread OpenMP parallel region
// that the caller opens, as a user's own parallel code would, and returns
// each thread's result (a thread the runtime did not start leaves its entry
// default-constructed). Checks go after the region: doctest's CHECK is not
// thread-safe.
#pragma once
#include <array>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qkv::testing {

template <class F>
auto on_each_thread_of_outer_region(F&& f) -> std::array<decltype(f()), 2> {
  std::array<decltype(f()), 2> out{};
#pragma omp parallel num_threads(2)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num();
#else
    const int t = 0;
#endif
    if (t < 2) out[t] = f();
  }
  return out;
}

}  // namespace qkv::testing
