// Shape helpers: a shape is a list of dimension sizes, row-major.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

namespace qkv {

// Highest rank a tensor may have. Attention needs 4 (B, H, T, d_k).
inline constexpr int kMaxRank = 8;

// A list of at most kMaxRank dimension sizes, stored inline. Every Tensor
// carries one and every op makes a few, so keeping them off the heap is what
// lets a training step run without a single heap allocation. It reads like the
// std::vector<int64_t> it replaces (size, [], begin/end, push_back, ==, ...)
// and converts implicitly from one, so the public API still takes vectors.
// Growing past kMaxRank throws qkv::Error naming the rank.
class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Shape() = default;
  explicit Shape(size_t n, int64_t value = 0);
  Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), dims.end()) {}
  Shape(const std::vector<int64_t>& dims) : Shape(dims.begin(), dims.end()) {}  // NOLINT: implicit
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  Shape(It first, It last) {
    if (std::distance(first, last) > kMaxRank) rank_error(std::vector<int64_t>(first, last));
    for (; first != last; ++first) dims_[rank_++] = *first;
  }

  size_t size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t* data() { return dims_; }
  const int64_t* data() const { return dims_; }
  iterator begin() { return dims_; }
  iterator end() { return dims_ + rank_; }
  const_iterator begin() const { return dims_; }
  const_iterator end() const { return dims_ + rank_; }
  int64_t& front() { return dims_[0]; }
  int64_t front() const { return dims_[0]; }
  int64_t& back() { return dims_[rank_ - 1]; }
  int64_t back() const { return dims_[rank_ - 1]; }

  void push_back(int64_t d) {
    if (rank_ == kMaxRank) push_back_error(d);
    dims_[rank_++] = d;
  }
  void pop_back() { --rank_; }
  void clear() { rank_ = 0; }
  // Inserts d before pos; returns the position of d.
  iterator insert(const_iterator pos, int64_t d);
  iterator erase(const_iterator pos);

  // The dims as a std::vector, for code that wants one.
  std::vector<int64_t> to_vector() const { return std::vector<int64_t>(begin(), end()); }

  friend bool operator==(const Shape& a, const Shape& b);
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  // Throw "Shape: rank 9 of shape (...) exceeds the maximum rank 8".
  [[noreturn]] static void rank_error(const std::vector<int64_t>& dims);
  [[noreturn]] void push_back_error(int64_t next) const;
  int64_t dims_[kMaxRank] = {};
  uint32_t rank_ = 0;
};

// Number of elements; 1 for a scalar (rank 0). Assumes a checked shape
// (check_shape): it does not test for overflow itself, being called often.
int64_t numel(const Shape& s);
// "(2,3,4)"; "()" for a scalar.
std::string to_string(const Shape& s);
// Row-major strides in elements, one per dimension (a Shape: also inline).
Shape strides_of(const Shape& s);
// NumPy broadcasting of two shapes; throws naming `op` when they don't broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Maps a possibly negative axis into [0, rank); throws naming `op` when out of range.
int normalize_axis(int axis, int rank, const char* op, const Shape& s);
// True when a tensor of this shape cannot exist: the product of its dims, with
// zero-size dims counted as 1, times sizeof(real) overflows int64. (Counting
// zeros as 1 keeps every stride and every partial product in range too.)
// Dims must be non-negative.
bool shape_too_large(const Shape& s);
// Throws naming `op` and the dims when a dimension is negative or the shape is
// too large (shape_too_large): "Tensor::zeros: shape (1099511627776,1099511627776)
// is too large: its element count overflows 64 bits". Every tensor allocation
// passes through here (Tensor::empty), before any byte is allocated. (A Shape
// cannot exceed kMaxRank: that is checked where it grows.)
void check_shape(const Shape& s, const char* op);

}  // namespace qkv
