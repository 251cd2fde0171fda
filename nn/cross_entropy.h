// nn::cross_entropy: log-softmax, negative log-likelihood and label smoothing
// in one fused op, as torch.nn.functional.cross_entropy with reduction "mean":
//   loss_r = (1 - eps) * (-logp[r, y_r]) + eps / V * sum_c(-logp[r, c])
//   loss   = mean of loss_r over the rows r whose target is not ignore_index
// with eps = label_smoothing. All rows ignored gives loss 0 and a zero
// gradient (PyTorch would give NaN). The maths is in nn/cross_entropy.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/var.h"

namespace qkv::nn {

// logits (N, V) or (B, T, V) (any rank >= 2; rows = all leading dims),
// targets: one class index per row, in [0, V) or equal to ignore_index.
// Returns a scalar (rank 0).
Var cross_entropy(const Var& logits, const std::vector<int64_t>& targets,
                  int64_t ignore_index = -100, real label_smoothing = 0);

// The kernels over flat arrays, without the graph. x, p, dx (N, V); targets (N),
// each in [0, V) or equal to ignore_index: cross_entropy checks that, these
// kernels do not (a target out of range reads and writes out of bounds).
// Forward writes p = softmax(x) and returns the sum of the counted rows' losses
// (divide by their number for the mean); backward writes
// dx = scale * (p - q), scale = dL/dloss / n_valid, and zero rows where
// targets[r] == ignore_index.
double cross_entropy_forward(const real* x, const int64_t* targets, int64_t N, int64_t V,
                             int64_t ignore_index, real smoothing, real* p);
void cross_entropy_backward(const real* p, const int64_t* targets, int64_t N, int64_t V,
                            int64_t ignore_index, real smoothing, real scale, real* dx);

}  // namespace qkv::nn
