#include "nn/stacked.h"

#include <algorithm>

namespace qkv::nn {

const real* stacked(std::initializer_list<const Tensor*> parts, Tensor& scratch) {
  const real* first = (*parts.begin())->data();
  bool contiguous = true;
  int64_t total = 0;
  for (const Tensor* p : parts) {
    contiguous &= p->data() == first + total;
    total += p->numel();
  }
  if (contiguous) return first;
  scratch = Tensor::empty({total});
  int64_t at = 0;
  for (const Tensor* p : parts) {
    std::copy(p->data(), p->data() + p->numel(), scratch.data() + at);
    at += p->numel();
  }
  return scratch.data();
}

}  // namespace qkv::nn
