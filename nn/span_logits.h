// Extractive question answering's head (Devlin et al. 2019, section 4.2):
// a linear layer gives every token two scores, a start and an end logit
// (B, T, 2); span_logits turns them into the two distributions' logits over
// the positions a span may take, (B, 2, T), the start row and the end row
// of each sequence:
//
//   span_logits   z (B, T, 2), allowed (B*T) -> y (B, 2, T)
//                 y[b,c,t] = z[b,t,c]          where allowed[b*T+t]
//                 y[b,c,t] = kMaskedLogit      elsewhere
//                 dz[b,t,c] = dy[b,c,t] where allowed, 0 elsewhere
//
// "Allowed" is [CLS] (position 0, the answer "none in this window") and the
// context's tokens: a question's tokens, its [SEP]s and padding can be
// neither start nor end. With y as the logits (B, 2, T) and the start and
// end positions as their targets (2B), cross_entropy(y, targets) is the
// span loss, the mean of the start and end cross-entropies, as Hugging
// Face's BertForQuestionAnswering computes it; a masked position's softmax
// probability is exactly 0, so it gets no gradient. docs/qa-backward.md
// derives the gradient and works one number; the op is the transpose and
// the mask in one node (composed: transpose, then mul and add by constant
// masks: tests/test_span_logits_grad.cpp shows both equal).
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/var.h"

namespace qkv::nn {

// The logit of a position no span may start or end at: exp of it minus any
// real logit is 0 in float32 and float64, so its probability is exactly 0.
inline constexpr real kMaskedLogit = real(-1e9);

// z (B, T, 2), allowed (B*T, 1 where a span may start or end) -> (B, 2, T).
// Errors name the op and the shapes.
Var span_logits(const Var& z, const std::vector<uint8_t>& allowed);

}  // namespace qkv::nn
