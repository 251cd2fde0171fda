// Incremental (cached) decoding. A Transformer decoder that generates one
// token at a time would, run naively, push the whole prefix through every layer
// again for each new token. But position i's keys and values never change once
// computed (causal attention: no position sees its future), so they can be kept:
// each step computes queries, keys and values for the new positions only, appends
// the keys and values to a per-layer cache, and attends over the cache. For the
// encoder-decoder the cross-attention keys and values of the encoder output
// (memory) are computed once, when decoding starts.
//
// These functions run without a graph (under NoGradGuard) on the model's own
// parameters, in its current mode (call eval() first to switch dropout off); the
// training forward is untouched. Their logits equal the full recompute's
// (Seq2SeqTransformer::decode, GPT::forward) to rounding: tests/test_decode.cpp.
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

// Keys and values of the positions decoded so far, for `rows` sequences.
// Row r of the encoder-decoder's cache reads encoder memory row memory_row[r],
// so beam search can hold several rows (hypotheses) per source sentence.
class KVCache {
 public:
  KVCache() = default;
  // Empty cache for `layers` self-attention layers, `rows` sequences, room for
  // `capacity` positions: keys of width key_width (heads * d_k; 0: d_model),
  // values of width d_model. Preallocates everything.
  KVCache(int64_t layers, int64_t rows, int64_t capacity, int64_t d_model, int64_t key_width = 0);

  int64_t rows() const { return rows_; }
  int64_t length() const { return len_; }  // positions cached so far
  int64_t capacity() const { return capacity_; }

  // Beam search and finished rows: new row r is old row from[r] (every cached
  // position and its memory row). from may repeat rows and may be shorter than
  // rows() (dropping finished sequences); each entry in [0, rows()).
  void reorder(const std::vector<int64_t>& from);

  // ---- the state, public for the step functions and for inspection ----
  // Per self-attention layer: (rows, capacity, E + D) with E = heads * d_k
  // (D by default), position t of row r holds [K | V] of that position (K in
  // columns [0, E), V in [E, E + D)).
  std::vector<Tensor> self_kv;
  // Encoder-decoder only: per decoder layer the cross-attention [K | V] of the
  // encoder memory, (B_src, S, E + D), computed once; the source lengths (B_src)
  // for the padding mask; and which source each row reads (rows).
  std::vector<Tensor> memory_kv;
  std::vector<int64_t> memory_lengths, memory_row;

  // Called by the step functions: n positions were appended.
  void advance(int64_t n) { len_ += n; }

 private:
  int64_t rows_ = 0, capacity_ = 0, len_ = 0;
  int64_t width_ = 0;  // of one cached position: E + D
};

// ---- encoder-decoder -----------------------------------------------------------------
// Encodes src (B, S), computes every decoder layer's cross-attention K/V of the
// memory, and returns an empty cache with rows_per_source rows per source (row
// r reads source r / rows_per_source) and room for `capacity` target positions.
KVCache start_decoding(Seq2SeqTransformer& model, const Tokens& src, int64_t capacity,
                       int64_t rows_per_source = 1);

// Feeds n new target tokens per row, ids (rows, n) row-major, at positions
// [length, length + n): returns their logits (rows, n, V_tgt) and appends their
// keys and values to the cache. n > 1 is a prefill (causal within the block).
Tensor decode_step(Seq2SeqTransformer& model, KVCache& cache, const std::vector<int64_t>& ids,
                   int64_t n = 1);

// ---- decoder-only (GPT) ----------------------------------------------------------------
// An empty cache for `rows` sequences of up to `capacity` positions
// (capacity <= cfg.max_positions, the position table's size).
KVCache start_generation(GPT& model, int64_t rows, int64_t capacity);

// As decode_step: ids (rows, n) at positions [length, length + n) -> logits (rows, n, V).
Tensor forward_step(GPT& model, KVCache& cache, const std::vector<int64_t>& ids, int64_t n = 1);

}  // namespace qkv::nn
