// libFuzzer harness for the IDX reader (data/idx.cpp).
//
// read_idx reads a file (zlib's gzopen decides between gzip and raw), so each
// input is written to a file and read back with a max_bytes of 1 MB. The only
// allowed outcomes are an IdxArray or a qkv::Error; anything else (another
// exception, a crash, a sanitizer report, an allocation beyond
// -malloc_limit_mb) is a finding. An accepted array must agree with its dims:
// prod(dims) bytes, within max_bytes, and, for a raw input, exactly the bytes
// after the header.
//
// Build and run with `make fuzz-idx` (clang, -fsanitize=fuzzer,address,undefined);
// the seed corpus is fuzz/corpus/idx/ (fuzz/make_corpus_idx.py).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "data/idx.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_idx: %s\n", what);
  std::abort();
}

constexpr int64_t kMaxBytes = 1 << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // (In /dev/shm when there is one: a tmpfs write costs little.)
  static const std::string path =
      std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/fuzz_idx." +
      std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0)
    finding("cannot write the input to a file");
  qkv::data::IdxArray a;
  try {
    a = qkv::data::read_idx(path, kMaxBytes);
  } catch (const qkv::Error&) {
    return 0;  // a refused file: the expected outcome for most inputs
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_idx: exception other than qkv::Error: %s\n", e.what());
    std::abort();
  }
  if (a.dims.empty()) finding("an accepted array has no dims");
  bool zero = false;
  for (int64_t d : a.dims) {
    if (d < 0 || d > 0xffffffffLL) finding("a dim outside uint32");
    zero = zero || d == 0;
  }
  int64_t n = zero ? 0 : 1;
  for (int64_t d : a.dims) {
    if (n == 0) break;
    n *= d;  // n <= max_bytes (2^20) before, d < 2^32: no overflow
    if (n > kMaxBytes) finding("prod(dims) above max_bytes accepted");
  }
  if (static_cast<int64_t>(a.bytes.size()) != n) finding("bytes disagree with prod(dims)");
  // A raw input (not gzip's 0x1f 0x8b): the data is the input after its header.
  const size_t header = 4 + 4 * a.dims.size();
  if (size >= 2 && !(data[0] == 0x1f && data[1] == 0x8b)) {
    if (size != header + a.bytes.size()) finding("a raw input's length disagrees with its dims");
    if (n && std::memcmp(data + header, a.bytes.data(), a.bytes.size()) != 0)
      finding("a raw input's data differs from the bytes read");
  }
  return 0;
}
