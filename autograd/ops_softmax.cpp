// Softmax and log-softmax over the last axis. Both save their output, which
// is all their backward needs. The two nodes are alike by design (see
// ops_elementwise.cpp); the maths is in the core kernels they call.
#include <memory>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/reduce.h"

namespace qkv {

struct SoftmaxNode : Node {
  Tensor y;
  const char* name() const override { return "softmax"; }
  OpDoc doc() const override {
    return {"P = softmax(Z) = exp(Z) / rowsum(exp(Z))  (last axis)",
            "dZ = P * (dP - rowsum(dP * P))", "docs/cross-entropy.md#the-softmax-jacobian"};
  }
  TensorList backward(const Tensor& g) override { return {softmax_backward(g, y)}; }
  void release_saved() override { y = Tensor(); }
};
Var softmax(const Var& a) {
  auto n = make_node<SoftmaxNode>();
  n->y = softmax(a.data());
  return make_result(n->y, n, {a});
}

struct LogSoftmaxNode : Node {
  Tensor y;
  const char* name() const override { return "log_softmax"; }
  OpDoc doc() const override {
    return {"y = Z - log(rowsum(exp(Z)))  (last axis)", "dZ = dy - softmax(Z) * rowsum(dy)",
            "docs/cross-entropy.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& g) override { return {log_softmax_backward(g, y)}; }
  void release_saved() override { y = Tensor(); }
};
Var log_softmax(const Var& a) {
  auto n = make_node<LogSoftmaxNode>();
  n->y = log_softmax(a.data());
  return make_result(n->y, n, {a});
}

}  // namespace qkv
