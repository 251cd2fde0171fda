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
#include <optional>
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
  std::string path;  // the file this was read from

  bool has(const std::string& name) const;
  // Throws Error "<path>: no tensor named '<name>'" when absent.
  const Tensor& get(const std::string& name) const;
};

// The largest header (JSON and padding) the reader accepts, as the reference
// implementation: the writer refuses to write a larger one.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// How the writer stores numbers. F32 is the default whatever qkv::real is, so
// checkpoints from the float and the double builds are interchangeable.
enum class FileDtype { F32, F64 };

// Writes `tensors` and `metadata` to `path` atomically (write_file_atomically,
// io/output_file.h: a temporary file, fsynced and renamed, the directory
// fsynced; a symlink is written through, a device, FIFO, socket or dangling
// symlink refused). On any failure the temporary is removed, `path` is left as
// it was, and an Error naming `path` is thrown. Temporaries of `path` left by
// writers killed mid-save (whose process no longer exists) are removed first.
//
// The rules, shared with the reader: tensor names unique, non-empty and not
// "__metadata__"; tensors defined; names, metadata keys and values UTF-8; a
// header of at most kMaxSafetensorsHeaderBytes. Every file the writer writes
// reads back; the reader refuses a file that breaks a rule above; and the
// tensors and metadata of any file the reader accepts write back (one
// exception: non-ASCII text is written as \u escapes, as Python's json does,
// so a header near the limit that holds much of it may grow past it).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const Metadata& metadata = {}, FileDtype dtype = FileDtype::F32);
// The temporary file write_safetensors writes first, "<path>.tmp.<pid>"
// (atomic_temp_path, io/output_file.h; a symlink's is beside the file it leads
// to): a program checking its outputs before working checks it with
// check_output_file.
std::string safetensors_temp_path(const std::string& path);

// Reads a whole safetensors file. F32, F64, F16 and BF16 data are converted to
// qkv::real; any other dtype is an Error naming the tensor and the dtype.
// Non-finite values (NaN, Inf) are read as they are: this is the generic
// reader; nn::load refuses them, and check_finite() below tests a file.
//
// The file itself: only a regular file is read (a directory, FIFO, socket or
// device such as /dev/zero is refused before any byte is read, and a FIFO
// cannot block the open), exactly the size fstat gives is read, and a file
// whose size changes while it is read (shorter or longer than stat said, or a
// different size afterwards) is refused. So the reader never holds more than
// the file's size in bytes plus the decoded tensors, and those are bounded by
// the data section: at most one real per 2 bytes of it (an F16 or BF16
// element is 2 bytes), whatever the header claims.
//
// The contents, each rejected with an Error naming the file (and the tensor
// when there is one): a file shorter than 8 bytes; a header length beyond the
// file or over 100 MB; invalid JSON, a header that is not an object, or one
// nested deeper than 8 levels; duplicate tensor names; a tensor named ""
// (the writer's rules, above); an entry that is not an
// object or lacks dtype/shape/data_offsets; a shape that is not a list of
// non-negative integers (or has rank > kMaxRank, or is too large for any
// tensor: shape_too_large); data_offsets that are not [begin, end] with
// begin <= end; an end beyond the data section; a byte length != numel * dtype
// size (also when numel * dtype size overflows 64 bits); ranges that overlap
// or leave gaps, or bytes after the last tensor; a non-string metadata value.
TensorFile read_safetensors(const std::string& path);

// The same parser over `size` bytes in memory (read_safetensors reads the file
// and calls it): for bytes that did not come from a file, and for the fuzzer
// (fuzz/fuzz_safetensors.cpp). `name` stands for the file: it becomes
// TensorFile::path and appears in every error,
// "parse_safetensors: <name>: ...".
TensorFile parse_safetensors(const void* bytes, size_t size, const std::string& name);

// ---- finite values ------------------------------------------------------------
// A checkpoint with NaN or Inf in it is the trace of a diverged run; loading it
// or saving it silently spreads the damage. nn::load and nn::save refuse such
// tensors by default (see checkpoint/checkpoint.h); these are the checks they use, for
// every other caller, e.g. a trainer that writes model and optimizer state
// with write_safetensors:
//
//   check_finite(all, "save " + path);      // before write_safetensors(path, all, md)
//   TensorFile f = read_safetensors(path);
//   check_finite(f);                         // every tensor: model and optimizer state

// The first non-finite element of a list of tensors.
struct NonFinite {
  std::string tensor;  // its tensor's name
  int64_t index = 0;   // flat row-major index of the first NaN or +-Inf in it
  double value = 0;    // that element: NaN, inf or -inf
  int64_t count = 0;   // how many elements of that tensor are not finite
};
// The first tensor (in list order) holding a NaN or an Inf; nullopt when all
// are finite. Undefined tensors are skipped.
std::optional<NonFinite> find_nonfinite(const NamedTensors& tensors);
// Throws Error "<where>: tensor '<name>' holds nan at index (0,3) of shape
// (2,4) (2 non-finite values in it)" for the first tensor that is not finite.
void check_finite(const NamedTensors& tensors, const std::string& where);
// check_finite(f.tensors, "check_finite: " + f.path).
void check_finite(const TensorFile& f);

}  // namespace qkv
