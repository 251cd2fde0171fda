// One image from a file (data/image.h): tiny PNGs written here through
// libpng's simplified API and tiny Netpbm files written as their format
// says, read back through libpng and libnetpbm; channel conversion; and the
// bad files refused in one line naming the file and what was expected.
#include <doctest/doctest.h>
#include <png.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "data/image.h"
#include "errors.h"
#include "temp_dir.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::TempDir;
using qkv::testing::write_file;

namespace {

using Bytes = std::vector<uint8_t>;

// A PNG of `format` (PNG_FORMAT_GRAY, _RGB, _RGBA) from interleaved (rows, cols, C) bytes.
void write_png(const std::string& path, int rows, int cols, uint32_t format, const Bytes& px) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(cols);
  png.height = static_cast<png_uint_32>(rows);
  png.format = format;
  REQUIRE(px.size() == PNG_IMAGE_SIZE(png));
  REQUIRE(png_image_write_to_file(&png, path.c_str(), 0, px.data(), 0, nullptr) != 0);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("read_image reads a gray and an RGB PNG written by libpng, channel-major") {
  TempDir t;
  // 2 rows x 3 cols, gray.
  write_png(t.file("gray.png"), 2, 3, PNG_FORMAT_GRAY, {0, 10, 20, 30, 40, 255});
  const data::Image g = data::read_image(t.file("gray.png"));
  CHECK(g.rows == 2);
  CHECK(g.cols == 3);
  CHECK(g.channels == 1);
  CHECK(g.pixels == Bytes{0, 10, 20, 30, 40, 255});
  // 1 row x 2 cols, RGB: interleaved in the file, planes (R, G, B) read.
  write_png(t.file("rgb.png"), 1, 2, PNG_FORMAT_RGB, {1, 2, 3, 4, 5, 6});
  const data::Image c = data::read_image(t.file("rgb.png"));
  CHECK(c.channels == 3);
  CHECK(c.pixels == Bytes{1, 4, 2, 5, 3, 6});
  // RGBA: the alpha channel composited onto black (alpha 0 -> 0, 255 -> itself).
  write_png(t.file("rgba.png"), 1, 2, PNG_FORMAT_RGBA, {200, 100, 50, 255, 200, 100, 50, 0});
  const data::Image a = data::read_image(t.file("rgba.png"));
  CHECK(a.channels == 3);
  CHECK(a.pixels == Bytes{200, 0, 100, 0, 50, 0});
}

TEST_CASE("read_image converts RGB to gray by BT.601 luma and gray to RGB by copying") {
  TempDir t;
  const Bytes rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 200, 90};  // 1 x 4
  write_png(t.file("rgb.png"), 1, 4, PNG_FORMAT_RGB, rgb);
  const data::Image g = data::read_image(t.file("rgb.png"), {1, 4, 1});
  REQUIRE(g.channels == 1);
  for (int i = 0; i < 4; ++i) {
    const double y = 0.299 * rgb[3 * i] + 0.587 * rgb[3 * i + 1] + 0.114 * rgb[3 * i + 2];
    CHECK(g.pixels[i] == static_cast<uint8_t>(std::lround(y)));
  }
  CHECK(g.pixels[0] == 76);  // 0.299 * 255 = 76.2
  write_png(t.file("gray.png"), 1, 2, PNG_FORMAT_GRAY, {7, 9});
  const data::Image c = data::read_image(t.file("gray.png"), {0, 0, 3});
  CHECK(c.channels == 3);
  CHECK(c.pixels == Bytes{7, 9, 7, 9, 7, 9});
  check_error([&] { data::image_with_channels(c, 2, "x.png"); },
              {"x.png: an image of 3 channels, expected 2 (1 gray or 3 RGB)"});
}

TEST_CASE("read_image reads PGM and PPM, binary and plain, through libnetpbm") {
  TempDir t;
  write_file(t.file("a.pgm"),
             std::string("P5\n3 2\n255\n") + std::string("\x00\x0a\x14\x1e\x28\xff", 6));
  const data::Image g = data::read_image(t.file("a.pgm"));
  CHECK(g.rows == 2);
  CHECK(g.cols == 3);
  CHECK(g.channels == 1);
  CHECK(g.pixels == Bytes{0, 10, 20, 30, 40, 255});
  // Plain PGM of maxval 15: 0..15 scaled to 0..255 (15 -> 255, 5 -> 85).
  write_file(t.file("plain.pgm"), "P2\n# a comment\n2 1\n15\n5 15\n");
  CHECK(data::read_image(t.file("plain.pgm")).pixels == Bytes{85, 255});
  // 16-bit PGM: 65535 -> 255, 257 -> 1.
  write_file(t.file("deep.pgm"),
             std::string("P5 2 1 65535\n") + std::string("\xff\xff\x01\x01", 4));
  CHECK(data::read_image(t.file("deep.pgm")).pixels == Bytes{255, 1});
  write_file(t.file("a.ppm"),
             std::string("P6 2 1 255\n") + std::string("\x01\x02\x03\x04\x05\x06", 6));
  const data::Image c = data::read_image(t.file("a.ppm"));
  CHECK(c.channels == 3);
  CHECK(c.pixels == Bytes{1, 4, 2, 5, 3, 6});
  // The same file as gray, as a ViT trained on gray images reads it.
  CHECK(data::read_image(t.file("a.ppm"), {1, 2, 1}).pixels ==
        Bytes{static_cast<uint8_t>(std::lround(0.299 * 1 + 0.587 * 2 + 0.114 * 3)),
              static_cast<uint8_t>(std::lround(0.299 * 4 + 0.587 * 5 + 0.114 * 6))});
}

TEST_CASE("read_image refuses a missing file, a folder, a non-image and broken images") {
  TempDir t;
  check_error([&] { data::read_image(t.file("none.png")); }, {"none.png: no such file"});
  check_error([&] { data::read_image(t.dir.string()); }, {"not a regular file"});
  write_file(t.file("text.png"), "hello, world");
  check_error([&] { data::read_image(t.file("text.png")); },
              {"text.png: not an image: expected a PNG or a Netpbm file", "it begins 0x68 0x65"});
  write_file(t.file("empty.png"), "");
  check_error([&] { data::read_image(t.file("empty.png")); },
              {"empty.png: not an image", "found 0 bytes"});
  // A PNG cut inside its image data (the last 12 bytes are the IEND chunk):
  // the header reads, the pixels do not.
  write_png(t.file("good.png"), 4, 4, PNG_FORMAT_GRAY, Bytes(16, 9));
  const std::string good = read_file(t.file("good.png"));
  REQUIRE(good.size() > 40);
  write_file(t.file("cut.png"), good.substr(0, good.size() - 20));
  check_error([&] { data::read_image(t.file("cut.png")); }, {"cut.png: a broken PNG (libpng: "});
  write_file(t.file("sig.png"), good.substr(0, 8));
  check_error([&] { data::read_image(t.file("sig.png")); },
              {"sig.png: not a readable PNG (libpng: "});
  // A PGM whose header promises 4x4 pixels and holds 3 bytes.
  write_file(t.file("short.pgm"), "P5 4 4 255\nabc");
  check_error([&] { data::read_image(t.file("short.pgm")); },
              {"short.pgm: a broken Netpbm image (libnetpbm: "});
  write_file(t.file("maxval.pgm"), "P5 1 1 0\n\x01");
  check_error([&] { data::read_image(t.file("maxval.pgm")); },
              {"maxval.pgm: a broken Netpbm image"});
  // A header claiming 20000 x 20000: refused before any pixel is allocated.
  write_file(t.file("huge.pgm"), "P5 20000 20000 255\n");
  check_error([&] { data::read_image(t.file("huge.pgm")); },
              {"huge.pgm: a 20000x20000 image (rows x cols) is more than the 16777216 pixels"});
  // After a refused file, a good one still reads (libnetpbm's jump buffer restored).
  write_file(t.file("ok.pgm"), "P2 1 1 255 42\n");
  CHECK(data::read_image(t.file("ok.pgm")).pixels == Bytes{42});
}

TEST_CASE("read_image refuses an image of other rows x cols than expected") {
  TempDir t;
  write_png(t.file("small.png"), 2, 3, PNG_FORMAT_GRAY, Bytes(6, 0));
  check_error(
      [&] {
        data::read_image(t.file("small.png"), {28, 28, 1});
      },
      {"small.png: a 2x3 image (rows x cols), expected 28x28"});
  check_error(
      [&] {
        data::read_image(t.file("small.png"), {0, 4, 0});
      },
      {"small.png: a 2x3 image (rows x cols), expected 4 cols"});
  CHECK(data::read_image(t.file("small.png"), {2, 3, 1}).pixels.size() == 6);
}
