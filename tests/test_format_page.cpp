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

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/qkv_autograd.h"
#include "checkpoint/model_file.h"
#include "compare.h"
#include "fixture.h"
#include "models/bert.h"
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

// Case `name`'s model file, loaded by qkv as any user's file is: its order
// of parameters and its logits on the fixture's input against PyTorch's.
void check_case(const std::string& name) {
  INFO("case " << name);
  const TensorFile ref = load_fixture("format_page.safetensors");
  auto m = load_case(name);
  check_parameter_order(*m, name);
  NoGradGuard no_grad;
  Var logits;
  const std::string in = name + ".in.";
  if (auto* s2s = dynamic_cast<Seq2SeqTransformer*>(m.get()))
    logits = s2s->forward(tokens_of(ref, in + "src", in + "src_lens"),
                          tokens_of(ref, in + "tgt", in + "tgt_lens"));
  else if (auto* gpt = dynamic_cast<GPT*>(m.get()))
    logits = gpt->forward(tokens_of(ref, in + "ids", in + "lens"));
  else if (auto* bert = dynamic_cast<Bert*>(m.get()))
    logits = bert->forward(tokens_of(ref, in + "ids", in + "lens"));
  else if (auto* vit = dynamic_cast<ViT*>(m.get())) {
    const Tensor& px = ref.get(in + "pixels");  // (B, C*H*W) pixel values as F32
    std::vector<data::Seq> images(px.size(0));
    for (int64_t b = 0; b < px.size(0); ++b)
      for (int64_t i = 0; i < px.size(1); ++i) images[b].push_back(std::lround(px.at({b, i})));
    logits = vit->forward(vit->images(images));
  } else
    logits = dynamic_cast<EncoderOnlyModel&>(*m).forward(tokens_of(ref, in + "ids", in + "lens"));
  testing::check_close_to_scale(logits.data(), ref.get(name + ".out.logits"), name + " logits");
}

}  // namespace

// Post-LN, tied, sinusoidal, d_k set apart; Pre-LN, learned positions,
// untied, sparse self-attention (standard cross-attention), dropout in the
// config (none in eval).
TEST_CASE("format page: seq2seq files written from the page alone load and give PyTorch's logits") {
  check_case("seq2seq");
  check_case("seq2seq_preln");
}

// Pre-LN, untied, GELU, linear kernel; Post-LN, tied, sparse under the causal mask.
TEST_CASE("format page: gpt files written from the page alone load and give PyTorch's logits") {
  check_case("gpt");
  check_case("gpt_tied");
}

// Post-LN, unscaled sparse attention; Pre-LN, GELU, d_k set apart.
TEST_CASE("format page: encoder files written from the page alone load and give PyTorch's logits") {
  check_case("encoder");
  check_case("encoder_preln");
}

// The block keys: the llama block (Pre-LN RMSNorm, SwiGLU, no biases, tied);
// Post-LN RMSNorm (the residual sum inside the norm), GELU, no biases.
TEST_CASE(
    "format page: files with the block keys norm, activation swiglu and bias, written from the "
    "page alone, load and give PyTorch's logits") {
  check_case("gpt_llama");
  check_case("seq2seq_rms");
}

// The attention keys: grouped-query attention (4 query heads, 2 key/value
// heads, d_k 6 set apart, with biases) and rotary positions (no pos_embed).
TEST_CASE(
    "format page: a gpt file with the attention keys kv_heads and rope_base, written from the "
    "page alone, loads and gives PyTorch's logits") {
  check_case("gpt_gqa_rope");
}

// T5's relative positions: a seq2seq (Pre-LN, ReLU) with encoder.rel_bias
// (bidirectional) and decoder.rel_bias (causal), no positions added.
TEST_CASE(
    "format page: a seq2seq file with the keys rel_buckets and rel_max_distance, written from the "
    "page alone, loads and gives PyTorch's logits") {
  check_case("seq2seq_relative");
}

// bert: head mlm (Post-LN, GELU, tied output + mlm.bias, optional keys left
// out); head classify (Pre-LN, ReLU, 3 segment rows, the pooler on position
// 0); head qa (qa_outputs: the start and end logits, masked to [CLS] and
// segment 1).
TEST_CASE(
    "format page: bert files (heads mlm, classify and qa) written from the page alone load and "
    "give PyTorch's logits") {
  check_case("bert_mlm");
  check_case("bert_classify");
  check_case("bert_qa");
}

// The Vision Transformer: pixels read in channel, row, column order, cut into
// patches in (c, py, px) order, the class token and positions, the head on
// position 0; 2 channels and Pre-LN (the library's alone: the trainer reads
// gray images), 1 channel and Post-LN (format_page.sh trains and asks it).
TEST_CASE(
    "format page: vit files (2 channels Pre-LN, 1 channel Post-LN) written from the page alone "
    "load and give PyTorch's logits") {
  check_case("vit");
  check_case("vit_gray");
}

TEST_CASE(
    "format page: gpt files with a mixture of experts, written from the page alone, load and give "
    "PyTorch's logits at inference and in a training step") {
  const TensorFile ref = load_fixture("format_page.safetensors");
  for (const std::string name : {"gpt_moe", "gpt_moe_top1"}) {
    check_case(name);  // at inference: no assignment dropped
    INFO("case " << name);
    auto m = load_case(name);
    m->train();  // dropout 0: the capacity is all that differs
    const std::string in = name + ".in.";
    const Var logits = dynamic_cast<GPT&>(*m).forward(tokens_of(ref, in + "ids", in + "lens"));
    testing::check_close_to_scale(logits.data(), ref.get(name + ".out.train_logits"),
                                  name + " training-step logits");
  }
}
