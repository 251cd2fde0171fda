// The fused attention op's arguments (nn/attention.h): the masks and the
// sparse pattern, the kernels' names, and the checks that multi_head_attention
// (nn/attention.cpp) makes before any work: every shape, the mask, and the
// kernel that runs (Auto resolved by the memory budget, each kernel's limits).
// Each error is one line naming the op and the shapes.
#include <cmath>
#include <sstream>
#include <string>

#include "core/error.h"
#include "nn/attention_internal.h"
#include "nn/relative_bias.h"

namespace qkv::nn {

namespace {
// A real as the user would write it: 10000, 0.5 (not 10000.000000).
std::string number(real x) {
  std::ostringstream os;
  os << x;
  return os.str();
}
}  // namespace

// ---- Masks, kernels and patterns --------------------------------------------------------

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

bool SparsePattern::visible(int64_t i, int64_t j) const {
  if (std::abs(i - j) < window) return true;
  return global_every > 0 && (i % global_every == 0 || j % global_every == 0);
}

const char* to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::Standard:
      return "standard";
    case AttentionKernel::MemoryEfficient:
      return "memory-efficient";
    case AttentionKernel::Sparse:
      return "sparse";
    case AttentionKernel::Linear:
      return "linear";
    case AttentionKernel::Auto:
      return "auto";
  }
  return "?";
}

AttentionKernel attention_kernel_from_string(const std::string& s) {
  for (AttentionKernel k :
       {AttentionKernel::Standard, AttentionKernel::MemoryEfficient, AttentionKernel::Sparse,
        AttentionKernel::Linear, AttentionKernel::Auto})
    if (s == to_string(k)) return k;
  if (s == "flash") return AttentionKernel::MemoryEfficient;
  throw Error("attention: unknown kernel '" + brief(s) +
              "' (standard, memory-efficient or flash, sparse, linear, auto)");
}

// ---- The checks ------------------------------------------------------------------------

namespace detail {

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
AttentionSizes check_arguments(const Var& xq, const Var& xkv, const AttentionWeights& w,
                               int64_t heads, int64_t d_k_option, int64_t kv_heads) {
  const Shape& qs = xq.shape();
  const Shape& ks = xkv.shape();
  if (qs.size() != 3 || ks.size() != 3 || qs[0] != ks[0] || qs[2] != ks[2])
    throw Error("attention: query " + to_string(qs) + " and key/value " + to_string(ks) +
                ": expected (B,T,D) and (B,S,D) with the same B and D");
  const int64_t B = qs[0], T = qs[1], S = ks[1], D = qs[2];
  if (heads <= 0 || D % heads != 0)
    throw Error("attention: d_model " + std::to_string(D) + " is not divisible by " +
                std::to_string(heads) + " heads");
  if (d_k_option < 0)
    throw Error("attention: d_k " + std::to_string(d_k_option) + " is negative (0: D / heads)");
  if (kv_heads < 0 || kv_heads > heads)
    throw Error("attention: kv_heads " + std::to_string(kv_heads) + " is outside [1, heads " +
                std::to_string(heads) + "] (0: heads)");
  if (kv_heads > 0 && heads % kv_heads != 0)
    throw Error("attention: kv_heads " + std::to_string(kv_heads) + " does not divide heads " +
                std::to_string(heads));
  const int64_t d_v = D / heads, d_k = d_k_option > 0 ? d_k_option : d_v, E = heads * d_k;
  const int64_t K = kv_heads > 0 ? kv_heads : heads, Ek = K * d_k, Dv = K * d_v;
  // wq (H*d_k, D), wk (K*d_k, D), wv (K*d_v, D), wo (D, D) (K = H: wk (H*d_k,
  // D), wv (D, D)). wv and wo first: they tell an input of the wrong width D
  // from a d_k that disagrees with wq, wk.
  const char* names[4] = {"wq", "wk", "wv", "wo"};
  const Var* ws[4] = {&w.wq, &w.wk, &w.wv, &w.wo};
  const int64_t all_rows[4] = {E, Ek, Dv, D};
  auto rule = [&](int i) {
    if (K == heads)
      return std::string(i < 2 ? ": (H*d_k, D) with d_k " + std::to_string(d_k) : ": (D, D)");
    const char* r[4] = {": (H*d_k, D) with d_k ", ": (K*d_k, D) with d_k ",
                        ": (K*d_v, D) with d_v ", ": (D, D)"};
    return r[i] + (i < 3 ? std::to_string(i < 2 ? d_k : d_v) + ", K " + std::to_string(K) : "");
  };
  for (int i : {2, 3, 0, 1}) {
    const int64_t rows = all_rows[i];
    if (!ws[i]->defined() || ws[i]->shape() != Shape{rows, D})
      throw Error("attention: weight " +
                  (ws[i]->defined() ? to_string(ws[i]->shape()) : std::string("undefined")) +
                  " should be (" + std::to_string(rows) + "," + std::to_string(D) + ") (" +
                  names[i] + rule(i) + ")");
  }
  if (w.bq.defined()) {
    const Var* bs[4] = {&w.bq, &w.bk, &w.bv, &w.bo};
    for (int i = 0; i < 4; ++i) {
      const int64_t n = all_rows[i];
      if (!bs[i]->defined() || bs[i]->shape() != Shape{n})
        throw Error(std::string("attention: bias b") + (names[i] + 1) + " " +
                    (bs[i]->defined() ? to_string(bs[i]->shape()) : std::string("undefined")) +
                    " should be (" + std::to_string(n) +
                    (K == heads ? ") (biases: all undefined, or bq, bk (H*d_k) and bv, bo (D))"
                                : ") (biases: all undefined, or bq (H*d_k), bk (K*d_k), bv "
                                  "(K*d_v) and bo (D))"));
    }
  }
  AttentionSizes d{B, T, S, D, heads, d_k, d_v};
  d.Hkv = K;
  return d;
}

void check_rope(const AttentionOptions& o, const AttentionSizes& d, bool self) {
  if (o.rope_base == 0) return;
  if (!(o.rope_base > 1))
    throw Error("attention: rope_base " + number(o.rope_base) + " must be > 1 (0: no rotation)");
  if (!self)
    throw Error("attention: rope_base " + number(o.rope_base) +
                " needs self-attention (xq and xkv one tensor); cross-attention takes no rotation");
  if (d.d_k % 2 != 0)
    throw Error("attention: rope needs an even head size d_k, got d_k " + std::to_string(d.d_k) +
                " (rope_base " + number(o.rope_base) + ")");
  if (o.rope_pos0 < 0)
    throw Error("attention: rope_pos0 " + std::to_string(o.rope_pos0) + " is negative");
}

void check_relative(const AttentionOptions& o, const AttentionSizes& d, AttentionKernel k) {
  if (!o.rel_bias.defined()) return;
  const Shape& s = o.rel_bias.shape();
  if (s.size() != 2 || s[0] != d.H)
    throw Error("attention: relative bias table " + to_string(s) +
                " should be (H, buckets) with H " + std::to_string(d.H));
  check_relative_bias("attention", s[1], o.rel_max_distance, o.rel_bidirectional);
  if (o.rel_pos0 < 0)
    throw Error("attention: rel_pos0 " + std::to_string(o.rel_pos0) + " is negative");
  if (k != AttentionKernel::Standard && k != AttentionKernel::MemoryEfficient)
    throw Error(std::string("attention: the ") + to_string(k) +
                " kernel takes no relative position bias; the standard and memory-efficient "
                "kernels do");
}

// The kernel that runs: Auto resolved by the budget, and each kernel's
// limits checked (one line naming the op, the kernel and the shapes).
AttentionKernel choose_kernel(const AttentionOptions& o, const AttentionSizes& d) {
  // (made only when throwing: a steady-state step allocates nothing)
  auto shapes = [&] {
    return " (B,H,T,S) = (" + std::to_string(d.B) + "," + std::to_string(d.H) + "," +
           std::to_string(d.T) + "," + std::to_string(d.S) + ")";
  };
  if (o.memory_budget < 0)
    throw Error("attention: negative memory budget " + std::to_string(o.memory_budget));
  const int64_t p_bytes = d.B * d.H * d.T * d.S * static_cast<int64_t>(sizeof(real));
  AttentionKernel k = o.kernel;
  if (k == AttentionKernel::Auto)
    k = (o.memory_budget == 0 || p_bytes <= o.memory_budget) ? AttentionKernel::Standard
                                                             : AttentionKernel::MemoryEfficient;
  if (o.keep_probs && k != AttentionKernel::Standard)
    throw Error(std::string("attention: keep_probs needs the standard kernel, not ") +
                to_string(k));
  if (k == AttentionKernel::MemoryEfficient && o.memory_budget > 0 &&
      o.memory_budget < detail::kBlockBytes)
    throw Error("attention: a memory budget of " + std::to_string(o.memory_budget) +
                " bytes cannot hold one (" + std::to_string(detail::kQueryBlock) + "," +
                std::to_string(detail::kKeyBlock) + ") block of scores and gradients (" +
                std::to_string(detail::kBlockBytes) + " bytes)" + shapes());
  if (k == AttentionKernel::Sparse || k == AttentionKernel::Linear) {
    if (d.Hkv != d.H)
      throw Error(std::string("attention: the ") + to_string(k) +
                  " kernel takes no grouped-query " + "attention (kv_heads " +
                  std::to_string(d.Hkv) + " != heads " + std::to_string(d.H) +
                  "); the standard and memory-efficient kernels do");
    if (o.rope_base != 0)
      throw Error(std::string("attention: the ") + to_string(k) + " kernel takes no rotary " +
                  "positions (rope_base " + number(o.rope_base) +
                  "); the standard and memory-efficient kernels do");
    if (o.mask.mask.defined())
      throw Error(std::string("attention: the ") + to_string(k) +
                  " kernel takes causal and padding masks, not a mask tensor of shape " +
                  to_string(o.mask.mask.shape()));
  }
  if (k == AttentionKernel::Sparse) {
    const SparsePattern& p = o.sparse;
    if (p.window < 1 || p.window > d.S)
      throw Error("attention: sparse window " + std::to_string(p.window) +
                  " is outside [1, S] for" + shapes());
    if (p.global_every < 0)
      throw Error("attention: sparse global_every " + std::to_string(p.global_every) +
                  " is negative");
  }
  if (k == AttentionKernel::Linear && o.mask.causal && d.T != d.S)
    throw Error("attention: causal linear attention needs T == S," + shapes());
  return k;
}

}  // namespace detail

}  // namespace qkv::nn
