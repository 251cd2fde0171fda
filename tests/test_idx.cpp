// IDX files (data/idx.h): tiny files written here, raw and gzip-compressed
// through zlib, read back; and every kind of bad file refused in one line
// naming the file and what was expected.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"
#include "errors.h"
#include "temp_dir.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

// An IDX file's bytes: magic 0x00 0x00 type ndims, big-endian uint32 dims, data.
Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_raw(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

Bytes iota_bytes(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

constexpr int64_t kMax = 1 << 20;

}  // namespace

TEST_CASE("read_idx reads a raw and a gzipped file to the same dims and bytes") {
  TempDir t;
  const Bytes data = iota_bytes(2 * 3 * 4);
  write_raw(t.file("a.idx"), idx_bytes({2, 3, 4}, data));
  write_gz(t.file("a.idx.gz"), idx_bytes({2, 3, 4}, data));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    INFO(name);
    const data::IdxArray a = data::read_idx(t.file(name), kMax);
    CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
    CHECK(a.bytes == data);
  }
  // A dim of 0: an empty array, no data.
  write_raw(t.file("empty.idx"), idx_bytes({0, 5}, {}));
  const data::IdxArray e = data::read_idx(t.file("empty.idx"), kMax);
  CHECK(e.dims == std::vector<int64_t>{0, 5});
  CHECK(e.bytes.empty());
  // Dims past 2^24 are read big-endian (a 1-d file of 0x01000002 bytes would
  // be 16 MB: the header alone is checked here, against a smaller max_bytes).
  write_raw(t.file("big.idx"), idx_bytes({0x01000002u}, {}));
  check_error([&] { data::read_idx(t.file("big.idx"), kMax); },
              {"big.idx", "(16777218)", "more than the 1048576 bytes"});
}

TEST_CASE("read_idx_images pairs a 3-d images file with a 1-d labels file") {
  TempDir t;
  const Bytes pixels = iota_bytes(3 * 2 * 5), labels = {9, 0, 4};
  write_gz(t.file("images.gz"), idx_bytes({3, 2, 5}, pixels));
  write_raw(t.file("labels"), idx_bytes({3}, labels));
  const data::ImageSet s = data::read_idx_images(t.file("images.gz"), t.file("labels"), kMax);
  CHECK(s.count == 3);
  CHECK(s.rows == 2);
  CHECK(s.cols == 5);
  CHECK(s.pixels == pixels);
  CHECK(s.labels == labels);
}

TEST_CASE("read_idx refuses a missing file, a folder, a bad magic and another element type") {
  TempDir t;
  check_error([&] { data::read_idx(t.file("nothing.idx"), kMax); }, {"nothing.idx: no such file"});
  check_error([&] { data::read_idx(t.dir.string(), kMax); }, {"not a regular file"});
  write_raw(t.file("text.idx"), {'h', 'e', 'l', 'l', 'o'});
  check_error([&] { data::read_idx(t.file("text.idx"), kMax); },
              {"text.idx: not an IDX file", "0x68 0x65", "expected 0x00 0x00"});
  write_gz(t.file("float.idx.gz"), idx_bytes({1}, {0, 0, 0, 0}, 0x0d));
  check_error([&] { data::read_idx(t.file("float.idx.gz"), kMax); },
              {"float.idx.gz: IDX element type 0x0d (float32)", "expected 0x08 (unsigned byte)"});
  write_raw(t.file("nodims.idx"), {0, 0, 8, 0});
  check_error([&] { data::read_idx(t.file("nodims.idx"), kMax); },
              {"nodims.idx", "0 dimensions", "expected at least 1"});
  write_raw(t.file("short.idx"), {0, 0});
  check_error([&] { data::read_idx(t.file("short.idx"), kMax); },
              {"short.idx: truncated: 2 bytes", "4-byte magic"});
}

TEST_CASE("read_idx refuses a header whose dims lie: too large, data short or long") {
  TempDir t;
  // Dims whose product overflows 64 bits if multiplied blindly: refused
  // before any allocation.
  write_raw(t.file("huge.idx"), idx_bytes({0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  check_error([&] { data::read_idx(t.file("huge.idx"), kMax); },
              {"huge.idx", "(4294967295, 4294967295, 4294967295)", "more than the 1048576"});
  // Exactly max_bytes is read; one more is refused.
  write_raw(t.file("at_max.idx"), idx_bytes({4, 4}, iota_bytes(16)));
  CHECK(data::read_idx(t.file("at_max.idx"), 16).bytes.size() == 16);
  check_error([&] { data::read_idx(t.file("at_max.idx"), 15); }, {"more than the 15 bytes"});
  for (bool gz : {false, true}) {
    INFO("gzip: " << gz);
    const auto write = gz ? write_gz : write_raw;
    write(t.file("short"), idx_bytes({2, 3}, iota_bytes(5)));
    check_error([&] { data::read_idx(t.file("short"), kMax); },
                {"short: truncated", "(2, 3) need 6 bytes of data, the file holds 5"});
    write(t.file("long"), idx_bytes({2, 3}, iota_bytes(7)));
    check_error([&] { data::read_idx(t.file("long"), kMax); },
                {"long: longer than its header says", "past the 6 bytes of dims (2, 3)"});
    // A header cut inside its dims.
    Bytes cut = idx_bytes({2, 3}, {});
    cut.resize(6);
    write(t.file("cut"), cut);
    check_error([&] { data::read_idx(t.file("cut"), kMax); },
                {"cut: truncated", "2 dims (8 bytes), the file holds 2"});
  }
}

TEST_CASE("read_idx refuses a corrupt gzip stream and a gzip file cut short") {
  TempDir t;
  write_gz(t.file("good.gz"), idx_bytes({64}, iota_bytes(64)));
  const Bytes gz = read_all(t.file("good.gz"));
  REQUIRE(gz.size() > 20);
  // A flipped byte inside the deflate data (after the 10-byte gzip header):
  // zlib finds a bad block or a CRC mismatch.
  Bytes bad = gz;
  for (size_t i = 10; i + 8 < bad.size(); ++i) bad[i] ^= 0x55;
  write_raw(t.file("bad.gz"), bad);
  check_error([&] { data::read_idx(t.file("bad.gz"), kMax); },
              {"bad.gz: corrupt gzip stream (zlib: ", "expected a gzip-compressed or raw IDX"});
  // The CRC and length trailer changed: the data decodes, the check fails.
  Bytes crc = gz;
  crc[crc.size() - 8] ^= 0xff;
  write_raw(t.file("crc.gz"), crc);
  check_error([&] { data::read_idx(t.file("crc.gz"), kMax); }, {"crc.gz: corrupt gzip stream"});
  // Cut in the middle of the deflate data: the data ends early.
  Bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
  write_raw(t.file("cut.gz"), cut);
  check_error([&] { data::read_idx(t.file("cut.gz"), kMax); }, {"cut.gz: truncated"});
}

TEST_CASE("read_idx_images refuses wrong dims, empty images and counts that disagree") {
  TempDir t;
  write_raw(t.file("flat"), idx_bytes({2, 6}, iota_bytes(12)));
  write_raw(t.file("images"), idx_bytes({2, 2, 3}, iota_bytes(12)));
  write_raw(t.file("labels"), idx_bytes({2}, {1, 2}));
  write_raw(t.file("labels3"), idx_bytes({3}, {1, 2, 3}));
  write_raw(t.file("labels2d"), idx_bytes({2, 1}, {1, 2}));
  write_raw(t.file("none"), idx_bytes({0, 2, 3}, {}));
  check_error([&] { data::read_idx_images(t.file("flat"), t.file("labels"), kMax); },
              {"flat: IDX images of 2 dims (2, 6), expected 3 (count, rows, cols)"});
  check_error([&] { data::read_idx_images(t.file("images"), t.file("labels2d"), kMax); },
              {"labels2d: IDX labels of 2 dims (2, 1), expected 1 (count)"});
  // An images file where the labels belong: said so, not by its dimensions alone.
  check_error(
      [&] { data::read_idx_images(t.file("images"), t.file("images"), kMax); },
      {"images: holds images (IDX magic 0x00000803", "are the images and labels files swapped?"});
  check_error([&] { data::read_idx_images(t.file("images"), t.file("labels3"), kMax); },
              {"labels3: 3 labels, expected one per image", "images holds 2"});
  check_error([&] { data::read_idx_images(t.file("none"), t.file("labels"), kMax); },
              {"none: IDX images of dims (0, 2, 3)", "above 0"});
}
