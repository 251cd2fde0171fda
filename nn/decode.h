// Greedy autoregressive decoding for the encoder-decoder model: encode the
// source once, then feed the decoder its own argmax one token at a time,
// from <bos> until <eos> or a length cap.
#pragma once
#include <vector>

#include "nn/transformer.h"

namespace qkv::nn {

struct DecodeOptions {
  int64_t bos = 1, eos = 2, pad = 0;
  int64_t max_len = 32;  // cap on generated tokens (not counting <bos>)
};

// One output sequence per source sequence, without <bos> and without the
// closing <eos>. Runs without recording a graph, in the model's current mode
// (call eval() first to switch dropout off).
std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqTransformer& model, const Tokens& src,
                                                const DecodeOptions& opt = {});

}  // namespace qkv::nn
