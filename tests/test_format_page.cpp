// docs/checkpoint-format.md is enough to write qkv's files and models from
// outside qkv. tests/pytorch/format_writer.py (Python's standard library
// alone) wrote tests/fixtures/format_<case>.safetensors from the page's facts;
// tests/pytorch/format_reference.py built the same models in plain torch ops
// from the page and wrote their logits to tests/fixtures/format_page.safetensors
// (`make fixtures` regenerates both). qkv must load each file and compute those
// logits, and its parameter order must be the one the page lists (the writer
// stored the order it took from the page under a key of its own).
// tests/cli/format_page.sh has the trainer evaluate, answer and resume from
// the writer's files.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/qkv_autograd.h"
#include "checkpoint/model_file.h"
#include "compare.h"
#include "fixture.h"
#include "models/transformer.h"

using namespace qkv;
using namespace qkv::nn;

namespace {

Tokens tokens_of(const TensorFile& f, const std::string& ids, const std::string& lens) {
  const Tensor& t = f.get(ids);
  return Tokens{testing::ids_of(t), t.size(0), t.size(1), testing::ids_of(f.get(lens))};
}

// The model file of `name`, loaded by qkv as any user's file is, in eval mode.
std::unique_ptr<Model> load_case(const std::string& name) {
  std::unique_ptr<Model> m = load_model(fixture_path("format_" + name + ".safetensors"));
  m->eval();
  return m;
}

// named_parameters() against the order the writer took from the page.
void check_parameter_order(const Model& m, const std::string& name) {
  const TensorFile f = load_fixture("format_" + name + ".safetensors");
  const auto page = nlohmann::json::parse(f.metadata.at("writer_parameter_order"))
                        .get<std::vector<std::string>>();
  std::vector<std::string> ours;
  for (const auto& [n, v] : m.named_parameters()) ours.push_back(n);
  CHECK(ours == page);
}

}  // namespace

TEST_CASE(
    "format page: a seq2seq file written from the page alone loads and gives PyTorch's logits") {
  const TensorFile ref = load_fixture("format_page.safetensors");
  auto m = load_case("seq2seq");
  check_parameter_order(*m, "seq2seq");
  auto& s2s = dynamic_cast<Seq2SeqTransformer&>(*m);
  NoGradGuard no_grad;
  Var logits = s2s.forward(tokens_of(ref, "seq2seq.in.src", "seq2seq.in.src_lens"),
                           tokens_of(ref, "seq2seq.in.tgt", "seq2seq.in.tgt_lens"));
  testing::check_close_to_scale(logits.data(), ref.get("seq2seq.out.logits"), "seq2seq logits");
}

TEST_CASE("format page: a gpt file written from the page alone loads and gives PyTorch's logits") {
  const TensorFile ref = load_fixture("format_page.safetensors");
  auto m = load_case("gpt");
  check_parameter_order(*m, "gpt");
  NoGradGuard no_grad;
  Var logits = dynamic_cast<GPT&>(*m).forward(tokens_of(ref, "gpt.in.ids", "gpt.in.lens"));
  testing::check_close_to_scale(logits.data(), ref.get("gpt.out.logits"), "gpt logits");
}

TEST_CASE(
    "format page: an encoder file written from the page alone loads and gives PyTorch's logits") {
  const TensorFile ref = load_fixture("format_page.safetensors");
  auto m = load_case("encoder");
  check_parameter_order(*m, "encoder");
  NoGradGuard no_grad;
  Var logits = dynamic_cast<EncoderOnlyModel&>(*m).forward(
      tokens_of(ref, "encoder.in.ids", "encoder.in.lens"));
  testing::check_close_to_scale(logits.data(), ref.get("encoder.out.logits"), "encoder logits");
}
