// A decoder's choice from logits that are NaN or +Inf would be a token
// picked from noise (weights so large that float32 overflows): every
// decoding method checks the row it chooses from, and refuses in one line.
// -Inf is a real value here (a suppressed token's logit), but a row with no
// finite value at all has nothing to choose from.
#pragma once
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace qkv::nn {

inline void check_finite_logits(const real* row, int64_t n, const char* op) {
  bool any_finite = false;
  for (int64_t v = 0; v < n; ++v) {
    if (std::isnan(row[v]) || row[v] == INFINITY)
      throw Error(std::string(op) + ": the model's output at id " + std::to_string(v) + " is " +
                  (std::isnan(row[v]) ? "NaN" : "+Inf") +
                  ": its weights are not finite, or too large for float32 on this input, so "
                  "there is no answer to give");
    any_finite = any_finite || std::isfinite(row[v]);
  }
  if (n > 0 && !any_finite)
    throw Error(std::string(op) + ": every one of the model's " + std::to_string(n) +
                " outputs is -Inf: there is no answer to give");
}

}  // namespace qkv::nn
