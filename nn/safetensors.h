// The safetensors file format, so qkv checkpoints are read by PyTorch, NumPy
// and Hugging Face tools, and qkv reads theirs.
//
//   [8 bytes]  N, the header length: unsigned 64-bit little-endian
//   [N bytes]  JSON header (UTF-8), padded with spaces to a multiple of 8:
//                {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
//                 ...,
//                 "__metadata__": {"<key>": "<string>", ...}}
//   [rest]     the data section: raw little-endian numbers, C (row-major) order.
//              data_offsets [begin, end) count bytes from the start of this section.
//
// The writer lays tensors out back to back in sorted name order (byte for byte
// what tests/pytorch/st.py writes for the same float32 tensors) and replaces
// the target file atomically. The reader checks every field and every offset
// before it touches the data, so a bad file is an Error naming the file and the
// tensor, never a crash or an out-of-bounds read.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace qkv {

// Named tensors, in order (the same alias as optim/optimizer.h).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// The file's "__metadata__": string keys to string values.
using Metadata = std::map<std::string, std::string>;

struct TensorFile {
  NamedTensors tensors;  // in sorted name order, converted to qkv::real
  Metadata metadata;
  std::string path;      // the file this was read from

  bool has(const std::string& name) const;
  // Throws Error "<path>: no tensor named '<name>'" when absent.
  const Tensor& get(const std::string& name) const;
};

// How the writer stores numbers. F32 is the default whatever qkv::real is, so
// checkpoints from the float and the double builds are interchangeable.
enum class FileDtype { F32, F64 };

// Writes `tensors` (names unique, non-empty, not "__metadata__"; tensors
// defined) and `metadata` to `path` atomically: the bytes go to
// "<path>.tmp.<pid>", which is fsynced and renamed over `path`, then the
// directory is fsynced. On any failure the temporary file is removed, `path`
// is left as it was, and an Error naming `path` is thrown. Temporaries of
// `path` left by writers killed mid-save (whose process no longer exists) are
// removed first.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const Metadata& metadata = {}, FileDtype dtype = FileDtype::F32);

// Reads a whole safetensors file. F32, F64, F16 and BF16 data are converted to
// qkv::real; any other dtype is an Error naming the tensor and the dtype.
// Rejected, each with an Error naming the file (and the tensor when there is
// one): a file shorter than 8 bytes; a header length beyond the file or over
// 100 MB; invalid JSON or a header that is not an object; duplicate tensor
// names; an entry that is not an object or lacks dtype/shape/data_offsets; a
// shape that is not a list of non-negative integers (or has rank > kMaxRank);
// data_offsets that are not [begin, end] with begin <= end; an end beyond the
// data section; a byte length != numel * dtype size; ranges that overlap or
// leave gaps, or bytes after the last tensor; a non-string metadata value.
TensorFile read_safetensors(const std::string& path);

}  // namespace qkv
