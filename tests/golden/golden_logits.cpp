// The C++ half of tests/golden/make_golden.sh (read its header first: the
// files it makes are frozen and must never be made again to pass a test).
//
//   golden_logits STEP3.safetensors STEP4.safetensors MODEL_OUT LOGITS_OUT [INPUT [MADE_BY]]
//
// Reads two training checkpoints of one run (written by `train` at steps 3
// and 4), writes the step-3 model as a model file without training state
// (nn::save_model) to MODEL_OUT, and writes to LOGITS_OUT a fixed input
// (three (source, target) pairs, ids as F32 tensors "input.src.<i>",
// "input.tgt.<i>") with the teacher-forced logits (B, T, V) of both models
// on it in eval mode: "logits.step3" and "logits.step4". The input fits the
// model (models/model.h says how each family reads a pair):
//   tokens    (the default) ids 3..6, the targets as long as the sources (the
//             encoder-only family needs one label per token; bert's mlm
//             scores every position); any model whose vocabulary has them
//   classify  "<s> ids 3..6 </s>" and one label each, 0, 1, 0, .. below the
//             model's classes (bert's classify head)
//   image     C*H*W pixels 0..255 of the model's image size (its model_config's
//             channels and image) and one label each below its classes (vit)
// MADE_BY goes into LOGITS_OUT's metadata "made_by" (default: 2a77ff7's, the
// first set's). The logits are those of float32 products, whatever precision
// the run trained with.
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

// The sources of fixed_pairs() as "<s> ids </s>", each with one label below `classes`.
std::vector<data::Pair> classify_pairs(int64_t classes) {
  std::vector<data::Pair> pairs = fixed_pairs();
  for (size_t i = 0; i < pairs.size(); ++i) {
    data::Seq src = {data::kBos};
    src.insert(src.end(), pairs[i].src.begin(), pairs[i].src.end());
    src.push_back(data::kEos);
    pairs[i] = {src, {int64_t(i) % classes}};
  }
  return pairs;
}

// Three images of `pixels` values 0..255 (each its own stripes), each with
// one label below `classes`.
std::vector<data::Pair> image_pairs(int64_t pixels, int64_t classes) {
  std::vector<data::Pair> pairs(3);
  for (size_t i = 0; i < pairs.size(); ++i) {
    for (int64_t j = 0; j < pixels; ++j) pairs[i].src.push_back((37 * j + 101 * int64_t(i)) % 256);
    pairs[i].tgt = {int64_t(i) % classes};
  }
  return pairs;
}

// The input of kind `input` for the model in the checkpoint at `path`.
std::vector<data::Pair> input_for(const std::string& input, const std::string& path) {
  if (input == "tokens") return fixed_pairs();
  const std::unique_ptr<nn::Model> m = nn::load_model(path);
  if (input == "classify") return classify_pairs(m->vocab_size());
  if (input == "image") {
    const TensorFile f = read_safetensors(path);
    const nlohmann::json c = nn::metadata_json(f.metadata, "model_config", path);
    const int64_t side = c.at("image").get<int64_t>();
    return image_pairs(c.at("channels").get<int64_t>() * side * side, m->vocab_size());
  }
  throw Error("golden_logits: INPUT is tokens, classify or image, not '" + input + "'");
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
  if (argc < 5 || argc > 7) {
    std::fprintf(stderr,
                 "usage: golden_logits STEP3 STEP4 MODEL_OUT LOGITS_OUT [INPUT [MADE_BY]]\n");
    return 2;
  }
  try {
    const std::string input = argc > 5 ? argv[5] : "tokens";
    const std::string made_by = argc > 6 ? argv[6] : "qkv 2a77ff7, tests/golden/make_golden.sh";
    const std::vector<data::Pair> pairs = input_for(input, argv[1]);
    NamedTensors out;
    for (size_t i = 0; i < pairs.size(); ++i) {
      out.emplace_back("input.src." + std::to_string(i), ids(pairs[i].src));
      out.emplace_back("input.tgt." + std::to_string(i), ids(pairs[i].tgt));
    }
    out.emplace_back("logits.step3", logits_of(argv[1], pairs));
    out.emplace_back("logits.step4", logits_of(argv[2], pairs));
    auto m = nn::load_model(argv[1]);
    nn::save_model(*m, argv[3]);
    write_safetensors(argv[4], out, {{"made_by", made_by}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "golden_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
