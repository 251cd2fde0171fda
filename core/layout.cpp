#include "core/layout.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/parallel.h"

namespace qkv {

namespace {
std::string dims_str(const std::vector<int>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}
}  // namespace

Tensor permute(const Tensor& a, const std::vector<int>& dims_in) {
  check_defined(a, "permute");
  const int r = a.dim();
  if (static_cast<int>(dims_in.size()) != r)
    throw Error("permute: dims " + dims_str(dims_in) + " do not match rank of shape " +
                to_string(a.shape()));
  std::vector<int> dims(r);
  std::vector<bool> seen(r, false);
  for (int i = 0; i < r; ++i) {
    dims[i] = normalize_axis(dims_in[i], r, "permute", a.shape());
    if (seen[dims[i]])
      throw Error("permute: dims " + dims_str(dims_in) + " repeat an axis for shape " +
                  to_string(a.shape()));
    seen[dims[i]] = true;
  }
  Shape out_shape(r);
  for (int i = 0; i < r; ++i) out_shape[i] = a.shape()[dims[i]];
  Tensor out = Tensor::empty(out_shape);
  if (a.numel() == 0) return out;
  if (r == 0) {
    out.data()[0] = a.data()[0];
    return out;
  }
  // Input stride for each output dimension.
  const auto st_in = strides_of(a.shape());
  std::vector<int64_t> st(r);
  for (int i = 0; i < r; ++i) st[i] = st_in[dims[i]];
  const int64_t inner = out_shape[r - 1], rows = out.numel() / inner, s_last = st[r - 1];
  const real* __restrict x = a.data();
  real* __restrict y = out.data();
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          int64_t rem = row, off = 0;
          for (int d = r - 2; d >= 0; --d) {
            off += (rem % out_shape[d]) * st[d];
            rem /= out_shape[d];
          }
          real* yr = y + row * inner;
          for (int64_t i = 0; i < inner; ++i) yr[i] = x[off + i * s_last];
        }
      },
      std::max<int64_t>(1, kParallelGrain / inner));
  return out;
}

std::vector<int> transpose_dims(const Shape& shape, int d0, int d1) {
  const int r = static_cast<int>(shape.size());
  const int x0 = normalize_axis(d0, r, "transpose", shape);
  const int x1 = normalize_axis(d1, r, "transpose", shape);
  std::vector<int> dims(r);
  for (int i = 0; i < r; ++i) dims[i] = i;
  std::swap(dims[x0], dims[x1]);
  return dims;
}

Tensor transpose(const Tensor& a, int d0, int d1) {
  check_defined(a, "transpose");
  return permute(a, transpose_dims(a.shape(), d0, d1));
}

std::vector<int> inverse_permutation(const std::vector<int>& dims) {
  const int r = static_cast<int>(dims.size());
  std::vector<int> inv(r);
  for (int i = 0; i < r; ++i) inv[dims[i] < 0 ? dims[i] + r : dims[i]] = i;
  return inv;
}

}  // namespace qkv
