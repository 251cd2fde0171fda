#include "data/mlm.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace qkv::data {

namespace {

void check_options(const MlmOptions& o) {
  if (!(o.rate > 0 && o.rate <= 1))
    throw Error("mask_for_mlm: rate " + std::to_string(o.rate) + " is outside (0, 1]");
  if (o.first_random_id < 1 || o.first_random_id >= o.vocab)
    throw Error("mask_for_mlm: first_random_id " + std::to_string(o.first_random_id) +
                " is outside [1, vocab) with vocab = " + std::to_string(o.vocab));
  if (o.mask_id < 0 || o.mask_id >= o.vocab)
    throw Error("mask_for_mlm: mask_id " + std::to_string(o.mask_id) +
                " is outside [0, vocab) with vocab = " + std::to_string(o.vocab));
}

}  // namespace

Pair mask_for_mlm(const Seq& ids, const MlmOptions& o, Generator& g) {
  check_options(o);
  Pair out{ids, Seq(ids.size(), kPad)};
  // The choosable positions: every id that is not special and not [MASK] itself.
  std::vector<size_t> pos;
  pos.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= o.vocab)
      throw Error("mask_for_mlm: id " + std::to_string(ids[i]) + " at position " +
                  std::to_string(i) +
                  " is outside [0, vocab) with vocab = " + std::to_string(o.vocab));
    if (ids[i] >= o.first_random_id && ids[i] != o.mask_id) pos.push_back(i);
  }
  const int64_t n = static_cast<int64_t>(pos.size());
  if (n == 0) return out;
  const int64_t k = std::max<int64_t>(1, std::llround(o.rate * double(n)));
  // k of the n uniformly without replacement: the first k steps of a Fisher-Yates shuffle.
  for (int64_t j = 0; j < k; ++j) {
    std::swap(pos[j], pos[g.randint(j, n)]);
    const size_t i = pos[j];
    out.tgt[i] = ids[i];
    const double u = g.uniform();  // 80% [MASK], 10% a random token, 10% unchanged
    if (u < 0.8)
      out.src[i] = o.mask_id;
    else if (u < 0.9)
      out.src[i] = g.randint(o.first_random_id, o.vocab);
  }
  return out;
}

}  // namespace qkv::data
