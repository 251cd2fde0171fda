// Causal linear attention, cached as the RNN it is (Katharopoulos et al.
// 2020, "Transformers are RNNs"). The full kernel
// (nn/attention_linear.cpp) computes, per row and head, for query position t
//   O_t = phi(q_t)^T S_t / (phi(q_t) . z_t),
//   S_t = sum_{j <= t} phi(k_j) v_j^T   (d_k, d_v),   z_t = sum_{j <= t} phi(k_j)   (d_k),
// phi = elu + 1 (nn::detail::linear_feature). S_t and z_t are all a later query
// needs of the positions up to t, so the cache keeps them instead of the keys
// and values: per layer, per row, per head one (d_k, d_v) matrix and one
// (d_k) vector (KVCache::linear_kv, linear_z), whatever the length. Each new
// position costs O(d_k d_v) per head:
//   S += phi(k_t) v_t^T,  z += phi(k_t)      (the key joins first: j <= t)
//   O_t = phi(q_t)^T S / (phi(q_t) . z)      (0 when the denominator is 0, as
//                                             the full kernel's divide_rows)
// The full kernel sums the same terms in another order (chunks of 64 rows),
// so the two agree to rounding: tests/decode_kernel_tests.h.
#include <algorithm>

#include "core/parallel.h"
#include "core/thread_scratch.h"
#include "generation/kv_cache_attention.h"
#include "nn/attention_internal.h"

namespace qkv::nn::kv_cache_detail {

void linear_attention_step(const real* QKV, int64_t ld, Tensor& S, Tensor& z, int64_t R, int64_t n,
                           int64_t H, int64_t dk, int64_t dv, real* O) {
  const int64_t E = H * dk, D = H * dv;
  ThreadScratch scratch(2 * dk);  // phi(q_t), phi(k_t) per thread
  parallel_for(
      R * H,
      [&](int64_t p0, int64_t p1) {
        real* qf = scratch.mine();  // (d_k)
        real* kf = qf + dk;         // (d_k)
        for (int64_t rh = p0; rh < p1; ++rh) {
          const int64_t r = rh / H, h = rh % H;
          real* Sr = S.data() + rh * dk * dv;  // (d_k, d_v) of row r, head h
          real* zr = z.data() + rh * dk;       // (d_k)
          for (int64_t i = 0; i < n; ++i) {    // positions in order: each sees those before
            const real* row = QKV + (r * n + i) * ld;
            const real* q = row + h * dk;          // (d_k)
            const real* k = row + E + h * dk;      // (d_k)
            const real* v = row + 2 * E + h * dv;  // (d_v)
            for (int64_t c = 0; c < dk; ++c) {
              qf[c] = nn::detail::linear_feature(q[c]);
              kf[c] = nn::detail::linear_feature(k[c]);
            }
            // S += phi(k) v^T   (d_k, 1) x (1, d_v);   z += phi(k)
            for (int64_t c = 0; c < dk; ++c) {
              zr[c] += kf[c];
              real* Sc = Sr + c * dv;
              for (int64_t e = 0; e < dv; ++e) Sc[e] += kf[c] * v[e];
            }
            // num = phi(q)^T S   (1, d_k) x (d_k, d_v);   den = phi(q) . z
            real* o = O + (r * n + i) * D + h * dv;  // (d_v), head h's columns
            std::fill(o, o + dv, real(0));
            real den = 0;
            for (int64_t c = 0; c < dk; ++c) {
              den += qf[c] * zr[c];
              const real* Sc = Sr + c * dv;
              for (int64_t e = 0; e < dv; ++e) o[e] += qf[c] * Sc[e];
            }
            const real inv = den > 0 ? 1 / den : 0;
            for (int64_t e = 0; e < dv; ++e) o[e] *= inv;
          }
        }
      },
      std::max<int64_t>(2, grain_for(n * dk * dv * 2)));
}

}  // namespace qkv::nn::kv_cache_detail
