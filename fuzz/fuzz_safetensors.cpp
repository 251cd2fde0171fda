// libFuzzer harness for the safetensors reader (io/safetensors.cpp).
//
// Every input is handed to parse_safetensors, the parser read_safetensors uses
// once it has the file's bytes. The only allowed outcomes are a TensorFile or
// a qkv::Error; anything else (another exception, a crash, a sanitizer report,
// an allocation beyond -malloc_limit_mb) is a finding. On success the result is
// checked against the input: the decoded tensors cannot hold more elements than
// the data section has pairs of bytes (the smallest readable dtype is 2 bytes),
// and writing the tensors back and reading them again must give the same
// numbers (F64, so no value is rounded).
//
// Build and run with `make fuzz` (clang, -fsanitize=fuzzer,address,undefined);
// the seed corpus is fuzz/corpus/safetensors/.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}

// Same bits, NaN == NaN: the values must survive a write and a read exactly.
bool same(qkv::real a, qkv::real b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qkv::TensorFile f;
  try {
    f = qkv::parse_safetensors(data, size, "fuzz-input");
  } catch (const qkv::Error&) {
    return 0;  // a refused file: the expected outcome for most inputs
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_safetensors: exception other than qkv::Error: %s\n", e.what());
    std::abort();
  }

  // Accepted: the tensors fit in what the file holds.
  uint64_t elements = 0;
  for (const auto& [name, t] : f.tensors) {
    if (!t.defined()) finding("an accepted tensor is undefined");
    elements += static_cast<uint64_t>(t.numel());
  }
  if (elements * 2 > size) finding("more elements decoded than the data section can hold");
  // find_nonfinite walks every element (ASan checks each read).
  (void)qkv::find_nonfinite(f.tensors);

  // Round trip through the writer (a file, as write_safetensors only writes
  // files; accepted inputs are rare, so this costs little).
  // (In /dev/shm when there is one: the writer fsyncs, which costs nothing on tmpfs.)
  static const std::string path =
      std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/fuzz_safetensors." +
      std::to_string(::getpid());
  try {
    qkv::write_safetensors(path, f.tensors, f.metadata, qkv::FileDtype::F64);
    const qkv::TensorFile g = qkv::read_safetensors(path);
    if (g.tensors.size() != f.tensors.size() || g.metadata != f.metadata)
      finding("round trip changed the tensor list or the metadata");
    for (size_t i = 0; i < f.tensors.size(); ++i) {
      const qkv::Tensor& a = f.tensors[i].second;
      const qkv::Tensor& b = g.tensors[i].second;
      if (f.tensors[i].first != g.tensors[i].first || a.shape() != b.shape())
        finding("round trip changed a name or a shape");
      for (int64_t k = 0; k < a.numel(); ++k)
        if (!same(a.data()[k], b.data()[k])) finding("round trip changed a value");
    }
  } catch (const qkv::Error& e) {
    // Reader and writer share their rules (io/safetensors.h): a file the
    // reader accepts must write back, so a refusal here is a finding too.
    std::fprintf(stderr, "fuzz_safetensors: round trip failed: %s\n", e.what());
    std::abort();
  }
  return 0;
}
