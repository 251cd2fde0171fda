#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <ostream>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/pool.h"

namespace qkv {

Storage::Storage(int64_t n) : n_(n) {
  ptr_ = static_cast<real*>(
      storage_alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(real)));
}
Storage::~Storage() {
  storage_free(ptr_, static_cast<size_t>(std::max<int64_t>(n_, 1)) * sizeof(real));
}

// Every tensor's storage is made here: check_shape refuses a negative dim or a
// shape whose size overflows before a byte is asked for, and a request the
// system cannot meet becomes an Error naming the shape, not a bare bad_alloc.
Tensor Tensor::empty(const Shape& shape) {
  check_shape(shape, "Tensor::empty");
  Tensor t;
  t.shape_ = shape;
  t.numel_ = qkv::numel(shape);
  try {
    t.storage_ = make_pooled<Storage>(t.numel_);  // the numbers themselves: storage_alloc
  } catch (const std::bad_alloc&) {
    throw Error("Tensor::empty: cannot allocate " +
                std::to_string(static_cast<uint64_t>(t.numel_) * sizeof(real)) +
                " bytes for shape " + to_string(shape));
  }
  return t;
}

// The named creators check under their own name, so the message says which was called.
Tensor Tensor::zeros(const Shape& shape) {
  check_shape(shape, "Tensor::zeros");
  return empty(shape).fill_(0);
}
Tensor Tensor::ones(const Shape& shape) {
  check_shape(shape, "Tensor::ones");
  return empty(shape).fill_(1);
}
Tensor Tensor::full(const Shape& shape, real value) {
  check_shape(shape, "Tensor::full");
  return empty(shape).fill_(value);
}
Tensor Tensor::scalar(real value) { return full({}, value); }

Tensor Tensor::arange(real end) { return arange(0, end, 1); }

Tensor Tensor::arange(real start, real end, real step) {
  if (step == 0) throw Error("arange: step must be non-zero");
  const double n = std::ceil((static_cast<double>(end) - start) / step);
  if (n >= 0x1p63)  // (the cast below would be undefined; empty() would refuse it anyway)
    throw Error("arange: [" + std::to_string(start) + ", " + std::to_string(end) + ") by " +
                std::to_string(step) + " has more elements than fit in 64 bits");
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor t = empty({count});
  real* p = t.data();
  for (int64_t i = 0; i < count; ++i) p[i] = start + static_cast<real>(i) * step;
  return t;
}

Tensor Tensor::from_vector(const std::vector<real>& values, const Shape& shape) {
  check_shape(shape, "Tensor::from_vector");
  if (static_cast<int64_t>(values.size()) != qkv::numel(shape))
    throw Error("Tensor::from_vector: " + std::to_string(values.size()) +
                " values do not fill shape " + to_string(shape));
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::from_vector(const std::vector<real>& values) {
  return from_vector(values, {static_cast<int64_t>(values.size())});
}

Tensor Tensor::uniform(const Shape& shape, real lo, real hi, Generator& g) {
  check_shape(shape, "Tensor::uniform");
  Tensor t = empty(shape);
  real* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<real>(lo + (hi - lo) * g.uniform());
  return t;
}

Tensor Tensor::normal(const Shape& shape, real mean, real stddev, Generator& g) {
  check_shape(shape, "Tensor::normal");
  Tensor t = empty(shape);
  real* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<real>(mean + stddev * g.normal());
  return t;
}

int64_t Tensor::size(int axis) const {
  return shape_[normalize_axis(axis, dim(), "Tensor::size", shape_)];
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined(*this, "reshape");
  Shape s = shape;
  int infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw Error("reshape: more than one -1 in " + to_string(shape));
      infer = static_cast<int>(i);
      s[i] = 1;  // for the checks below; replaced by the inferred size
    } else if (s[i] < 0) {
      throw Error("reshape: negative dimension in shape " + to_string(shape));
    }
  }
  // Before any product: the dims of a shape that cannot exist overflow int64.
  if (shape_too_large(s))
    throw Error("reshape: cannot reshape " + to_string(shape_) + " into " + to_string(shape) +
                ": the shape is too large (its size overflows 64 bits)");
  const int64_t known = qkv::numel(s);  // the product of the given dims
  if (infer >= 0) {
    if (known == 0 || numel_ % known != 0)
      throw Error("reshape: cannot reshape " + to_string(shape_) + " into " + to_string(shape));
    s[infer] = numel_ / known;
  }
  check_shape(s, "reshape");
  if (qkv::numel(s) != numel_)
    throw Error("reshape: cannot reshape " + to_string(shape_) + " (" + std::to_string(numel_) +
                " elements) into " + to_string(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  check_defined(*this, "slice0");
  if (dim() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw Error("slice0: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") out of range for shape " + to_string(shape_));
  const int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.offset_ = offset_ + begin * row;
  return t;
}

Tensor Tensor::clone() const {
  check_defined(*this, "clone");
  Tensor t = empty(shape_);
  std::memcpy(t.data(), data(), sizeof(real) * numel_);
  return t;
}

real Tensor::item() const {
  check_defined(*this, "item");
  if (numel_ != 1)
    throw Error("item: tensor of shape " + to_string(shape_) + " has " + std::to_string(numel_) +
                " elements, not 1");
  return data()[0];
}

namespace {
int64_t flat_index(const Shape& shape, std::initializer_list<int64_t> index) {
  if (index.size() != shape.size())
    throw Error("at: " + std::to_string(index.size()) + " indices for shape " + to_string(shape));
  int64_t flat = 0;
  size_t i = 0;
  for (int64_t ix : index) {
    if (ix < 0 || ix >= shape[i])
      throw Error("at: index " + std::to_string(ix) + " out of range for dim " + std::to_string(i) +
                  " of shape " + to_string(shape));
    flat = flat * shape[i] + ix;
    ++i;
  }
  return flat;
}
}  // namespace

real Tensor::at(std::initializer_list<int64_t> index) const {
  check_defined(*this, "at");
  return data()[flat_index(shape_, index)];
}
real& Tensor::at(std::initializer_list<int64_t> index) {
  check_defined(*this, "at");
  return data()[flat_index(shape_, index)];
}

std::vector<real> Tensor::to_vector() const {
  check_defined(*this, "to_vector");
  return std::vector<real>(data(), data() + numel_);
}

Tensor& Tensor::fill_(real value) {
  check_defined(*this, "fill_");
  real* __restrict p = data();
  parallel_for(numel_, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = value;
  });
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined(*this, "copy_");
  check_defined(src, "copy_");
  if (src.numel() != numel_)
    throw Error("copy_: source " + to_string(src.shape()) + " and destination " +
                to_string(shape_) + " differ in size");
  if (src.data() != data()) std::memmove(data(), src.data(), sizeof(real) * numel_);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, real alpha) {
  check_defined(*this, "add_");
  check_defined(other, "add_");
  if (other.shape() != shape_)
    throw Error("add_: shapes " + to_string(shape_) + " and " + to_string(other.shape()) +
                " differ");
  real* __restrict p = data();
  const real* __restrict q = other.data();
  parallel_for(numel_, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] += alpha * q[i];
  });
  return *this;
}

Tensor& Tensor::mul_(real s) {
  check_defined(*this, "mul_");
  real* __restrict p = data();
  parallel_for(numel_, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] *= s;
  });
  return *this;
}

void check_defined(const Tensor& t, const char* op) {
  if (!t.defined()) throw Error(std::string(op) + ": tensor is undefined");
}

// ---- printing --------------------------------------------------------------

namespace {
constexpr int64_t kSummarizeAbove = 1000;  // PyTorch's threshold
constexpr int64_t kEdgeItems = 3;

std::string format_value(real v, bool integral, int width) {
  char buf[64];
  if (integral)
    std::snprintf(buf, sizeof buf, "%*.0f.", width - 1, static_cast<double>(v));
  else
    std::snprintf(buf, sizeof buf, "%*.4f", width, static_cast<double>(v));
  return buf;
}

void print_rec(std::ostream& os, const Tensor& t, int axis, int64_t offset, int indent,
               bool summarize, bool integral, int width) {
  const Shape& s = t.shape();
  const int64_t n = s[axis];
  const auto st = strides_of(s);
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (axis + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    if (axis + 1 == t.dim()) {
      os << format_value(t.data()[offset + i], integral, width);
      if (i + 1 < n) os << ", ";
    } else {
      print_rec(os, t, axis + 1, offset + i * st[axis], indent + 1, summarize, integral, width);
      if (i + 1 < n)
        os << "," << std::string(t.dim() - axis - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
  os << "]";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const real* p = t.data();
  bool integral = true;
  double maxabs = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (std::isfinite(p[i]) && p[i] != std::floor(p[i])) integral = false;
    if (std::isfinite(p[i])) maxabs = std::max(maxabs, std::fabs(static_cast<double>(p[i])));
  }
  const int width = integral ? std::max(2, static_cast<int>(std::log10(maxabs + 1)) + 3)
                             : std::max(6, static_cast<int>(std::log10(maxabs + 1)) + 7);
  os << "tensor(";
  if (t.dim() == 0)
    os << format_value(p[0], integral, 0);
  else
    print_rec(os, t, 0, 0, 7, t.numel() > kSummarizeAbove, integral, width);
  return os << ", shape=" << to_string(t.shape()) << ")";
}

}  // namespace qkv
