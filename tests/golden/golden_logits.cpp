// The C++ half of tests/golden/make_golden.sh (read its header first: the
// files it makes are frozen and must never be made again to pass a test).
//
//   golden_logits STEP3.safetensors STEP4.safetensors MODEL_OUT LOGITS_OUT
//
// Reads two training checkpoints of one run (written by `train` at steps 3
// and 4), writes the step-3 model as a model file without training state
// (nn::save_model) to MODEL_OUT, and writes to LOGITS_OUT the fixed input
// (three (source, target) pairs of different lengths, ids as F32 tensors
// "input.src.<i>", "input.tgt.<i>") with the teacher-forced logits (B, T, V)
// of both models on it in eval mode: "logits.step3" and "logits.step4".
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/model_file.h"
#include "io/safetensors.h"

using namespace qkv;

namespace {

// The fixed input: symbols 3..6 of a task with --symbols 4, the targets as
// long as the sources (the encoder-only family needs one label per token).
std::vector<data::Pair> fixed_pairs() {
  return {{{3, 4, 5, 6}, {6, 5, 4, 3}}, {{5, 3}, {3, 5}}, {{6, 6, 4}, {4, 6, 6}}};
}

Tensor ids(const data::Seq& s) {
  std::vector<real> v(s.begin(), s.end());
  return Tensor::from_vector(v);
}

Tensor logits_of(const std::string& path, const std::vector<data::Pair>& pairs) {
  auto m = nn::load_model(path);
  m->eval();
  NoGradGuard no_grad;
  return m->forward_pairs(pairs).logits.data().clone();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: golden_logits STEP3 STEP4 MODEL_OUT LOGITS_OUT\n");
    return 2;
  }
  try {
    const std::vector<data::Pair> pairs = fixed_pairs();
    NamedTensors out;
    for (size_t i = 0; i < pairs.size(); ++i) {
      out.emplace_back("input.src." + std::to_string(i), ids(pairs[i].src));
      out.emplace_back("input.tgt." + std::to_string(i), ids(pairs[i].tgt));
    }
    out.emplace_back("logits.step3", logits_of(argv[1], pairs));
    out.emplace_back("logits.step4", logits_of(argv[2], pairs));
    auto m = nn::load_model(argv[1]);
    nn::save_model(*m, argv[3]);
    write_safetensors(argv[4], out, {{"made_by", "qkv 2a77ff7, tests/golden/make_golden.sh"}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "golden_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
