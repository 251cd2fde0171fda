#include "generation/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/blas.h"
#include "core/error.h"
#include "core/parallel.h"
#include "autograd/ops.h"
#include "core/reduce.h"
#include "nn/stacked.h"
#include "nn/sublayer.h"

namespace qkv::nn {

// ---- the cache -------------------------------------------------------------------------
KVCache::KVCache(int64_t layers, int64_t rows, int64_t capacity, int64_t d_model, int64_t key_width)
    : rows_(rows), capacity_(capacity), width_(d_model + (key_width > 0 ? key_width : d_model)) {
  if (layers < 0 || rows < 0 || capacity < 1 || d_model < 1 || key_width < 0)
    throw Error(
        "KVCache: need layers >= 0, rows >= 0, capacity >= 1, d_model >= 1 and key_width >= 0, "
        "got " +
        std::to_string(layers) + ", " + std::to_string(rows) + ", " + std::to_string(capacity) +
        ", " + std::to_string(d_model) + ", " + std::to_string(key_width));
  for (int64_t l = 0; l < layers; ++l) self_kv.push_back(Tensor::empty({rows, capacity, width_}));
}

void KVCache::reorder(const std::vector<int64_t>& from) {
  for (int64_t f : from)
    if (f < 0 || f >= rows_)
      throw Error("KVCache::reorder: row " + std::to_string(f) + " outside [0, " +
                  std::to_string(rows_) + ")");
  const int64_t R = static_cast<int64_t>(from.size()), W = width_;
  for (Tensor& kv : self_kv) {
    Tensor moved = Tensor::empty({R, capacity_, W});  // pooled: steady-state reorders reuse blocks
    for (int64_t r = 0; r < R; ++r) {
      const real* src = kv.data() + from[r] * capacity_ * W;
      std::copy(src, src + len_ * W, moved.data() + r * capacity_ * W);  // positions [0, len)
    }
    kv = moved;
  }
  if (!memory_row.empty()) {
    std::vector<int64_t> rows(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) rows[r] = memory_row[from[r]];
    memory_row.swap(rows);
  }
  rows_ = R;
}

namespace {

// Attention of n new queries per row over that row's keys, all heads:
//   O[r, i, head h] = softmax(scale q_h K_h^T + mask) V_h
// q (R*n, ldq), head h in columns [h*d_k, (h+1)*d_k). Row r's keys and values
// are L rows of stride E + D (E = H*d_k, D = H*d_v) at kv + kv_row(r) * kv_stride:
// K in columns [0, E), V in [E, E + D). Query i of row r sees keys
// j < visible(r, i). O (R*n, D), head h in columns [h*d_v, (h+1)*d_v).
template <class KvRow, class Visible>
void attend(const real* q, int64_t ldq, const real* kv, int64_t kv_stride, KvRow kv_row,
            Visible visible, int64_t R, int64_t n, int64_t L, int64_t H, int64_t dk, int64_t dv,
            real a_scale, real* O) {
  const int64_t E = H * dk, D = H * dv, ldkv = E + D;
  // The module's scale (0: the paper's 1/sqrt(d_k)).
  const real scale = a_scale > 0 ? a_scale : real(1) / std::sqrt(static_cast<real>(dk));
  const real neg_inf = -std::numeric_limits<real>::infinity();
  Tensor P = Tensor::empty({R * H, n, L});  // scores, then probabilities
  parallel_for(
      R * H,
      [&](int64_t p0, int64_t p1) {
        for (int64_t rh = p0; rh < p1; ++rh) {
          const int64_t r = rh / H, h = rh % H;
          real* Pr = P.data() + rh * n * L;                          // (n, L)
          const real* Kr = kv + kv_row(r) * kv_stride + h * dk;      // (L, d_k), ld E+D
          const real* Vr = kv + kv_row(r) * kv_stride + E + h * dv;  // (L, d_v), ld E+D
          const real* Qr = q + r * n * ldq + h * dk;                 // (n, d_k), ld ldq
          // scores = scale Q_h K_h^T   (n, d_k) x (d_k, L) -> (n, L)
          gemm(false, true, n, L, dk, scale, Qr, ldq, Kr, ldkv, 0, Pr, L);
          for (int64_t i = 0; i < n; ++i) {
            const int64_t vis = std::max<int64_t>(0, std::min(L, visible(r, i)));
            for (int64_t j = vis; j < L; ++j) Pr[i * L + j] = neg_inf;
          }
          softmax_rows(Pr, n, L);  // a row with no visible key becomes zeros
          // O_h = P V_h   (n, L) x (L, d_v) -> (n, d_v), into its head's columns
          gemm(false, false, n, dv, L, 1, Pr, L, Vr, ldkv, 0, O + r * n * D + h * dv, D);
        }
      },
      std::max<int64_t>(2, grain_for(n * L * (dk + dv))));
}

// Self-attention of x (R, n, D), the positions [t0, t0 + n), with the cached
// keys and values of [0, t0): appends the new ones to kv (R, capacity, E + D).
Tensor self_attention_step(MultiHeadAttention& a, const Tensor& x, Tensor& kv, int64_t t0) {
  const int64_t R = x.size(0), n = x.size(1), D = a.d_model, E = a.heads * a.d_k, cap = kv.size(1);
  const int64_t W3 = 2 * E + D;  // the width of [Q | K | V]
  Tensor wscratch, bscratch;
  const bool bias = a.w_q->bias.defined();
  const real* W =
      stacked({&a.w_q->weight.data(), &a.w_k->weight.data(), &a.w_v->weight.data()}, wscratch);
  const real* b =
      bias ? stacked({&a.w_q->bias.data(), &a.w_k->bias.data(), &a.w_v->bias.data()}, bscratch)
           : nullptr;
  Tensor QKV = Tensor::empty({R * n, W3});
  linear_forward(x, W, b, W3, QKV.data());  // (R*n, D) x (D, 2E+D) -> (R*n, 2E+D)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const real* src = QKV.data() + (r * n + i) * W3 + E;  // [K | V] of the new position
      std::copy(src, src + E + D, kv.data() + (r * cap + t0 + i) * (E + D));
    }
  Tensor O = Tensor::empty({R * n, D});
  attend(
      QKV.data(), W3, kv.data(), cap * (E + D), [](int64_t r) { return r; },
      [t0](int64_t, int64_t i) { return t0 + i + 1; },  // causal: query t0+i sees keys [0, t0+i]
      R, n, t0 + n, a.heads, a.d_k, a.d_v, a.scale, O.data());
  Tensor Y = Tensor::empty({R, n, D});
  linear_forward(O, a.w_o->weight.data().data(), bias ? a.w_o->bias.data().data() : nullptr, D,
                 Y.data());
  return Y;
}

// Cross-attention of x (R, n, D) over the encoder memory's cached [K | V].
Tensor cross_attention_step(MultiHeadAttention& a, const Tensor& x, const Tensor& mem_kv,
                            const KVCache& c) {
  const int64_t R = x.size(0), n = x.size(1), D = a.d_model, E = a.heads * a.d_k;
  const int64_t S = mem_kv.size(1);
  const bool bias = a.w_q->bias.defined();
  Tensor Q = Tensor::empty({R * n, E});  // (R*n, D) x (D, E) -> (R*n, E)
  linear_forward(x, a.w_q->weight.data().data(), bias ? a.w_q->bias.data().data() : nullptr, E,
                 Q.data());
  Tensor O = Tensor::empty({R * n, D});
  const int64_t* mrow = c.memory_row.data();
  const int64_t* mlen = c.memory_lengths.data();
  attend(
      Q.data(), E, mem_kv.data(), S * (E + D), [mrow](int64_t r) { return mrow[r]; },
      [mrow, mlen](int64_t r, int64_t) { return mlen[mrow[r]]; },  // source padding
      R, n, S, a.heads, a.d_k, a.d_v, a.scale, O.data());
  Tensor Y = Tensor::empty({R, n, D});
  linear_forward(O, a.w_o->weight.data().data(), bias ? a.w_o->bias.data().data() : nullptr, D,
                 Y.data());
  return Y;
}

void check_step(const char* op, const KVCache& c, const std::vector<int64_t>& ids, int64_t n,
                size_t layers) {
  if (c.self_kv.size() != layers)
    throw Error(std::string(op) + ": cache has " + std::to_string(c.self_kv.size()) +
                " layers, the model " + std::to_string(layers) +
                " (make it with the model's start function)");
  if (n < 1 || static_cast<int64_t>(ids.size()) != c.rows() * n)
    throw Error(std::string(op) + ": " + std::to_string(ids.size()) + " ids for (rows, n) = (" +
                std::to_string(c.rows()) + "," + std::to_string(n) + ")");
  if (c.length() + n > c.capacity())
    throw Error(std::string(op) + ": positions [" + std::to_string(c.length()) + ", " +
                std::to_string(c.length() + n) + ") past the cache capacity " +
                std::to_string(c.capacity()));
}

// x (R, n, D) += table rows [t0, t0 + n) of a (L, D) position table.
void add_position_rows(Tensor& x, const Tensor& table, int64_t t0) {
  const int64_t R = x.size(0), n = x.size(1), D = x.size(2);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) {
      real* xr = x.data() + (r * n + i) * D;
      const real* pr = table.data() + (t0 + i) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) xr[j] += pr[j];
    }
}

}  // namespace

// ---- encoder-decoder -----------------------------------------------------------------------
// The cache computes softmax attention over every cached key: exact for the
// standard and memory-efficient kernels, not for sparse or linear attention.
static void check_cacheable(const AttentionSettings& c, const char* op) {
  if (!c.cacheable())
    throw Error(std::string(op) +
                ": the key/value cache computes softmax attention over every "
                "cached key, not this model's " +
                to_string(c.attention) +
                " attention; decode without the cache (DecodeOptions::use_cache = false, "
                "nn::answer does)");
}

KVCache start_decoding(Seq2SeqTransformer& model, const Tokens& src, int64_t capacity,
                       int64_t rows_per_source) {
  src.check("start_decoding");
  check_cacheable(model.cfg, "start_decoding");
  if (rows_per_source < 1)
    throw Error("start_decoding: rows_per_source must be >= 1, got " +
                std::to_string(rows_per_source));
  if (model.tgt_pos && capacity > model.cfg.max_positions)
    throw Error("start_decoding: capacity " + std::to_string(capacity) +
                " exceeds the learned position table (max_positions " +
                std::to_string(model.cfg.max_positions) + ")");
  NoGradGuard no_grad;
  const int64_t B = src.batch, S = src.len, D = model.cfg.d_model;
  const auto& layers = model.decoder->layers;
  const int64_t E = layers.empty() ? D : layers[0]->self_attn->heads * layers[0]->self_attn->d_k;
  KVCache c(static_cast<int64_t>(layers.size()), B * rows_per_source, capacity, D, E);
  Tensor memory = model.encode(src).data();  // (B, S, D)
  for (auto& layer : layers) {
    MultiHeadAttention& a = *layer->cross_attn;
    const int64_t Ec = a.heads * a.d_k;  // the cross-attention's key width
    Tensor wscratch, bscratch;
    const bool bias = a.w_k->bias.defined();
    const real* W = stacked({&a.w_k->weight.data(), &a.w_v->weight.data()}, wscratch);
    const real* b = bias ? stacked({&a.w_k->bias.data(), &a.w_v->bias.data()}, bscratch) : nullptr;
    Tensor kv = Tensor::empty({B, S, Ec + D});
    linear_forward(memory, W, b, Ec + D, kv.data());  // (B*S, D) x (D, E+D) -> (B*S, E+D)
    c.memory_kv.push_back(kv);
  }
  c.memory_lengths = src.full_lengths();
  c.memory_row.resize(static_cast<size_t>(B * rows_per_source));
  for (int64_t r = 0; r < B * rows_per_source; ++r) c.memory_row[r] = r / rows_per_source;
  return c;
}

Tensor decode_step(Seq2SeqTransformer& model, KVCache& cache, const std::vector<int64_t>& ids,
                   int64_t n) {
  auto& layers = model.decoder->layers;
  check_step("decode_step", cache, ids, n, layers.size());
  if (cache.memory_kv.size() != layers.size() ||
      static_cast<int64_t>(cache.memory_row.size()) != cache.rows())
    throw Error("decode_step: the cache holds no encoder memory (make it with start_decoding)");
  NoGradGuard no_grad;
  const int64_t R = cache.rows(), t0 = cache.length(), D = model.cfg.d_model;
  // (R, n) ids -> (R, n, D): embedding * sqrt(D) + positions [t0, t0 + n), dropout
  Tensor x =
      embedding(model.tgt_embed->weight, ids, {R, n}, std::sqrt(static_cast<real>(D))).data();
  add_position_rows(x, model.tgt_pos ? model.tgt_pos->weight.data() : model.sin_pos->table(t0 + n),
                    t0);
  Var y = model.tgt_drop->forward(Var(x));
  for (size_t l = 0; l < layers.size(); ++l) {
    DecoderLayer& L = *layers[l];
    y = sublayer(y, *L.norm1, *L.drop1, L.pre_norm, [&](const Var& v) {
      return Var(self_attention_step(*L.self_attn, v.data(), cache.self_kv[l], t0));
    });
    y = sublayer(y, *L.norm2, *L.drop2, L.pre_norm, [&](const Var& v) {
      return Var(cross_attention_step(*L.cross_attn, v.data(), cache.memory_kv[l], cache));
    });
    y = sublayer(y, *L.norm3, *L.drop3, L.pre_norm,
                 [&](const Var& v) { return L.ffn->forward(v); });
  }
  if (model.decoder->norm) y = model.decoder->norm->forward(y);
  cache.advance(n);
  return linear(y, model.lm_head->weight, model.lm_head->bias).data();  // (R, n, V)
}

// ---- decoder-only (GPT) --------------------------------------------------------------------
KVCache start_generation(GPT& model, int64_t rows, int64_t capacity) {
  check_cacheable(model.cfg, "start_generation");
  if (capacity > model.cfg.max_positions)
    throw Error("start_generation: capacity " + std::to_string(capacity) +
                " exceeds the position table (max_positions " +
                std::to_string(model.cfg.max_positions) + ")");
  const int64_t E = model.layers.empty()
                        ? 0
                        : model.layers[0]->self_attn->heads * model.layers[0]->self_attn->d_k;
  return KVCache(static_cast<int64_t>(model.layers.size()), rows, capacity, model.cfg.d_model, E);
}

Tensor forward_step(GPT& model, KVCache& cache, const std::vector<int64_t>& ids, int64_t n) {
  check_step("forward_step", cache, ids, n, model.layers.size());
  NoGradGuard no_grad;
  const int64_t R = cache.rows(), t0 = cache.length();
  // (R, n) -> (R, n, D): token + learned position embeddings of [t0, t0 + n)
  Tensor e = embedding(model.tok_embed->weight, ids, {R, n}).data();
  add_position_rows(e, model.pos_embed->weight.data(), t0);
  Var x = model.drop->forward(Var(e));
  for (size_t l = 0; l < model.layers.size(); ++l) {
    EncoderLayer& L = *model.layers[l];
    x = sublayer(x, *L.norm1, *L.drop1, L.pre_norm, [&](const Var& v) {
      return Var(self_attention_step(*L.self_attn, v.data(), cache.self_kv[l], t0));
    });
    x = sublayer(x, *L.norm2, *L.drop2, L.pre_norm,
                 [&](const Var& v) { return L.ffn->forward(v); });
  }
  if (model.norm) x = model.norm->forward(x);
  cache.advance(n);
  return linear(x, model.lm_head ? model.lm_head->weight : model.tok_embed->weight)
      .data();  // (R, n, V)
}

}  // namespace qkv::nn
