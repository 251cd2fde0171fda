#include "nn/linear.h"

#include <algorithm>
#include <memory>

#include "autograd/node.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/reduce.h"
#include "nn/embedding.h"
#include "nn/init.h"

namespace qkv::nn {

void linear_forward(const Tensor& X, const real* W, const real* b, int64_t out, real* Y) {
  const int64_t in = X.size(-1), N = X.numel() / in;
  if (b) broadcast_rows(Y, N, out, b);  // Y = broadcast(b), then Y += X W^T (beta = 1)
  // (N,in) x (in,out) -> (N,out), W read transposed by sgemm
  gemm(false, true, N, out, in, 1, X.data(), in, W, in, b ? 1 : 0, Y, out);
}

// Y = X W^T + b  =>  dX = dY W (N,out)x(out,in);  dW = dY^T X (out,N)x(N,in);  db = sum_N dY
void linear_backward(const real* dY, const Tensor& X, const real* W, int64_t out, real* dX,
                     real* dW, real* db) {
  const int64_t in = X.size(-1), N = X.numel() / in;
  if (dX) gemm(false, false, N, in, out, 1, dY, out, W, in, 0, dX, in);
  if (dW) gemm(true, false, out, in, N, 1, dY, out, X.data(), in, 0, dW, in);
  if (db) sum_rows(dY, N, out, db);
}

struct LinearNode : Node {
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "linear"; }
  OpDoc doc() const override {
    return {"Y = X W^T + b   (N,in) x (in,out) -> (N,out)",
            "dX = dY W,  dW = dY^T X,  db = colsum(dY)",
            "docs/feedforward-backward.md#the-linear-layer"};
  }
  TensorList backward(const Tensor& g) override {
    const int64_t out = w.size(0);
    Tensor dx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor dw = needs_grad(1) ? Tensor::empty(w.shape()) : Tensor();
    Tensor db = has_bias && needs_grad(2) ? Tensor::empty({out}) : Tensor();
    linear_backward(g.data(), x, w.data(), out, dx.defined() ? dx.data() : nullptr,
                    dw.defined() ? dw.data() : nullptr, db.defined() ? db.data() : nullptr);
    if (has_bias) return {dx, dw, db};
    return {dx, dw};
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
  Shape ys = X.shape();
  ys.back() = W.size(0);
  Tensor Y = Tensor::empty(ys);  // (..., out)
  linear_forward(X, W.data(), has_bias ? bias.data().data() : nullptr, W.size(0), Y.data());
  auto node = make_node<LinearNode>();
  node->x = X;
  node->w = W;
  node->has_bias = has_bias;
  if (has_bias) return make_result(Y, node, {x, weight, bias});
  return make_result(Y, node, {x, weight});
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& g)
    : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0)
    throw Error("Linear: features must be positive, got in " + std::to_string(in) + ", out " +
                std::to_string(out));
  weight = register_parameter("weight", xavier_uniform({out, in}, g));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

namespace {
void collect_weights(const Module& m, std::vector<Var>& linear, std::vector<Var>& embedding) {
  if (const auto* l = dynamic_cast<const Linear*>(&m)) linear.push_back(l->weight);
  if (const auto* e = dynamic_cast<const Embedding*>(&m)) embedding.push_back(e->weight);
  for (const auto& [name, child] : m.children()) collect_weights(*child, linear, embedding);
}
bool among(const std::vector<Var>& vars, const Var& p) {
  return std::any_of(vars.begin(), vars.end(), [&](const Var& v) { return v.same_as(p); });
}
}  // namespace

std::vector<bool> weight_decay_mask(const Module& m) {
  std::vector<Var> linear, embedding;
  collect_weights(m, linear, embedding);
  std::vector<bool> mask;
  for (const Var& p : m.parameters()) mask.push_back(among(linear, p) && !among(embedding, p));
  return mask;
}

}  // namespace qkv::nn
