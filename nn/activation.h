// The activations a fused layer can apply inside its own loops (FeedForward).
// GELU is the exact erf form, x * Phi(x), as PyTorch's default nn.GELU().
#pragma once

namespace qkv::nn {

enum class Activation { ReLU, GELU };

inline const char* activation_name(Activation a) { return a == Activation::ReLU ? "relu" : "gelu"; }

}  // namespace qkv::nn
