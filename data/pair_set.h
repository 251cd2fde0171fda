// A held-out or test set the trainer scores: (source, target) pairs, kept
// either as pairs (token data: a task's or a file's) or, for a classifier's
// images, as their bytes (data/image_store.h: one byte a pixel where a pair's
// ids take 8; Fashion-MNIST's 6,000 held-out and 10,000 test images: 13 MB,
// not 100 MB). Either way the set is read a batch at a time into a buffer the
// caller keeps, so that scoring a set allocates nothing per pair once the
// buffer has grown to a batch:
//
//   data::PairSet set(std::move(images));   // or std::move(pairs)
//   std::vector<Pair> batch;                // reused from batch to batch
//   for (size_t i = 0; i < set.size(); i += 500) {
//     set.batch(i, std::min(set.size(), i + 500), batch);   // pairs [i, i + 500)
//     ...
//   }
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "data/batch.h"
#include "data/image_store.h"

namespace qkv::data {

class PairSet {
 public:
  PairSet() = default;
  // Implicit: a function scoring a set takes a vector of pairs as well.
  PairSet(std::vector<Pair> pairs);  // NOLINT: implicit
  explicit PairSet(ImageStore images);

  size_t size() const { return images_ ? images_->size() : pairs_.size(); }
  bool empty() const { return size() == 0; }
  // Pairs [begin, end) into `out`, resized to end - begin; each pair's source
  // and target reuse the storage they had (no allocation once `out` has held
  // a batch as large). Error naming the range unless begin <= end <= size().
  void batch(size_t begin, size_t end, std::vector<Pair>& out) const;
  // Pair i, copied (made from its bytes for images): for a few pairs, never
  // for a whole set. Error naming i and the size when out of range.
  Pair at(size_t i) const;

  // The longest source, the longest target and the longest source and target
  // together, in ids (0 for an empty set): how long a batch of the set can be.
  int64_t longest_source() const { return longest_src_; }
  int64_t longest_target() const { return longest_tgt_; }
  int64_t longest_pair() const { return longest_pair_; }

  // The images, or nullptr for a set of pairs.
  const ImageStore* images() const { return images_ ? &*images_ : nullptr; }

 private:
  std::vector<Pair> pairs_;           // token pairs; empty for images
  std::optional<ImageStore> images_;  // (N, rows, cols, channels) bytes and N labels
  int64_t longest_src_ = 0, longest_tgt_ = 0, longest_pair_ = 0;
};

}  // namespace qkv::data
