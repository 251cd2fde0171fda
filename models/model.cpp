#include "models/model.h"

#include <string>

#include "autograd/ops.h"
#include "core/error.h"

namespace qkv::nn {

namespace {
// Every FFN block among m's modules, depth first in registration order.
void collect_ffns(const Module& m, std::vector<const FFN*>& out) {
  for (const auto& [name, child] : m.children()) {
    if (const auto* f = dynamic_cast<const FFN*>(child.get())) out.push_back(f);
    collect_ffns(*child, out);
  }
}
std::vector<const FFN*> ffns_of(const Module& m) {
  std::vector<const FFN*> out;
  collect_ffns(m, out);
  return out;
}
}  // namespace

Var Model::aux_loss() const {
  Var total;
  int layers = 0;
  for (const FFN* f : ffns_of(*this)) {
    Var a = f->aux_loss();
    if (!a.defined()) continue;
    total = total.defined() ? total + a : a;
    ++layers;
  }
  return layers > 1 ? total * (real(1) / real(layers)) : total;
}

std::vector<const MoERouting*> Model::routings() const {
  std::vector<const MoERouting*> out;
  for (const FFN* f : ffns_of(*this))
    if (f->routing()) out.push_back(f->routing());
  return out;
}

int64_t Model::active_parameters() const {
  int64_t n = num_parameters();
  for (const FFN* f : ffns_of(*this)) n -= f->num_parameters() - f->active_parameters();
  return n;
}

TeacherForced Model::forward_text(const data::LMBatch&) {
  throw Error(std::string(kind()) +
              " model: reads (source, target) pairs, not plain text (a language model, gpt, does)");
}

}  // namespace qkv::nn
