// Gradient clipping by global norm (PyTorch's clip_grad_norm_).
#pragma once
#include <vector>

#include "autograd/var.h"

namespace qkv::optim {

// The L2 norm of all gradients together, ||(g_1, ..., g_n)||, accumulated in
// double. When it exceeds max_norm, every gradient is scaled in place by
// max_norm / (norm + 1e-6), so the new norm is max_norm (to within the 1e-6).
// Returns the norm before clipping. Parameters without a gradient are skipped.
// A non-finite norm (an inf or NaN gradient) is returned and the gradients are
// left as they are: check it and skip the step. Throws unless max_norm is
// finite and > 0.
real clip_grad_norm(const std::vector<Var>& params, real max_norm);

}  // namespace qkv::optim
