// Reading one image for a model that classifies images (a ViT's --ask), through
// Debian's libraries, never a hand-written decoder: PNG through libpng's
// simplified API (png_image), PGM / PPM / PBM / PAM through libnetpbm.
//
// Pixels come out channel-major, (C, rows, cols), as a ViT's patches read
// them: 1 channel (gray) or 3 (R, G, B). An alpha channel is composited onto
// black (Fashion-MNIST's background). Samples of other depths (16-bit PNG, a
// PGM of maxval 65535 or 15) become 0..255: by libpng's simplified API for a
// PNG, as round(255 * v / maxval) for Netpbm.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::data {

struct Image {
  int64_t rows = 0, cols = 0, channels = 0;
  std::vector<uint8_t> pixels;  // (channels, rows, cols): channel c, row y, column x at
                                // (c * rows + y) * cols + x
};

// What a reader expects of an image; 0 takes any.
struct ImageShape {
  int64_t rows = 0, cols = 0;
  int64_t channels = 0;  // 1 or 3: converted to it (gray <-> RGB, image_with_channels)
};

// The largest image read, in pixels (rows x cols): an image classifier's
// input, not a photograph's; a header claiming more is refused before any
// allocation.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 24;

// The image at `path`, a PNG or a Netpbm file (by its first bytes, not its
// name), with its own channel count (1 or 3), or converted to
// `want.channels`. Refused in one line naming the file and what was expected:
// missing, not a regular file, not an image (neither PNG nor Netpbm), a
// broken one (libpng's or libnetpbm's words), larger than kMaxImagePixels,
// or of other rows x cols than `want` asks.
Image read_image(const std::string& path, const ImageShape& want = {});

// `im` with `channels` channels: 3 -> 1 by the luma weights of ITU-R BT.601
// (Y = 0.299 R + 0.587 G + 0.114 B, what PIL's convert("L") and most tools
// use), 1 -> 3 by copying the gray plane thrice, the same count unchanged.
// Any other count is refused (`what` names the image in the message).
Image image_with_channels(const Image& im, int64_t channels, const std::string& what);

}  // namespace qkv::data
