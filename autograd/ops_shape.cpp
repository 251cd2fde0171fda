// Shape ops. reshape shares storage; transpose/permute copy (core/layout.h).
// Their backward undoes the move.
#include <memory>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/layout.h"

namespace qkv {

struct ReshapeNode : Node {
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  OpDoc doc() const override {
    return {"y = x viewed in a new shape (same numbers, same order)",
            "dx = dy reshaped back to x's shape", "docs/primitives.md#reshape"};
  }
  TensorList backward(const Tensor& g) override { return {g.reshape(in_shape)}; }
};
Var reshape(const Var& a, const Shape& shape) {
  auto n = make_node<ReshapeNode>();
  n->in_shape = a.shape();
  return make_result(a.data().reshape(shape), n, {a});
}

struct PermuteNode : Node {
  std::vector<int> inverse;
  const char* name() const override { return "permute"; }
  OpDoc doc() const override {
    return {"y = x with its axes reordered",
            "dx = dy with the axes moved back (the inverse permutation)",
            "docs/primitives.md#permute"};
  }
  TensorList backward(const Tensor& g) override { return {permute(g, inverse)}; }
};
Var permute(const Var& a, const std::vector<int>& dims) {
  auto n = make_node<PermuteNode>();
  Tensor y = permute(a.data(), dims);  // validates dims
  n->inverse = inverse_permutation(dims);
  return make_result(y, n, {a});
}

Var transpose(const Var& a, int d0, int d1) {
  return permute(a, transpose_dims(a.shape(), d0, d1));
}

}  // namespace qkv
