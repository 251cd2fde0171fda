// Per-thread scratch for one parallel_for: a block of `per_thread` numbers for
// each part the loop may be cut into, made once before the loop. Inside the
// loop body, mine() is the calling part's block, private to it, so parts
// never share a temporary and nothing is allocated inside the loop.
//
//   ThreadScratch scratch(T * S);         // one (T,S) block per thread
//   parallel_for(n, [&](int64_t i0, int64_t i1) {
//     real* tmp = scratch.mine();         // this part's (T,S) block
//     ...
//   });
//
// It is ThreadSlots (core/parallel.h) with the memory attached: called from
// inside someone else's parallel region, the loop runs on the calling thread
// and there is one block.
#pragma once
#include <cstdint>

#include "core/parallel.h"
#include "core/reduce.h"
#include "core/tensor.h"

namespace qkv {

class ThreadScratch {
 public:
  explicit ThreadScratch(int64_t per_thread)
      : per_thread_(per_thread), blocks_(Tensor::empty({slots_.count(), per_thread})) {}
  real* mine() { return blocks_.data() + slots_.slot() * per_thread_; }

 private:
  ThreadSlots slots_;  // made first: blocks_ is sized by its count()
  int64_t per_thread_;
  Tensor blocks_;  // (threads, per_thread)
};

// A sum over the rows of a parallel_for that every part adds into: each part
// adds its rows into its own zeroed block, mine(), and sum_into() adds the
// blocks in part order after the loop. The result never depends on which
// thread finished first (dgamma, dbeta, the bias of a hidden layer).
//
//   ThreadSums dgamma_parts(D);
//   parallel_for(N, [&](int64_t r0, int64_t r1) {
//     real* dg = dgamma_parts.mine();     // (D), this part's running sum
//     for (r = r0; r < r1; ++r) dg[j] += ...;
//   });
//   dgamma_parts.sum_into(dgamma);       // (D)
class ThreadSums {
 public:
  explicit ThreadSums(int64_t n) : n_(n), blocks_(Tensor::zeros({slots_.count(), n})) {}
  real* mine() { return blocks_.data() + slots_.slot() * n_; }
  void sum_into(real* out) const { sum_rows(blocks_.data(), slots_.count(), n_, out); }

 private:
  ThreadSlots slots_;  // made first: blocks_ is sized by its count()
  int64_t n_;
  Tensor blocks_;  // (threads, n), zeroed
};

}  // namespace qkv
