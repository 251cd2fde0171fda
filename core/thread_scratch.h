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
  Tensor blocks_;      // (threads, per_thread)
};

}  // namespace qkv
