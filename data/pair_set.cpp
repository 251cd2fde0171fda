// A held-out or test set as pairs or as image bytes, read a batch at a time
// into the caller's buffer (data/pair_set.h).
#include "data/pair_set.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace qkv::data {

PairSet::PairSet(std::vector<Pair> pairs) : pairs_(std::move(pairs)) {
  for (const Pair& p : pairs_) {
    const auto s = static_cast<int64_t>(p.src.size()), t = static_cast<int64_t>(p.tgt.size());
    longest_src_ = std::max(longest_src_, s);
    longest_tgt_ = std::max(longest_tgt_, t);
    longest_pair_ = std::max(longest_pair_, s + t);
  }
}

PairSet::PairSet(ImageStore images) : images_(std::move(images)) {
  if (images_->size() == 0) return;
  longest_src_ = images_->pixels_per_image();  // every image: its pixels, {its label}
  longest_tgt_ = 1;
  longest_pair_ = longest_src_ + 1;
}

void PairSet::batch(size_t begin, size_t end, std::vector<Pair>& out) const {
  if (begin > end || end > size())
    throw Error("PairSet::batch: pairs [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") of a set of " + std::to_string(size()));
  if (images_) {
    images_->batch(begin, end, out);
    return;
  }
  out.resize(end - begin);
  for (size_t k = begin; k < end; ++k) {
    out[k - begin].src.assign(pairs_[k].src.begin(), pairs_[k].src.end());  // reuses capacity
    out[k - begin].tgt.assign(pairs_[k].tgt.begin(), pairs_[k].tgt.end());
  }
}

Pair PairSet::at(size_t i) const {
  if (i >= size())
    throw Error("PairSet::at: pair " + std::to_string(i) + " of a set of " +
                std::to_string(size()));
  return images_ ? images_->pair(i) : pairs_[i];
}

}  // namespace qkv::data
