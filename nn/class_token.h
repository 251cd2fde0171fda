// The Vision Transformer's class token (Dosovitskiy et al. 2021, eq. 1-4):
// a learned vector c (1, 1, D) put in front of every sequence of patch
// embeddings, whose output after the encoder is what the head reads.
//
//   prepend_class_token   x (B, N, D), c (1, 1, D) -> z (B, N+1, D)
//                         z[b,0] = c;  z[b,1+n] = x[b,n]
//                         dc = sum_b dz[b,0];  dx[b,n] = dz[b,1+n]
//   class_token_output    h (B, T, D) -> h[:, 0] (B, D)
//                         dh[b,0] = dy[b];  dh[b,t>0] = 0
//
// Two small fused ops with their own backward (ops.h has no concatenation or
// slicing). The class token's gradient is the sum over the batch of what
// reaches position 0, and that is more than the head's: every other position
// attends to it, so its keys and values pass gradient back too
// (docs/vit-backward.md).
#pragma once
#include "autograd/var.h"

namespace qkv::nn {

// x (B, N, D), token (1, 1, D) -> (B, N+1, D). Errors name the op and shapes.
Var prepend_class_token(const Var& x, const Var& token);

// h (B, T, D) -> (B, D): every sequence's first position.
Var class_token_output(const Var& h);

}  // namespace qkv::nn
