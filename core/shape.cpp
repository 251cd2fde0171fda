#include "core/shape.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/real.h"

namespace qkv {

// ---- Shape -----------------------------------------------------------------

Shape::Shape(size_t n, int64_t value) {
  // (Not rank_error: n may be huge, a negative count converted to size_t.)
  if (n > static_cast<size_t>(kMaxRank))
    throw Error("Shape: rank " + std::to_string(n) + " exceeds the maximum rank " +
                std::to_string(kMaxRank));
  std::fill(dims_, dims_ + n, value);
  rank_ = static_cast<uint32_t>(n);
}

Shape::iterator Shape::insert(const_iterator pos, int64_t d) {
  const size_t i = static_cast<size_t>(pos - dims_);
  push_back(d);                              // grows (and checks the rank)...
  std::rotate(dims_ + i, end() - 1, end());  // ...then moves d into place
  return dims_ + i;
}

Shape::iterator Shape::erase(const_iterator pos) {
  const size_t i = static_cast<size_t>(pos - dims_);
  std::copy(dims_ + i + 1, end(), dims_ + i);
  --rank_;
  return dims_ + i;
}

bool operator==(const Shape& a, const Shape& b) {
  return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
}

void Shape::rank_error(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  throw Error("Shape: rank " + std::to_string(dims.size()) + " of shape " + s +
              ") exceeds the maximum rank " + std::to_string(kMaxRank));
}

void Shape::push_back_error(int64_t next) const {
  std::vector<int64_t> dims(begin(), end());
  dims.push_back(next);
  rank_error(dims);
}

// ---- helpers ---------------------------------------------------------------

int64_t numel(const Shape& s) {
  uint64_t n = 1;  // unsigned: an unchecked huge shape wraps instead of being UB
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return static_cast<int64_t>(n);
}

std::string to_string(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + ")";
}

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    // Align from the right: a missing leading dimension counts as 1.
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) +
                  " do not broadcast (dim " + std::to_string(i) + ": " + std::to_string(da) +
                  " vs " + std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_axis(int axis, int rank, const char* op, const Shape& s) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " out of range for shape " +
                to_string(s));
  return a;
}

namespace {
// The product of the dims (zeros counted as 1) and of that times sizeof(real),
// as int64; *elements_overflow tells which one overflowed first.
bool product_overflows(const Shape& s, bool* elements_overflow) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d == 0 ? int64_t{1} : d, &n)) {
      *elements_overflow = true;
      return true;
    }
  int64_t bytes;
  *elements_overflow = false;
  return __builtin_mul_overflow(n, static_cast<int64_t>(sizeof(real)), &bytes);
}
}  // namespace

bool shape_too_large(const Shape& s) {
  bool elements;
  return product_overflows(s, &elements);
}

void check_shape(const Shape& s, const char* op) {
  for (int64_t d : s)
    if (d < 0) throw Error(std::string(op) + ": negative dimension in shape " + to_string(s));
  bool elements;
  if (product_overflows(s, &elements))
    throw Error(std::string(op) + ": shape " + to_string(s) + " is too large: " +
                (elements ? std::string("its element count overflows 64 bits")
                          : "its size in bytes (" + std::to_string(sizeof(real)) +
                                " per element) overflows 64 bits"));
}

}  // namespace qkv
