#include "nn/stacked.h"

#include <algorithm>

namespace qkv::nn {

const real* stacked(std::initializer_list<const Tensor*> parts, int64_t block, Tensor& scratch) {
  const int64_t k = static_cast<int64_t>(parts.size());
  const real* first = (*parts.begin())->data();
  bool contiguous = true;
  int64_t i = 0;
  for (const Tensor* p : parts) contiguous &= p->data() == first + block * i++;
  if (contiguous) return first;
  scratch = Tensor::empty({k * block});
  i = 0;
  for (const Tensor* p : parts)
    std::copy(p->data(), p->data() + block, scratch.data() + block * i++);
  return scratch.data();
}

}  // namespace qkv::nn
