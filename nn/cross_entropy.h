// nn::cross_entropy: log-softmax, negative log-likelihood and label smoothing
// in one fused op, as torch.nn.functional.cross_entropy with reduction "mean":
//   loss_i = (1 - eps) * (-logp[i, y_i]) + eps / V * sum_c(-logp[i, c])
//   loss   = mean of loss_i over the rows whose target is not ignore_index
// All rows ignored gives loss 0 and a zero gradient (PyTorch would give NaN).
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

}  // namespace qkv::nn
