// The sparse heads' kernel of the fused attention op: softmax attention in
// which query i sees key j only when SparsePattern::visible(i, j) (a local
// window of w positions either side, or on one side with a causal mask, plus
// global positions every g, Longformer / BigBird) and the mask lets it.
// Equal to the standard kernel with those keys masked, but computed only
// over the keys a query may see, on the blocks' engine of the memory-efficient
// kernel (nn/attention_blocks.cpp), so its cost per head is
//   band pass:    T query rows x (w + 64 + w + T/g) keys
//   global pass:  T/g query rows x S keys
// that is O(T (w + T/g)), not O(T S). Nothing (T, S) is ever held.
//
// The keys a (non-global) query block reads come in two runs, disjoint:
//   the band    positions [t0 - w + 1, t0 + n - 1 + w) (n = kBandBlock rows), the global ones
//   skipped the globals positions 0, g, 2g, ..., read in place with row stride g*ld
// and the global queries (rows 0, g, 2g, ...), hidden in the band pass, see
// every key in a pass of their own. The forward and backward maths per block
// are the memory-efficient kernel's: docs/long-sequences.md.
#include <algorithm>

#include "core/parallel.h"
#include "core/thread_scratch.h"
#include "nn/attention_internal.h"

namespace qkv::nn::detail {

namespace {

// Query rows per block of the band pass: its band holds n + 2w - 2 keys of
// which a row sees 2w - 1, so shorter blocks waste less (at most kQueryBlock).
constexpr int64_t kBandBlock = 64;
static_assert(kBandBlock <= kQueryBlock, "the engine holds kQueryBlock rows");

// Runs one head's two passes; `backward` picks query_block_backward.
void sparse_head(bool backward, const QKVGradColumns* grad, const real* dO, real* O, real* lse,
                 const QKVColumns& in, const AttentionMask& mask, const SparsePattern& p,
                 const AttentionSizes& d, real scale, int64_t b, int64_t h, real* scratch) {
  const int64_t T = d.T, S = d.S, D = d.D, dk = d.d_k, dv = d.d_v, w = p.window, g = p.global_every;
  const real* Kh = in.K + b * S * in.ldkv + h * dk;  // (S, d_k), row stride ldkv
  const real* Vh = in.V + b * S * in.ldkv + h * dv;  // (S, d_v), row stride ldkv
  real* dKh = grad ? grad->dK + b * S * grad->ldkv + h * dk : nullptr;
  real* dVh = grad ? grad->dV + b * S * grad->ldkv + h * dv : nullptr;
  const int64_t ldg = grad ? grad->ldkv : 0;
  RowLimits lim{S, mask.key_lengths.empty() ? S : mask.key_lengths[b], mask.causal, nullptr};
  auto run_block = [&](const QueryRun& q, const KeyRun* keys, int64_t n) {
    if (backward)
      query_block_backward(q, keys, n, lim, dk, dv, scale, scratch);
    else
      query_block_forward(q, keys, n, lim, dk, dv, scale, scratch);
  };
  // A query run of n rows from position first, every step-th row.
  auto query_run = [&](int64_t first, int64_t step, int64_t n, int64_t hide_every) {
    QueryRun q{};
    q.Q = in.Q + (b * T + first) * in.ldq + h * dk;
    q.O = O + (b * T + first) * D + h * dv;
    q.dO = dO ? dO + (b * T + first) * D + h * dv : nullptr;
    q.dQ = grad ? grad->dQ + (b * T + first) * grad->ldq + h * dk : nullptr;
    q.lse = lse + (b * d.H + h) * T + first;
    q.n = n;
    q.ldq = in.ldq * step;
    q.ldo = D * step;
    q.ldg = grad ? grad->ldq * step : 0;
    q.first = first;
    q.step = step;
    q.hide_every = hide_every;
    return q;
  };
  // A key run of n keys from position first, every step-th key.
  auto key_run = [&](int64_t first, int64_t step, int64_t n, int64_t window, int64_t skip) {
    return KeyRun{Kh + first * in.ldkv,
                  Vh + first * in.ldkv,
                  dKh ? dKh + first * ldg : nullptr,
                  dVh ? dVh + first * ldg : nullptr,
                  n,
                  in.ldkv * step,
                  ldg * step,
                  first,
                  step,
                  window,
                  skip};
  };
  // The band pass: every query block against its band and the global keys.
  for (int64_t t0 = 0; t0 < T; t0 += kBandBlock) {
    const int64_t n = std::min(kBandBlock, T - t0);
    const int64_t lo = std::clamp<int64_t>(t0 - w + 1, 0, S);
    const int64_t hi = std::clamp<int64_t>(t0 + n - 1 + w, lo, S);
    KeyRun keys[2] = {key_run(lo, 1, hi - lo, w, g),
                      key_run(0, g, g > 0 ? (S + g - 1) / g : 0, 0, 0)};
    run_block(query_run(t0, 1, n, g), keys, g > 0 ? 2 : 1);
  }
  // The global pass: rows 0, g, 2g, ... against every key.
  if (g > 0) {
    const int64_t rows = (T + g - 1) / g;
    KeyRun all = key_run(0, 1, S, 0, 0);
    for (int64_t r0 = 0; r0 < rows; r0 += kQueryBlock)
      run_block(query_run(r0 * g, g, std::min(kQueryBlock, rows - r0), 0), &all, 1);
  }
}

}  // namespace

void sparse_forward(real* lse, real* O, const QKVColumns& in, const AttentionMask& mask,
                    const SparsePattern& pattern, const AttentionSizes& d, real scale) {
  ThreadScratch scratch(blockwise_scratch_size(d.d_k, d.d_v));
  parallel_for(
      d.B * d.H,
      [&](int64_t bh0, int64_t bh1) {
        for (int64_t bh = bh0; bh < bh1; ++bh)
          sparse_head(false, nullptr, nullptr, O, lse, in, mask, pattern, d, scale, bh / d.H,
                      bh % d.H, scratch.mine());
      },
      /*grain=*/1);
}

void sparse_backward(const QKVGradColumns& grad, const real* dO, const real* O, const real* lse,
                     const QKVColumns& in, const AttentionMask& mask, const SparsePattern& pattern,
                     const AttentionSizes& d, real scale) {
  ThreadScratch scratch(blockwise_scratch_size(d.d_k, d.d_v));
  parallel_for(
      d.B * d.H,
      [&](int64_t bh0, int64_t bh1) {
        for (int64_t bh = bh0; bh < bh1; ++bh) {
          zero_head_grads(grad, d, bh / d.H, bh % d.H);
          sparse_head(true, &grad, dO, const_cast<real*>(O), const_cast<real*>(lse), in, mask,
                      pattern, d, scale, bh / d.H, bh % d.H, scratch.mine());
        }
      },
      /*grain=*/1);
}

}  // namespace qkv::nn::detail
