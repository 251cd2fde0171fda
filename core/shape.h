// Shape helpers: a shape is a list of dimension sizes, row-major.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

using Shape = std::vector<int64_t>;

// Highest rank a tensor may have. Attention needs 4 (B, H, T, d_k).
inline constexpr int kMaxRank = 8;

// Number of elements; 1 for a scalar (rank 0).
int64_t numel(const Shape& s);
// "(2,3,4)"; "()" for a scalar.
std::string to_string(const Shape& s);
// Row-major strides in elements.
std::vector<int64_t> strides_of(const Shape& s);
// NumPy broadcasting of two shapes; throws naming `op` when they don't broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Maps a possibly negative axis into [0, rank); throws naming `op` when out of range.
int normalize_axis(int axis, int rank, const char* op, const Shape& s);
// Throws naming `op` when the rank exceeds kMaxRank or a dimension is negative.
void check_shape(const Shape& s, const char* op);

}  // namespace qkv
