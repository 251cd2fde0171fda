#include "core/matmul.h"

#include <string>

#include "core/blas.h"
#include "core/error.h"

namespace qkv {

namespace {
std::string desc(const Tensor& t, bool tr) { return to_string(t.shape()) + (tr ? "^T" : ""); }
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_defined(a, "matmul");
  check_defined(b, "matmul");
  if (a.dim() < 2 || b.dim() < 2)
    throw Error("matmul: " + desc(a, trans_a) + " x " + desc(b, trans_b) +
                ": both operands need rank >= 2");
  const int64_t ar = a.size(-2), ac = a.size(-1), br = b.size(-2), bc = b.size(-1);
  const int64_t M = trans_a ? ac : ar, K = trans_a ? ar : ac;
  const int64_t Kb = trans_b ? bc : br, N = trans_b ? br : bc;
  if (K != Kb)
    throw Error("matmul: " + desc(a, trans_a) + " x " + desc(b, trans_b) + ": inner dims " +
                std::to_string(K) + " != " + std::to_string(Kb));
  const Shape ba(a.shape().begin(), a.shape().end() - 2);
  const Shape bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "matmul (batch dims)");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  check_shape(out_shape, "matmul");
  Tensor out = Tensor::empty(out_shape);
  const int64_t nb = numel(batch);
  if (out.numel() == 0) return out;
  const int64_t lda = ac, ldb = bc;  // row-major leading dims of the stored matrices
  const int64_t sa = ar * ac, sb = br * bc, sc = M * N;

  // a batched, b one matrix, a not transposed: fold the batch into M (one big gemm).
  if (numel(bb) == 1 && !trans_a && numel(ba) == nb) {
    gemm(false, trans_b, nb * M, N, K, 1, a.data(), lda, b.data(), ldb, 0, out.data(), N);
    return out;
  }
  const int64_t na = numel(ba), nbb = numel(bb);
  if ((na == nb || na == 1) && (nbb == nb || nbb == 1)) {
    // Plain batch (or one side broadcast whole): strides of 0 repeat the matrix.
    gemm_batched(trans_a, trans_b, nb, M, N, K, 1, a.data(), na == 1 ? 0 : sa, lda, b.data(),
                 nbb == 1 ? 0 : sb, ldb, 0, out.data(), sc, N);
    return out;
  }
  // General broadcast of batch dims: work out each operand's matrix per output batch.
  const int r = static_cast<int>(batch.size());
  Shape stA(r, 0), stB(r, 0);  // batch strides (0 where broadcast); inline
  {
    const auto sta = strides_of(ba), stb = strides_of(bb);
    const int oa = r - static_cast<int>(ba.size()), ob = r - static_cast<int>(bb.size());
    for (int d = 0; d < r; ++d) {
      if (d >= oa && ba[d - oa] != 1) stA[d] = sta[d - oa];
      if (d >= ob && bb[d - ob] != 1) stB[d] = stb[d - ob];
    }
  }
  // Batch i's offsets into a and b: unravel i over the batch shape (the same
  // walk as map_broadcast's per-row offsets in core/elementwise.cpp; both are
  // kept inline, a few lines each, in their loops).
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ia += idx * stA[d];
      ib += idx * stB[d];
    }
    gemm(trans_a, trans_b, M, N, K, 1, a.data() + ia * sa, lda, b.data() + ib * sb, ldb, 0,
         out.data() + i * sc, N);
  }
  return out;
}

}  // namespace qkv
