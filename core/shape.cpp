#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace qkv {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string to_string(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + ")";
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
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

void check_shape(const Shape& s, const char* op) {
  if (static_cast<int>(s.size()) > kMaxRank)
    throw Error(std::string(op) + ": rank " + std::to_string(s.size()) + " of shape " +
                to_string(s) + " exceeds the maximum rank " + std::to_string(kMaxRank));
  for (int64_t d : s)
    if (d < 0) throw Error(std::string(op) + ": negative dimension in shape " + to_string(s));
}

}  // namespace qkv
