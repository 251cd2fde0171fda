#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/reduce.h"

namespace qkv::nn {

bool AttentionMask::hidden(int64_t b, int64_t i, int64_t j, int64_t T, int64_t S) const {
  if (causal && j > i) return true;
  if (!key_lengths.empty() && j >= key_lengths[b]) return true;
  if (mask.defined()) {
    const real* m = mask.data();
    const int64_t off = mask.dim() == 3 ? b * T * S : 0;
    if (m[off + i * S + j] != 0) return true;
  }
  return false;
}

namespace {

void check_mask(const AttentionMask& m, int64_t B, int64_t T, int64_t S) {
  if (!m.key_lengths.empty()) {
    if (static_cast<int64_t>(m.key_lengths.size()) != B)
      throw Error("attention: " + std::to_string(m.key_lengths.size()) +
                  " key lengths for a batch of " + std::to_string(B));
    for (int64_t b = 0; b < B; ++b)
      if (m.key_lengths[b] < 0 || m.key_lengths[b] > S)
        throw Error("attention: key length " + std::to_string(m.key_lengths[b]) +
                    " of sequence " + std::to_string(b) + " is outside [0, " +
                    std::to_string(S) + "]");
  }
  // causal with T > S is allowed: queries past S simply see all S keys.
  if (m.mask.defined()) {
    const Shape& s = m.mask.shape();
    const bool ok = (s == Shape{T, S}) || (s == Shape{B, T, S});
    if (!ok)
      throw Error("attention: mask of shape " + to_string(s) + " does not match (T,S) = (" +
                  std::to_string(T) + "," + std::to_string(S) + ") or (B,T,S)");
  }
}

// Y (N, D) = X (N, D_in) W^T + b  (W is (D, D_in)).
void project(const Tensor& X, const Tensor& W, const Tensor* b, Tensor& Y) {
  const int64_t N = X.numel() / X.size(-1), in = W.size(1), out = W.size(0);
  if (b) {
    real* y = Y.data();
    const real* bp = b->data();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) y[n * out + o] = bp[o];
  }
  gemm(false, true, N, out, in, 1, X.data(), in, W.data(), in, b ? 1 : 0, Y.data(), out);
}

// Backward of project: dX (+)= dY W, dW = dY^T X, db = column sums of dY.
void project_backward(const Tensor& dY, const Tensor& X, const Tensor& W, Tensor* dX,
                      bool accumulate_dx, Tensor* dW, Tensor* db) {
  const int64_t N = X.numel() / X.size(-1), in = W.size(1), out = W.size(0);
  if (dX) gemm(false, false, N, in, out, 1, dY.data(), out, W.data(), in, accumulate_dx ? 1 : 0, dX->data(), in);
  if (dW) gemm(true, false, out, in, N, 1, dY.data(), out, X.data(), in, 0, dW->data(), in);
  if (db) {
    real* d = db->data();
    const real* g = dY.data();
    for (int64_t o = 0; o < out; ++o) d[o] = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) d[o] += g[n * out + o];
  }
}

}  // namespace

struct AttentionNode : Node {
  // Saved for backward: the inputs, the projections Q, K, V (B*T or B*S, D),
  // the probabilities P (B,H,T,S) and the merged head outputs O (B*T, D).
  Tensor xq, xkv, wq, wk, wv, wo, Q, K, V, P, O;
  int64_t B = 0, T = 0, S = 0, D = 0, H = 0, dk = 0;
  bool has_bias = false, same_input = false;
  const char* name() const override { return "multi_head_attention"; }

  std::vector<Tensor> backward(const Tensor& dY) override {
    const real scale = real(1) / std::sqrt(static_cast<real>(dk));
    // Output projection: out = O Wo^T + bo.
    Tensor dO = Tensor::empty({B * T, D});
    Tensor dWo = Tensor::empty(wo.shape()), dbo = has_bias ? Tensor::empty({D}) : Tensor();
    project_backward(dY, O, wo, &dO, false, &dWo, has_bias ? &dbo : nullptr);

    Tensor dQ = Tensor::empty({B * T, D}), dK = Tensor::empty({B * S, D}),
           dV = Tensor::empty({B * S, D});
    const int threads = get_num_threads();
    // One (T,S) scratch block per thread for dP / dS.
    Tensor scratch = Tensor::empty({static_cast<int64_t>(threads), T, S});
    parallel_for(
        B * H,
        [&](int64_t p0, int64_t p1) {
#ifdef _OPENMP
          real* dS = scratch.data() + (in_parallel_region() ? omp_get_thread_num() : 0) * T * S;
#else
          real* dS = scratch.data();
#endif
          for (int64_t bh = p0; bh < p1; ++bh) {
            const int64_t b = bh / H, h = bh % H;
            const real* Pb = P.data() + bh * T * S;                // (T,S)
            const real* Qb = Q.data() + b * T * D + h * dk;        // (T,d_k), ld D
            const real* Kb = K.data() + b * S * D + h * dk;        // (S,d_k), ld D
            const real* Vb = V.data() + b * S * D + h * dk;        // (S,d_k), ld D
            const real* dOb = dO.data() + b * T * D + h * dk;      // (T,d_k), ld D
            // dP = dO V^T  (T,d_k) x (d_k,S) -> (T,S)
            gemm(false, true, T, S, dk, 1, dOb, D, Vb, D, 0, dS, S);
            // dV = P^T dO  (S,T) x (T,d_k) -> (S,d_k)
            gemm(true, false, S, dk, T, 1, Pb, S, dOb, D, 0, dV.data() + b * S * D + h * dk, D);
            // Softmax backward per row: dS = P * (dP - rowsum(dP * P)).
            for (int64_t i = 0; i < T; ++i) {
              real* r = dS + i * S;
              const real* pr = Pb + i * S;
              real dot = 0;
              for (int64_t j = 0; j < S; ++j) dot += r[j] * pr[j];
              for (int64_t j = 0; j < S; ++j) r[j] = pr[j] * (r[j] - dot);
            }
            // scores = scale Q K^T:  dQ = scale dS K (T,S)x(S,d_k);  dK = scale dS^T Q (S,T)x(T,d_k)
            gemm(false, false, T, dk, S, scale, dS, S, Kb, D, 0, dQ.data() + b * T * D + h * dk, D);
            gemm(true, false, S, dk, T, scale, dS, S, Qb, D, 0, dK.data() + b * S * D + h * dk, D);
          }
        },
        /*grain=*/2);

    // Input projections. With self-attention (xq and xkv the same Var) the
    // engine adds the two input gradients; we return them separately.
    Tensor dxq = needs_grad(0) ? Tensor::empty(xq.shape()) : Tensor();
    Tensor dxkv = needs_grad(1) ? Tensor::empty(xkv.shape()) : Tensor();
    Tensor dWq = Tensor::empty(wq.shape()), dWk = Tensor::empty(wk.shape()),
           dWv = Tensor::empty(wv.shape());
    Tensor dbq, dbk, dbv;
    if (has_bias) {
      dbq = Tensor::empty({D});
      dbk = Tensor::empty({D});
      dbv = Tensor::empty({D});
    }
    project_backward(dQ, xq, wq, needs_grad(0) ? &dxq : nullptr, false, &dWq, has_bias ? &dbq : nullptr);
    project_backward(dK, xkv, wk, needs_grad(1) ? &dxkv : nullptr, false, &dWk, has_bias ? &dbk : nullptr);
    project_backward(dV, xkv, wv, needs_grad(1) ? &dxkv : nullptr, true, &dWv, has_bias ? &dbv : nullptr);
    if (has_bias) return {dxq, dxkv, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo};
    return {dxq, dxkv, dWq, dWk, dWv, dWo};
  }
  void release_saved() override { xq = xkv = wq = wk = wv = wo = Q = K = V = P = O = Tensor(); }
};

Var multi_head_attention(const Var& xq, const Var& xkv, const Var& wq, const Var& bq,
                         const Var& wk, const Var& bk, const Var& wv, const Var& bv,
                         const Var& wo, const Var& bo, int64_t heads, const AttentionMask& mask,
                         Tensor* probs_out) {
  const Shape& qs = xq.shape();
  const Shape& ks = xkv.shape();
  if (qs.size() != 3 || ks.size() != 3 || qs[0] != ks[0] || qs[2] != ks[2])
    throw Error("attention: query " + to_string(qs) + " and key/value " + to_string(ks) +
                ": expected (B,T,D) and (B,S,D) with the same B and D");
  const int64_t B = qs[0], T = qs[1], S = ks[1], D = qs[2];
  if (heads <= 0 || D % heads != 0)
    throw Error("attention: d_model " + std::to_string(D) + " is not divisible by " +
                std::to_string(heads) + " heads");
  for (const Var* w : {&wq, &wk, &wv, &wo})
    if (w->shape() != Shape{D, D})
      throw Error("attention: weight " + to_string(w->shape()) + " should be (" +
                  std::to_string(D) + "," + std::to_string(D) + ")");
  const bool has_bias = bq.defined();
  if (has_bias)
    for (const Var* b : {&bq, &bk, &bv, &bo})
      if (!b->defined() || b->shape() != Shape{D})
        throw Error("attention: every bias must be (" + std::to_string(D) + ")");
  check_mask(mask, B, T, S);
  const int64_t H = heads, dk = D / H;
  const real scale = real(1) / std::sqrt(static_cast<real>(dk));

  // Projections, (B*T, D) and (B*S, D).
  Tensor Q = Tensor::empty({B * T, D}), K = Tensor::empty({B * S, D}), V = Tensor::empty({B * S, D});
  project(xq.data(), wq.data(), has_bias ? &bq.data() : nullptr, Q);
  project(xkv.data(), wk.data(), has_bias ? &bk.data() : nullptr, K);
  project(xkv.data(), wv.data(), has_bias ? &bv.data() : nullptr, V);

  Tensor P = Tensor::empty({B, H, T, S});
  Tensor O = Tensor::empty({B * T, D});
  const bool any_mask = mask.causal || !mask.key_lengths.empty() || mask.mask.defined();
  const real neg_inf = -std::numeric_limits<real>::infinity();
  parallel_for(
      B * H,
      [&](int64_t p0, int64_t p1) {
        for (int64_t bh = p0; bh < p1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          real* Pb = P.data() + bh * T * S;
          // scores = scale Q_h K_h^T   (T,d_k) x (d_k,S) -> (T,S)
          gemm(false, true, T, S, dk, scale, Q.data() + b * T * D + h * dk, D,
               K.data() + b * S * D + h * dk, D, 0, Pb, S);
          if (any_mask)
            for (int64_t i = 0; i < T; ++i)
              for (int64_t j = 0; j < S; ++j)
                if (mask.hidden(b, i, j, T, S)) Pb[i * S + j] = neg_inf;
          softmax_rows(Pb, T, S);  // fully masked rows become zeros
          // O_h = P V_h   (T,S) x (S,d_k) -> (T,d_k), written into its head's columns
          gemm(false, false, T, dk, S, 1, Pb, S, V.data() + b * S * D + h * dk, D, 0,
               O.data() + b * T * D + h * dk, D);
        }
      },
      /*grain=*/2);

  Tensor Y = Tensor::empty({B, T, D});
  project(O, wo.data(), has_bias ? &bo.data() : nullptr, Y);
  if (probs_out) *probs_out = P;

  auto node = std::make_shared<AttentionNode>();
  node->B = B; node->T = T; node->S = S; node->D = D; node->H = H; node->dk = dk;
  node->has_bias = has_bias;
  node->xq = xq.data(); node->xkv = xkv.data();
  node->wq = wq.data(); node->wk = wk.data(); node->wv = wv.data(); node->wo = wo.data();
  node->Q = Q; node->K = K; node->V = V; node->P = P; node->O = O;
  std::vector<Var> inputs{xq, xkv, wq};
  if (has_bias) inputs.push_back(bq);
  inputs.push_back(wk);
  if (has_bias) inputs.push_back(bk);
  inputs.push_back(wv);
  if (has_bias) inputs.push_back(bv);
  inputs.push_back(wo);
  if (has_bias) inputs.push_back(bo);
  return make_result(Y, node, inputs);
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model_, int64_t heads_, bool bias, Generator& g)
    : d_model(d_model_), heads(heads_), d_k(heads_ > 0 ? d_model_ / heads_ : 0) {
  if (heads <= 0 || d_model % heads != 0)
    throw Error("MultiHeadAttention: d_model " + std::to_string(d_model) +
                " is not divisible by " + std::to_string(heads) + " heads");
  w_q = register_module("w_q", std::make_shared<Linear>(d_model, d_model, bias, g));
  w_k = register_module("w_k", std::make_shared<Linear>(d_model, d_model, bias, g));
  w_v = register_module("w_v", std::make_shared<Linear>(d_model, d_model, bias, g));
  w_o = register_module("w_o", std::make_shared<Linear>(d_model, d_model, bias, g));
}

Var MultiHeadAttention::forward(const Var& xq, const Var& xkv, const AttentionMask& mask) {
  Tensor probs;
  Var y = multi_head_attention(xq, xkv, w_q->weight, w_q->bias, w_k->weight, w_k->bias,
                               w_v->weight, w_v->bias, w_o->weight, w_o->bias, heads, mask,
                               keep_attention_ ? &probs : nullptr);
  last_attention_ = keep_attention_ ? probs : Tensor();
  return y;
}

}  // namespace qkv::nn
