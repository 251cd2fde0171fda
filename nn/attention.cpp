#include "nn/attention.h"

#include <cmath>
#include <initializer_list>
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

// The projections that read the same input are stacked, so one sgemm computes
// them all: [Wq; Wk; Wv] (3D, D) for self-attention, [Wk; Wv] (2D, D) for the
// key/value side of cross-attention. MultiHeadAttention keeps its weights back
// to back in one buffer, so the stack is the first weight's pointer; other
// callers' tensors are copied into `scratch`.
const real* stacked(std::initializer_list<const Var*> parts, int64_t block, Tensor& scratch) {
  const int64_t k = static_cast<int64_t>(parts.size());
  const real* first = (*parts.begin())->data().data();
  bool contiguous = true;
  int64_t i = 0;
  for (const Var* p : parts) contiguous &= p->data().data() == first + block * i++;
  if (contiguous) return first;
  scratch = Tensor::empty({k * block});
  i = 0;
  for (const Var* p : parts)
    std::copy(p->data().data(), p->data().data() + block, scratch.data() + block * i++);
  return scratch.data();
}

}  // namespace

struct AttentionNode : Node {
  // Saved for backward: the inputs; the stacked projections, QKV (B*T, 3D)
  // for self-attention, or Q (B*T, D) and KV (B*S, 2D) for cross-attention;
  // the probabilities P (B,H,T,S); and the (stacked) weights they were made
  // with. The merged head outputs O (B*T, D), which dWo needs, are kept
  // unless the caller asked for HeadOutputs::Recompute or Auto chose it (see
  // attention_keeps_head_outputs); then backward makes them again from P and
  // V, one small product per head, and saves (B*T, D) per layer.
  Tensor xq, xkv, Wqkv, Wkv, wq, wo, QKV, Q, KV, P, O;
  int64_t B = 0, T = 0, S = 0, D = 0, H = 0, dk = 0;
  bool has_bias = false, self = false;
  const char* name() const override { return "multi_head_attention"; }

  TensorList backward(const Tensor& dY) override {
    const real scale = real(1) / std::sqrt(static_cast<real>(dk));
    // Output projection: out = O Wo^T + bo. dO and dbo now; dWo = dY^T O
    // after the head loop below (which recomputes O when it was not kept).
    const bool recompute = !O.defined();
    Tensor Ob = recompute ? Tensor::empty({B * T, D}) : O;
    Tensor dO = Tensor::empty({B * T, D});
    Tensor dWo = Tensor::empty({D, D}), dbo = has_bias ? Tensor::empty({D}) : Tensor();
    linear_backward(dY.data(), Ob, wo.data(), D, dO.data(), false, nullptr,  // Ob: its shape only
                     has_bias ? dbo.data() : nullptr);

    // Gradients of the projections, in the same stacked layout as forward.
    const int64_t ldq = self ? 3 * D : D, ldkv = self ? 3 * D : 2 * D;
    Tensor dQKV, dQ, dKV;
    real *dq, *dkp, *dvp;
    const real *q, *k, *v;
    if (self) {
      dQKV = Tensor::empty({B * T, 3 * D});
      dq = dQKV.data(); dkp = dq + D; dvp = dq + 2 * D;
      q = QKV.data(); k = q + D; v = q + 2 * D;
    } else {
      dQ = Tensor::empty({B * T, D});
      dKV = Tensor::empty({B * S, 2 * D});
      dq = dQ.data(); dkp = dKV.data(); dvp = dkp + D;
      q = Q.data(); k = KV.data(); v = k + D;
    }
    // One (T,S) scratch block per thread for dP / dS.
    const ThreadSlots slots;
    Tensor scratch = Tensor::empty({static_cast<int64_t>(slots.count()), T, S});
    parallel_for(
        B * H,
        [&](int64_t p0, int64_t p1) {
          real* dS = scratch.data() + slots.slot() * T * S;
          for (int64_t bh = p0; bh < p1; ++bh) {
            const int64_t b = bh / H, h = bh % H;
            const real* Pb = P.data() + bh * T * S;               // (T,S)
            const real* Qb = q + b * T * ldq + h * dk;            // (T,d_k), ld ldq
            const real* Kb = k + b * S * ldkv + h * dk;           // (S,d_k), ld ldkv
            const real* Vb = v + b * S * ldkv + h * dk;           // (S,d_k), ld ldkv
            const real* dOb = dO.data() + b * T * D + h * dk;     // (T,d_k), ld D
            // O_h = P V_h again  (T,S) x (S,d_k) -> (T,d_k), into its head's columns
            if (recompute)
              gemm(false, false, T, dk, S, 1, Pb, S, Vb, ldkv, 0, Ob.data() + b * T * D + h * dk, D);
            // dP = dO V^T  (T,d_k) x (d_k,S) -> (T,S)
            gemm(false, true, T, S, dk, 1, dOb, D, Vb, ldkv, 0, dS, S);
            // dV = P^T dO  (S,T) x (T,d_k) -> (S,d_k)
            gemm(true, false, S, dk, T, 1, Pb, S, dOb, D, 0, dvp + b * S * ldkv + h * dk, ldkv);
            // Softmax backward per row: dS = P * (dP - rowsum(dP * P)).
            for (int64_t i = 0; i < T; ++i) {
              real* r = dS + i * S;
              const real* pr = Pb + i * S;
              real dot = 0;
#pragma omp simd reduction(+ : dot)
              for (int64_t j = 0; j < S; ++j) dot += r[j] * pr[j];
#pragma omp simd
              for (int64_t j = 0; j < S; ++j) r[j] = pr[j] * (r[j] - dot);
            }
            // scores = scale Q K^T:  dQ = scale dS K (T,S)x(S,d_k);  dK = scale dS^T Q (S,T)x(T,d_k)
            gemm(false, false, T, dk, S, scale, dS, S, Kb, ldkv, 0, dq + b * T * ldq + h * dk, ldq);
            gemm(true, false, S, dk, T, scale, dS, S, Qb, ldq, 0, dkp + b * S * ldkv + h * dk, ldkv);
          }
        },
        /*grain=*/2);
    linear_backward(dY.data(), Ob, wo.data(), D, nullptr, false, dWo.data(), nullptr);

    // Input projections, one stacked gemm per input. The weight gradients of
    // the stack are computed in one (k*D, D) block whose row blocks (views)
    // are dWq, dWk, dWv.
    Tensor dxq = needs_grad(0) ? Tensor::empty(xq.shape()) : Tensor();
    Tensor dxkv = needs_grad(1) && !self ? Tensor::empty(xkv.shape()) : Tensor();
    Tensor dWs, dbs;  // (3D, D) and (3D): rows [q | k | v]
    dWs = Tensor::empty({3 * D, D});
    if (has_bias) dbs = Tensor::empty({3 * D});
    if (self) {
      linear_backward(dQKV.data(), xq, Wqkv.data(), 3 * D, needs_grad(0) ? dxq.data() : nullptr,
                       false, dWs.data(), has_bias ? dbs.data() : nullptr);
    } else {
      linear_backward(dQ.data(), xq, wq.data(), D, needs_grad(0) ? dxq.data() : nullptr, false,
                       dWs.data(), has_bias ? dbs.data() : nullptr);
      linear_backward(dKV.data(), xkv, Wkv.data(), 2 * D, needs_grad(1) ? dxkv.data() : nullptr,
                       false, dWs.data() + D * D, has_bias ? dbs.data() + D : nullptr);
    }
    Tensor dWq = dWs.slice0(0, D), dWk = dWs.slice0(D, 2 * D), dWv = dWs.slice0(2 * D, 3 * D);
    // With self-attention xq and xkv are the same Var: all of dx is returned
    // for input 0 and none for input 1.
    if (has_bias) {
      Tensor dbq = dbs.slice0(0, D), dbk = dbs.slice0(D, 2 * D), dbv = dbs.slice0(2 * D, 3 * D);
      return {dxq, dxkv, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo};
    }
    return {dxq, dxkv, dWq, dWk, dWv, dWo};
  }
  void release_saved() override {
    xq = xkv = Wqkv = Wkv = wq = wo = QKV = Q = KV = P = O = Tensor();
  }
};

Var multi_head_attention(const Var& xq, const Var& xkv, const Var& wq, const Var& bq,
                         const Var& wk, const Var& bk, const Var& wv, const Var& bv,
                         const Var& wo, const Var& bo, int64_t heads, const AttentionMask& mask,
                         Tensor* probs_out, HeadOutputs head_outputs) {
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
  const bool self = xq.same_as(xkv);

  auto node = make_node<AttentionNode>();
  // Stacked projections: self-attention QKV (B*T, 3D); cross-attention
  // Q (B*T, D) and KV (B*S, 2D). q/k/v point at each one's first column.
  const real *q, *k, *v;
  int64_t ldq, ldkv;
  Tensor wscratch, bscratch;
  if (self) {
    const real* W = stacked({&wq, &wk, &wv}, D * D, wscratch);
    const real* b = has_bias ? stacked({&bq, &bk, &bv}, D, bscratch) : nullptr;
    node->QKV = Tensor::empty({B * T, 3 * D});
    linear_forward(xq.data(), W, b, 3 * D, node->QKV.data());
    // Keeps the stack alive. When it is the module's packed buffer, wq's
    // storage holds all three weights and backward reads 3*D*D from its start.
    node->Wqkv = wscratch.defined() ? wscratch : wq.data();
    ldq = ldkv = 3 * D;
    q = node->QKV.data(); k = q + D; v = q + 2 * D;
  } else {
    node->Q = Tensor::empty({B * T, D});
    linear_forward(xq.data(), wq.data().data(), has_bias ? bq.data().data() : nullptr, D, node->Q.data());
    const real* W = stacked({&wk, &wv}, D * D, wscratch);
    const real* b = has_bias ? stacked({&bk, &bv}, D, bscratch) : nullptr;
    node->KV = Tensor::empty({B * S, 2 * D});
    linear_forward(xkv.data(), W, b, 2 * D, node->KV.data());
    node->Wkv = wscratch.defined() ? wscratch : wk.data();
    ldq = D; ldkv = 2 * D;
    q = node->Q.data(); k = node->KV.data(); v = k + D;
  }

  Tensor P = Tensor::empty({B, H, T, S});
  Tensor O = Tensor::empty({B * T, D});
  const real neg_inf = -std::numeric_limits<real>::infinity();
  parallel_for(
      B * H,
      [&](int64_t p0, int64_t p1) {
        for (int64_t bh = p0; bh < p1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          real* Pb = P.data() + bh * T * S;
          // scores = scale Q_h K_h^T   (T,d_k) x (d_k,S) -> (T,S)
          gemm(false, true, T, S, dk, scale, q + b * T * ldq + h * dk, ldq, k + b * S * ldkv + h * dk,
               ldkv, 0, Pb, S);
          // Masks: causal and key padding hide a suffix of each row; a boolean
          // mask is checked element by element.
          const int64_t len = mask.key_lengths.empty() ? S : mask.key_lengths[b];
          for (int64_t i = 0; i < T; ++i) {
            real* row = Pb + i * S;
            const int64_t visible = std::min(len, mask.causal ? i + 1 : S);
            for (int64_t j = std::max<int64_t>(visible, 0); j < S; ++j) row[j] = neg_inf;
            if (mask.mask.defined())
              for (int64_t j = 0; j < S; ++j)
                if (mask.hidden(b, i, j, T, S)) row[j] = neg_inf;
          }
          softmax_rows(Pb, T, S);  // fully masked rows become zeros
          // O_h = P V_h   (T,S) x (S,d_k) -> (T,d_k), written into its head's columns
          gemm(false, false, T, dk, S, 1, Pb, S, v + b * S * ldkv + h * dk, ldkv, 0,
               O.data() + b * T * D + h * dk, D);
        }
      },
      /*grain=*/2);

  Tensor Y = Tensor::empty({B, T, D});
  linear_forward(O, wo.data().data(), has_bias ? bo.data().data() : nullptr, D, Y.data());
  if (probs_out) *probs_out = P;

  node->B = B; node->T = T; node->S = S; node->D = D; node->H = H; node->dk = dk;
  node->has_bias = has_bias;
  node->self = self;
  node->xq = xq.data(); node->xkv = xkv.data();
  node->wq = wq.data(); node->wo = wo.data();
  node->P = P;
  const bool keep_o = head_outputs == HeadOutputs::Auto
                          ? attention_keeps_head_outputs(B, T, S, D, H)
                          : head_outputs == HeadOutputs::Keep;
  if (keep_o) node->O = O;
  if (has_bias) return make_result(Y, node, {xq, xkv, wq, bq, wk, bk, wv, bv, wo, bo});
  return make_result(Y, node, {xq, xkv, wq, wk, wv, wo});
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
  // Keep W_Q, W_K, W_V (and their biases) back to back in one buffer, so the
  // fused op computes the three projections of an input with one sgemm and
  // no packing copy. Each parameter stays its own (D, D) view, by name.
  const int64_t D = d_model;
  Tensor W = Tensor::empty({3 * D, D});
  Linear* parts[3] = {w_q.get(), w_k.get(), w_v.get()};
  for (int i = 0; i < 3; ++i) {
    Tensor view = W.slice0(i * D, (i + 1) * D);
    view.copy_(parts[i]->weight.data());
    parts[i]->weight.data() = view;
  }
  if (bias) {
    Tensor b = Tensor::empty({3 * D});
    for (int i = 0; i < 3; ++i) {
      Tensor view = b.slice0(i * D, (i + 1) * D);
      view.copy_(parts[i]->bias.data());
      parts[i]->bias.data() = view;
    }
  }
}

Var MultiHeadAttention::forward(const Var& xq, const Var& xkv, const AttentionMask& mask) {
  ModuleScope scope(this);
  Tensor probs;
  Var y = multi_head_attention(xq, xkv, w_q->weight, w_q->bias, w_k->weight, w_k->bias,
                               w_v->weight, w_v->bias, w_o->weight, w_o->bias, heads, mask,
                               keep_attention_ ? &probs : nullptr);
  last_attention_ = keep_attention_ ? probs : Tensor();
  return y;
}

}  // namespace qkv::nn
