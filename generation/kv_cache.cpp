// The key/value cache (generation/kv_cache.h): the cache itself, its checks,
// and the model steps, which run each layer as the training forward does but
// over the new positions only. The attention steps are in
// generation/kv_cache_attention.cpp (softmax kernels, sparse included) and
// generation/kv_cache_linear.cpp (linear attention's running sums).
#include "generation/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "core/error.h"
#include "generation/kv_cache_attention.h"
#include "nn/stacked.h"
#include "nn/sublayer.h"

namespace qkv::nn {

using kv_cache_detail::cross_attention_step;
using kv_cache_detail::self_attention_step;

// ---- the cache -------------------------------------------------------------------------
namespace {

void check_sizes(int64_t rows, int64_t capacity) {
  if (rows < 0 || capacity < 1)
    throw Error("KVCache: need rows >= 0 and capacity >= 1, got " + std::to_string(rows) + ", " +
                std::to_string(capacity));
}

// t (rows, ...) -> (R, ...): new row r is old row from[r], of which the first
// `used` numbers are copied (the rest of a row is unused space).
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& from, int64_t used) {
  Shape s = t.shape();
  int64_t per_row = 1;  // numbers per row
  for (size_t d = 1; d < s.size(); ++d) per_row *= s[d];
  s[0] = static_cast<int64_t>(from.size());
  Tensor moved = Tensor::empty(s);  // pooled: steady-state reorders reuse blocks
  for (size_t r = 0; r < from.size(); ++r) {
    const real* src = t.data() + from[r] * per_row;
    std::copy(src, src + used, moved.data() + static_cast<int64_t>(r) * per_row);
  }
  return moved;
}

}  // namespace

KVCache::KVCache(const std::vector<const MultiHeadAttention*>& self_attention, int64_t rows,
                 int64_t capacity)
    : rows_(rows), capacity_(capacity) {
  check_sizes(rows, capacity);
  for (const MultiHeadAttention* a : self_attention) {
    const int64_t H = a->heads, dk = a->d_k, dv = a->d_v;  // linear: kv_heads == heads
    if (a->kernel == AttentionKernel::Linear) {
      self_kv.emplace_back();
      linear_kv.push_back(Tensor::zeros({rows, H, dk, dv}));  // S = 0: no position yet
      linear_z.push_back(Tensor::zeros({rows, H, dk}));       // z = 0
    } else {
      // [K | V] of a->kv_heads key/value heads: (K*d_k + K*d_v) per position,
      // K/H of the full heads' E + D under grouped-query attention
      self_kv.push_back(Tensor::empty({rows, capacity, a->kv_heads * (dk + dv)}));
      linear_kv.emplace_back();
      linear_z.emplace_back();
    }
  }
}

KVCache::KVCache(int64_t layers, int64_t rows, int64_t capacity, int64_t d_model, int64_t key_width)
    : rows_(rows), capacity_(capacity) {
  if (layers < 0 || d_model < 1 || key_width < 0)
    throw Error("KVCache: need layers >= 0, d_model >= 1 and key_width >= 0, got " +
                std::to_string(layers) + ", " + std::to_string(d_model) + ", " +
                std::to_string(key_width));
  check_sizes(rows, capacity);
  const int64_t width = d_model + (key_width > 0 ? key_width : d_model);
  for (int64_t l = 0; l < layers; ++l) self_kv.push_back(Tensor::empty({rows, capacity, width}));
  linear_kv.resize(self_kv.size());
  linear_z.resize(self_kv.size());
}

void KVCache::reorder(const std::vector<int64_t>& from) {
  for (int64_t f : from)
    if (f < 0 || f >= rows_)
      throw Error("KVCache::reorder: row " + std::to_string(f) + " outside [0, " +
                  std::to_string(rows_) + ")");
  for (Tensor& kv : self_kv)
    if (kv.defined()) kv = gather_rows(kv, from, len_ * kv.size(2));  // positions [0, len)
  for (std::vector<Tensor>* sums : {&linear_kv, &linear_z})
    for (Tensor& s : *sums)
      if (s.defined()) s = gather_rows(s, from, s.numel() / std::max<int64_t>(1, rows_));
  if (!memory_row.empty()) {
    std::vector<int64_t> rows(from.size());
    for (size_t r = 0; r < from.size(); ++r) rows[r] = memory_row[from[r]];
    memory_row.swap(rows);
  }
  rows_ = static_cast<int64_t>(from.size());
}

namespace {

// The self-attention modules of a model's layers, in order.
template <class Layers>
std::vector<const MultiHeadAttention*> self_attention_of(const Layers& layers) {
  std::vector<const MultiHeadAttention*> out;
  for (const auto& layer : layers) out.push_back(layer->self_attn.get());
  return out;
}

// The settings the full kernels refuse, refused here too (choose_kernel in
// nn/attention_options.cpp): the cache must not decode what the model cannot run.
void check_kernels(const char* op, const std::vector<const MultiHeadAttention*>& self_attention) {
  for (size_t l = 0; l < self_attention.size(); ++l) {
    const MultiHeadAttention& a = *self_attention[l];
    const bool sparse_or_linear =
        a.kernel == AttentionKernel::Sparse || a.kernel == AttentionKernel::Linear;
    if (sparse_or_linear && a.kv_heads != a.heads)
      throw Error(std::string(op) + ": layer " + std::to_string(l) + "'s " + to_string(a.kernel) +
                  " attention takes no grouped-query attention (kv_heads " +
                  std::to_string(a.kv_heads) + " != heads " + std::to_string(a.heads) + ")");
    if (sparse_or_linear && a.rope_base != 0)
      throw Error(std::string(op) + ": layer " + std::to_string(l) + "'s " + to_string(a.kernel) +
                  " attention takes no rotary positions (rope_base set)");
    if (sparse_or_linear && a.rel_bias.defined())
      throw Error(std::string(op) + ": layer " + std::to_string(l) + "'s " + to_string(a.kernel) +
                  " attention takes no relative position bias (rel_buckets set)");
    if (a.kernel != AttentionKernel::Sparse) continue;
    if (a.sparse.window < 1 || a.sparse.global_every < 0)
      throw Error(std::string(op) + ": layer " + std::to_string(l) +
                  "'s sparse attention needs window >= 1 and global_every >= 0, got window " +
                  std::to_string(a.sparse.window) + ", global_every " +
                  std::to_string(a.sparse.global_every));
  }
}

void check_step(const char* op, const KVCache& c, const std::vector<int64_t>& ids, int64_t n,
                const std::vector<const MultiHeadAttention*>& self_attention) {
  const size_t layers = self_attention.size();
  if (c.self_kv.size() != layers || c.linear_kv.size() != layers)
    throw Error(std::string(op) + ": cache has " + std::to_string(c.self_kv.size()) +
                " layers, the model " + std::to_string(layers) +
                " (make it with the model's start function)");
  for (size_t l = 0; l < layers; ++l) {
    const bool linear = self_attention[l]->kernel == AttentionKernel::Linear;
    if (linear ? !c.linear_kv[l].defined() : !c.self_kv[l].defined())
      throw Error(std::string(op) + ": layer " + std::to_string(l) + " runs the " +
                  to_string(self_attention[l]->kernel) + " kernel, but the cache was made for " +
                  (linear ? "a softmax kernel" : "the linear kernel") +
                  " (make it with the model's start function after setting the kernel)");
  }
  check_kernels(op, self_attention);  // a window may have changed since the start function
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
KVCache start_decoding(Seq2SeqTransformer& model, const Tokens& src, int64_t capacity,
                       int64_t rows_per_source) {
  src.check("start_decoding");
  if (rows_per_source < 1)
    throw Error("start_decoding: rows_per_source must be >= 1, got " +
                std::to_string(rows_per_source));
  if (model.tgt_pos && capacity > model.cfg.max_positions)
    throw Error("start_decoding: capacity " + std::to_string(capacity) +
                " exceeds the learned position table (max_positions " +
                std::to_string(model.cfg.max_positions) + ")");
  const auto& layers = model.decoder->layers;
  const std::vector<const MultiHeadAttention*> self_attention = self_attention_of(layers);
  check_kernels("start_decoding", self_attention);
  // The models run sparse and linear attention in self-attention only
  // (set_kernel in models/encoder_decoder.cpp); the cache computes
  // cross-attention with softmax over every source key.
  for (size_t l = 0; l < layers.size(); ++l) {
    const AttentionKernel k = layers[l]->cross_attn->kernel;
    if (k == AttentionKernel::Sparse || k == AttentionKernel::Linear)
      throw Error(std::string("start_decoding: decoder layer ") + std::to_string(l) +
                  "'s cross-attention runs the " + to_string(k) +
                  " kernel; the cache computes cross-attention with softmax over every source "
                  "key, as the models set it (decode without the cache: "
                  "DecodeOptions::use_cache = false)");
  }
  NoGradGuard no_grad;
  const int64_t B = src.batch, S = src.len;
  KVCache c(self_attention, B * rows_per_source, capacity);
  Tensor memory = model.encode(src).data();  // (B, S, D)
  for (auto& layer : layers) {
    MultiHeadAttention& a = *layer->cross_attn;
    // the cross-attention's [K | V] width, Ek + Dv (E + D: the models give it every head)
    const int64_t KV = a.kv_heads * (a.d_k + a.d_v);
    Tensor wscratch, bscratch;
    const bool bias = a.w_k->bias.defined();
    const real* W = stacked({&a.w_k->weight.data(), &a.w_v->weight.data()}, wscratch);
    const real* b = bias ? stacked({&a.w_k->bias.data(), &a.w_v->bias.data()}, bscratch) : nullptr;
    Tensor kv = Tensor::empty({B, S, KV});
    linear_forward(memory, W, b, KV, kv.data());  // (B*S, D) x (D, Ek+Dv) -> (B*S, Ek+Dv)
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
  check_step("decode_step", cache, ids, n, self_attention_of(layers));
  if (cache.memory_kv.size() != layers.size() ||
      static_cast<int64_t>(cache.memory_row.size()) != cache.rows())
    throw Error("decode_step: the cache holds no encoder memory (make it with start_decoding)");
  NoGradGuard no_grad;
  const int64_t R = cache.rows(), t0 = cache.length(), D = model.cfg.d_model;
  // (R, n) ids -> (R, n, D): embedding * sqrt(D) + positions [t0, t0 + n), dropout
  Tensor x =
      embedding(model.tgt_embed->weight, ids, {R, n}, std::sqrt(static_cast<real>(D))).data();
  if (model.tgt_pos || model.sin_pos)  // relative positions (T5): none, the bias says where
    add_position_rows(
        x, model.tgt_pos ? model.tgt_pos->weight.data() : model.sin_pos->table(t0 + n), t0);
  Var y = model.tgt_drop->forward(Var(x));
  for (size_t l = 0; l < layers.size(); ++l) {
    DecoderLayer& L = *layers[l];
    y = sublayer(y, *L.norm1, *L.drop1, L.pre_norm, [&](const Var& v) {
      return Var(self_attention_step(*L.self_attn, v.data(), cache, l, t0));
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
  if (capacity > model.cfg.max_positions)
    throw Error("start_generation: capacity " + std::to_string(capacity) +
                " exceeds the position table (max_positions " +
                std::to_string(model.cfg.max_positions) + ")");
  const std::vector<const MultiHeadAttention*> self_attention = self_attention_of(model.layers);
  check_kernels("start_generation", self_attention);
  return KVCache(self_attention, rows, capacity);
}

Tensor forward_step(GPT& model, KVCache& cache, const std::vector<int64_t>& ids, int64_t n) {
  check_step("forward_step", cache, ids, n, self_attention_of(model.layers));
  NoGradGuard no_grad;
  const int64_t R = cache.rows(), t0 = cache.length();
  // (R, n) -> (R, n, D): token + learned position embeddings of [t0, t0 + n)
  Tensor e = embedding(model.tok_embed->weight, ids, {R, n}).data();
  if (model.pos_embed) add_position_rows(e, model.pos_embed->weight.data(), t0);  // RoPE: none
  Var x = model.drop->forward(Var(e));
  for (size_t l = 0; l < model.layers.size(); ++l) {
    EncoderLayer& L = *model.layers[l];
    x = sublayer(x, *L.norm1, *L.drop1, L.pre_norm, [&](const Var& v) {
      return Var(self_attention_step(*L.self_attn, v.data(), cache, l, t0));
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
