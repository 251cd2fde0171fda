// Whole models against PyTorch (float32): the committed fixtures were written
// by tests/pytorch/make_fixtures.py from torch.nn.Transformer{Encoder,Decoder}Layer
// with the same weights. Logits, loss and every parameter's gradient must agree.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "fixture.h"
#include "nn/cross_entropy.h"
#include "models/transformer.h"
#include "checkpoint/model_file.h"
#include "nn/rmsnorm.h"
#include "nn/swiglu.h"

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::check_close;
using qkv::testing::ids_of;

namespace {

Tokens tokens_of(const TensorFile& f, const std::string& ids, const std::string& lens) {
  const Tensor& t = f.get(ids);
  return Tokens{ids_of(t), t.size(0), t.size(1), ids_of(f.get(lens))};
}

// Every model parameter exists in the fixture and vice versa.
void check_same_names(const Module& m, const TensorFile& f) {
  std::set<std::string> ours, theirs;
  for (auto& [n, v] : m.named_parameters()) ours.insert(n);
  for (auto& [n, t] : f.tensors)
    if (n.rfind("param.", 0) == 0) theirs.insert(n.substr(6));
  CHECK(ours == theirs);
}

void check_grads(const Module& m, const TensorFile& f) {
  qkv::testing::check_param_grads(m.named_parameters(), f, "grad.", "model");
}

void seq2seq_parity(Seq2SeqTransformer& model, const TensorFile& f);

TransformerConfig seq2seq_config(const TensorFile& f) {
  const auto& m = f.metadata;
  TransformerConfig c;
  c.src_vocab = std::stoi(m.at("src_vocab"));
  c.tgt_vocab = std::stoi(m.at("tgt_vocab"));
  c.d_model = std::stoi(m.at("d_model"));
  c.heads = std::stoi(m.at("heads"));
  c.encoder_layers = std::stoi(m.at("enc_layers"));
  c.decoder_layers = std::stoi(m.at("dec_layers"));
  c.d_ff = std::stoi(m.at("d_ff"));
  c.dropout = 0;
  c.pre_norm = m.at("norm_first") == "true";
  c.activation = m.at("activation") == "gelu" ? Activation::GELU : Activation::ReLU;
  c.tie_weights = m.at("tied") == "true";
  return c;
}

void seq2seq_parity(const char* file) {
  TensorFile f = load_fixture(file);
  Seq2SeqTransformer model(seq2seq_config(f));
  seq2seq_parity(model, f);
}

// A Seq2SeqTransformer given the fixture's weights: the same parameter
// names, encoder output, logits, loss and every gradient as the reference.
void seq2seq_parity(Seq2SeqTransformer& model, const TensorFile& f) {
  check_same_names(model, f);
  load_params(model, f, "");
  Tokens src = tokens_of(f, "in.src", "in.src_lens");
  Tokens tgt = tokens_of(f, "in.tgt_in", "in.tgt_lens");
  Var memory = model.encode(src);
  check_close(memory.data(), f.get("out.enc"), "encoder output");
  Var logits = model.decode(tgt, memory, src);
  check_close(logits.data(), f.get("out.logits"), "logits");
  Var loss = cross_entropy(logits, ids_of(f.get("in.tgt_out")), /*ignore_index=*/0,
                           std::stof(f.metadata.at("label_smoothing")));
  check_close(loss.data().reshape({1}), f.get("out.loss"), "loss");
  loss.backward();
  check_grads(model, f);
}

// A GPT built from the fixture's configuration, given its weights: the same
// parameter names, logits, loss and every gradient as the PyTorch reference.
void gpt_parity(GPT& model, const TensorFile& f) {
  check_same_names(model, f);
  load_params(model, f, "");
  Var logits = model.forward(tokens_of(f, "in.ids", "in.lens"));
  check_close(logits.data(), f.get("out.logits"), "logits");
  Var loss = cross_entropy(logits, ids_of(f.get("in.targets")), 0, 0);
  check_close(loss.data().reshape({1}), f.get("out.loss"), "loss");
  loss.backward();
  check_grads(model, f);
}

}  // namespace

TEST_CASE(
    "Seq2SeqTransformer Post-LN ReLU matches PyTorch: encoder output, logits, loss, every "
    "gradient") {
  seq2seq_parity("seq2seq_postln.safetensors");
}

TEST_CASE("Seq2SeqTransformer Pre-LN GELU with tied output weights matches PyTorch") {
  seq2seq_parity("seq2seq_preln_tied.safetensors");
}

TEST_CASE(
    "Seq2SeqTransformer with T5's relative positions (model_config rel_buckets 8, "
    "rel_max_distance 6: encoder.rel_bias bidirectional and decoder.rel_bias causal, each shared "
    "by 2 layers, none in cross-attention, no sinusoids) matches the PyTorch reference built from "
    "the same keys: encoder output, logits, loss and every gradient, both tables' included") {
  TensorFile f = load_fixture("seq2seq_relative.safetensors");
  const TransformerConfig c = transformer_config_from_json(
      nlohmann::json::parse(f.metadata.at("model_config")), "seq2seq_relative.safetensors");
  REQUIRE(c.rel_buckets == 8);
  REQUIRE(c.rel_max_distance == 6);
  Seq2SeqTransformer model(c);
  CHECK_FALSE(model.sin_pos);
  CHECK(model.encoder->rel_bias.shape() == Shape{2, 8});
  CHECK(model.decoder->rel_bias.shape() == Shape{2, 8});
  CHECK(model.encoder->layers[1]->self_attn->rel_bias.same_as(model.encoder->rel_bias));
  CHECK(model.decoder->layers[1]->self_attn->rel_bias.same_as(model.decoder->rel_bias));
  CHECK_FALSE(model.decoder->layers[0]->cross_attn->rel_bias.defined());
  seq2seq_parity(model, f);
}

TEST_CASE(
    "Seq2SeqTransformer with T5's block (--preset t5: Pre-LN RMSNorm, ReLU, no biases, tied, "
    "relative positions) matches the PyTorch reference built from the same keys") {
  TensorFile f = load_fixture("seq2seq_t5.safetensors");
  const TransformerConfig c = transformer_config_from_json(
      nlohmann::json::parse(f.metadata.at("model_config")), "seq2seq_t5.safetensors");
  REQUIRE(c.norm == "rms");
  REQUIRE_FALSE(c.bias);
  REQUIRE(c.tie_weights);
  REQUIRE(c.rel_buckets == 8);
  Seq2SeqTransformer model(c);
  REQUIRE(dynamic_cast<const RMSNorm*>(model.encoder->norm.get()));
  CHECK_FALSE(model.decoder->layers[0]->cross_attn->w_q->bias.defined());
  seq2seq_parity(model, f);
}

TEST_CASE(
    "EncoderOnlyModel with T5's relative positions (model_config rel_buckets 8, rel_max_distance "
    "6: one bidirectional table encoder.rel_bias shared by 2 layers, no sinusoids) matches the "
    "PyTorch reference built from the same keys: logits, loss and every gradient") {
  TensorFile f = load_fixture("encoder_relative.safetensors");
  const EncoderOnlyConfig c = encoder_config_from_json(
      nlohmann::json::parse(f.metadata.at("model_config")), "encoder_relative.safetensors");
  REQUIRE(c.rel_buckets == 8);
  EncoderOnlyModel model(c);
  CHECK(model.encoder->rel_bias.shape() == Shape{4, 8});
  CHECK(model.encoder->layers[1]->self_attn->rel_bias.same_as(model.encoder->rel_bias));
  check_same_names(model, f);
  load_params(model, f, "");
  Var logits = model.forward(tokens_of(f, "in.ids", "in.lens"));
  check_close(logits.data(), f.get("out.logits"), "logits");
  Var loss = cross_entropy(logits, ids_of(f.get("in.targets")), 0, 0);
  check_close(loss.data().reshape({1}), f.get("out.loss"), "loss");
  loss.backward();
  check_grads(model, f);
}

TEST_CASE("GPT decoder-only LM (Pre-LN, GELU, learned positions, tied head) matches PyTorch") {
  TensorFile f = load_fixture("gpt.safetensors");
  const auto& m = f.metadata;
  GPTConfig c;
  c.vocab = std::stoi(m.at("vocab"));
  c.d_model = std::stoi(m.at("d_model"));
  c.heads = std::stoi(m.at("heads"));
  c.layers = std::stoi(m.at("layers"));
  c.d_ff = std::stoi(m.at("d_ff"));
  c.max_positions = std::stoi(m.at("max_len"));
  c.dropout = 0;
  GPT model(c);
  gpt_parity(model, f);
}

TEST_CASE(
    "GPT with grouped-query attention and rotary positions (model_config kv_heads 2 of 4 heads, "
    "rope_base 10000, the llama block) matches the PyTorch reference built from the same keys: "
    "logits, loss and every gradient") {
  TensorFile f = load_fixture("gpt_llama_gqa_rope.safetensors");
  // The model is built from the model_config the reference was built from.
  const GPTConfig c = gpt_config_from_json(nlohmann::json::parse(f.metadata.at("model_config")),
                                           "gpt_llama_gqa_rope.safetensors");
  REQUIRE(c.kv_heads == 2);
  REQUIRE(c.heads == 4);
  REQUIRE(c.rope_base == real(10000));
  GPT model(c);
  // No position table; W_K, W_V of 2 key/value heads: (2 * 16/4, 16).
  CHECK_FALSE(model.pos_embed);
  const auto& attn = *model.layers[0]->self_attn;
  CHECK(attn.w_k->weight.shape() == Shape{8, 16});
  CHECK(attn.w_v->weight.shape() == Shape{8, 16});
  CHECK(attn.w_q->weight.shape() == Shape{16, 16});
  gpt_parity(model, f);
}

TEST_CASE(
    "GPT with T5's relative positions (model_config rel_buckets 8, rel_max_distance 6: one causal "
    "table shared by 2 layers, no position table) matches the PyTorch reference built from the "
    "same keys: logits, loss and every gradient, the table's included") {
  TensorFile f = load_fixture("gpt_relative.safetensors");
  const GPTConfig c = gpt_config_from_json(nlohmann::json::parse(f.metadata.at("model_config")),
                                           "gpt_relative.safetensors");
  REQUIRE(c.rel_buckets == 8);
  REQUIRE(c.rel_max_distance == 6);
  GPT model(c);
  CHECK_FALSE(model.pos_embed);
  CHECK(model.rel_bias.shape() == Shape{4, 8});
  CHECK(model.layers[1]->self_attn->rel_bias.same_as(model.rel_bias));
  gpt_parity(model, f);
}

TEST_CASE(
    "GPT with the llama block (model_config norm rms, activation swiglu, bias false) matches "
    "the PyTorch reference built from the same keys: logits, loss and every gradient") {
  TensorFile f = load_fixture("gpt_llama.safetensors");
  // The model is built from the model_config the reference was built from.
  const GPTConfig c = gpt_config_from_json(nlohmann::json::parse(f.metadata.at("model_config")),
                                           "gpt_llama.safetensors");
  REQUIRE(c.norm == "rms");
  REQUIRE(c.activation == Activation::SwiGLU);
  REQUIRE_FALSE(c.bias);
  GPT model(c);
  // RMSNorm everywhere, SwiGLU of hidden width swiglu_hidden(64) = 48, no biases.
  REQUIRE(dynamic_cast<const RMSNorm*>(model.norm.get()));
  const auto* ffn = dynamic_cast<const SwiGLU*>(model.layers[0]->ffn.get());
  REQUIRE(ffn);
  CHECK(ffn->F == 48);
  CHECK_FALSE(model.layers[0]->self_attn->w_q->bias.defined());
  gpt_parity(model, f);
}

TEST_CASE("transformer parameter names follow PyTorch-style hierarchy and counts add up") {
  TransformerConfig c;
  c.src_vocab = 10;
  c.tgt_vocab = 12;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = 2;
  c.decoder_layers = 1;
  c.d_ff = 16;
  Seq2SeqTransformer m(c);
  std::set<std::string> names;
  for (auto& [n, v] : m.named_parameters()) names.insert(n);
  CHECK(names.count("encoder.layers.1.self_attn.w_q.weight"));
  CHECK(names.count("decoder.layers.0.cross_attn.w_o.bias"));
  CHECK(names.count("decoder.layers.0.norm3.weight"));
  CHECK(names.count("lm_head.weight"));
  CHECK_FALSE(names.count("encoder.norm.weight"));  // Post-LN: no final norm
  const int64_t D = 8, F = 16, attn = 4 * (D * D + D), ffn = D * F + F + F * D + D, ln = 2 * D;
  const int64_t expect =
      10 * D + 12 * D + 2 * (attn + ffn + 2 * ln) + (2 * attn + ffn + 3 * ln) + 12 * D + 12;
  CHECK(m.num_parameters() == expect);

  c.pre_norm = true;
  c.tie_weights = true;
  Seq2SeqTransformer t(c);
  names.clear();
  for (auto& [n, v] : t.named_parameters()) names.insert(n);
  CHECK(names.count("encoder.norm.weight"));
  CHECK(names.count("decoder.norm.bias"));
  CHECK_FALSE(names.count("lm_head.weight"));  // tied: the weight is tgt_embed.weight
  CHECK(names.count("lm_head.bias"));
  CHECK(t.num_parameters() == expect - 12 * D + 4 * D);
}

TEST_CASE("transformer inputs are validated with clear errors") {
  TransformerConfig c;
  c.src_vocab = 5;
  c.tgt_vocab = 5;
  c.d_model = 8;
  c.heads = 3;
  CHECK_THROWS_WITH_AS(Seq2SeqTransformer{c}, doctest::Contains("not divisible by 3 heads"), Error);
  c.heads = 2;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.d_ff = 8;
  Seq2SeqTransformer m(c);
  Tokens bad_len{{1, 2, 3, 4}, 2, 2, {2, 3}};
  CHECK_THROWS_WITH_AS(m.encode(bad_len), doctest::Contains("length 3 of sequence 1"), Error);
  Tokens bad_count{{1, 2, 3}, 2, 2, {}};
  CHECK_THROWS_WITH_AS(m.encode(bad_count), doctest::Contains("3 token ids for (B,T) = (2,2)"),
                       Error);
  Tokens bad_id{{1, 7}, 1, 2, {}};
  CHECK_THROWS_AS(m.encode(bad_id), Error);
  Tokens src{{1, 2, 3}, 1, 3, {}}, other{{1, 2}, 1, 2, {}};
  Var memory = m.encode(src);  // (1,3,8)
  CHECK_THROWS_WITH_AS(
      m.decode(other, memory, other),
      doctest::Contains("memory (1,3,8) does not match target batch 1 and source length 2"), Error);
  c.encoder_layers = 0;
  CHECK_THROWS_WITH_AS(Seq2SeqTransformer{c},
                       doctest::Contains("Encoder: needs at least one layer, got 0"), Error);
  c.encoder_layers = 1;
  c.src_vocab = 0;
  CHECK_THROWS_WITH_AS(Seq2SeqTransformer{c},
                       doctest::Contains("vocabulary sizes must be positive"), Error);
}

TEST_CASE("train() and eval() reach every dropout in the model") {
  TransformerConfig c;
  c.src_vocab = 5;
  c.tgt_vocab = 5;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.d_ff = 8;
  c.dropout = 0.5;
  Seq2SeqTransformer m(c);
  Tokens src{{1, 2, 3}, 1, 3, {}};
  m.eval();
  Var a = m.encode(src), b = m.encode(src);
  CHECK(max_abs_diff(a.data(), b.data()) == 0);  // deterministic in eval
  CHECK_FALSE(m.encoder->layers[0]->drop1->is_training());
  m.train();
  Var x = m.encode(src), y = m.encode(src);
  CHECK(max_abs_diff(x.data(), y.data()) > 0);  // fresh dropout masks in training
}
