// A classifier's images as bytes, turned into pairs a batch at a time, the
// training ones shifted and mirrored on the way (data/image_store.h).
#include "data/image_store.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace qkv::data {

Augment parse_augment(const std::string& spec) {
  Augment a;
  bool crop = false;
  for (size_t at = 0; !spec.empty() && at <= spec.size();) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string part = spec.substr(at, comma - at);
    at = comma + 1;
    const auto bad = [&](const std::string& why) {
      return Error("augment '" + brief(spec) + "': " + why);
    };
    if (part.empty()) {
      throw bad("expected crop:K and/or flip, comma-separated; got an empty item (\"" +
                brief(spec) + "\" has a comma too many)");
    } else if (part == "flip") {
      if (a.flip) throw bad("flip twice");
      a.flip = true;
    } else if (part.rfind("crop:", 0) == 0) {
      const std::string k = part.substr(5);
      if (crop) throw bad("crop twice");
      if (k.empty() || k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(k) < 1 || std::stoi(k) > 1024)
        throw bad("crop:K pads by K pixels, K from 1 to 1024; got '" + brief(k) + "'");
      a.crop = std::stoi(k);
      crop = true;
    } else {
      throw bad("expected crop:K and/or flip, comma-separated; got '" + brief(part) + "'");
    }
  }
  return a;
}

void shift_flip_image(const uint8_t* in, int64_t rows, int64_t cols, int64_t channels, int64_t dy,
                      int64_t dx, bool flip, int64_t* out) {
  for (int64_t y = 0; y < rows; ++y) {
    const int64_t sy = y + dy;  // the source row; outside: background
    for (int64_t x = 0; x < cols; ++x) {
      const int64_t sx = (flip ? cols - 1 - x : x) + dx;
      int64_t* o = out + (y * cols + x) * channels;  // (channels)
      if (sy < 0 || sy >= rows || sx < 0 || sx >= cols) {
        for (int64_t c = 0; c < channels; ++c) o[c] = 0;
        continue;
      }
      const uint8_t* s = in + (sy * cols + sx) * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] = s[c];
    }
  }
}

ImageStore::ImageStore(int64_t rows, int64_t cols, int64_t channels)
    : rows_(rows), cols_(cols), channels_(channels) {
  if (rows < 1 || cols < 1 || channels < 1)
    throw Error("ImageStore: images of " + std::to_string(rows) + "x" + std::to_string(cols) + "x" +
                std::to_string(channels) + ": every side must be >= 1");
}

void ImageStore::reserve(size_t n) {
  pixels_.reserve(n * static_cast<size_t>(pixels_per_image()));
  labels_.reserve(n);
}

void ImageStore::add(const uint8_t* pixels, int64_t label) {
  pixels_.insert(pixels_.end(), pixels, pixels + pixels_per_image());
  labels_.push_back(label);
}

Pair ImageStore::pair(size_t i) const {
  const size_t P = static_cast<size_t>(pixels_per_image());
  Pair p;
  p.src.assign(pixels_.begin() + static_cast<std::ptrdiff_t>(i * P),
               pixels_.begin() + static_cast<std::ptrdiff_t>((i + 1) * P));
  p.tgt = {labels_.at(i)};
  return p;
}

void ImageStore::batch(size_t begin, size_t end, std::vector<Pair>& out) const {
  if (begin > end || end > size())
    throw Error("ImageStore::batch: images [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") of " + std::to_string(size()));
  const size_t P = static_cast<size_t>(pixels_per_image());
  out.resize(end - begin);
  for (size_t i = begin; i < end; ++i) {
    Pair& p = out[i - begin];
    const uint8_t* img = pixels_.data() + i * P;  // (rows, cols, channels)
    p.src.assign(img, img + P);                   // bytes widened to ids
    p.tgt.assign(1, labels_[i]);
  }
}

std::vector<Pair> ImageStore::draw(int64_t B, Generator& g, const Augment& a) const {
  if (a.crop < 0 || a.crop >= rows_ || a.crop >= cols_)
    throw Error("ImageStore::draw: crop " + std::to_string(a.crop) + " on images of " +
                std::to_string(rows_) + "x" + std::to_string(cols_) +
                ": must be in [0, the smaller side)");
  if (labels_.empty()) throw Error("ImageStore::draw: no images");
  const int64_t P = pixels_per_image();
  std::vector<Pair> out(static_cast<size_t>(B));
  for (Pair& p : out) {
    const size_t i = static_cast<size_t>(g.randint(0, static_cast<int64_t>(labels_.size())));
    const uint8_t* img = pixels_.data() + i * static_cast<size_t>(P);
    p.tgt = {labels_[i]};
    p.src.resize(static_cast<size_t>(P));
    if (!a.any()) {
      for (int64_t k = 0; k < P; ++k) p.src[static_cast<size_t>(k)] = img[k];
      continue;
    }
    // The crop's offset in the padded image, 0..2K, is a shift of offset - K.
    const int64_t dy = a.crop ? g.randint(0, 2 * a.crop + 1) - a.crop : 0;
    const int64_t dx = a.crop ? g.randint(0, 2 * a.crop + 1) - a.crop : 0;
    const bool flip = a.flip && g.randint(0, 2) == 1;
    shift_flip_image(img, rows_, cols_, channels_, dy, dx, flip, p.src.data());
  }
  return out;
}

}  // namespace qkv::data
