// One image from a file: PNG through libpng's simplified API, Netpbm through
// libnetpbm; the channel conversion a model's reader asks for.
#include "data/image.h"

#include <netpbm/pam.h>
#include <png.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace qkv::data {

namespace {

std::string dims_text(int64_t rows, int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

std::string too_large(const std::string& shown, int64_t rows, int64_t cols) {
  return shown + ": a " + dims_text(rows, cols) + " image (rows x cols) is more than the " +
         std::to_string(kMaxImagePixels) + " pixels this program reads";
}

// (rows, cols, C) interleaved -> (C, rows, cols) planes.
Image planes_from_interleaved(const uint8_t* px, int64_t rows, int64_t cols, int64_t C) {
  Image im{rows, cols, C, std::vector<uint8_t>(static_cast<size_t>(rows * cols * C))};
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < rows * cols; ++i) im.pixels[c * rows * cols + i] = px[i * C + c];
  return im;
}

// ---- PNG ----------------------------------------------------------------------

Image read_png(const std::string& path, const std::string& shown) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&png, path.c_str()))
    throw Error(shown + ": not a readable PNG (libpng: " + brief(png.message) + ")");
  const int64_t rows = png.height, cols = png.width;
  if (rows * cols > kMaxImagePixels) {
    png_image_free(&png);
    throw Error(too_large(shown, rows, cols));
  }
  // Gray stays gray (1 channel), colour (and a palette) becomes RGB (3).
  const int64_t C = (png.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
  png.format = C == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  // With no background colour given, libpng composites an alpha channel onto
  // the buffer as it is: zeroed, that is black.
  std::vector<uint8_t> px(PNG_IMAGE_SIZE(png), 0);  // (rows, cols, C)
  if (!png_image_finish_read(&png, nullptr, px.data(), 0, nullptr))
    throw Error(shown + ": a broken PNG (libpng: " + brief(png.message) + ")");
  return planes_from_interleaved(px.data(), rows, cols, C);
}

// ---- Netpbm -------------------------------------------------------------------
// libnetpbm reports a bad file by pm_error, which longjmps to the buffer set
// by pm_setjmpbufsave (else it exits the program). So read_netpbm_c keeps
// only C objects alive between its setjmp and the reads (the jump skips no
// destructor), and its caller turns the outcome into a qkv::Error. libnetpbm's
// jump buffer and message hook are process-wide: one image is read at a time.

// The last message of pm_error, kept instead of printed.
thread_local char netpbm_message[256];
void keep_netpbm_message(const char* msg) {
  std::snprintf(netpbm_message, sizeof netpbm_message, "%s", msg);
}

struct NetpbmPixels {
  int rows = 0, cols = 0, depth = 0;
  unsigned char* px = nullptr;  // (rows, cols, depth) scaled to 0..255, malloc'd
};
enum class NetpbmOutcome { kRead, kBroken, kTooLarge, kDepth };

NetpbmOutcome read_netpbm_c(FILE* f, NetpbmPixels* out) {
  static std::once_flag init;
  std::call_once(init, [] { pm_init("qkv", 0); });
  pm_setusererrormsgfn(keep_netpbm_message);
  struct pam pam;
  tuple* volatile row = nullptr;
  unsigned char* volatile px = nullptr;
  jmp_buf jump;
  jmp_buf* saved = nullptr;
  pm_setjmpbufsave(&jump, &saved);
  if (setjmp(jump) != 0) {  // pm_error: a broken file
    pm_setjmpbuf(saved);
    if (row) pnm_freepamrow(row);
    std::free(px);
    return NetpbmOutcome::kBroken;
  }
  pnm_readpaminit(f, &pam, PAM_STRUCT_SIZE(tuple_type));
  out->rows = pam.height;
  out->cols = pam.width;
  out->depth = static_cast<int>(pam.depth);
  NetpbmOutcome outcome = NetpbmOutcome::kRead;
  if (int64_t{pam.height} * pam.width > kMaxImagePixels) outcome = NetpbmOutcome::kTooLarge;
  // 1 gray, 2 gray + alpha, 3 RGB, 4 RGB + alpha (PAM's tuple types).
  else if (pam.depth < 1 || pam.depth > 4)
    outcome = NetpbmOutcome::kDepth;
  if (outcome == NetpbmOutcome::kRead) {
    const int C = pam.depth == 2 || pam.depth == 4 ? static_cast<int>(pam.depth) - 1
                                                   : static_cast<int>(pam.depth);
    out->depth = C;
    px = static_cast<unsigned char*>(
        std::calloc(static_cast<size_t>(pam.height) * pam.width * C, 1));
    row = pnm_allocpamrow(&pam);
    const double maxval = static_cast<double>(pam.maxval);
    for (int y = 0; y < pam.height; ++y) {
      pnm_readpamrow(&pam, row);
      for (int x = 0; x < pam.width; ++x)
        for (int c = 0; c < C; ++c) {
          // 0..maxval -> 0..255; an alpha channel composites onto black.
          double v = row[x][c] / maxval;
          if (C < static_cast<int>(pam.depth)) v *= row[x][C] / maxval;
          px[(static_cast<size_t>(y) * pam.width + x) * C + c] =
              static_cast<unsigned char>(std::lround(v * 255.0));
        }
    }
    pnm_freepamrow(row);
    out->px = px;
  }
  pm_setjmpbuf(saved);
  return outcome;
}

Image read_netpbm(const std::string& path, const std::string& shown) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(shown + ": cannot be opened (" + std::strerror(errno) + ")");
  NetpbmPixels p;
  const NetpbmOutcome outcome = read_netpbm_c(f, &p);
  std::fclose(f);
  switch (outcome) {
    case NetpbmOutcome::kBroken:
      throw Error(shown + ": a broken Netpbm image (libnetpbm: " + brief(netpbm_message) + ")");
    case NetpbmOutcome::kTooLarge:
      throw Error(too_large(shown, p.rows, p.cols));
    case NetpbmOutcome::kDepth:
      throw Error(shown + ": a Netpbm image of depth " + std::to_string(p.depth) +
                  ", expected 1 (gray) or 3 (RGB), with or without alpha");
    case NetpbmOutcome::kRead:
      break;
  }
  Image im = planes_from_interleaved(p.px, p.rows, p.cols, p.depth);
  std::free(p.px);
  return im;
}

}  // namespace

Image image_with_channels(const Image& im, int64_t channels, const std::string& what) {
  if (channels == im.channels) return im;
  const int64_t n = im.rows * im.cols;
  if (im.channels == 3 && channels == 1) {
    Image out{im.rows, im.cols, 1, std::vector<uint8_t>(static_cast<size_t>(n))};
    const uint8_t *r = im.pixels.data(), *g = r + n, *b = g + n;
    for (int64_t i = 0; i < n; ++i)  // Y = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601)
      out.pixels[i] = static_cast<uint8_t>(std::lround(0.299 * r[i] + 0.587 * g[i] + 0.114 * b[i]));
    return out;
  }
  if (im.channels == 1 && channels == 3) {
    Image out{im.rows, im.cols, 3, {}};
    out.pixels.reserve(static_cast<size_t>(3 * n));
    for (int k = 0; k < 3; ++k)
      out.pixels.insert(out.pixels.end(), im.pixels.begin(), im.pixels.end());
    return out;
  }
  throw Error(what + ": an image of " + std::to_string(im.channels) + " channels, expected " +
              std::to_string(channels) + " (1 gray or 3 RGB)");
}

Image read_image(const std::string& path, const ImageShape& want) {
  const std::string shown = brief(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(shown + ": " + (errno == ENOENT ? "no such file" : std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  // The kind by the first bytes: PNG's 8-byte signature, or Netpbm's P1..P7.
  unsigned char head[8] = {0};
  size_t got = 0;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    got = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
  } else {
    throw Error(shown + ": cannot be opened (" + std::strerror(errno) + ")");
  }
  Image im;
  if (got == 8 && png_sig_cmp(head, 0, 8) == 0) {
    im = read_png(path, shown);
  } else if (got >= 2 && head[0] == 'P' && head[1] >= '1' && head[1] <= '7') {
    im = read_netpbm(path, shown);
  } else {
    char b[32];
    std::snprintf(b, sizeof b, "0x%02x 0x%02x", got > 0 ? head[0] : 0, got > 1 ? head[1] : 0);
    throw Error(shown + ": not an image: expected a PNG or a Netpbm file (PGM, PPM, PBM, PAM), " +
                (got < 2 ? std::string("found ") + std::to_string(got) + " bytes"
                         : std::string("it begins ") + b));
  }
  if ((want.rows && im.rows != want.rows) || (want.cols && im.cols != want.cols))
    throw Error(shown + ": a " + dims_text(im.rows, im.cols) + " image (rows x cols), expected " +
                (want.rows && want.cols ? dims_text(want.rows, want.cols)
                 : want.rows            ? std::to_string(want.rows) + " rows"
                                        : std::to_string(want.cols) + " cols"));
  if (want.channels) im = image_with_channels(im, want.channels, shown);
  return im;
}

}  // namespace qkv::data
