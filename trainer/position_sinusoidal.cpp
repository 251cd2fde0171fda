// The paper's positions (Vaswani et al. 2017, section 3.5): a sin/cos table
// added to the embeddings, computed as sequences need it (no fixed length).
// Its row in the position table (trainer/positions.h).
#include "trainer/positions.h"

namespace qkv::train {

PositionKind sinusoidal_positions() {
  PositionKind k;
  k.name = "sinusoidal";
  k.help = "sinusoidal";
  k.table = PositionTable::Computed;
  return k;
}

}  // namespace qkv::train
