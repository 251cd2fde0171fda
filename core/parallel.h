// Threading policy: one pool. Our kernels use OpenMP, and we link the OpenMP
// build of OpenBLAS, so sgemm runs on the same OpenMP threads (and runs
// single-threaded when called from inside one of our parallel regions, never
// oversubscribing the cores). set_num_threads governs both.
#pragma once
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qkv {

void set_num_threads(int n);  // n >= 1; sets OpenMP and OpenBLAS alike
int get_num_threads();

// Elementwise loops below this many elements run on the calling thread: waking
// a second thread costs tens of microseconds, more than the work it would take.
inline constexpr int64_t kParallelGrain = 32768;

inline bool in_parallel_region() {
#ifdef _OPENMP
  return omp_in_parallel();
#else
  return false;
#endif
}

// Calls f(begin, end) on contiguous chunks covering [0, n), one per thread, when
// n is at least `grain`; otherwise once on the calling thread. f must not throw.
template <class F>
void parallel_for(int64_t n, F&& f, int64_t grain = kParallelGrain) {
  if (n <= 0) return;
#ifdef _OPENMP
  const int threads = get_num_threads();
  if (threads > 1 && n >= grain && !in_parallel_region()) {
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t b = n * t / nt, e = n * (t + 1) / nt;
      if (b < e) f(b, e);
    }
    return;
  }
#endif
  f(int64_t{0}, n);
}

// Per-thread scratch for one parallel_for: count() rows, and in the loop body
// slot() is the calling thread's row, private to it. Make it before the loop.
// Called from inside someone else's parallel region, parallel_for runs on the
// calling thread alone, so there is one row and every call uses row 0.
class ThreadSlots {
 public:
  ThreadSlots() : nested_(in_parallel_region()) {}
  int count() const { return nested_ ? 1 : get_num_threads(); }
  int slot() const {
#ifdef _OPENMP
    return nested_ ? 0 : omp_get_thread_num();
#else
    return 0;
#endif
  }

 private:
  bool nested_;
};

}  // namespace qkv
