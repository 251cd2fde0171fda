// Images as bytes (data/image_store.h): pairs drawn from them equal the
// images; augmented draws are exact shifted and mirrored copies, checked
// against the crop of a zero-padded image written out here; a held-out or
// test set read a batch at a time (data/pair_set.h) gives the images of the
// IDX files pixel for pixel, into a buffer it reuses, and scores as the same
// pairs kept whole; and a run with --augment changes its training batches
// only, never its held-out or test images.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"
#include "data/image_store.h"
#include "data/pair_set.h"
#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"
#include "trainer/trainer.h"

using namespace qkv;
using qkv::testing::check_error;

namespace {

// n random images of rows x cols x channels bytes, labels 0..2.
data::ImageStore random_store(int64_t n, int64_t rows, int64_t cols, int64_t channels, Generator& g,
                              std::vector<std::vector<uint8_t>>* kept = nullptr) {
  data::ImageStore s(rows, cols, channels);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> px(static_cast<size_t>(rows * cols * channels));
    for (uint8_t& p : px) p = static_cast<uint8_t>(g.randint(1, 256));  // never background
    s.add(px.data(), i % 3);
    if (kept) kept->push_back(px);
  }
  return s;
}

// torchvision's way, written out: pad by K zeros, cut at (top, left), mirror.
std::vector<int64_t> crop_of_padded(const std::vector<uint8_t>& img, int64_t rows, int64_t cols,
                                    int64_t C, int64_t K, int64_t top, int64_t left, bool flip) {
  const int64_t R2 = rows + 2 * K, C2 = cols + 2 * K;
  std::vector<int64_t> padded(static_cast<size_t>(R2 * C2 * C), 0);
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x)
      for (int64_t c = 0; c < C; ++c)
        padded[static_cast<size_t>(((y + K) * C2 + x + K) * C + c)] =
            img[static_cast<size_t>((y * cols + x) * C + c)];
  std::vector<int64_t> out(static_cast<size_t>(rows * cols * C));
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x) {
      const int64_t from_x = flip ? cols - 1 - x : x;
      for (int64_t c = 0; c < C; ++c)
        out[static_cast<size_t>((y * cols + x) * C + c)] =
            padded[static_cast<size_t>(((y + top) * C2 + from_x + left) * C + c)];
    }
  return out;
}

}  // namespace

TEST_CASE("ImageStore::draw without augmentation: the images drawn by one randint each, exact") {
  Generator g = qkv::testing::test_generator();
  std::vector<std::vector<uint8_t>> kept;
  const data::ImageStore s = random_store(7, 5, 4, 1, g, &kept);
  CHECK(s.size() == 7);
  Generator a(11), b(11);
  const std::vector<data::Pair> drawn = s.draw(20, a);
  REQUIRE(drawn.size() == 20);
  for (const data::Pair& p : drawn) {
    const size_t i = static_cast<size_t>(b.randint(0, 7));  // PairData::sample's one draw
    CHECK(p.src == data::Seq(kept[i].begin(), kept[i].end()));
    CHECK(p.tgt == data::Seq{static_cast<int64_t>(i % 3)});
    CHECK(s.pair(i).src == p.src);
  }
  CHECK(a.state().s[0] == b.state().s[0]);  // nothing else drawn
}

TEST_CASE(
    "ImageStore::draw with crop:K,flip: each image is the crop of its K-padded copy at the drawn "
    "offset, mirrored when drawn so, pixel for pixel") {
  Generator g = qkv::testing::test_generator();
  for (const int64_t C : {1, 3}) {
    std::vector<std::vector<uint8_t>> kept;
    const int64_t R = 6, W = 5, K = 2;
    const data::ImageStore s = random_store(4, R, W, C, g, &kept);
    for (const bool flip : {false, true}) {
      Generator a(3 + C), b(3 + C);
      const std::vector<data::Pair> drawn = s.draw(64, a, data::Augment{K, flip});
      int shifted = 0, mirrored = 0;
      for (const data::Pair& p : drawn) {
        const size_t i = static_cast<size_t>(b.randint(0, 4));
        const int64_t top = b.randint(0, 2 * K + 1), left = b.randint(0, 2 * K + 1);
        const bool f = flip && b.randint(0, 2) == 1;
        CHECK(p.src == crop_of_padded(kept[i], R, W, C, K, top, left, f));
        CHECK(p.tgt == data::Seq{static_cast<int64_t>(i % 3)});
        shifted += top != K || left != K;
        mirrored += f;
      }
      CHECK(a.state().s[0] == b.state().s[0]);
      CHECK(shifted > 32);  // 24 of 25 offsets move the image
      if (flip) CHECK((mirrored > 8 && mirrored < 56));
    }
  }
}

TEST_CASE("shift_flip_image: a shift by (1, -2) and a mirror at known pixels; zeros shifted in") {
  // 3 x 4 image, pixel (y, x) = 10 y + x + 1.
  std::vector<uint8_t> in(12);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) in[static_cast<size_t>(y * 4 + x)] = uint8_t(10 * y + x + 1);
  std::vector<int64_t> out(12);
  data::shift_flip_image(in.data(), 3, 4, 1, 1, -2, false, out.data());
  // out[y][x] = in[y + 1][x - 2]
  CHECK(out == std::vector<int64_t>{0, 0, 11, 12, 0, 0, 21, 22, 0, 0, 0, 0});
  data::shift_flip_image(in.data(), 3, 4, 1, 0, 0, true, out.data());
  CHECK(out == std::vector<int64_t>{4, 3, 2, 1, 14, 13, 12, 11, 24, 23, 22, 21});
}

TEST_CASE("ImageStore refuses a bad shape, an empty draw and a crop as large as the image") {
  check_error([] { data::ImageStore(0, 4, 1); }, {"ImageStore", "0x4x1"});
  data::ImageStore empty(4, 4, 1);
  Generator g(1);
  check_error([&] { empty.draw(2, g); }, {"ImageStore::draw", "no images"});
  const std::vector<uint8_t> px(16, 5);
  empty.add(px.data(), 0);
  check_error(
      [&] {
        empty.draw(2, g, data::Augment{4, false});
      },
      {"ImageStore::draw", "crop 4", "4x4"});
  check_error([&] { empty.draw(2, g, data::Augment{-1, false}); }, {"crop -1"});
}

TEST_CASE("parse_augment reads crop:K and flip in any order; anything else is refused, quoted") {
  CHECK(!data::parse_augment("").any());
  const data::Augment a = data::parse_augment("crop:2,flip");
  CHECK(a.crop == 2);
  CHECK(a.flip);
  const data::Augment b = data::parse_augment("flip");
  CHECK(b.crop == 0);
  CHECK(b.flip);
  CHECK(data::parse_augment("flip,crop:4").crop == 4);
  check_error([] { data::parse_augment("crop:0"); }, {"augment 'crop:0'", "K from 1 to 1024"});
  check_error([] { data::parse_augment("crop:-1"); }, {"augment 'crop:-1'", "got '-1'"});
  check_error([] { data::parse_augment("crop:99999"); }, {"K from 1 to 1024"});
  check_error([] { data::parse_augment("crop"); }, {"expected crop:K and/or flip", "'crop'"});
  check_error([] { data::parse_augment("flip,flip"); }, {"flip twice"});
  check_error([] { data::parse_augment("crop:1,crop:2"); }, {"crop twice"});
  // An empty item is said to be one, not shown as nothing between quotes.
  check_error([] { data::parse_augment("flip,"); }, {"got an empty item", "a comma too many"});
  check_error([] { data::parse_augment(","); }, {"augment ','", "got an empty item"});
  check_error([] { data::parse_augment("rotate"); }, {"got 'rotate'"});
}

namespace {

// An IDX folder: `n` training and 9 test 8x8 images of 3 labels (a bright
// left half for label 0, a bright right half otherwise), written raw.
void write_idx_folder(const qkv::testing::TempDir& d, int64_t n, Generator& g) {
  auto write = [&](const std::string& prefix, int64_t count) {
    std::vector<uint8_t> im = {0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 8};
    std::vector<uint8_t> lab = {0, 0, 8, 1, 0, 0, 0, 0};
    im[7] = lab[7] = static_cast<uint8_t>(count);
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t p = 0; p < 64; ++p)
        im.push_back(static_cast<uint8_t>((p % 8 < 4) == (i % 3 == 0) ? g.randint(150, 256) : 0));
      lab.push_back(static_cast<uint8_t>(i % 3));
    }
    for (const auto& [name, bytes] : {std::pair{prefix + "-images-idx3-ubyte", &im},
                                      std::pair{prefix + "-labels-idx1-ubyte", &lab}}) {
      std::ofstream out(d.file(name), std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes->data()),
                static_cast<std::streamsize>(bytes->size()));
      REQUIRE(out.good());
    }
  };
  write("train", n);
  write("t10k", 9);
}

train::TrainConfig vit_config(const std::string& dir) {
  train::TrainConfig c;
  c.model = "vit";
  c.data = dir;
  c.format = "idx";
  c.positions = "learned";
  c.pre_ln = true;
  c.activation = "gelu";
  c.patch = 4;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.batch = 8;
  c.steps = 10;
  c.warmup = 2;
  c.valid_fraction = 0.25;
  c.seed = qkv::testing::test_seed();
  return c;
}

}  // namespace

TEST_CASE(
    "--augment crop:2,flip: a step trains on the stored images cropped and mirrored as drawn; "
    "the held-out and test images are the unaugmented run's, pixel for pixel") {
  Generator g = qkv::testing::test_generator();
  qkv::testing::TempDir d;
  write_idx_folder(d, 40, g);
  train::TrainConfig c = vit_config(d.dir.string());
  train::Trainer plain(c);
  c.augment = "crop:2,flip";
  train::Trainer aug(c);
  REQUIRE(aug.pairs->train_images() != nullptr);
  const data::ImageStore& s = *aug.pairs->train_images();
  REQUIRE(s.size() == 30);
  REQUIRE(aug.pairs->heldout().size() == 10);
  REQUIRE(aug.test_set.size() == 9);
  auto same_heldout_and_test = [&] {
    for (size_t i = 0; i < 10; ++i)
      CHECK(aug.pairs->heldout().at(i).src == plain.pairs->heldout().at(i).src);
    for (size_t i = 0; i < 9; ++i) CHECK(aug.test_set.at(i).src == plain.test_set.at(i).src);
  };
  same_heldout_and_test();
  for (int step = 0; step < 2; ++step) {
    // What the step will draw, replayed from its stream: an image, the crop's
    // offset in the image padded by 2, the flip.
    Generator replay = aug.data_gen;
    int moved = 0;
    for (int64_t b = 0; b < c.batch; ++b) {
      const size_t i = static_cast<size_t>(replay.randint(0, 30));
      const int64_t top = replay.randint(0, 5), left = replay.randint(0, 5);
      const bool f = replay.randint(0, 2) == 1;
      const data::Seq img = s.pair(i).src;
      moved += crop_of_padded(std::vector<uint8_t>(img.begin(), img.end()), 8, 8, 1, 2, top, left,
                              f) != std::vector<int64_t>(img.begin(), img.end());
    }
    Generator same = aug.data_gen;
    const std::vector<data::Pair> want = s.draw(c.batch, same, data::Augment{2, true});
    CHECK(want.size() == 8);
    CHECK(same.state().s[0] == replay.state().s[0]);
    CHECK(moved > 0);
    CHECK(std::isfinite(aug.step()));
    // The step drew exactly that batch: its stream is where the replay's is.
    CHECK(aug.data_gen.state().s[0] == replay.state().s[0]);
    CHECK(aug.data_gen.state().s[1] == replay.state().s[1]);
  }
  same_heldout_and_test();
}

TEST_CASE("--augment is refused for a model that reads tokens, and a crop the images cannot take") {
  train::TrainConfig c;
  c.augment = "flip";
  check_error([&] { train::Trainer t(c); },
              {"--augment", "goes with a model that reads images", "seq2seq"});
  Generator g = qkv::testing::test_generator();
  qkv::testing::TempDir d;
  write_idx_folder(d, 12, g);
  train::TrainConfig v = vit_config(d.dir.string());
  v.augment = "crop:8";
  check_error([&] { train::Trainer t(v); }, {"--augment crop:8", "8x8"});
  v.augment = "crop:2,spin";
  check_error([&] { train::Trainer t(v); }, {"--augment: 'crop:2,spin': ", "got 'spin'"});
  try {  // the flag's name once, not "--augment: augment '...'"
    train::Trainer t(v);
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("augment 'crop") == std::string::npos);
  }
}

TEST_CASE("--augment resumes: a run saved after 2 steps and resumed takes the same steps 3 and 4") {
  Generator g = qkv::testing::test_generator();
  qkv::testing::TempDir d;
  write_idx_folder(d, 40, g);
  train::TrainConfig c = vit_config(d.dir.string());
  c.augment = "crop:1,flip";
  c.dropout = 0.1f;
  train::Trainer a(c);
  a.step();
  a.step();
  const std::string ckpt = d.file("ckpt.safetensors");
  a.save(ckpt);
  const real a3 = a.step(), a4 = a.step();
  train::Trainer b = train::Trainer::resume(ckpt);
  CHECK(b.cfg.augment == "crop:1,flip");
  CHECK(b.augment.crop == 1);
  CHECK(b.augment.flip);
  CHECK(b.step() == a3);
  CHECK(b.step() == a4);
}

TEST_CASE(
    "ImageStore::batch: images [begin, end) as pairs, pixel for pixel with their labels, into a "
    "buffer whose pairs keep their storage from batch to batch") {
  Generator g = qkv::testing::test_generator();
  std::vector<std::vector<uint8_t>> kept;
  const data::ImageStore s = random_store(10, 3, 4, 2, g, &kept);
  std::vector<data::Pair> b;
  auto same = [&](size_t begin) {
    for (size_t k = 0; k < b.size(); ++k) {
      CHECK(b[k].src == data::Seq(kept[begin + k].begin(), kept[begin + k].end()));
      CHECK(b[k].tgt == data::Seq{static_cast<int64_t>((begin + k) % 3)});
    }
  };
  s.batch(2, 6, b);
  REQUIRE(b.size() == 4);
  same(2);
  const int64_t* src0 = b[0].src.data();
  const int64_t* tgt3 = b[3].tgt.data();
  s.batch(6, 10, b);  // as many again: read into the same storage
  REQUIRE(b.size() == 4);
  same(6);
  CHECK(b[0].src.data() == src0);
  CHECK(b[3].tgt.data() == tgt3);
  s.batch(9, 10, b);  // the last, shorter batch
  REQUIRE(b.size() == 1);
  same(9);
  s.batch(4, 4, b);
  CHECK(b.empty());
  check_error([&] { s.batch(6, 5, b); }, {"ImageStore::batch: images [6, 5) of 10"});
  check_error([&] { s.batch(0, 11, b); }, {"ImageStore::batch: images [0, 11) of 10"});
}

TEST_CASE(
    "PairSet: a set of images and the same images kept as pairs give the same batches, pairs "
    "and lengths; a range past the set is refused naming it") {
  Generator g = qkv::testing::test_generator();
  std::vector<std::vector<uint8_t>> kept;
  data::ImageStore s = random_store(7, 2, 3, 1, g, &kept);
  std::vector<data::Pair> as_pairs;
  s.batch(0, 7, as_pairs);
  const data::PairSet images(std::move(s)), pairs(as_pairs);
  REQUIRE(images.images() != nullptr);
  CHECK(pairs.images() == nullptr);
  CHECK(images.size() == 7);
  CHECK(pairs.size() == 7);
  CHECK(images.longest_source() == 6);
  CHECK(images.longest_target() == 1);
  CHECK(images.longest_pair() == 7);
  CHECK(pairs.longest_source() == 6);
  CHECK(pairs.longest_target() == 1);
  CHECK(pairs.longest_pair() == 7);
  std::vector<data::Pair> a, b;
  for (size_t i = 0; i < 7; i += 3) {
    images.batch(i, std::min<size_t>(7, i + 3), a);
    pairs.batch(i, std::min<size_t>(7, i + 3), b);
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      CHECK(a[k].src == data::Seq(kept[i + k].begin(), kept[i + k].end()));
      CHECK(a[k].src == b[k].src);
      CHECK(a[k].tgt == b[k].tgt);
    }
  }
  CHECK(images.at(5).src == as_pairs[5].src);
  CHECK(images.at(5).tgt == data::Seq{2});
  // Pairs of unequal lengths: the longest pair is not the longest source plus
  // the longest target.
  const data::PairSet mixed(std::vector<data::Pair>{{{5, 6, 7}, {8}}, {{5}, {8, 9, 9}}});
  CHECK(mixed.longest_source() == 3);
  CHECK(mixed.longest_target() == 3);
  CHECK(mixed.longest_pair() == 4);
  CHECK(data::PairSet().empty());
  CHECK(data::PairSet().longest_pair() == 0);
  check_error([&] { images.batch(5, 8, a); }, {"PairSet::batch: pairs [5, 8) of a set of 7"});
  check_error([&] { pairs.at(7); }, {"PairSet::at: pair 7 of a set of 7"});
}

TEST_CASE(
    "--format idx: the held-out and test sets are kept as bytes and read back as the IDX files' "
    "images, pixel for pixel in the split's order, with their labels; scored, they give what the "
    "same images kept as pairs give") {
  Generator g = qkv::testing::test_generator();
  qkv::testing::TempDir d;
  write_idx_folder(d, 40, g);
  const train::TrainConfig c = vit_config(d.dir.string());
  train::Trainer t(c);
  const data::ImageSet train = data::read_idx_images(d.file("train-images-idx3-ubyte"),
                                                     d.file("train-labels-idx1-ubyte"), 1 << 20);
  const data::ImageSet test = data::read_idx_images(d.file("t10k-images-idx3-ubyte"),
                                                    d.file("t10k-labels-idx1-ubyte"), 1 << 20);
  const train::detail::HeldoutSplit split = train::detail::heldout_split(40, c.seed, 0.25);
  REQUIRE(split.n_valid == 10);
  const data::PairSet& held = t.pairs->heldout();
  REQUIRE(held.images() != nullptr);  // bytes, not pairs of ids
  REQUIRE(t.test_set.images() != nullptr);
  REQUIRE(held.size() == 10);
  REQUIRE(t.test_set.size() == 9);
  CHECK(t.labels == std::vector<std::string>{"0", "1", "2"});  // label k is index k
  // Image i of an IDX set as the pair it should be.
  auto want = [](const data::ImageSet& s, size_t i) {
    const uint8_t* px = s.pixels.data() + i * 64;  // (8, 8)
    return data::Pair{data::Seq(px, px + 64), data::Seq{s.labels[i]}};
  };
  std::vector<data::Pair> b;
  for (size_t i = 0; i < 10; i += 4) {  // batches of 4, 4 and 2
    held.batch(i, std::min<size_t>(10, i + 4), b);
    for (size_t k = 0; k < b.size(); ++k) {
      const data::Pair w = want(train, split.order[i + k]);
      CHECK(b[k].src == w.src);
      CHECK(b[k].tgt == w.tgt);
    }
  }
  t.test_set.batch(0, 9, b);
  REQUIRE(b.size() == 9);
  for (size_t i = 0; i < 9; ++i) {
    const data::Pair w = want(test, i);
    CHECK(b[i].src == w.src);
    CHECK(b[i].tgt == w.tgt);
  }
  // Scored 4 at a time (the buffer refilled and cut short at the end): the
  // same numbers as the test images kept whole as pairs.
  for (int i = 0; i < 3; ++i) t.step();
  const train::EvalResult bytes = t.evaluate(t.test_set, 4), whole = t.evaluate(b, 4);
  CHECK(bytes.sequences == 9);
  CHECK(bytes.loss == whole.loss);
  CHECK(bytes.exact == whole.exact);
  CHECK(bytes.predictions == whole.predictions);
}
