// Activation recomputation (gradient checkpointing; Chen et al. 2016,
// PyTorch's torch.utils.checkpoint): trade compute for memory.
//
//   Var y = recompute([&](const std::vector<Var>& in) { return layer->forward(in[0]); },
//                     {x}, {&dropout_generator});
//
// Forward runs f without recording its graph, so none of f's intermediates
// is kept: the only node is one RecomputeNode, which keeps f, the inputs'
// values and the state of the listed generators. Its backward runs f again,
// with grad recording on and each listed generator set back to the state it
// had when forward ran f (so dropout draws the same masks), backpropagates
// the incoming gradient through that re-run, and returns the inputs'
// gradients; parameters f reads (leaves) get theirs added directly, as in
// any backward. The generators are then put back where backward found them,
// so the random stream after a step is the same with or without recompute.
// The gradients equal those without recompute bit for bit
// (tests/test_recompute.cpp), at the cost of one more forward of f.
//
// Rules for f: every Var it reads that is not a leaf (a parameter) must come
// through `inputs` (a Var captured from the graph outside would have no path
// for its gradient); every generator it draws from must be listed; f must be
// deterministic. The re-run's output is compared with forward's (a 64-bit
// hash of its bytes): if they differ, an op of f drew from an unlisted
// generator or is not deterministic, and backward throws naming recompute.
// With grad recording on, at least one input must require grad (else no
// backward would ever reach f: an error); with it off, recompute is just f.
#pragma once
#include <functional>
#include <vector>

#include "autograd/var.h"
#include "core/generator.h"

namespace qkv {

using RecomputeFn = std::function<Var(const std::vector<Var>&)>;

Var recompute(RecomputeFn f, const std::vector<Var>& inputs,
              const std::vector<Generator*>& generators = {});

}  // namespace qkv
