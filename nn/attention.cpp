// Multi-head attention (Vaswani et al., section 3.2) as one fused op with a
// hand-written backward. Read top to bottom, in the order data flows:
//   1. the maths, forward and backward (this comment);
//   2. forward: project_inputs makes Q, K, V, stacked so one sgemm serves
//      each input; then attention_forward, the heads' kernel (scores, mask,
//      softmax, P V);
//   3. backward, in reverse: attention_backward, the heads' gradient, each
//      step under the forward line it differentiates; then
//      project_inputs_backward;
//   4. AttentionNode, the adapter: what forward saves, and a backward that
//      calls the kernels;
//   5. multi_head_attention, the public op, and the MultiHeadAttention module.
//
// Sizes: B batch, T query (target) length, S key (source) length, D d_model,
// H heads, d_k = D / H the head size.
//
// Forward. xq (B,T,D) gives the queries, xkv (B,S,D) the keys and values
// (the same tensor for self-attention):
//   Q = xq Wq^T + bq                         (B*T, D)
//   K = xkv Wk^T + bk                        (B*S, D)
//   V = xkv Wv^T + bv                        (B*S, D)
//   per sequence b and head h, with Q_h, K_h, V_h the h-th block of d_k columns:
//     Z   = Q_h K_h^T / sqrt(d_k) + M        (T, S)    scores; M = -inf where the mask hides a key
//     P   = softmax(Z), row by row           (T, S)    kept for backward
//     O_h = P V_h                            (T, d_k)
//   Y = O Wo^T + bo                          (B*T, D), O = concat_h(O_h) (B*T, D)
// The scores are called Z (and their gradient dZ) because S is the key length.
//
// Backward, from dY (B*T, D). Each step but the softmax is a matrix product
// C = A B, whose gradients are dA = dC B^T and dB = A^T dC:
//   dO   = dY Wo,  dWo = dY^T O,  dbo = sum of dY's rows
//   dV_h = P^T dO_h                          (S, T) x (T, d_k) -> (S, d_k)
//   dP   = dO_h V_h^T                        (T, d_k) x (d_k, S) -> (T, S)
//   dZ   = P * (dP - rowsum(dP * P))         (T, S), * elementwise
//          One row: p = softmax(z) has dp_j/dz_i = p_j (delta_ij - p_i), so
//          dz_i = sum_j dp_j p_j (delta_ij - p_i) = p_i (dp_i - sum_j dp_j p_j).
//          It needs P only. A hidden key has p = 0, so its dZ is 0: the mask
//          needs no test in backward.
//   dQ_h = dZ K_h / sqrt(d_k)                (T, S) x (S, d_k) -> (T, d_k)
//   dK_h = dZ^T Q_h / sqrt(d_k)              (S, T) x (T, d_k) -> (S, d_k)
//   dxq  = dQ Wq,          dWq = dQ^T xq,    dbq = sum of dQ's rows
//   dxkv = dK Wk + dV Wv,  dWk = dK^T xkv,   dWv = dV^T xkv,  dbk, dbv likewise
// For self-attention xq and xkv are one tensor, and its gradient is the sum
// of all three. docs/attention-backward.md derives every step at length.
//
// Heads are never copied out: head h of Q is the column block
// [h*d_k, (h+1)*d_k) of the (B*T, D) matrix (or of a wider stacked one), which
// sgemm reads in place, the matrix's row stride as its leading dimension.
#include "nn/attention.h"

#include <algorithm>
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
#include "core/stacked.h"
#include "core/thread_scratch.h"
#include "nn/attention_internal.h"

namespace qkv::nn {

// ---- Masks ------------------------------------------------------------------------------

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

// Z += M for sequence b: every hidden score of Z (T, S) becomes -inf. Causal
// masking and key padding hide a suffix of each row; a boolean mask is
// checked element by element.
void hide_masked_scores(const AttentionMask& mask, int64_t b, int64_t T, int64_t S, real* Z) {
  const real neg_inf = -std::numeric_limits<real>::infinity();
  const int64_t len = mask.key_lengths.empty() ? S : mask.key_lengths[b];
  for (int64_t i = 0; i < T; ++i) {
    real* row = Z + i * S;  // (S)
    const int64_t visible = std::min(len, mask.causal ? i + 1 : S);
    for (int64_t j = std::max<int64_t>(visible, 0); j < S; ++j) row[j] = neg_inf;
    if (mask.mask.defined())
      for (int64_t j = 0; j < S; ++j)
        if (mask.hidden(b, i, j, T, S)) row[j] = neg_inf;
  }
}

// ---- The buffers ------------------------------------------------------------------------

struct AttentionSizes {
  int64_t B, T, S, D, H, d_k;
};

// Where the kernels find Q, K and V: the first column of each inside a
// row-major matrix with row stride ldq (Q, B*T rows) or ldkv (K and V, B*S
// rows). Head h of sequence b is then a (T, d_k) or (S, d_k) block at
// Q + b*T*ldq + h*d_k and K (V) + b*S*ldkv + h*d_k.
struct QKVColumns {
  const real* Q;
  const real* K;
  const real* V;
  int64_t ldq, ldkv;
};

// The same for their gradients, which backward writes in the same layout.
struct QKVGradColumns {
  real* dQ;
  real* dK;
  real* dV;
  int64_t ldq, ldkv;
};

// ---- Forward: the input projections -----------------------------------------------------

// The projections that read the same input are stacked, so that one sgemm
// computes them all:
//   self-attention:   QKV = xq [Wq; Wk; Wv]^T + [bq; bk; bv]   (B*T, 3D)
//   cross-attention:  Q   = xq Wq^T + bq                       (B*T, D)
//                     KV  = xkv [Wk; Wv]^T + [bk; bv]           (B*S, 2D)
// MultiHeadAttention keeps its weights back to back in one buffer, so the
// stack is the first weight itself; other callers' weights are copied
// (core/stacked.h). Backward needs the weight stack and the inputs, not the
// biases: forward keeps the first and drops a copied bias stack.
struct InputProjections {
  Tensor W_qkv, QKV;        // self:  [Wq; Wk; Wv] (3D, D), QKV (B*T, 3D)
  Tensor W_q, Q, W_kv, KV;  // cross: Wq (D, D), Q (B*T, D), [Wk; Wv] (2D, D), KV (B*S, 2D)

  bool self() const { return QKV.defined(); }
  QKVColumns columns(int64_t D) const {
    if (self()) return {QKV.data(), QKV.data() + D, QKV.data() + 2 * D, 3 * D, 3 * D};
    return {Q.data(), KV.data(), KV.data() + D, D, 2 * D};
  }
};

InputProjections project_inputs(const Var& xq, const Var& xkv, bool self, const Var& wq,
                                const Var& bq, const Var& wk, const Var& bk, const Var& wv,
                                const Var& bv, const AttentionSizes& dims) {
  const int64_t B = dims.B, T = dims.T, S = dims.S, D = dims.D;
  const bool has_bias = bq.defined();
  InputProjections p;
  Tensor W_copy, b_copy;  // (k*D, D), (k*D): the stacks, when they have to be copied
  if (self) {
    // [Wq; Wk; Wv] (3D, D) and [bq; bk; bv] (3D)
    const real* W = stacked({&wq.data(), &wk.data(), &wv.data()}, D * D, W_copy);
    const real* b = has_bias ? stacked({&bq.data(), &bk.data(), &bv.data()}, D, b_copy) : nullptr;
    p.QKV = Tensor::empty({B * T, 3 * D});
    linear_forward(xq.data(), W, b, 3 * D, p.QKV.data());  // (B*T, D) x (D, 3D) -> (B*T, 3D)
    // Keeps the stack alive. When it is the module's packed buffer, wq's
    // storage holds all three weights and backward reads 3*D*D from its start.
    p.W_qkv = W_copy.defined() ? W_copy : wq.data();
  } else {
    p.Q = Tensor::empty({B * T, D});
    linear_forward(xq.data(), wq.data().data(), has_bias ? bq.data().data() : nullptr, D,
                   p.Q.data());  // (B*T, D) x (D, D) -> (B*T, D)
    // [Wk; Wv] (2D, D) and [bk; bv] (2D)
    const real* W = stacked({&wk.data(), &wv.data()}, D * D, W_copy);
    const real* b = has_bias ? stacked({&bk.data(), &bv.data()}, D, b_copy) : nullptr;
    p.KV = Tensor::empty({B * S, 2 * D});
    linear_forward(xkv.data(), W, b, 2 * D, p.KV.data());  // (B*S, D) x (D, 2D) -> (B*S, 2D)
    p.W_q = wq.data();
    p.W_kv = W_copy.defined() ? W_copy : wk.data();
  }
  return p;
}

// ---- Forward: the heads' kernel ---------------------------------------------------------

// For every sequence b and head h:  Z = scale Q_h K_h^T + M,  P = softmax(Z),
// O_h = P V_h. Writes P (B,H,T,S) and O (B*T, D), head h into its columns.
void attention_forward(real* P, real* O, const QKVColumns& in, const AttentionMask& mask,
                       const AttentionSizes& dims) {
  const int64_t T = dims.T, S = dims.S, D = dims.D, H = dims.H, d_k = dims.d_k;
  const real scale = real(1) / std::sqrt(static_cast<real>(d_k));
  parallel_for(
      dims.B * H,
      [&](int64_t bh0, int64_t bh1) {
        for (int64_t bh = bh0; bh < bh1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          const real* Qh = in.Q + b * T * in.ldq + h * d_k;   // (T, d_k), row stride ldq
          const real* Kh = in.K + b * S * in.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          const real* Vh = in.V + b * S * in.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          real* Pbh = P + bh * T * S;                         // (T, S): Z, then P in place
          real* Oh = O + b * T * D + h * d_k;                 // (T, d_k), row stride D
          // Z = scale Q_h K_h^T            (T, d_k) x (d_k, S) -> (T, S)
          gemm(false, true, T, S, d_k, scale, Qh, in.ldq, Kh, in.ldkv, 0, Pbh, S);
          // Z += M                         hidden scores -> -inf
          hide_masked_scores(mask, b, T, S, Pbh);
          // P = softmax(Z), row by row     (T, S); a fully hidden row becomes zeros
          softmax_rows(Pbh, T, S);
          // O_h = P V_h                    (T, S) x (S, d_k) -> (T, d_k)
          gemm(false, false, T, d_k, S, 1, Pbh, S, Vh, in.ldkv, 0, Oh, D);
        }
      },
      /*grain=*/2);
}

// ---- Backward: the heads' kernel --------------------------------------------------------

// Softmax backward of a (T, S) block, in place: dP in, dZ out, row by row,
//   dZ = P * (dP - rowsum(dP * P)).
// The formula of core's softmax_backward (core/reduce.cpp), which makes a new
// tensor for its result; here dZ overwrites dP in a per-thread scratch block.
void softmax_backward_in_place(real* d, const real* P, int64_t T, int64_t S) {
  for (int64_t i = 0; i < T; ++i) {
    real* r = d + i * S;         // (S): dP's row in, dZ's row out
    const real* pr = P + i * S;  // (S)
    real dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < S; ++j) dot += r[j] * pr[j];
#pragma omp simd
    for (int64_t j = 0; j < S; ++j) r[j] = pr[j] * (r[j] - dot);
  }
}

// For every sequence b and head h, from dO (B*T, D), P (B,H,T,S) and the
// projections `in`: writes dQ, dK, dV in the layout of `in`. When O_again is
// not null (forward did not keep O), also remakes O (B*T, D) there.
void attention_backward(const QKVGradColumns& grad, real* O_again, const real* dO, const real* P,
                        const QKVColumns& in, const AttentionSizes& dims) {
  const int64_t T = dims.T, S = dims.S, D = dims.D, H = dims.H, d_k = dims.d_k;
  const real scale = real(1) / std::sqrt(static_cast<real>(d_k));
  ThreadScratch scratch(T * S);  // one (T, S) block per thread: dP, then dZ in place
  parallel_for(
      dims.B * H,
      [&](int64_t bh0, int64_t bh1) {
        real* dP = scratch.mine();  // (T, S)
        for (int64_t bh = bh0; bh < bh1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          const real* Pbh = P + bh * T * S;                   // (T, S)
          const real* Qh = in.Q + b * T * in.ldq + h * d_k;   // (T, d_k), row stride ldq
          const real* Kh = in.K + b * S * in.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          const real* Vh = in.V + b * S * in.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          const real* dOh = dO + b * T * D + h * d_k;         // (T, d_k), row stride D
          real* dQh = grad.dQ + b * T * grad.ldq + h * d_k;   // (T, d_k), row stride ldq
          real* dKh = grad.dK + b * S * grad.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          real* dVh = grad.dV + b * S * grad.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          // O_h = P V_h again, when forward did not keep O (dWo needs it)
          //                      (T, S) x (S, d_k) -> (T, d_k), row stride D
          if (O_again)
            gemm(false, false, T, d_k, S, 1, Pbh, S, Vh, in.ldkv, 0, O_again + b * T * D + h * d_k,
                 D);

          // forward: O_h = P V_h
          //   dP = dO_h V_h^T        (T, d_k) x (d_k, S) -> (T, S)
          gemm(false, true, T, S, d_k, 1, dOh, D, Vh, in.ldkv, 0, dP, S);
          //   dV_h = P^T dO_h        (S, T) x (T, d_k) -> (S, d_k)
          gemm(true, false, S, d_k, T, 1, Pbh, S, dOh, D, 0, dVh, grad.ldkv);

          // forward: P = softmax(Z)
          //   dZ = P * (dP - rowsum(dP * P))          (T, S), in place over dP
          softmax_backward_in_place(dP, Pbh, T, S);
          const real* dZ = dP;

          // forward: Z = scale Q_h K_h^T + M  (M is a constant)
          //   dQ_h = scale dZ K_h    (T, S) x (S, d_k) -> (T, d_k)
          gemm(false, false, T, d_k, S, scale, dZ, S, Kh, in.ldkv, 0, dQh, grad.ldq);
          //   dK_h = scale dZ^T Q_h  (S, T) x (T, d_k) -> (S, d_k)
          gemm(true, false, S, d_k, T, scale, dZ, S, Qh, in.ldq, 0, dKh, grad.ldkv);
        }
      },
      /*grain=*/2);
}

// ---- The input projections' backward ----------------------------------------------------

// The projections' gradients dQKV (B*T, 3D), or dQ (B*T, D) and dKV (B*S, 2D):
// the stacked layout of forward, so each input's backward is one sgemm too.
struct InputProjectionGrads {
  Tensor dQKV;     // self
  Tensor dQ, dKV;  // cross

  InputProjectionGrads(const InputProjections& p, const AttentionSizes& dims) {
    if (p.self()) {
      dQKV = Tensor::empty({dims.B * dims.T, 3 * dims.D});
    } else {
      dQ = Tensor::empty({dims.B * dims.T, dims.D});
      dKV = Tensor::empty({dims.B * dims.S, 2 * dims.D});
    }
  }
  QKVGradColumns columns(int64_t D) {
    if (dQKV.defined()) return {dQKV.data(), dQKV.data() + D, dQKV.data() + 2 * D, 3 * D, 3 * D};
    return {dQ.data(), dKV.data(), dKV.data() + D, D, 2 * D};
  }
};

// forward: QKV = xq [Wq; Wk; Wv]^T + [bq; bk; bv]  (or Q and KV)
//   dxq (+ dxkv) = dQKV [Wq; Wk; Wv],  d[Wq; Wk; Wv] = dQKV^T xq,  d[bq; bk; bv] = row sums
// The weight and bias gradients fill one (3D, D) and one (3D) block, rows
// [q | k | v], whatever the layout. With self-attention the one input gets
// all of dx, in dxq; dxkv stays undefined.
struct InputGrads {
  Tensor dxq, dxkv;  // (B,T,D), (B,S,D), or undefined when not wanted
  Tensor dW, db;     // (3D, D), (3D) or undefined without biases
};

InputGrads project_inputs_backward(const InputProjectionGrads& g, const InputProjections& p,
                                   const Tensor& xq, const Tensor& xkv, bool want_dxq,
                                   bool want_dxkv, bool has_bias, int64_t D) {
  InputGrads r;
  if (want_dxq) r.dxq = Tensor::empty(xq.shape());
  if (want_dxkv && !p.self()) r.dxkv = Tensor::empty(xkv.shape());
  r.dW = Tensor::empty({3 * D, D});
  if (has_bias) r.db = Tensor::empty({3 * D});
  real* dxq = want_dxq ? r.dxq.data() : nullptr;  // (B*T, D), or null: not wanted
  real* db = has_bias ? r.db.data() : nullptr;    // (3D), or null: no biases
  if (p.self()) {
    linear_backward(g.dQKV.data(), xq, p.W_qkv.data(), 3 * D, dxq, r.dW.data(), db);
  } else {
    linear_backward(g.dQ.data(), xq, p.W_q.data(), D, dxq, r.dW.data(), db);
    linear_backward(g.dKV.data(), xkv, p.W_kv.data(), 2 * D, want_dxkv ? r.dxkv.data() : nullptr,
                    r.dW.data() + D * D, has_bias ? db + D : nullptr);
  }
  return r;
}

}  // namespace

// ---- The Node adapter -------------------------------------------------------------------

// Saves exactly what backward needs: the inputs and weights for the
// projections' gradients, the projections Q, K, V, the probabilities P, and
// the head outputs O only when the memory policy keeps them
// (nn/attention_internal.h); otherwise backward makes O again from P and V.
// These are tensors forward made anyway, shared, not copied; the one copy is
// the weight stack ([Wq; Wk; Wv], or [Wk; Wv] for cross-attention) that
// project_inputs makes when the caller's weights are not already rows of one
// buffer, kept until backward.
struct AttentionNode : Node {
  AttentionSizes dims{};
  bool has_bias = false;
  Tensor xq, xkv;       // (B,T,D), (B,S,D)
  InputProjections in;  // stacked weights and Q, K, V
  Tensor P;             // (B,H,T,S)
  Tensor O;             // (B*T, D), or undefined: recompute
  Tensor wo;            // (D, D)
  const char* name() const override { return "multi_head_attention"; }
  OpDoc doc() const override {
    return {
        "Y = concat_h(softmax(Q_h K_h^T / sqrt(d_k) + mask) V_h) Wo^T + bo,  Q = xq Wq^T + bq, K, "
        "V from xkv",
        "dP = dO_h V_h^T,  dZ = P * (dP - rowsum(dP * P)),  dQ_h = dZ K_h / sqrt(d_k),  dK_h = "
        "dZ^T Q_h / sqrt(d_k),  dV_h = P^T dO_h",
        "docs/attention-backward.md"};
  }
  std::vector<std::pair<std::string, Tensor>> inspect() const override { return {{"P", P}}; }

  TensorList backward(const Tensor& dY) override {
    const int64_t BT = dims.B * dims.T, D = dims.D;
    // forward: Y = O Wo^T + bo.  dO = dY Wo and dbo now; dWo = dY^T O after
    // the heads, which make O again when it was not kept.
    const bool recompute_O = !O.defined();
    Tensor O_used = recompute_O ? Tensor::empty({BT, D}) : O;  // (B*T, D)
    Tensor dO = Tensor::empty({BT, D});                        // (B*T, D)
    Tensor dWo = Tensor::empty({D, D});                        // (D, D)
    Tensor dbo = has_bias ? Tensor::empty({D}) : Tensor();     // (D)
    linear_backward(dY.data(), O_used, wo.data(), D, dO.data(), nullptr,
                    has_bias ? dbo.data() : nullptr);  // reads only O_used's shape

    // forward: attention_forward (P and O_h = P V_h for every head)
    //   dQ, dK, dV from dO and P, in the stacked layout of Q, K, V
    InputProjectionGrads dproj(in, dims);
    attention_backward(dproj.columns(D), recompute_O ? O_used.data() : nullptr, dO.data(), P.data(),
                       in.columns(D), dims);
    //   dWo = dY^T O   (D, B*T) x (B*T, D) -> (D, D)
    linear_backward(dY.data(), O_used, wo.data(), D, nullptr, dWo.data(), nullptr);

    // forward: project_inputs (Q, K, V from xq and xkv)
    //   dxq, dxkv, and dW, db for [Wq; Wk; Wv], [bq; bk; bv]
    InputGrads g =
        project_inputs_backward(dproj, in, xq, xkv, needs_grad(0), needs_grad(1), has_bias, D);
    // (D, D) each: the row blocks of d[Wq; Wk; Wv] (3D, D)
    Tensor dWq = g.dW.slice0(0, D), dWk = g.dW.slice0(D, 2 * D), dWv = g.dW.slice0(2 * D, 3 * D);
    if (has_bias) {
      // (D) each, of d[bq; bk; bv] (3D)
      Tensor dbq = g.db.slice0(0, D), dbk = g.db.slice0(D, 2 * D), dbv = g.db.slice0(2 * D, 3 * D);
      return {g.dxq, g.dxkv, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo};
    }
    return {g.dxq, g.dxkv, dWq, dWk, dWv, dWo};
  }
  void release_saved() override {
    xq = xkv = P = O = wo = Tensor();
    in = InputProjections();
  }
};

// ---- The public op ----------------------------------------------------------------------

namespace {

void check_mask(const AttentionMask& m, int64_t B, int64_t T, int64_t S) {
  if (!m.key_lengths.empty()) {
    if (static_cast<int64_t>(m.key_lengths.size()) != B)
      throw Error("attention: " + std::to_string(m.key_lengths.size()) +
                  " key lengths for a batch of " + std::to_string(B));
    for (int64_t b = 0; b < B; ++b)
      if (m.key_lengths[b] < 0 || m.key_lengths[b] > S)
        throw Error("attention: key length " + std::to_string(m.key_lengths[b]) + " of sequence " +
                    std::to_string(b) + " is outside [0, " + std::to_string(S) + "]");
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

// The sizes, after checking every shape; throws naming the op and the shapes.
AttentionSizes check_arguments(const Var& xq, const Var& xkv, const Var& wq, const Var& bq,
                               const Var& wk, const Var& bk, const Var& wv, const Var& bv,
                               const Var& wo, const Var& bo, int64_t heads) {
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
  if (bq.defined())
    for (const Var* b : {&bq, &bk, &bv, &bo})
      if (!b->defined() || b->shape() != Shape{D})
        throw Error("attention: every bias must be (" + std::to_string(D) + ")");
  return {B, T, S, D, heads, D / heads};
}

}  // namespace

Var multi_head_attention(const Var& xq, const Var& xkv, const Var& wq, const Var& bq, const Var& wk,
                         const Var& bk, const Var& wv, const Var& bv, const Var& wo, const Var& bo,
                         int64_t heads, const AttentionMask& mask, Tensor* probs_out) {
  const AttentionSizes dims = check_arguments(xq, xkv, wq, bq, wk, bk, wv, bv, wo, bo, heads);
  const int64_t B = dims.B, T = dims.T, S = dims.S, D = dims.D, H = dims.H;
  check_mask(mask, B, T, S);
  const bool has_bias = bq.defined();
  auto node = make_node<AttentionNode>();

  // Q, K, V  (B*T, D), (B*S, D), (B*S, D), stacked
  node->in = project_inputs(xq, xkv, xq.same_as(xkv), wq, bq, wk, bk, wv, bv, dims);
  // P = softmax(Q_h K_h^T / sqrt(d_k) + M),  O_h = P V_h   for every head
  Tensor P = Tensor::empty({B, H, T, S});  // (B,H,T,S)
  Tensor O = Tensor::empty({B * T, D});    // (B*T, D), head h in columns [h*d_k, (h+1)*d_k)
  attention_forward(P.data(), O.data(), node->in.columns(D), mask, dims);
  // Y = O Wo^T + bo   (B*T, D) x (D, D) -> (B, T, D)
  Tensor Y = Tensor::empty({B, T, D});  // (B,T,D)
  linear_forward(O, wo.data().data(), has_bias ? bo.data().data() : nullptr, D, Y.data());
  if (probs_out) *probs_out = P;

  // Save for backward (shared, not copied); O only if the memory policy keeps it.
  node->dims = dims;
  node->has_bias = has_bias;
  node->xq = xq.data();
  node->xkv = xkv.data();
  node->wo = wo.data();
  node->P = P;
  if (detail::keep_head_outputs(B, T, S, D, H)) node->O = O;
  if (has_bias) return make_result(Y, node, {xq, xkv, wq, bq, wk, bk, wv, bv, wo, bo});
  return make_result(Y, node, {xq, xkv, wq, wk, wv, wo});
}

// ---- The module -------------------------------------------------------------------------

MultiHeadAttention::MultiHeadAttention(int64_t d_model_, int64_t heads_, bool bias, Generator& g)
    : d_model(d_model_), heads(heads_), d_k(heads_ > 0 ? d_model_ / heads_ : 0) {
  if (heads <= 0 || d_model % heads != 0)
    throw Error("MultiHeadAttention: d_model " + std::to_string(d_model) + " is not divisible by " +
                std::to_string(heads) + " heads");
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
  Var y = multi_head_attention(xq, xkv, w_q->weight, w_q->bias, w_k->weight, w_k->bias, w_v->weight,
                               w_v->bias, w_o->weight, w_o->bias, heads, mask,
                               keep_attention_ ? &probs : nullptr);
  last_attention_ = keep_attention_ ? probs : Tensor();
  return y;
}

// ---- Machinery: the memory policy's test hook (nn/attention_internal.h) -----------------

namespace detail {

namespace {
thread_local HeadOutputs tl_forced_head_outputs = HeadOutputs::Auto;
}  // namespace

ForceHeadOutputs::ForceHeadOutputs(HeadOutputs policy) : previous_(tl_forced_head_outputs) {
  tl_forced_head_outputs = policy;
}
ForceHeadOutputs::~ForceHeadOutputs() { tl_forced_head_outputs = previous_; }

bool keep_head_outputs(int64_t B, int64_t T, int64_t S, int64_t d_model, int64_t heads) {
  if (tl_forced_head_outputs == HeadOutputs::Auto)
    return attention_keeps_head_outputs(B, T, S, d_model, heads);
  return tl_forced_head_outputs == HeadOutputs::Keep;
}

}  // namespace detail

}  // namespace qkv::nn
