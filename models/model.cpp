#include "models/model.h"

#include <string>

#include "autograd/ops.h"
#include "core/error.h"

namespace qkv::nn {

namespace {
// Calls visit(f) on every FFN block among m's modules, depth first in
// registration order, collecting nothing: aux_loss runs every step, and a
// vector here was the step's only heap allocations (bench_train's count).
template <class Visit>
void each_ffn(const Module& m, const Visit& visit) {
  for (const auto& [name, child] : m.children()) {
    if (const auto* f = dynamic_cast<const FFN*>(child.get())) visit(*f);
    each_ffn(*child, visit);
  }
}
}  // namespace

Var Model::aux_loss() const {
  Var total;
  int layers = 0;
  each_ffn(*this, [&](const FFN& f) {
    Var a = f.aux_loss();
    if (!a.defined()) return;
    total = total.defined() ? total + a : a;
    ++layers;
  });
  return layers > 1 ? total * (real(1) / real(layers)) : total;
}

std::vector<const MoERouting*> Model::routings() const {
  std::vector<const MoERouting*> out;
  each_ffn(*this, [&](const FFN& f) {
    if (f.routing()) out.push_back(f.routing());
  });
  return out;
}

int64_t Model::active_parameters() const {
  int64_t n = num_parameters();
  each_ffn(*this, [&](const FFN& f) { n -= f.num_parameters() - f.active_parameters(); });
  return n;
}

TeacherForced Model::forward_text(const data::LMBatch&) {
  throw Error(std::string(kind()) +
              " model: reads (source, target) pairs, not plain text (a language model, gpt, does)");
}

}  // namespace qkv::nn
