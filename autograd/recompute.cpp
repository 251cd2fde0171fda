// recompute: run f without a graph, run it again in backward
// (autograd/recompute.h says why and how).
#include "autograd/recompute.h"

#include <cstring>
#include <string>
#include <utility>

#include "autograd/node.h"
#include "core/error.h"

namespace qkv {

namespace {

// A hash of t's bytes: forward's and the re-run's outputs must agree. FNV-1a's
// step h = (h ^ w) * prime over 64-bit words, in four independent lanes (one
// serial chain over the bytes took ~1.3 ms per MiB, a tenth of small's step at
// 2 threads with layer recompute). Each step is a bijection of h for a fixed
// word, so outputs that differ in one word always hash apart.
uint64_t hash_of(const Tensor& t) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t h[4] = {1469598103934665603ULL, 0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL,
                   0x165667b19e3779f9ULL};
  const unsigned char* p = reinterpret_cast<const unsigned char*>(t.data());
  const size_t n = static_cast<size_t>(t.numel()) * sizeof(real), words = n / 8;
  size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + 8 * (i + l), 8);
      h[l] = (h[l] ^ w) * kPrime;
    }
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    h[0] = (h[0] ^ w) * kPrime;
  }
  for (size_t b = 8 * words; b < n; ++b) h[1] = (h[1] ^ p[b]) * kPrime;
  uint64_t out = n;
  for (int l = 0; l < 4; ++l) out = (out ^ h[l]) * kPrime;
  return out;
}

// Sets grad recording for a scope and restores it after.
class GradMode {
 public:
  explicit GradMode(bool on) : prev_(grad_enabled()) { set_grad_enabled(on); }
  ~GradMode() { set_grad_enabled(prev_); }

 private:
  bool prev_;
};

}  // namespace

// Saves f, the inputs' values and the generators' states at forward; the
// graph of f exists only during this node's backward.
struct RecomputeNode : Node {
  RecomputeFn f;
  std::vector<Tensor> x;                                     // the inputs' values
  std::vector<std::pair<Generator*, Generator::State>> rng;  // at forward
  uint64_t out_hash = 0;                                     // forward's output
  const char* name() const override { return "recompute"; }
  OpDoc doc() const override {
    return {"y = f(x), run without recording its graph (only x and the random state are kept)",
            "in backward: run f(x) again, recorded, with the same random state, then dx = the "
            "re-run's backward of dy",
            "docs/long-sequences.md#recomputation-backward-through-a-second-forward"};
  }

  TensorList backward(const Tensor& dY) override {
    // Leaves holding the saved values: the re-run's graph ends at them.
    std::vector<Var> leaves;
    for (size_t i = 0; i < x.size(); ++i) leaves.emplace_back(x[i], needs_grad(i));
    // f again, recorded, with the generators as forward found them
    std::vector<Generator::State> now;
    for (auto& [g, st] : rng) {
      now.push_back(g->state());
      g->set_state(st);
    }
    Var y;
    {
      GradMode on(true);
      y = f(leaves);
    }
    for (size_t i = 0; i < rng.size(); ++i) rng[i].first->set_state(now[i]);
    if (hash_of(y.data()) != out_hash)
      throw Error("recompute: re-running the function gave another output of shape " +
                  to_string(y.shape()) +
                  " than forward: it draws from a generator not passed to recompute, or is "
                  "not deterministic");
    // backpropagate through the re-run: parameters get theirs, leaves ours
    if (y.requires_grad()) y.backward(dY);
    TensorList g;
    for (size_t i = 0; i < leaves.size(); ++i)
      g.push_back(needs_grad(i) ? leaves[i].grad() : Tensor());
    return g;
  }
  void release_saved() override {
    f = nullptr;
    x.clear();
  }
};

Var recompute(RecomputeFn f, const std::vector<Var>& inputs,
              const std::vector<Generator*>& generators) {
  VarList in(inputs.begin(), inputs.end());
  if (!grad_enabled()) return f(inputs);
  if (!should_record(in))
    throw Error("recompute: none of the " + std::to_string(inputs.size()) +
                " inputs requires grad, so backward would never re-run the function and its "
                "parameters would get no gradient");
  auto node = make_node<RecomputeNode>();
  for (Generator* g : generators) node->rng.push_back({g, g->state()});
  Var y;
  {
    GradMode off(false);
    y = f(inputs);
  }
  node->out_hash = hash_of(y.data());
  for (const Var& v : inputs) node->x.push_back(v.data());
  node->f = std::move(f);
  return make_result(y.data(), node, in);
}

}  // namespace qkv
