// span_logits (nn/span_logits.h): the node with its backward beside the op
// that makes it. docs/qa-backward.md derives both.
#include "nn/span_logits.h"

#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"

namespace qkv::nn {

// Saved: the mask (backward sends nothing to a masked position) and shapes.
struct SpanLogitsNode : Node {
  int64_t B = 0, T = 0;
  std::vector<uint8_t> allowed;  // (B*T)
  const char* name() const override { return "span_logits"; }
  OpDoc doc() const override {
    return {"y[b,c,t] = z[b,t,c] where allowed, -1e9 elsewhere   (B,T,2) -> (B,2,T)",
            "dz[b,t,c] = dy[b,c,t] where allowed, 0 elsewhere",
            "docs/qa-backward.md#the-head-span_logits"};
  }
  // y[b,c,t] = z[b,t,c] (allowed) or a constant  =>  dz[b,t,c] = dy[b,c,t] or 0
  TensorList backward(const Tensor& g) override {
    Tensor dz = Tensor::empty({B, T, 2});
    const real* gp = g.data();  // (B, 2, T)
    real* d = dz.data();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const bool on = allowed[static_cast<size_t>(b * T + t)] != 0;
        d[(b * T + t) * 2 + 0] = on ? gp[(b * 2 + 0) * T + t] : real(0);
        d[(b * T + t) * 2 + 1] = on ? gp[(b * 2 + 1) * T + t] : real(0);
      }
    return {dz};
  }
  void release_saved() override { allowed.clear(); }
};

Var span_logits(const Var& z, const std::vector<uint8_t>& allowed) {
  const Tensor& Z = z.data();
  if (Z.dim() != 3 || Z.size(2) != 2 || Z.size(1) < 1)
    throw Error("span_logits: input " + to_string(Z.shape()) +
                ": expected (B, T, 2), a start and an end logit a position");
  const int64_t B = Z.size(0), T = Z.size(1);
  if (static_cast<int64_t>(allowed.size()) != B * T)
    throw Error("span_logits: input " + to_string(Z.shape()) + ", mask of " +
                std::to_string(allowed.size()) +
                ": expected a mask of B*T = " + std::to_string(B * T));
  Tensor Y = Tensor::empty({B, 2, T});
  const real* zp = Z.data();
  real* y = Y.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const bool on = allowed[static_cast<size_t>(b * T + t)] != 0;
      y[(b * 2 + 0) * T + t] = on ? zp[(b * T + t) * 2 + 0] : kMaskedLogit;
      y[(b * 2 + 1) * T + t] = on ? zp[(b * T + t) * 2 + 1] : kMaskedLogit;
    }
  auto node = make_node<SpanLogitsNode>();
  node->B = B;
  node->T = T;
  if (should_record({z})) node->allowed = allowed;
  return make_result(Y, node, {z});
}

}  // namespace qkv::nn
