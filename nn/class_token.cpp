// The class token's two ops (nn/class_token.h): each node with its backward
// beside the op that makes it. docs/vit-backward.md derives both.
#include "nn/class_token.h"

#include <cstring>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"

namespace qkv::nn {

// ---- prepend_class_token ---------------------------------------------------------------
// Saved: nothing but shapes (the op moves numbers; backward reads only dz).
struct PrependClassTokenNode : Node {
  int64_t B = 0, N = 0, D = 0;
  const char* name() const override { return "prepend_class_token"; }
  OpDoc doc() const override {
    return {"z[b,0] = c,  z[b,1+n] = x[b,n]   (B,N,D), (1,1,D) -> (B,N+1,D)",
            "dc = sum_b dz[b,0],  dx[b,n] = dz[b,1+n]",
            "docs/vit-backward.md#the-class-token-prepend_class_token"};
  }
  // z[b,0] = c, z[b,1+n] = x[b,n]  =>  dc = sum_b dz[b,0];  dx[b,n] = dz[b,1+n]
  TensorList backward(const Tensor& g) override {
    Tensor dx, dc;
    const real* gp = g.data();  // (B, N+1, D)
    if (needs_grad(0)) {
      dx = Tensor::empty({B, N, D});
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(dx.data() + b * N * D, gp + (b * (N + 1) + 1) * D, N * D * sizeof(real));
    }
    if (needs_grad(1)) {
      dc = Tensor::zeros({1, 1, D});
      real* __restrict d = dc.data();
      for (int64_t b = 0; b < B; ++b) {
        const real* __restrict row = gp + b * (N + 1) * D;  // dz[b, 0]
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) d[k] += row[k];
      }
    }
    return {dx, dc};
  }
};

Var prepend_class_token(const Var& x, const Var& token) {
  const Tensor& X = x.data();
  const Tensor& Ct = token.data();
  if (X.dim() != 3 || Ct.shape() != Shape{1, 1, X.dim() == 3 ? X.size(2) : -1})
    throw Error("prepend_class_token: input " + to_string(X.shape()) + ", token " +
                to_string(Ct.shape()) + ": expected input (B, N, D) and token (1, 1, D)");
  const int64_t B = X.size(0), N = X.size(1), D = X.size(2);
  Tensor Z = Tensor::empty({B, N + 1, D});
  for (int64_t b = 0; b < B; ++b) {
    real* zb = Z.data() + b * (N + 1) * D;
    std::memcpy(zb, Ct.data(), D * sizeof(real));                     // z[b, 0] = c
    std::memcpy(zb + D, X.data() + b * N * D, N * D * sizeof(real));  // z[b, 1:] = x[b]
  }
  auto node = make_node<PrependClassTokenNode>();
  node->B = B;
  node->N = N;
  node->D = D;
  return make_result(Z, node, {x, token});
}

// ---- class_token_output ----------------------------------------------------------------
struct ClassTokenOutputNode : Node {
  int64_t B = 0, T = 0, D = 0;
  const char* name() const override { return "class_token_output"; }
  OpDoc doc() const override {
    return {"y[b] = h[b,0]   (B,T,D) -> (B,D)", "dh[b,0] = dy[b],  dh[b,t>0] = 0",
            "docs/vit-backward.md#the-head-reads-position-0-class_token_output"};
  }
  // y[b] = h[b,0]  =>  dh[b,0] = dy[b];  dh[b,t>0] = 0
  TensorList backward(const Tensor& g) override {
    Tensor dh = Tensor::zeros({B, T, D});
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(dh.data() + b * T * D, g.data() + b * D, D * sizeof(real));
    return {dh};
  }
};

Var class_token_output(const Var& h) {
  const Tensor& Hs = h.data();
  if (Hs.dim() != 3 || Hs.size(1) < 1)
    throw Error("class_token_output: input " + to_string(Hs.shape()) +
                ": expected (B, T, D) with T >= 1");
  const int64_t B = Hs.size(0), T = Hs.size(1), D = Hs.size(2);
  Tensor Y = Tensor::empty({B, D});
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(Y.data() + b * D, Hs.data() + b * T * D, D * sizeof(real));
  auto node = make_node<ClassTokenOutputNode>();
  node->B = B;
  node->T = T;
  node->D = D;
  return make_result(Y, node, {h});
}

}  // namespace qkv::nn
