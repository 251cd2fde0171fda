#include "io/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_bounded.h"
#include "io/safetensors_rules.h"

namespace qkv {

namespace {

using json = nlohmann::json;
using namespace safetensors_detail;

// A header needs 3 levels of nesting; deeper ones are refused while parsing.
constexpr int kMaxHeaderDepth = 8;

float float_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
double double_from_bits(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

// IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return float_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return float_from_bits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
// bfloat16 is the top half of a float32.
float bf16_to_float(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

// ---- dtypes -------------------------------------------------------------------
struct DtypeInfo {
  const char* name;
  int size;       // bytes per element
  bool readable;  // converted to qkv::real by the reader
};
constexpr DtypeInfo kDtypes[] = {
    {"F64", 8, true},   {"F32", 4, true},      {"F16", 2, true},      {"BF16", 2, true},
    {"I64", 8, false},  {"I32", 4, false},     {"I16", 2, false},     {"I8", 1, false},
    {"U64", 8, false},  {"U32", 4, false},     {"U16", 2, false},     {"U8", 1, false},
    {"BOOL", 1, false}, {"F8_E4M3", 1, false}, {"F8_E5M2", 1, false},
};
const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// One tensor's header entry, validated.
struct Entry {
  std::string name;
  const DtypeInfo* dtype;
  Shape shape;
  uint64_t begin, end;  // byte range in the data section
};

// A JSON value from the header as quoted in a message (brief; a parsed
// header's strings are UTF-8, so printing cannot throw).
std::string clip(const json& value) { return brief(value.dump()); }

std::string range_str(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + "," + std::to_string(e) + "]";
}

// Parses a whole safetensors image held in memory. `op` and `name` start
// every error message: "read_safetensors: <file>: ...".
class Parser {
 public:
  Parser(const char* op, const std::string& name) : op_(op), name_(name) {}

  TensorFile parse(const unsigned char* bytes, uint64_t size) {
    if (size < 8)
      fail("file is " + std::to_string(size) +
           " bytes, too short for a safetensors file (the header length alone is 8)");
    const uint64_t n = load_le(bytes, 8);
    if (n > kMaxSafetensorsHeaderBytes)
      fail("header length " + std::to_string(n) + " is absurd (limit " +
           std::to_string(kMaxSafetensorsHeaderBytes) + " bytes)");
    if (n > size - 8)
      fail("header length " + std::to_string(n) + " is larger than the " +
           std::to_string(size - 8) + " bytes that follow it (truncated file?)");
    const unsigned char* data = bytes + 8 + n;  // the data section
    const uint64_t data_size = size - 8 - n;

    const json header = parse_header(reinterpret_cast<const char*>(bytes + 8), n);

    TensorFile out;
    out.path = name_;
    std::vector<Entry> entries;
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__")
        out.metadata = parse_metadata(value);
      else
        entries.push_back(parse_entry(key, value, data_size));
    }
    check_layout(entries, data_size);

    // Everything is checked: every range lies inside the data section, so the
    // tensors allocated below add up to at most (data_size / 2) reals.
    out.tensors.reserve(entries.size());
    for (const Entry& e : entries) out.tensors.emplace_back(e.name, decode(e, data + e.begin));
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(std::string(op_) + ": " + brief(name_) + ": " + msg);
  }
  [[noreturn]] void fail(const std::string& tensor, const std::string& msg) const {
    fail("tensor '" + brief(tensor) + "': " + msg);
  }

  json parse_header(const char* text, uint64_t n) const {
    // The nesting is bounded while parsing: a valid header needs 3 levels
    // (header, entry, shape list). nlohmann keeps the last of two equal keys;
    // the key hook sees every top-level key (depth 1) so that a duplicate
    // tensor name is an error.
    std::set<std::string> seen;
    auto on_key = [&](int depth, const std::string& key) {
      if (depth == 1 && !seen.insert(key).second) fail(key, "duplicate tensor name in the header");
    };
    const json header = parse_json_bounded(std::string_view(text, n),
                                           std::string(op_) + ": " + brief(name_) + ": header",
                                           kMaxHeaderDepth, on_key);
    if (!header.is_object())
      fail(std::string("header is not a JSON object (it is ") + header.type_name() + ")");
    return header;
  }

  Metadata parse_metadata(const json& value) const {
    Metadata md;
    if (value.is_null()) return md;
    if (!value.is_object())
      fail(std::string("__metadata__ is not an object (it is ") + value.type_name() + ")");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string())
        fail("__metadata__ value for '" + brief(k) + "' is not a string (it is " + v.type_name() +
             ")");
      md[k] = v.get<std::string>();
    }
    return md;
  }

  Entry parse_entry(const std::string& name, const json& info, uint64_t data_size) const {
    if (const char* why = bad_tensor_name(name)) fail(why);
    if (!info.is_object())
      fail(name, std::string("entry is not an object (it is ") + info.type_name() + ")");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!info.contains(field)) fail(name, std::string("entry has no '") + field + "'");
    Entry e;
    e.name = name;

    const json& dt = info["dtype"];
    if (!dt.is_string()) fail(name, "dtype is not a string: " + clip(dt));
    const std::string dtype = dt.get<std::string>();
    e.dtype = find_dtype(dtype);
    if (!e.dtype) fail(name, "unknown dtype '" + brief(dtype) + "'");
    if (!e.dtype->readable)
      fail(name, "dtype " + dtype + " is not supported (qkv reads F32, F64, F16 and BF16)");

    const json& sh = info["shape"];
    if (!sh.is_array()) fail(name, "shape is not a list: " + clip(sh));
    if (sh.size() > static_cast<size_t>(kMaxRank))
      fail(name, "shape " + clip(sh) + " has rank " + std::to_string(sh.size()) + " > " +
                     std::to_string(kMaxRank));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : sh) {
      if (d.is_number_integer() && !d.is_number_unsigned())
        fail(name, "shape " + clip(sh) + " has a negative dimension");
      if (!d.is_number_unsigned()) fail(name, "shape " + clip(sh) + " is not a list of integers");
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(name, "shape " + clip(sh) + " has a dimension too large");
      e.shape.push_back(static_cast<int64_t>(v));
      overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(e.dtype->size), &nbytes);

    const json& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail(name, "data_offsets " + clip(off) + " is not [begin, end] of non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) fail(name, "data_offsets " + clip(off) + " has begin > end");
    if (e.end > data_size)
      fail(name, "data_offsets " + clip(off) + " end beyond the data section (" +
                     std::to_string(data_size) + " bytes)");
    if (overflow || nbytes != e.end - e.begin)
      fail(name, "data_offsets " + clip(off) + " hold " + std::to_string(e.end - e.begin) +
                     " bytes but dtype " + dtype + " with shape " + to_string(e.shape) + " needs " +
                     (overflow ? std::string("more than 2^64") : std::to_string(nbytes)));
    // The bytes match, so the elements fit in the file; but zero-size dims
    // hide the others: (0, 2^40, 2^40) holds 0 bytes and no tensor can have
    // that shape (its strides overflow). The limit every tensor has, checked
    // here so that the message names the file and the tensor.
    if (shape_too_large(e.shape))
      fail(name, "shape " + to_string(e.shape) +
                     " is too large for a tensor (its size overflows 64 bits)");
    return e;
  }

  // Ranges must tile the data section exactly: no overlap, no gap, no tail.
  void check_layout(const std::vector<Entry>& entries, uint64_t data_size) const {
    std::vector<const Entry*> by_offset;
    for (const Entry& e : entries) by_offset.push_back(&e);
    std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
      if (a->begin != b->begin) return a->begin < b->begin;
      return a->end != b->end ? a->end < b->end : a->name < b->name;
    });
    uint64_t cursor = 0;          // end of the bytes covered so far
    const Entry* prev = nullptr;  // the tensor that ends at cursor
    for (const Entry* e : by_offset) {
      if (e->begin < cursor)
        fail(e->name, "offsets overlap with tensor '" + brief(prev->name) + "' (data_offsets " +
                          range_str(e->begin, e->end) + " and " +
                          range_str(prev->begin, prev->end) + ")");
      if (e->begin > cursor)
        fail(e->name, "offsets leave a gap of " + std::to_string(e->begin - cursor) +
                          " bytes before it (data_offsets " + range_str(e->begin, e->end) +
                          (prev ? ", previous tensor '" + brief(prev->name) + "' ends at " +
                                      std::to_string(cursor)
                                : std::string(", the data section starts at 0")) +
                          ")");
      cursor = e->end;
      prev = e;
    }
    if (cursor != data_size) {
      const std::string tail = std::to_string(data_size - cursor) + " bytes after " +
                               (prev ? "the last tensor" : "the header") + " belong to no tensor";
      if (prev) fail(prev->name, tail);
      fail(tail);
    }
  }

  static Tensor decode(const Entry& e, const unsigned char* src) {
    Tensor t = Tensor::empty(e.shape);
    real* dst = t.data();
    const int64_t n = t.numel();
    const std::string& dt = e.dtype->name;
    if (dt == "F32") {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<real>(float_from_bits(static_cast<uint32_t>(load_le(src + 4 * i, 4))));
    } else if (dt == "F64") {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<real>(double_from_bits(load_le(src + 8 * i, 8)));
    } else if (dt == "F16") {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<real>(half_to_float(static_cast<uint16_t>(load_le(src + 2 * i, 2))));
    } else {  // BF16 (parse_entry let only readable dtypes through)
      for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<real>(bf16_to_float(static_cast<uint16_t>(load_le(src + 2 * i, 2))));
    }
    return t;
  }

  const char* op_;
  std::string name_;
};

// ---- the file -----------------------------------------------------------------
// Reads exactly the bytes fstat says the file has. Only a regular file has a
// size to trust: a directory, a FIFO, a socket or a device (/dev/zero never
// ends) is refused before any byte is read, and it is opened with O_NONBLOCK so
// that a FIFO without a writer cannot block the open. A file whose size changes
// while it is read (a short read, bytes past the size, or a different size
// afterwards: a writer still at work, or /proc and /sys files, whose size says
// nothing) is refused too, so the buffer is never more than the stat size.
class FileBytes {
 public:
  explicit FileBytes(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
      fail(std::string("is ") + file_kind(st.st_mode) + ", not a regular file");
    if (st.st_size < 0) fail("has a negative size");
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > std::numeric_limits<size_t>::max()) fail("is too large for this machine");
    try {
      bytes_.reset(new unsigned char[std::max<uint64_t>(size_, 1)]);
    } catch (const std::bad_alloc&) {
      fail("cannot allocate " + std::to_string(size_) + " bytes to read it");
    }
    uint64_t got = 0;
    while (got < size_) {
      const ssize_t r = ::read(fd_, bytes_.get() + got,
                               static_cast<size_t>(std::min<uint64_t>(size_ - got, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(std::string("read failed: ") + std::strerror(errno));
      if (r == 0)
        fail("shrank while being read: its size was " + std::to_string(size_) +
             " bytes but it ended after " + std::to_string(got));
      got += static_cast<uint64_t>(r);
    }
    unsigned char probe;
    ssize_t r;
    do r = ::read(fd_, &probe, 1);
    while (r < 0 && errno == EINTR);
    if (r > 0)
      fail("grew while being read: its size was " + std::to_string(size_) +
           " bytes but more followed");
    struct stat after {};
    if (::fstat(fd_, &after) == 0 && after.st_size != st.st_size)
      fail("changed size while being read: " + std::to_string(size_) + " bytes, then " +
           std::to_string(after.st_size));
  }
  ~FileBytes() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const unsigned char* data() const { return bytes_.get(); }
  uint64_t size() const { return size_; }

 private:
  [[noreturn]] void fail(const std::string& msg) {
    if (fd_ >= 0) ::close(fd_);  // the destructor does not run for a throwing constructor
    fd_ = -1;
    throw Error("read_safetensors: " + brief(path_) + ": " + msg);
  }
  static const char* file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "a special file";
  }

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::unique_ptr<unsigned char[]> bytes_;
};

}  // namespace

bool TensorFile::has(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

const Tensor& TensorFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw Error("TensorFile: " + brief(path) + ": no tensor named '" + brief(name) + "'");
}

namespace {
// Fills nf (all but the name) when t holds a NaN or an Inf.
bool scan_nonfinite(const Tensor& t, NonFinite& nf) {
  if (!t.defined()) return false;
  const real* p = t.data();
  const int64_t n = t.numel();
  // One branch-free pass counts; only a tensor that has a bad value is searched again.
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(p[i]);
  if (bad == 0) return false;
  nf.count = bad;
  nf.index = 0;
  while (std::isfinite(p[nf.index])) ++nf.index;
  nf.value = static_cast<double>(p[nf.index]);
  return true;
}
}  // namespace

std::optional<NonFinite> find_nonfinite(const NamedTensors& tensors) {
  NonFinite nf;
  for (const auto& [name, t] : tensors)
    if (scan_nonfinite(t, nf)) {
      nf.tensor = name;
      return nf;
    }
  return std::nullopt;
}

void check_finite(const NamedTensors& tensors, const std::string& where) {
  NonFinite nf;
  for (const auto& [name, t] : tensors) {
    if (!scan_nonfinite(t, nf)) continue;
    // The flat index as a multi-index, e.g. 11 in (3,4) -> (2,3).
    const Shape& shape = t.shape();
    Shape at(shape.size());
    int64_t rest = nf.index;
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      at[i] = rest % shape[i];
      rest /= shape[i];
    }
    throw Error(where + ": tensor '" + brief(name) + "' holds " + std::to_string(nf.value) +
                " at index " + to_string(at) + " of shape " + to_string(shape) + " (" +
                std::to_string(nf.count) + " non-finite value" + (nf.count == 1 ? "" : "s") +
                " in it)");
  }
}

void check_finite(const TensorFile& f) { check_finite(f.tensors, "check_finite: " + f.path); }

TensorFile parse_safetensors(const void* bytes, size_t size, const std::string& name) {
  return Parser("parse_safetensors", name).parse(static_cast<const unsigned char*>(bytes), size);
}

TensorFile read_safetensors(const std::string& path) {
  const FileBytes file(path);
  return Parser("read_safetensors", path).parse(file.data(), file.size());
}

}  // namespace qkv
