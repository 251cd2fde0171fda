// A classifier's images kept as their bytes: (N, rows * cols * channels)
// uint8 pixels and N labels, 1 byte a pixel where a Pair's ids take 8
// (Fashion-MNIST's 54,000 training images: 42 MB, not 339 MB). A batch is
// turned into pairs (pixels as ids, {label}) when it is needed: a training
// batch drawn at random, and maybe augmented then, as torchvision's
// transforms do a batch at a time; a held-out or test batch in order
// (batch(), through data::PairSet, data/pair_set.h), never augmented:
//
//   crop:K   RandomCrop(size, padding=K): the image padded by K background
//            (0) pixels on every side, then cut back to its size at a random
//            offset; the same as shifting it by dy, dx in [-K, K]
//   flip     RandomHorizontalFlip(): mirrored left to right, half the time
//
//   data::ImageStore s(28, 28, 1);
//   s.add(pixels, label);                          // rows * cols * channels bytes
//   std::vector<Pair> b = s.draw(128, gen, {2, true});   // crop:2,flip
//   s.batch(0, 500, b);                            // images 0..499, as stored
//
// draw() takes one randint(0, N) from `g` per image, as PairData::draw does
// (so a run without augmentation draws the same batches as pairs would),
// then, per image, two for the crop's offset (when K > 0) and one for the
// flip (when on). Deterministic given g's state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/generator.h"
#include "data/batch.h"

namespace qkv::data {

struct Augment {
  int64_t crop = 0;   // K: padded by K pixels, cut back at random (0: off)
  bool flip = false;  // mirrored left to right with probability 1/2
  bool any() const { return crop > 0 || flip; }
};

// "crop:K,flip", "flip", "crop:K" (K from 1 to 1024), in any order, each at
// most once; "" is no augmentation. Error quoting the text otherwise.
Augment parse_augment(const std::string& spec);

// One image's pixels (rows, cols, channels), channels fastest, shifted and
// mirrored into `out` (as many values): out[y][x] = in[y + dy][x' + dx] with
// x' = cols - 1 - x when flipped, else x; 0 where that falls outside. That is
// the crop at offset (K + dy, K + dx) of the image padded by K, then the flip.
void shift_flip_image(const uint8_t* in, int64_t rows, int64_t cols, int64_t channels, int64_t dy,
                      int64_t dx, bool flip, int64_t* out);

class ImageStore {
 public:
  // Error naming the shape unless rows, cols and channels are >= 1.
  ImageStore(int64_t rows, int64_t cols, int64_t channels);
  void reserve(size_t n);
  // `pixels`: rows * cols * channels bytes.
  void add(const uint8_t* pixels, int64_t label);

  size_t size() const { return labels_.size(); }
  int64_t pixels_per_image() const { return rows_ * cols_ * channels_; }
  // Image i as a pair: its pixels as ids, {its label}.
  Pair pair(size_t i) const;
  // Images [begin, end) as pairs into `out`, resized to end - begin, each
  // pair's source and target reusing their storage (a held-out or test batch:
  // no allocation once `out` has held one as large). Unaugmented. Error
  // naming the range unless begin <= end <= size().
  void batch(size_t begin, size_t end, std::vector<Pair>& out) const;
  // B images drawn uniformly (see the header comment for the draws), each
  // augmented by `a`. Error naming the crop for K < 0 or K >= the image's
  // rows or cols (a crop that could keep no pixel).
  std::vector<Pair> draw(int64_t B, Generator& g, const Augment& a = {}) const;

 private:
  int64_t rows_, cols_, channels_;
  std::vector<uint8_t> pixels_;  // (N, rows, cols, channels)
  std::vector<int64_t> labels_;  // (N)
};

}  // namespace qkv::data
