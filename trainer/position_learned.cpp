// Learned positions (GPT, BERT, ViT): a table of one learned row per
// position added to the embeddings; its rows are the run's context and bound
// every sequence. Its row in the position table (trainer/positions.h).
#include "trainer/positions.h"

namespace qkv::train {

PositionKind learned_positions() {
  PositionKind k;
  k.name = "learned";
  k.help = "learned";
  k.table = PositionTable::Learned;
  return k;
}

}  // namespace qkv::train
