// T5's relative positions (Raffel et al. 2020; nn/relative_bias.h): nothing is
// added to the embeddings; every self-attention adds to its scores a learned
// bias per head and distance bucket (--rel-buckets, --rel-max-distance; the
// file's rel_buckets, rel_max_distance). Its row in the position table
// (trainer/positions.h).
#include "trainer/positions.h"

namespace qkv::train {

PositionKind relative_positions() {
  PositionKind k;
  k.name = "relative";
  k.help = "relative (T5)";
  k.to_attention = [](const TrainConfig& c, nn::AttentionSettings& a) {
    a.rel_buckets = c.rel_buckets;
    a.rel_max_distance = c.rel_max_distance;
  };
  k.from_attention = [](TrainConfig& c, const nn::AttentionSettings& a) {
    if (a.rel_buckets == 0) return false;
    c.rel_buckets = a.rel_buckets;
    c.rel_max_distance = a.rel_max_distance;
    return true;
  };
  k.softmax_kernels = true;  // the bias is added to the softmax kernels' scores
  k.keys = {{"rel_buckets", "relative positions' buckets"},
            {"rel_max_distance", "relative positions' last distance"}};
  k.file_key = "rel_buckets";
  return k;
}

}  // namespace qkv::train
