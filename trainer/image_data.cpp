// A classifier's images (the data source "images", --format idx): a folder
// holding the IDX files of MNIST and Fashion-MNIST (data/idx.h), read whole.
//
//   train-images-idx3-ubyte[.gz]  (N, rows, cols) bytes   train-labels-idx1-ubyte[.gz]  (N)
//   t10k-images-idx3-ubyte[.gz]   the test set, optional  t10k-labels-idx1-ubyte[.gz]
//
// The held-out set for model selection (--eval-every, the best checkpoint) is
// carved from the training images (--valid-fraction); the test images are
// scored once, at the end (Trainer::test). Every image is kept as bytes
// (data::ImageStore; the held-out and test ones behind a data::PairSet) and
// becomes a pair a batch at a time. An image becomes a pair: its pixels
// as the source (rows * cols values 0..255, row by row) and {label} as the
// target, the label's index among the training labels sorted by value.
#include <algorithm>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "data/idx.h"
#include "trainer/data_sources.h"
#include "trainer/trainer.h"

namespace qkv::train {

namespace {

// DIR/base.gz, else DIR/base; "" when neither is in the folder. A name that
// is there but cannot be followed (a symlink loop, a dangling link) is
// returned too: reading it says why, rather than "no file".
std::string idx_file(const std::string& dir, const std::string& base) {
  std::error_code ec;
  const std::string names[] = {dir + "/" + base + ".gz", dir + "/" + base};
  for (const std::string& p : names)
    if (std::filesystem::exists(p, ec)) return p;
  for (const std::string& p : names)  // there, but not to be followed
    if (std::filesystem::exists(std::filesystem::symlink_status(p, ec))) return p;
  return "";
}

}  // namespace

namespace {

DataNeed read_images(Trainer& t, const Vocab* given) {
  const int64_t max_file_bytes = kMaxDataFileBytes;
  std::error_code ec;
  if (!std::filesystem::is_directory(t.cfg.data, ec))
    throw Error("--data " + brief(t.cfg.data) +
                ": --format idx reads a folder of IDX files (train-images-idx3-ubyte[.gz], "
                "train-labels-idx1-ubyte[.gz], optionally t10k-*), e.g. "
                "/usr/share/datasets/fashion-mnist");
  if (!t.cfg.valid.empty())
    throw Error("--valid " + brief(t.cfg.valid) +
                ": images are held out from the training files (--valid-fraction); the t10k "
                "files are the test set, scored once at the end");
  auto read = [&](const char* images, const char* labels, bool required) {
    const std::string ip = idx_file(t.cfg.data, images), lp = idx_file(t.cfg.data, labels);
    if (ip.empty() || lp.empty()) {
      if (!required && ip.empty() && lp.empty()) return data::ImageSet{};
      throw Error("--data " + brief(t.cfg.data) + ": no " + (ip.empty() ? images : labels) +
                  "[.gz] in the folder (--format idx reads MNIST's file names)");
    }
    return data::read_idx_images(ip, lp, max_file_bytes);
  };
  data::ImageSet train = read("train-images-idx3-ubyte", "train-labels-idx1-ubyte", true);
  data::ImageSet test = read("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", false);
  if (train.count < 2)
    throw Error("--data " + brief(t.cfg.data) + ": " + std::to_string(train.count) +
                " training image cannot be split into training and held-out");
  if (test.count > 0 && (test.rows != train.rows || test.cols != train.cols))
    throw Error("--data " + brief(t.cfg.data) + ": the test images are " +
                std::to_string(test.rows) + "x" + std::to_string(test.cols) +
                " but the training images " + std::to_string(train.rows) + "x" +
                std::to_string(train.cols));
  // The files' bytes, read whole, then each pixel once more, one byte in
  // an ImageStore (training, held-out or test).
  const double pixels = double(train.rows * train.cols);
  detail::check_data_memory(
      2.0 * pixels * double(train.count + test.count) + 64.0 * double(train.count + test.count),
      "--data " + brief(t.cfg.data),
      std::to_string(train.count + test.count) + " images of " + std::to_string(train.rows) + "x" +
          std::to_string(train.cols));

  // The labels: the training set's values, sorted; named by their number.
  std::vector<uint8_t> values(train.labels.begin(), train.labels.end());
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::vector<int64_t> index(256, -1);
  std::vector<std::string> names;
  std::vector<std::string> given_names;  // --label-names "T-shirt/top,Trouser,...": label k's
  for (size_t at = 0; !t.cfg.label_names.empty() && at <= t.cfg.label_names.size();) {
    const size_t comma = std::min(t.cfg.label_names.find(',', at), t.cfg.label_names.size());
    given_names.push_back(t.cfg.label_names.substr(at, comma - at));
    at = comma + 1;
  }
  for (size_t k = 0; k < values.size(); ++k) {
    index[values[k]] = static_cast<int64_t>(k);
    if (!given_names.empty() && values[k] >= given_names.size())
      throw Error("--label-names: names " + std::to_string(given_names.size()) + " labels (0.." +
                  std::to_string(given_names.size() - 1) + "), but --data " + brief(t.cfg.data) +
                  " has label " + std::to_string(values[k]));
    names.push_back(given_names.empty() ? std::to_string(values[k]) : given_names[values[k]]);
  }
  if (!t.labels.empty() && t.labels != names)
    throw Error("--data " + brief(t.cfg.data) + ": its labels are " + brief(json(names).dump()) +
                " but the model's are " + brief(json(t.labels).dump()));
  t.labels = names;
  if (t.shape.rows &&
      (t.shape.rows != train.rows || t.shape.cols != train.cols || t.shape.channels != 1))
    throw Error("--data " + brief(t.cfg.data) + ": its images are " + std::to_string(train.rows) +
                "x" + std::to_string(train.cols) + "x1 but the model reads " +
                std::to_string(t.shape.rows) + "x" + std::to_string(t.shape.cols) + "x" +
                std::to_string(t.shape.channels));
  t.shape.rows = train.rows;
  t.shape.cols = train.cols;
  t.shape.channels = 1;
  t.augment = data::parse_augment(t.cfg.augment);  // validate() has checked the text
  if (t.augment.crop >= std::min(train.rows, train.cols))
    throw Error("--augment " + brief(t.cfg.augment) + ": the images are " +
                std::to_string(train.rows) + "x" + std::to_string(train.cols) + ": crop:" +
                std::to_string(t.augment.crop) + " would shift some out of the frame entirely");

  const size_t P = static_cast<size_t>(train.rows * train.cols);
  auto label_of = [&](const data::ImageSet& s, size_t i, const char* which) {
    const int64_t label = index[s.labels[i]];
    if (label < 0)
      throw Error("--data " + brief(t.cfg.data) + ": " + which + " image " + std::to_string(i) +
                  " has label " + std::to_string(s.labels[i]) +
                  ", which no training image has (the model knows " + brief(json(names).dump()) +
                  ")");
    return label;
  };
  // The held-out split, drawn from its own stream as the pairs' is.
  const detail::HeldoutSplit split =
      detail::heldout_split(static_cast<size_t>(train.count), t.cfg.seed, t.cfg.valid_fraction);
  // Every image stays bytes, made pairs a batch at a time: the training ones
  // drawn at random (where --augment shifts and mirrors them), the held-out
  // and test ones in order, as stored here.
  data::ImageStore train_s(train.rows, train.cols, 1), valid_s(train.rows, train.cols, 1);
  train_s.reserve(split.order.size() - split.n_valid);
  valid_s.reserve(split.n_valid);
  for (size_t i = 0; i < split.order.size(); ++i) {
    const size_t k = split.order[i];
    (i < split.n_valid ? valid_s : train_s)
        .add(train.pixels.data() + k * P, label_of(train, k, "training"));
  }
  data::ImageStore test_s(train.rows, train.cols, 1);
  test_s.reserve(static_cast<size_t>(test.count));
  for (size_t i = 0; i < static_cast<size_t>(test.count); ++i)
    test_s.add(test.pixels.data() + i * P, label_of(test, i, "test"));
  t.test_set = PairSet(std::move(test_s));
  t.pairs = std::make_unique<PairData>(std::move(train_s), std::move(valid_s));

  // What a checkpoint records of the data: the folder and a hash of every
  // image and label read (the files are compressed: their bytes may differ
  // for the same images).
  uint64_t h = kFnv1a64Basis;
  for (const data::ImageSet* s : {&train, &test}) {
    h = fnv1a64(s->pixels.data(), s->pixels.size(), h);
    h = fnv1a64(s->labels.data(), s->labels.size(), h);
  }
  const std::string abs = std::filesystem::absolute(t.cfg.data, ec).lexically_normal().string();
  *t.data_info = {{"kind", "images"},
                  {"data",
                   {{"path", t.cfg.data},
                    {"abspath", ec ? t.cfg.data : abs},
                    {"images", train.count},
                    {"test_images", test.count},
                    {"fnv1a64", detail::hex64(h)}}}};
  // The positions an image takes: the family's (vit: its patches and a class token).
  const Family& fam = t.family();
  return {fam.reads.image_tokens ? fam.reads.image_tokens(t.cfg, t.shape.rows, t.shape.cols)
                                 : t.shape.rows * t.shape.cols,
          "--data " + brief(t.cfg.data)};
}

}  // namespace

DataSource images_source() {
  DataSource s;
  s.name = "images";
  s.help = "a folder of IDX image and label files (MNIST, Fashion-MNIST)";
  s.format = "idx";
  s.holds = DataSource::Holds::kImages;
  s.read = read_images;
  return s;
}

}  // namespace qkv::train
