// IDX reading through zlib (gzopen/gzread read gzip and raw files alike).
#include "data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace qkv::data {

namespace {

// The names of IDX's element types, for the message that refuses one.
const char* idx_type_name(int type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0b:
      return "int16";
    case 0x0c:
      return "int32";
    case 0x0d:
      return "float32";
    case 0x0e:
      return "float64";
    default:
      return "not an IDX type";
  }
}

std::string hex_byte(unsigned char b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", b);
  return s;
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

// An open gzFile, closed at scope exit.
class GzReader {
 public:
  GzReader(const std::string& path, const std::string& shown) : shown_(shown) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_)
      throw Error(shown + ": cannot be opened" +
                  (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
  }
  ~GzReader() { gzclose(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Up to n bytes into p (fewer only at the end of the data); a corrupt gzip
  // stream is an error. A stream cut short (zlib's Z_BUF_ERROR) reads as the
  // end of the data: the caller reports the file as truncated.
  int64_t read(uint8_t* p, int64_t n) {
    int64_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 30));
      const int r = gzread(f_, p + got, chunk);
      if (r < 0) fail();
      if (r == 0) break;
      got += r;
    }
    int err = Z_OK;
    gzerror(f_, &err);
    if (err != Z_OK && err != Z_BUF_ERROR) fail();
    return got;
  }

 private:
  [[noreturn]] void fail() {
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    if (err == Z_ERRNO) throw Error(shown_ + ": cannot be read (" + std::strerror(errno) + ")");
    throw Error(shown_ + ": corrupt gzip stream (zlib: " + brief(msg ? msg : "?") +
                "), expected a gzip-compressed or raw IDX file");
  }
  gzFile f_ = nullptr;
  std::string shown_;
};

}  // namespace

IdxArray read_idx(const std::string& path, int64_t max_bytes) {
  const std::string shown = brief(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(shown + ": " + (errno == ENOENT ? "no such file" : std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  GzReader in(path, shown);

  // The magic number: 0x00 0x00 type ndims.
  uint8_t magic[4];
  const int64_t got_magic = in.read(magic, 4);
  if (got_magic < 4)
    throw Error(shown + ": truncated: " + std::to_string(got_magic) +
                " bytes, expected an IDX file (4-byte magic number 0x00 0x00 type ndims, "
                "then the dims)");
  if (magic[0] != 0 || magic[1] != 0)
    throw Error(shown + ": not an IDX file: it begins " + hex_byte(magic[0]) + " " +
                hex_byte(magic[1]) + ", expected 0x00 0x00");
  if (magic[2] != kIdxUnsignedByte)
    throw Error(shown + ": IDX element type " + hex_byte(magic[2]) + " (" +
                idx_type_name(magic[2]) + "), expected 0x08 (unsigned byte)");
  const int ndims = magic[3];
  if (ndims == 0) throw Error(shown + ": IDX file of 0 dimensions, expected at least 1");

  // The dims, big-endian uint32 each.
  std::vector<uint8_t> header(4 * static_cast<size_t>(ndims));
  const int64_t got_header = in.read(header.data(), static_cast<int64_t>(header.size()));
  if (got_header < static_cast<int64_t>(header.size()))
    throw Error(shown + ": truncated: the header names " + std::to_string(ndims) + " dims (" +
                std::to_string(header.size()) + " bytes), the file holds " +
                std::to_string(got_header) + " of them");
  IdxArray a;
  a.dims.resize(ndims);
  for (int d = 0; d < ndims; ++d) {
    const uint8_t* b = &header[4 * static_cast<size_t>(d)];
    a.dims[d] = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
  }
  // prod(dims) against max_bytes before anything is allocated: a header may
  // lie (dims of 2^32 - 1 each), so the product is checked by division, never
  // formed past max_bytes. Any dim of 0 makes an empty array.
  int64_t n = std::find(a.dims.begin(), a.dims.end(), 0) == a.dims.end() ? 1 : 0;
  for (int64_t dim : a.dims) {
    if (n == 0) break;
    if (n > max_bytes / dim)
      throw Error(shown + ": the header's dims " + shape_text(a.dims) + " hold more than the " +
                  std::to_string(max_bytes) + " bytes this program reads");
    n *= dim;
  }

  // The data: exactly n bytes, then the end of the file.
  a.bytes.resize(static_cast<size_t>(n));
  const int64_t got = in.read(a.bytes.data(), n);
  if (got < n)
    throw Error(shown + ": truncated: the header's dims " + shape_text(a.dims) + " need " +
                std::to_string(n) + " bytes of data, the file holds " + std::to_string(got));
  uint8_t extra = 0;
  if (in.read(&extra, 1) > 0)
    throw Error(shown + ": longer than its header says: data goes on past the " +
                std::to_string(n) + " bytes of dims " + shape_text(a.dims));
  return a;
}

ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path,
                         int64_t max_bytes) {
  IdxArray images = read_idx(images_path, max_bytes);
  if (images.dims.size() != 3)
    throw Error(brief(images_path) + ": IDX images of " + std::to_string(images.dims.size()) +
                " dims " + shape_text(images.dims) + ", expected 3 (count, rows, cols)");
  for (int64_t d : images.dims)
    if (d == 0)
      throw Error(brief(images_path) + ": IDX images of dims " + shape_text(images.dims) +
                  ", expected count, rows and cols above 0");
  IdxArray labels = read_idx(labels_path, max_bytes);
  if (labels.dims.size() == 3)  // the magic of images: 0x00 0x00 0x08 0x03
    throw Error(brief(labels_path) + ": holds images (IDX magic 0x00000803, dims " +
                shape_text(labels.dims) + "), not labels (0x00000801): are the images and labels " +
                "files swapped?");
  if (labels.dims.size() != 1)
    throw Error(brief(labels_path) + ": IDX labels of " + std::to_string(labels.dims.size()) +
                " dims " + shape_text(labels.dims) + ", expected 1 (count)");
  if (labels.dims[0] != images.dims[0])
    throw Error(brief(labels_path) + ": " + std::to_string(labels.dims[0]) +
                " labels, expected one per image: " + brief(images_path) + " holds " +
                std::to_string(images.dims[0]));
  ImageSet s;
  s.count = images.dims[0];
  s.rows = images.dims[1];
  s.cols = images.dims[2];
  s.pixels = std::move(images.bytes);
  s.labels = std::move(labels.bytes);
  return s;
}

}  // namespace qkv::data
