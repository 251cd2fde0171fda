// Reductions: forward and backward side by side. The backward of a reduction
// broadcasts the gradient back over the reduced axis.
#include <memory>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/reduce.h"

namespace qkv {

namespace {
// Shape of a reduction's output with the axis kept as size 1, so that the
// upstream gradient broadcasts against the input.
Shape keepdim_shape(const Shape& in, int axis) {
  Shape s = in;
  s[normalize_axis(axis, static_cast<int>(in.size()), "reduce", in)] = 1;
  return s;
}
}  // namespace

// ---- sum -------------------------------------------------------------------------
struct SumNode : Node {
  Shape in_shape, kept;  // kept: the output shape with keepdim
  const char* name() const override { return "sum"; }
  OpDoc doc() const override {
    return {"y = sum(x)  (over one axis or all)", "dx = dy, broadcast back over the summed axis",
            "docs/primitives.md#sum"};
  }
  TensorList backward(const Tensor& g) override {
    Tensor out = Tensor::empty(in_shape);
    out.fill_(0);
    return {add(out, g.reshape(kept))};
  }
};
Var sum(const Var& a, int axis, bool keepdim) {
  auto n = make_node<SumNode>();
  Tensor y = sum(a.data(), axis, keepdim);
  n->in_shape = a.shape();
  n->kept = keepdim_shape(a.shape(), axis);
  return make_result(y, n, {a});
}
Var sum(const Var& a) {
  auto n = make_node<SumNode>();
  n->in_shape = a.shape();
  n->kept = Shape(a.shape().size(), 1);
  return make_result(sum(a.data()), n, {a});
}

// ---- mean ------------------------------------------------------------------------
struct MeanNode : Node {
  Shape in_shape, kept;
  real inv_n = 1;
  const char* name() const override { return "mean"; }
  OpDoc doc() const override {
    return {"y = mean(x)  (over one axis or all, n elements)",
            "dx = dy / n, broadcast back over the averaged axis", "docs/primitives.md#mean"};
  }
  TensorList backward(const Tensor& g) override {
    Tensor out = Tensor::zeros(in_shape);
    return {add(out, mul(g, inv_n).reshape(kept))};
  }
};
Var mean(const Var& a, int axis, bool keepdim) {
  auto n = make_node<MeanNode>();
  Tensor y = mean(a.data(), axis, keepdim);
  n->in_shape = a.shape();
  n->kept = keepdim_shape(a.shape(), axis);
  n->inv_n = real(1) / static_cast<real>(a.size(axis));
  return make_result(y, n, {a});
}
Var mean(const Var& a) {
  auto n = make_node<MeanNode>();
  Tensor y = mean(a.data());
  n->in_shape = a.shape();
  n->kept = Shape(a.shape().size(), 1);
  n->inv_n = real(1) / static_cast<real>(a.numel());
  return make_result(y, n, {a});
}

// ---- max -------------------------------------------------------------------------
struct MaxNode : Node {
  Shape in_shape;
  std::vector<int64_t> index;  // flat input index of each output's winner
  const char* name() const override { return "max"; }
  OpDoc doc() const override {
    return {"y = max(x)  (over one axis or all)",
            "dx = dy at the winning element (the first on ties), 0 elsewhere",
            "docs/primitives.md#max"};
  }
  TensorList backward(const Tensor& g) override {
    Tensor dx = Tensor::zeros(in_shape);
    const real* gp = g.data();
    real* d = dx.data();
    for (size_t k = 0; k < index.size(); ++k) d[index[k]] += gp[k];
    return {dx};
  }
  void release_saved() override {
    index.clear();
    index.shrink_to_fit();
  }
};
Var max(const Var& a, int axis, bool keepdim) {
  auto n = make_node<MaxNode>();
  Tensor y = max_with_index(a.data(), axis, keepdim, n->index);
  n->in_shape = a.shape();
  return make_result(y, n, {a});
}
Var max(const Var& a) {
  auto n = make_node<MaxNode>();
  n->in_shape = a.shape();
  check_defined(a.data(), "max");
  if (a.numel() == 0) throw Error("max: empty tensor of shape " + to_string(a.shape()));
  Tensor y = max_with_index(a.data().reshape({a.numel()}), 0, false, n->index);
  return make_result(y, n, {a});
}

}  // namespace qkv
