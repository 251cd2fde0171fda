// Masked language modelling's inputs (BERT, Devlin et al. 2019, section 3.1):
// of a sequence's n choosable positions, max(1, round(rate * n)) are chosen
// uniformly without replacement (none when n is 0); of the chosen, 80% become
// [MASK], 10% a random token, 10% stay as they were (one uniform draw per
// chosen position). The model is scored on the chosen positions only: the
// targets hold the original id there and kPad everywhere else.
//
//   data::MlmOptions o;  o.mask_id = 3;  o.first_random_id = 4;  o.vocab = V.size();
//   data::Pair p = data::mask_for_mlm(ids, o, gen);   // p.src masked, p.tgt targets
#pragma once
#include <cstdint>

#include "core/generator.h"
#include "data/batch.h"

namespace qkv::data {

struct MlmOptions {
  double rate = 0.15;           // the share of choosable positions chosen
  int64_t mask_id = 3;          // [MASK] (Vocab::from_bpe(bpe, {"[MASK]"}) puts it at 3)
  int64_t first_random_id = 4;  // ids below it are special: never chosen, never drawn
  int64_t vocab = 0;            // random replacements are drawn from [first_random_id, vocab)
};

// Pair{masked ids, targets}, both as long as ids: a position is choosable
// when its id is >= first_random_id and is not mask_id. Deterministic given
// g. Error naming the option for rate outside (0, 1], first_random_id outside
// [1, vocab), mask_id outside [0, vocab), or an id outside [0, vocab).
Pair mask_for_mlm(const Seq& ids, const MlmOptions& o, Generator& g);

}  // namespace qkv::data
