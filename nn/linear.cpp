#include "nn/linear.h"

#include <memory>

#include "autograd/node.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/init.h"

namespace qkv::nn {

// Forward: Y (N, out) = X (N, in) W^T + b, N = product of x's leading dims.
// Backward: dX = dY W (N,out)x(out,in); dW = dY^T X (out,N)x(N,in); db = sum_N dY.
struct LinearNode : Node {
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "linear"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const int64_t out = w.size(0), in = w.size(1), N = x.numel() / in;
    Tensor dx, dw, db;
    if (needs_grad(0)) {
      dx = Tensor::empty(x.shape());
      gemm(false, false, N, in, out, 1, g.data(), out, w.data(), in, 0, dx.data(), in);
    }
    if (needs_grad(1)) {
      dw = Tensor::empty(w.shape());
      gemm(true, false, out, in, N, 1, g.data(), out, x.data(), in, 0, dw.data(), in);
    }
    if (has_bias && needs_grad(2)) {
      db = Tensor::zeros({out});
      real* d = db.data();
      const real* gp = g.data();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < out; ++o) d[o] += gp[n * out + o];
    }
    std::vector<Tensor> grads{dx, dw};
    if (has_bias) grads.push_back(db);
    return grads;
  }
  void release_saved() override { x = w = Tensor(); }
};

Var linear(const Var& x, const Var& weight, const Var& bias) {
  const Tensor& X = x.data();
  const Tensor& W = weight.data();
  if (W.dim() != 2 || X.dim() < 1 || X.size(-1) != W.size(1))
    throw Error("linear: input " + to_string(X.shape()) + " x weight " + to_string(W.shape()) +
                "^T: expected input (..., " + (W.dim() == 2 ? std::to_string(W.size(1)) : "in") +
                ") and weight (out, in)");
  const bool has_bias = bias.defined();
  if (has_bias && bias.shape() != Shape{W.size(0)})
    throw Error("linear: bias " + to_string(bias.shape()) + " does not match weight " +
                to_string(W.shape()));
  const int64_t out = W.size(0), in = W.size(1), N = X.numel() / in;
  Shape ys = X.shape();
  ys.back() = out;
  Tensor Y = Tensor::empty(ys);
  if (has_bias) {  // Y = broadcast(b), then Y += X W^T (beta = 1)
    const real* b = bias.data().data();
    real* y = Y.data();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) y[n * out + o] = b[o];
  }
  gemm(false, true, N, out, in, 1, X.data(), in, W.data(), in, has_bias ? 1 : 0, Y.data(), out);
  auto node = std::make_shared<LinearNode>();
  node->x = X;
  node->w = W;
  node->has_bias = has_bias;
  std::vector<Var> inputs{x, weight};
  if (has_bias) inputs.push_back(bias);
  return make_result(Y, node, inputs);
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& g)
    : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0)
    throw Error("Linear: features must be positive, got in " + std::to_string(in) + ", out " +
                std::to_string(out));
  weight = register_parameter("weight", xavier_uniform({out, in}, g));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

}  // namespace qkv::nn
