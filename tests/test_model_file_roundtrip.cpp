// nn::save_model and nn::load_model agree: every configuration the model
// constructors take (each field at its bounds and at its special values, each
// family and attention kernel) is written, read back to the same
// configuration and the same weights, and loaded into a model whose logits
// are the original's. A file qkv writes is a file qkv reads.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/model_file.h"
#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;

namespace {

// parameter_count of the model's own configuration (checkpoint/model_file.h).
double parameter_count_of(const Model& m) {
  if (auto* s = dynamic_cast<const Seq2SeqTransformer*>(&m)) return parameter_count(s->cfg);
  if (auto* g = dynamic_cast<const GPT*>(&m)) return parameter_count(g->cfg);
  return parameter_count(dynamic_cast<const EncoderOnlyModel&>(m).cfg);
}

// Saves `m`, loads the file, and checks the configuration and every weight.
void check_round_trip(const Model& m, const std::string& what) {
  testing::TempDir tmp("qkv_model_round_trip");
  const std::string path = tmp.file("m.safetensors");
  INFO(what);
  INFO(config_to_json(m).dump());
  save_model(m, path);
  std::unique_ptr<Model> back;
  std::string err;
  try {
    back = load_model(path);
  } catch (const Error& e) {
    err = e.what();
  }
  REQUIRE_MESSAGE(err.empty(), "load_model refused a file save_model wrote: " << err);
  // the count the configuration implies is the model's (check_config_fits bounds a file by it)
  CHECK(parameter_count_of(m) == double(m.num_parameters()));
  CHECK(std::string(back->kind()) == m.kind());
  CHECK(config_to_json(*back) == config_to_json(m));
  const NamedTensors a = state_dict(m), b = state_dict(*back);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    REQUIRE(a[i].second.shape() == b[i].second.shape());
    bool same = true;
    for (int64_t k = 0; k < a[i].second.numel(); ++k)
      same = same && a[i].second.data()[k] == b[i].second.data()[k];
    CHECK_MESSAGE(same, a[i].first);
  }
}

// Each edit of a base configuration, applied alone; a configuration the
// constructor refuses is not a value the API accepts and is skipped.
template <class Config, class Model_>
void each_edit(const Config& base,
               const std::vector<std::pair<std::string, std::function<void(Config&)>>>& edits) {
  for (const auto& [what, edit] : edits) {
    Config c = base;
    edit(c);
    std::unique_ptr<Model_> m;
    try {
      m = std::make_unique<Model_>(c);
    } catch (const Error&) {
      continue;
    }
    check_round_trip(*m, what);
  }
}

// The llama block (RMSNorm, SwiGLU, no biases, Pre-LN) with one key/value
// head and d_k 6; a gpt adds its rotary positions.
template <class Config>
void llama_block(Config& c) {
  c.norm = "rms";
  c.activation = Activation::SwiGLU;
  c.bias = false;
  c.pre_norm = true;
  c.kv_heads = 1;
  c.d_k = 6;
}

// The attention settings every family shares: each kernel, the sparse
// pattern at its bounds (global_every 0: no global positions), the scale, d_k.
template <class Config>
std::vector<std::pair<std::string, std::function<void(Config&)>>> attention_edits() {
  std::vector<std::pair<std::string, std::function<void(Config&)>>> e;
  for (AttentionKernel k :
       {AttentionKernel::Standard, AttentionKernel::MemoryEfficient, AttentionKernel::Sparse,
        AttentionKernel::Linear, AttentionKernel::Auto})
    e.push_back({std::string("attention ") + to_string(k), [k](Config& c) { c.attention = k; }});
  for (int64_t g : {int64_t(0), int64_t(1), int64_t(1) << 40})
    e.push_back({"sparse, global_every " + std::to_string(g), [g](Config& c) {
                   c.attention = AttentionKernel::Sparse;
                   c.global_every = g;
                 }});
  for (int64_t w : {int64_t(1), int64_t(1) << 40})
    e.push_back({"sparse, window " + std::to_string(w), [w](Config& c) {
                   c.attention = AttentionKernel::Sparse;
                   c.window = w;
                 }});
  e.push_back({"unscaled", [](Config& c) { c.scaled = false; }});
  for (int64_t dk : {int64_t(1), int64_t(3), int64_t(64)})
    e.push_back({"d_k " + std::to_string(dk), [dk](Config& c) { c.d_k = dk; }});
  e.push_back({"gelu", [](Config& c) { c.activation = Activation::GELU; }});
  e.push_back({"relu", [](Config& c) { c.activation = Activation::ReLU; }});
  e.push_back({"pre_norm", [](Config& c) { c.pre_norm = !c.pre_norm; }});
  // The block's keys (norm, activation swiglu, bias), alone, together, in
  // both norm placements (Post-LN's residual sum fused into the RMSNorm).
  e.push_back({"swiglu", [](Config& c) { c.activation = Activation::SwiGLU; }});
  e.push_back({"swiglu, d_ff 1", [](Config& c) {
                 c.activation = Activation::SwiGLU;
                 c.d_ff = 1;
               }});
  e.push_back({"norm rms", [](Config& c) { c.norm = "rms"; }});
  e.push_back({"no bias", [](Config& c) { c.bias = false; }});
  for (bool pre : {false, true})
    e.push_back({std::string("llama block, ") + (pre ? "Pre-LN" : "Post-LN"), [pre](Config& c) {
                   c.norm = "rms";
                   c.activation = Activation::SwiGLU;
                   c.bias = false;
                   c.pre_norm = pre;
                 }});
  e.push_back({"no bias, gelu, d_k 3", [](Config& c) {
                 c.bias = false;
                 c.activation = Activation::GELU;
                 c.d_k = 3;
               }});
  // Grouped-query attention (K key/value heads of H = 2) in every
  // self-attention, alone and with the llama block (a gpt's edits add rotary
  // positions, which the other families refuse).
  e.push_back({"kv_heads 1", [](Config& c) { c.kv_heads = 1; }});
  e.push_back({"kv_heads 2 (every head, said)", [](Config& c) { c.kv_heads = 2; }});
  e.push_back({"llama block, kv_heads 1, d_k 6", llama_block<Config>});
  e.push_back({"one head per dimension", [](Config& c) { c.heads = c.d_model; }});
  e.push_back({"d_model 1, one head", [](Config& c) {
                 c.d_model = 1;
                 c.heads = 1;
               }});
  e.push_back({"d_ff 1", [](Config& c) { c.d_ff = 1; }});
  for (real p : {real(0), real(0.5), std::nextafter(real(1), real(0))})
    e.push_back({"dropout " + std::to_string(p), [p](Config& c) { c.dropout = p; }});
  for (uint64_t s : {uint64_t(0), std::numeric_limits<uint64_t>::max()})
    e.push_back({"seed " + std::to_string(s), [s](Config& c) { c.seed = s; }});
  return e;
}

}  // namespace

TEST_CASE("save_model/load_model round trip: every seq2seq configuration the constructor takes") {
  TransformerConfig base;
  base.src_vocab = 7;
  base.tgt_vocab = 5;
  base.d_model = 8;
  base.heads = 2;
  base.encoder_layers = 1;
  base.decoder_layers = 1;
  base.d_ff = 8;
  base.dropout = 0;
  base.max_positions = 8;
  base.seed = testing::test_seed();
  auto edits = attention_edits<TransformerConfig>();
  edits.push_back(
      {"vocabularies of 1", [](TransformerConfig& c) { c.src_vocab = c.tgt_vocab = 1; }});
  edits.push_back({"two layers each", [](TransformerConfig& c) {
                     c.encoder_layers = 2;
                     c.decoder_layers = 3;
                   }});
  edits.push_back({"tied", [](TransformerConfig& c) { c.tie_weights = true; }});
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(65536), int64_t(65537), int64_t(1) << 20})
    edits.push_back({"sinusoidal, max_positions " + std::to_string(n),
                     [n](TransformerConfig& c) { c.max_positions = n; }});
  for (int64_t n : {int64_t(1), int64_t(100)})
    edits.push_back({"learned, max_positions " + std::to_string(n), [n](TransformerConfig& c) {
                       c.learned_positions = true;
                       c.max_positions = n;
                     }});
  each_edit<TransformerConfig, Seq2SeqTransformer>(base, edits);
}

TEST_CASE("save_model/load_model round trip: every gpt configuration the constructor takes") {
  GPTConfig base;
  base.vocab = 7;
  base.d_model = 8;
  base.heads = 2;
  base.layers = 1;
  base.d_ff = 8;
  base.max_positions = 8;
  base.seed = testing::test_seed();
  auto edits = attention_edits<GPTConfig>();
  edits.push_back({"vocabulary of 1", [](GPTConfig& c) { c.vocab = 1; }});
  edits.push_back({"no layers", [](GPTConfig& c) { c.layers = 0; }});
  edits.push_back({"three layers", [](GPTConfig& c) { c.layers = 3; }});
  edits.push_back({"untied", [](GPTConfig& c) { c.tie_weights = false; }});
  edits.push_back({"llama block, rope base 500000, kv_heads 1, d_k 6", [](GPTConfig& c) {
                     llama_block(c);
                     c.rope_base = 500000;
                   }});
  for (int64_t n : {int64_t(1), int64_t(100)}) {
    edits.push_back(
        {"max_positions " + std::to_string(n), [n](GPTConfig& c) { c.max_positions = n; }});
    // RoPE: no position table; max_positions still bounds the input.
    edits.push_back({"rope, max_positions " + std::to_string(n), [n](GPTConfig& c) {
                       c.rope_base = 10000;
                       c.max_positions = n;
                     }});
  }
  each_edit<GPTConfig, GPT>(base, edits);
}

TEST_CASE("save_model/load_model round trip: every encoder configuration the constructor takes") {
  EncoderOnlyConfig base;
  base.vocab = 7;
  base.classes = 3;
  base.d_model = 8;
  base.heads = 2;
  base.layers = 1;
  base.d_ff = 8;
  base.dropout = 0;
  base.seed = testing::test_seed();
  auto edits = attention_edits<EncoderOnlyConfig>();
  edits.push_back({"one token, one class", [](EncoderOnlyConfig& c) { c.vocab = c.classes = 1; }});
  edits.push_back({"three layers", [](EncoderOnlyConfig& c) { c.layers = 3; }});
  each_edit<EncoderOnlyConfig, EncoderOnlyModel>(base, edits);
}

TEST_CASE(
    "load_model names the tensors a model file lacks and those it holds beyond the model, not a "
    "parameter count") {
  testing::TempDir tmp("qkv_model_round_trip");
  const std::string path = tmp.file("m.safetensors");
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 7;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 8;
  c.seed = testing::test_seed();
  const Seq2SeqTransformer m(c);
  // Drop 5 tensors none of the size checks reads: only the names can tell.
  auto dropped = [](const std::string& name) {
    return name == "lm_head.bias" || name.find("encoder.layers.0.ffn.linear2.") == 0 ||
           name.find("decoder.layers.0.norm1.") == 0;
  };
  NamedTensors kept;
  std::vector<std::string> gone;  // in the model's parameter order
  for (auto& [name, t] : state_dict(m)) {
    if (dropped(name))
      gone.push_back(name);
    else
      kept.emplace_back(name, t);
  }
  REQUIRE(gone.size() == 5);
  write_safetensors(path, kept, model_metadata(m));
  std::string msg = testing::error_of([&] { load_model(path); });
  CHECK(msg == "load: " + path + ": missing 5 tensors: '" + gone[0] + "', '" + gone[1] + "', '" +
                   gone[2] + "' and 2 more");
  // One missing, one unexpected (a misspelt name): both said.
  kept.clear();
  for (auto& [name, t] : state_dict(m))
    kept.emplace_back(name == "lm_head.bias" ? std::string("lm_head.bais\x1b") : name, t);
  write_safetensors(path, kept, model_metadata(m));
  msg = testing::error_of([&] { load_model(path); });
  CHECK(msg ==
        "load: " + path + ": missing tensor 'lm_head.bias'; unexpected tensor 'lm_head.bais\\x1b'");
}
