// IDX files, the format of MNIST and Fashion-MNIST (LeCun's page; Debian's
// dataset-fashion-mnist ships them gzip-compressed):
//
//   byte 0, 1   0x00 0x00                     the magic number's first half
//   byte 2      the element type              0x08 unsigned byte (the only one read here)
//   byte 3      the number of dimensions N
//   N x 4 bytes each dimension, a big-endian uint32
//   the data    prod(dims) elements, the last dimension fastest
//
// A file may be gzip-compressed or raw: zlib's gzread reads both. Every check
// is made before the data is allocated (the header's dims against max_bytes),
// and the data must be exactly as long as the header says. Errors name the
// file and what was expected, in one line: "<path>: ...".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::data {

// The element type this reader accepts (byte 2 of the magic number).
inline constexpr int kIdxUnsignedByte = 0x08;

// An IDX file's dims and data (unsigned bytes, row-major: the last dim fastest).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // prod(dims) of them
};

// The whole IDX file at `path` (gzip or raw), refused when it is missing, not
// a regular file, not IDX (magic), of another element type than 0x08, without
// dimensions, larger than max_bytes of data by its header, shorter or longer
// than its header says, or a corrupt gzip stream.
IdxArray read_idx(const std::string& path, int64_t max_bytes);

// Images and their labels, as MNIST ships them: an images file of 3 dims
// (count, rows, cols) and a labels file of 1 dim (count), counts equal.
struct ImageSet {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (count, rows, cols), 0 = background
  std::vector<uint8_t> labels;  // (count)
};

// Both files through read_idx (max_bytes each), then their shapes checked:
// images 3-d with count, rows and cols above 0, labels 1-d, counts equal.
ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path,
                         int64_t max_bytes);

}  // namespace qkv::data
