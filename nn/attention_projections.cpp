// The fused attention op's input projections (nn/attention_internal.h; the
// maths in nn/attention.cpp, Section 1):
// Q, K and V from the inputs, the projections that read the same input
// stacked so that one sgemm computes them all, and their backward. With
// E = H*d_k the width of Q (D by default), Ek = Hkv*d_k and Dv = Hkv*d_v
// the widths of K and V (E and D unless grouped-query attention shares the
// key/value heads), W = E + Ek + Dv (2E+D by default):
//   self-attention:   QKV = xq [Wq; Wk; Wv]^T + [bq; bk; bv]   (B*T, W)
//   cross-attention:  Q   = xq Wq^T + bq                       (B*T, E)
//                     KV  = xkv [Wk; Wv]^T + [bk; bv]           (B*S, Ek+Dv)
// MultiHeadAttention keeps its weights back to back in one buffer, so the
// stack is the first weight itself; other callers' weights are copied
// (nn/stacked.h). Backward needs the weight stack and the inputs, not the
// biases: forward keeps the first and drops a copied bias stack.
#include "nn/attention_internal.h"
#include "nn/stacked.h"

namespace qkv::nn::detail {

// ---- Forward ----------------------------------------------------------------------------

InputProjections project_inputs(const Var& xq, const Var& xkv, bool self, const AttentionWeights& w,
                                const AttentionSizes& dims) {
  const Var &wq = w.wq, &bq = w.bq, &wk = w.wk, &bk = w.bk, &wv = w.wv, &bv = w.bv;
  const int64_t B = dims.B, T = dims.T, S = dims.S, E = dims.E(), KV = dims.Ek() + dims.Dv();
  const bool has_bias = bq.defined();
  InputProjections p;
  Tensor W_copy, b_copy;  // the stacks, when they have to be copied
  if (self) {
    // [Wq; Wk; Wv] (E+Ek+Dv, D) and [bq; bk; bv] (E+Ek+Dv)
    const real* W = stacked({&wq.data(), &wk.data(), &wv.data()}, W_copy);
    const real* b = has_bias ? stacked({&bq.data(), &bk.data(), &bv.data()}, b_copy) : nullptr;
    p.QKV = Tensor::empty({B * T, E + KV});
    // (B*T, D) x (D, E+Ek+Dv) -> (B*T, E+Ek+Dv)
    linear_forward(xq.data(), W, b, E + KV, p.QKV.data());
    // Keeps the stack alive. When it is the module's packed buffer, wq's
    // storage holds all three weights and backward reads (E+Ek+Dv)*D from its start.
    p.W_qkv = W_copy.defined() ? W_copy : wq.data();
  } else {
    p.Q = Tensor::empty({B * T, E});
    linear_forward(xq.data(), wq.data().data(), has_bias ? bq.data().data() : nullptr, E,
                   p.Q.data());  // (B*T, D) x (D, E) -> (B*T, E)
    // [Wk; Wv] (Ek+Dv, D) and [bk; bv] (Ek+Dv)
    const real* W = stacked({&wk.data(), &wv.data()}, W_copy);
    const real* b = has_bias ? stacked({&bk.data(), &bv.data()}, b_copy) : nullptr;
    p.KV = Tensor::empty({B * S, KV});
    linear_forward(xkv.data(), W, b, KV, p.KV.data());  // (B*S, D) x (D, Ek+Dv) -> (B*S, Ek+Dv)
    p.W_q = wq.data();
    p.W_kv = W_copy.defined() ? W_copy : wk.data();
  }
  return p;
}

// ---- Backward ---------------------------------------------------------------------------

InputProjectionGrads::InputProjectionGrads(const InputProjections& p, const AttentionSizes& dims) {
  const int64_t E = dims.E(), KV = dims.Ek() + dims.Dv();
  if (p.self()) {
    dQKV = Tensor::empty({dims.B * dims.T, E + KV});
  } else {
    dQ = Tensor::empty({dims.B * dims.T, E});
    dKV = Tensor::empty({dims.B * dims.S, KV});
  }
}

// forward: QKV = xq [Wq; Wk; Wv]^T + [bq; bk; bv]  (or Q and KV)
//   dxq (+ dxkv) = dQKV [Wq; Wk; Wv],  d[Wq; Wk; Wv] = dQKV^T xq,  d[bq; bk; bv] = row sums
// The weight and bias gradients fill one (E+Ek+Dv, D) and one (E+Ek+Dv)
// block, rows [q | k | v], whatever the layout. With self-attention the one
// input gets all of dx, in dxq; dxkv stays undefined.

InputGrads project_inputs_backward(const InputProjectionGrads& g, const InputProjections& p,
                                   const Tensor& xq, const Tensor& xkv, bool want_dxq,
                                   bool want_dxkv, bool has_bias, const AttentionSizes& dims) {
  const int64_t D = dims.D, E = dims.E(), KV = dims.Ek() + dims.Dv();
  InputGrads r;
  if (want_dxq) r.dxq = Tensor::empty(xq.shape());
  if (want_dxkv && !p.self()) r.dxkv = Tensor::empty(xkv.shape());
  r.dW = Tensor::empty({E + KV, D});
  if (has_bias) r.db = Tensor::empty({E + KV});
  real* dxq = want_dxq ? r.dxq.data() : nullptr;  // (B*T, D), or null: not wanted
  real* db = has_bias ? r.db.data() : nullptr;    // (E+Ek+Dv), or null: no biases
  if (p.self()) {
    linear_backward(g.dQKV.data(), xq, p.W_qkv.data(), E + KV, dxq, r.dW.data(), db);
  } else {
    linear_backward(g.dQ.data(), xq, p.W_q.data(), E, dxq, r.dW.data(), db);
    linear_backward(g.dKV.data(), xkv, p.W_kv.data(), KV, want_dxkv ? r.dxkv.data() : nullptr,
                    r.dW.data() + E * D, has_bias ? db + E : nullptr);
  }
  return r;
}

}  // namespace qkv::nn::detail
