// The one scalar type of qkv. float by default; the gradient-check build
// compiles the library a second time with -DQKV_DOUBLE so that finite
// differences are tight (~1e-6) instead of float32-loose.
#pragma once

namespace qkv {
#ifdef QKV_DOUBLE
using real = double;
inline constexpr const char* real_name = "float64";
#else
using real = float;
inline constexpr const char* real_name = "float32";
#endif
}  // namespace qkv
