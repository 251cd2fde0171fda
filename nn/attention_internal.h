// The fused attention op's memory policy: an internal choice, not part of
// nn::multi_head_attention's signature. Tests and benchmarks include this
// header; a program using qkv does not need to.
//
// Backward needs the merged head outputs O (B*T, D) for the output
// projection's weight gradient dWo = dY^T O. Forward can keep O until then,
// or backward can recompute it from the saved P and V (one (T,S) x (S,d_k)
// product per head, B*H in all), which saves B*T*D numbers per layer.
#pragma once
#include <cstdint>

#include "core/real.h"

namespace qkv::nn::detail {

enum class HeadOutputs { Auto, Keep, Recompute };

// Auto's rule: keep O when it takes no more memory than the probabilities P
// (B,H,T,S) kept anyway, D <= H*S (the small and GPT benchmark shapes), or when
// it is at most kKeptHeadOutputsBytes, too little memory to be worth B*H extra
// small products in backward (tiny: 192 KiB per attention). Otherwise (base:
// 2 MiB per attention, 18 of them) backward recomputes O.
inline constexpr int64_t kKeptHeadOutputsBytes = int64_t{1} << 20;
inline bool attention_keeps_head_outputs(int64_t B, int64_t T, int64_t S, int64_t d_model,
                                         int64_t heads) {
  return d_model <= heads * S ||
         B * T * d_model * static_cast<int64_t>(sizeof(real)) <= kKeptHeadOutputsBytes;
}

// The test hook: while one is alive, multi_head_attention called on this
// thread keeps (Keep) or recomputes (Recompute) O whatever the shape, so a
// test reaches both backward paths at any size. Scopes nest; Auto restores
// the rule above.
class ForceHeadOutputs {
 public:
  explicit ForceHeadOutputs(HeadOutputs policy);
  ~ForceHeadOutputs();
  ForceHeadOutputs(const ForceHeadOutputs&) = delete;
  ForceHeadOutputs& operator=(const ForceHeadOutputs&) = delete;

 private:
  HeadOutputs previous_;
};

// What forward does: the forced policy if a ForceHeadOutputs is alive on
// this thread, otherwise attention_keeps_head_outputs.
bool keep_head_outputs(int64_t B, int64_t T, int64_t S, int64_t d_model, int64_t heads);

}  // namespace qkv::nn::detail
