// Decoding: turning a trained model into output sequences.
//
//   greedy_decode(model, src, DecodeOptions)     encoder-decoder, argmax at every step
//   beam_search(model, src, BeamOptions)         encoder-decoder, k hypotheses per source
//                                                (generation/beam_search.h)
//   generate(gpt, prompt, SampleOptions, gen)    GPT, temperature / top-k / top-p sampling
//                                                (generation/sampling.h)
//
// All three run without recording a graph, in the model's current mode (call
// eval() first to switch dropout off), and use the key/value cache of
// generation/kv_cache.h: each step runs the decoder over the new token only,
// for every attention kernel (standard, memory-efficient, sparse, linear).
// Each has use_cache = false, the reference path that recomputes the prefix.
#pragma once
#include <vector>

#include "generation/beam_search.h"
#include "generation/kv_cache.h"
#include "generation/sampling.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"

namespace qkv::nn {

struct DecodeOptions {
  int64_t bos = 1, eos = 2, pad = 0;
  int64_t max_new_tokens = 32;    // cap on generated tokens (not counting <bos>)
  bool use_cache = true;          // false: rerun the decoder over the whole prefix every step
                                  // (the slow reference path, for tests and benchmarks)
  bool ignore_eos = false;        // true: <eos> is an ordinary token, every output has
                                  // max_new_tokens tokens (fixed-length decoding, for benchmarks)
  std::vector<int64_t> suppress;  // ids never chosen (an answer's: <pad> and <s>)
};

// Encode the source once, then feed the decoder its own argmax one token at a
// time, from <bos> until <eos> or max_new_tokens tokens. One output sequence per source
// sequence, without <bos> and without the closing <eos>. Ties go to the lowest id;
// the ids in opt.suppress are never chosen.
std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqTransformer& model, const Tokens& src,
                                                const DecodeOptions& opt = {});

}  // namespace qkv::nn
