// Incremental (cached) decoding. A Transformer decoder that generates one
// token at a time would, run naively, push the whole prefix through every layer
// again for each new token. But what position i contributes to later queries
// never changes once computed (causal attention: no position sees its future),
// so it can be kept: each step computes queries, keys and values for the new
// positions only, adds them to a per-layer cache, and attends over the cache.
// What a layer keeps depends on its self-attention kernel
// (MultiHeadAttention::kernel):
//   standard, memory-efficient, auto  every key and value; softmax over all of them
//   sparse                            every key and value (a global query sees all
//                                     earlier keys); softmax over the keys
//                                     SparsePattern::visible lets the query see:
//                                     the window back and the global positions
//   linear                            no keys at all: the running sums
//                                     S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j)
//                                     per head, causal linear attention as the RNN it
//                                     is (constant memory and time per new token)
// For the encoder-decoder the cross-attention keys and values of the encoder
// output (memory) are computed once, when decoding starts (the models run the
// cross-attention with softmax over every source key whatever the kernel).
//
// These functions run without a graph (under NoGradGuard) on the model's own
// parameters, in its current mode (call eval() first to switch dropout off); the
// training forward is untouched. Their logits equal the full recompute's
// (Seq2SeqTransformer::decode, GPT::forward) to rounding, for every kernel:
// tests/decode_tests.h and tests/decode_kernel_tests.h.
//
//   KVCache cache = start_decoding(model, src, /*capacity=*/max_new_tokens);
//   Tensor logits = decode_step(model, cache, bos_column);     // (B, 1, V)
//   ... pick next tokens ...; logits = decode_step(model, cache, next);
#pragma once
#include <cstdint>
#include <vector>

#include "models/encoder_decoder.h"
#include "models/gpt.h"

namespace qkv::nn {

// What the positions decoded so far left behind, for `rows` sequences.
// Row r of the encoder-decoder's cache reads encoder memory row memory_row[r],
// so beam search can hold several rows (hypotheses) per source sentence.
class KVCache {
 public:
  KVCache() = default;
  // Empty cache for the given self-attention layers (one module per layer, in
  // order), `rows` sequences and room for `capacity` positions: each layer's
  // kernel decides what it keeps (see the state below). Preallocates everything.
  KVCache(const std::vector<const MultiHeadAttention*>& self_attention, int64_t rows,
          int64_t capacity);
  // The same for `layers` layers of softmax attention: keys of width key_width
  // (heads * d_k; 0: d_model), values of width d_model.
  KVCache(int64_t layers, int64_t rows, int64_t capacity, int64_t d_model, int64_t key_width = 0);

  int64_t rows() const { return rows_; }
  int64_t length() const { return len_; }  // positions cached so far
  int64_t capacity() const { return capacity_; }

  // Beam search and finished rows: new row r is old row from[r] (every cached
  // position, every running sum and its memory row). from may repeat rows and
  // may be shorter than rows() (dropping finished sequences); each entry in
  // [0, rows()).
  void reorder(const std::vector<int64_t>& from);

  // ---- the state, public for the step functions and for inspection ----
  // Per self-attention layer l, by its kernel, one of:
  //   self_kv[l]   (rows, capacity, E + D) with E = heads * d_k (D by default):
  //                position t of row r holds [K | V] of that position (K in
  //                columns [0, E), V in [E, E + D)). Softmax kernels, sparse included.
  //   linear_kv[l] (rows, H, d_k, d_v): per row and head S = sum_j phi(k_j) v_j^T
  //                over the positions so far, and
  //   linear_z[l]  (rows, H, d_k):      z = sum_j phi(k_j). Linear kernel.
  // The tensors a layer does not use are undefined.
  std::vector<Tensor> self_kv, linear_kv, linear_z;
  // Encoder-decoder only: per decoder layer the cross-attention [K | V] of the
  // encoder memory, (B_src, S, E + D), computed once; the source lengths (B_src)
  // for the padding mask; and which source each row reads (rows).
  std::vector<Tensor> memory_kv;
  std::vector<int64_t> memory_lengths, memory_row;

  // Called by the step functions: n positions were appended.
  void advance(int64_t n) { len_ += n; }

 private:
  int64_t rows_ = 0, capacity_ = 0, len_ = 0;
};

// ---- encoder-decoder -----------------------------------------------------------------
// Encodes src (B, S), computes every decoder layer's cross-attention K/V of the
// memory, and returns an empty cache with rows_per_source rows per source (row
// r reads source r / rows_per_source) and room for `capacity` target positions.
KVCache start_decoding(Seq2SeqTransformer& model, const Tokens& src, int64_t capacity,
                       int64_t rows_per_source = 1);

// Feeds n new target tokens per row, ids (rows, n) row-major, at positions
// [length, length + n): returns their logits (rows, n, V_tgt) and adds their
// keys and values (or running sums) to the cache. n > 1 is a prefill (causal
// within the block).
Tensor decode_step(Seq2SeqTransformer& model, KVCache& cache, const std::vector<int64_t>& ids,
                   int64_t n = 1);

// ---- decoder-only (GPT) ----------------------------------------------------------------
// An empty cache for `rows` sequences of up to `capacity` positions
// (capacity <= cfg.max_positions, the position table's size).
KVCache start_generation(GPT& model, int64_t rows, int64_t capacity);

// As decode_step: ids (rows, n) at positions [length, length + n) -> logits (rows, n, V).
Tensor forward_step(GPT& model, KVCache& cache, const std::vector<int64_t>& ids, int64_t n = 1);

}  // namespace qkv::nn
