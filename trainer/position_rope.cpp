// Rotary positions (RoPE, Su et al. 2021; nn/rope.h): nothing is added to
// the embeddings; every self-attention rotates its queries and keys pair by
// pair by angles of base^(-2i/d_k) per position (--rope-base, the file's
// rope_base). Its row in the position table (trainer/positions.h).
#include "trainer/positions.h"

namespace qkv::train {

namespace {

void rope_check(const TrainConfig& c, const Require& require) {
  const int64_t d_k = c.d_k > 0 ? c.d_k : c.d_model / c.heads;
  require(d_k % 2 == 0, "positions",
          "rope turns pairs of a head's d_k numbers, and d_k = " + std::to_string(d_k) +
              " is odd (--d-model / --heads, or --d-k)");
}

}  // namespace

PositionKind rope_positions() {
  PositionKind k;
  k.name = "rope";
  k.help = "rope (gpt)";
  k.to_attention = [](const TrainConfig& c, nn::AttentionSettings& a) {
    a.rope_base = c.rope_base;
  };
  k.from_attention = [](TrainConfig& c, const nn::AttentionSettings& a) {
    if (a.rope_base > 0) c.rope_base = a.rope_base;
    return a.rope_base > 0;
  };
  k.softmax_kernels = true;  // the rotation lives in the softmax kernels
  k.keys = {{"rope_base", "rope's base"}};
  k.file_key = "rope_base";
  k.check = rope_check;
  return k;
}

}  // namespace qkv::train
