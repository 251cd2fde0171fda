// Self-describing model files (checkpoint/model_file.h) read from hostile files: JSON
// in the metadata nested without end or holding huge values, and
// configurations whose sizes disagree with the file's tensors. Each is refused
// with one short line naming the file and the key, before a model is built.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare.h"

#include "core/allocator.h"
#include "errors.h"
#include "io/json_bounded.h"
#include "checkpoint/model_file.h"
#include "models/vit.h"
#include "nn/swiglu.h"
#include "temp_dir.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using json = nlohmann::json;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::numbers_in;
using qkv::testing::test_seed;

namespace {

using testing::TempDir;

TransformerConfig small_seq2seq(bool pre_norm, bool learned, bool tied) {
  TransformerConfig c;
  c.src_vocab = 13;
  c.tgt_vocab = 11;
  c.d_model = 16;
  c.heads = 2;
  c.encoder_layers = 1;
  c.decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0;
  c.pre_norm = pre_norm;
  c.learned_positions = learned;
  c.tie_weights = tied;
  c.max_positions = 16;
  c.seed = test_seed();
  return c;
}

EncoderOnlyConfig small_encoder(bool pre_norm) {
  EncoderOnlyConfig c;
  c.vocab = 13;
  c.classes = 5;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.dropout = 0;
  c.pre_norm = pre_norm;
  c.seed = test_seed();
  return c;
}

GPTConfig small_gpt(bool pre_norm, bool tied) {
  GPTConfig c;
  c.vocab = 17;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 24;
  c.pre_norm = pre_norm;
  c.tie_weights = tied;
  c.seed = test_seed(1);
  return c;
}

// Rewrites metadata `key` of the file at `path`, tensors unchanged.
void set_metadata(const std::string& path, const std::string& key, const std::string& value) {
  TensorFile f = read_safetensors(path);
  f.metadata[key] = value;
  write_safetensors(path, f.tensors, f.metadata);
}
// Applies `edit` to the file's model_config.
void edit_config(const std::string& path, const std::function<void(json&)>& edit) {
  json c = json::parse(read_safetensors(path).metadata.at("model_config"));
  edit(c);
  set_metadata(path, "model_config", c.dump());
}

// A trainer-style GPT file: the weights under "model.", beside optimizer state.
void save_prefixed_gpt(const GPT& m, const std::string& path) {
  NamedTensors all;
  for (auto& [n, t] : state_dict(m)) all.emplace_back("model." + n, t);
  all.emplace_back("optim.step", Tensor::scalar(3));
  write_safetensors(path, all, model_metadata(m, "model."));
}

std::string nested_lists(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

}  // namespace

// ---- JSON in the metadata -----------------------------------------------------------

TEST_CASE(
    "model file: a model_config nested 100,000 levels deep is refused by load_seq2seq and "
    "load_gpt, naming the file and the key") {
  TempDir tmp;
  const std::string s2s = tmp.file("s2s.safetensors"), gpt = tmp.file("gpt.safetensors");
  save_model(Seq2SeqTransformer(small_seq2seq(false, false, false)), s2s);
  save_model(GPT(small_gpt(true, true)), gpt);
  // 200 KB of brackets: parsed without a bound, printing or comparing the
  // value overflowed the stack.
  for (const std::string& path : {s2s, gpt})
    set_metadata(path, "model_config", nested_lists(100000));
  const std::string tail =
      "nests lists or objects deeper than " + std::to_string(kMaxJsonDepth) + " levels";
  CHECK(error_of([&] { load_seq2seq(s2s); }) == s2s + ": metadata 'model_config' " + tail);
  CHECK(error_of([&] { load_gpt(gpt); }) == gpt + ": metadata 'model_config' " + tail);
  // Any key a program reads with metadata_json, e.g. a trainer's vocabulary.
  Metadata md{{"vocab", "[" + nested_lists(100000) + "]"}};
  CHECK(error_of([&] { metadata_json(md, "vocab", "run.safetensors"); }) ==
        "run.safetensors: metadata 'vocab' " + tail);
}

TEST_CASE(
    "model file: a 1 MB config value of the wrong type is quoted in under 400 characters, with its "
    "length") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  save_model(Seq2SeqTransformer(small_seq2seq(false, false, false)), path);
  edit_config(path, [](json& c) { c["d_model"] = std::string(1 << 20, '6'); });
  const std::string msg = error_of([&] { load_seq2seq(path); });
  INFO(msg.substr(0, 600));
  CHECK(has(msg,
            path +
                ": metadata 'model_config': key 'd_model' has the wrong type (expected an integer, "
                "got string \"666"));
  CHECK(has(msg, "... (1048578 bytes))"));  // the value as JSON: 2^20 digits and two quotes
  CHECK(msg.size() < 400);
  // The same for a value out of range, and for a list where a number belongs.
  edit_config(path, [](json& c) {
    c["d_model"] = json::array();
    for (int i = 0; i < 100000; ++i) c["d_model"].push_back(i);
  });
  const std::string list = error_of([&] { load_seq2seq(path); });
  CHECK(has(list, "key 'd_model' has the wrong type (expected an integer, got array [0,1,2,"));
  CHECK(list.size() < 400);
}

TEST_CASE(
    "model file: kv_heads and rope_base are optional (every head, a position table); a kv_heads "
    "that does not divide heads, a rope_base outside (1, 1e9] or a table beside rope is refused") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  GPTConfig c = small_gpt(true, true);
  save_model(GPT(c), path);
  edit_config(path, [](json& j) {
    CHECK_FALSE(j.contains("kv_heads"));
    CHECK_FALSE(j.contains("rope_base"));
  });
  const std::unique_ptr<GPT> plain = load_gpt(path);
  CHECK(plain->cfg.kv_heads == 0);
  CHECK(plain->cfg.rope_base == 0);
  CHECK(plain->pos_embed);
  const std::string where = path + ": metadata 'model_config': ";
  for (int64_t k : {int64_t(0), int64_t(-1), int64_t(3)}) {
    edit_config(path, [k](json& j) { j["kv_heads"] = k; });
    CHECK(error_of([&] { load_gpt(path); }) ==
          where + "key 'kv_heads' is " + std::to_string(k) +
              ": must divide 'heads' 2 (leave it out for every head)");
  }
  edit_config(path, [](json& j) {
    j["kv_heads"] = 1;
    j["rope_base"] = 0.5;
  });
  CHECK(error_of([&] { load_gpt(path); }) ==
        where + "key 'rope_base' is 0.5: must be in (1, 1e9] (leave it out for no rotation)");
  edit_config(path, [](json& j) { j["rope_base"] = 1e300; });
  CHECK(has(error_of([&] { load_gpt(path); }), "key 'rope_base' is 1e+300: must be in (1, 1e9]"));
  edit_config(path, [](json& j) { j["rope_base"] = "10000"; });
  CHECK(has(error_of([&] { load_gpt(path); }), "key 'rope_base' has the wrong type"));
  // With rope the model has no position table: this file's pos_embed.weight is unexpected.
  edit_config(path, [](json& j) {
    j.erase("kv_heads");  // every head, as the tensors are
    j["rope_base"] = 10000;
  });
  CHECK(has(error_of([&] { load_gpt(path); }), "unexpected tensor 'pos_embed.weight'"));
  // ... and a rotary model's file read without rope lacks one.
  c.kv_heads = 1;
  c.rope_base = 10000;
  save_model(GPT(c), path);
  const std::unique_ptr<GPT> rot = load_gpt(path);
  CHECK_FALSE(rot->pos_embed);
  CHECK(rot->cfg.kv_heads == 1);
  edit_config(path, [](json& j) { j.erase("rope_base"); });
  CHECK(has(error_of([&] { load_gpt(path); }), "pos_embed.weight"));
}

TEST_CASE(
    "model file: rotary positions are a gpt's: a seq2seq, encoder or vit file with rope_base is "
    "refused naming the key, and their constructors refuse rope_base > 0") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  ViTConfig vit;
  vit.image = 8;
  vit.patch = 4;
  vit.d_model = 8;
  vit.heads = 2;
  vit.layers = 1;
  vit.d_ff = 16;
  vit.seed = test_seed();
  const std::vector<std::pair<std::string, std::function<void()>>> saves = {
      {"seq2seq", [&] { save_model(Seq2SeqTransformer(small_seq2seq(true, true, false)), path); }},
      {"encoder", [&] { save_model(EncoderOnlyModel(small_encoder(true)), path); }},
      {"vit", [&] { save_model(ViT(vit), path); }}};
  for (const auto& [kind, save] : saves) {
    CAPTURE(kind);
    save();
    REQUIRE(load_model(path));
    edit_config(path, [](json& j) { j["rope_base"] = 10000; });
    const std::string msg = error_of([&] { load_model(path); });
    CHECK(has(msg, path + ": metadata 'model_config': key 'rope_base': "));
    CHECK(has(msg, "rotary positions are a gpt's (leave the key out)"));
  }
  auto with_rope = [](auto c) {
    c.rope_base = 10000;
    return c;
  };
  CHECK(has(error_of([&] { Seq2SeqTransformer m(with_rope(small_seq2seq(true, false, false))); }),
            "Seq2SeqTransformer: rope_base is set, but rotary positions are a GPT's"));
  CHECK(has(error_of([&] { EncoderOnlyModel m(with_rope(small_encoder(true))); }),
            "EncoderOnlyModel: rope_base is set, but rotary positions are a GPT's"));
  CHECK(has(error_of([&] { ViT m(with_rope(vit)); }),
            "ViT: rope_base is set, but rotary positions are a GPT's"));
}

TEST_CASE(
    "model file: the block keys norm and bias are optional (LayerNorm, biases), and a wrong "
    "norm, a mistyped bias or a SwiGLU file whose d_ff disagrees with its tensors is refused") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  GPTConfig c = small_gpt(true, true);
  save_model(GPT(c), path);
  // a file without the keys (as every file before them) is the paper's block
  edit_config(path, [](json& j) {
    CHECK_FALSE(j.contains("norm"));
    CHECK_FALSE(j.contains("bias"));
  });
  const std::unique_ptr<GPT> plain = load_gpt(path);
  CHECK(plain->cfg.norm == "layer");
  CHECK(plain->cfg.bias);
  c.norm = "rms";
  c.bias = false;
  c.activation = Activation::SwiGLU;
  save_model(GPT(c), path);
  edit_config(path, [](json& j) {
    CHECK(j.at("norm") == "rms");
    CHECK(j.at("bias") == false);
    CHECK(j.at("activation") == "swiglu");
    j["norm"] = "batch";
  });
  CHECK(error_of([&] { load_gpt(path); }) ==
        path + ": metadata 'model_config': key 'norm' is 'batch' (expected layer or rms)");
  edit_config(path, [](json& j) {
    j["norm"] = "rms";
    j["bias"] = "no";
  });
  CHECK(has(error_of([&] { load_gpt(path); }),
            "key 'bias' has the wrong type (expected a boolean, got string \"no\")"));
  edit_config(path, [&](json& j) {
    j["bias"] = false;
    j["d_ff"] = c.d_ff * 2;  // SwiGLU's hidden width from another d_ff
  });
  const std::string d_ff = error_of([&] { load_gpt(path); });
  CHECK(has(d_ff, "model_config key 'd_ff' is " + std::to_string(c.d_ff * 2) +
                      " (a SwiGLU hidden width of " + std::to_string(swiglu_hidden(c.d_ff * 2)) +
                      ") but tensor 'layers.0.ffn.gate.weight' has shape"));
  edit_config(path, [&](json& j) {
    j["d_ff"] = c.d_ff;
    j["bias"] = true;  // the file holds no biases
  });
  CHECK(has(error_of([&] { load_gpt(path); }), "bias"));
}

TEST_CASE("model file: a control character in a quoted config value shows escaped") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  save_model(GPT(small_gpt(true, true)), path);
  edit_config(path, [](json& c) { c["activation"] = "gelu\n\x1b[2Jrelu"; });
  const std::string msg = error_of([&] { load_gpt(path); });
  CHECK(msg ==
        path +
            ": metadata 'model_config': key 'activation' is 'gelu\\x0a\\x1b[2Jrelu' (expected "
            "relu, gelu or swiglu)");
  // And the model kind, from the same file's metadata.
  set_metadata(path, "model_kind", "gpt\r\n" + std::string(5000, 'k'));
  const std::string kind = error_of([&] { load_gpt(path); });
  CHECK(has(kind, path + ": holds a 'gpt\\x0d\\x0akkk"));
  CHECK(has(kind, "... (5005 bytes)' model, not a 'gpt' model"));
  CHECK(kind.find('\n') == std::string::npos);
}

// ---- the configuration against the tensors ---------------------------------------------

TEST_CASE(
    "check_config_fits: a config saying d_model 20000 over (13,16) tensors is refused before the "
    "model is built") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  save_model(Seq2SeqTransformer(small_seq2seq(false, false, false)), path);
  edit_config(path, [](json& c) { c["d_model"] = 20000; });  // the 24 GB model of the report
  const AllocatorStats before = allocator_stats();
  const std::string msg = error_of([&] { load_seq2seq(path); });
  CHECK(
      msg ==
      path +
          ": model_config key 'd_model' is 20000 but tensor 'src_embed.weight' has shape (13,16)");
  // Nothing is kept, and nothing near a model's size was ever allocated (the
  // encoder's first attention alone would be 20000^2 numbers).
  const AllocatorStats after = allocator_stats();
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.peak_in_use <=
        std::max<int64_t>(before.peak_in_use, before.bytes_in_use + (64 << 20)));

  // A trainer-style file: the weights under "model.", the message names the tensor as stored.
  const std::string trained = tmp.file("run.safetensors");
  save_prefixed_gpt(GPT(small_gpt(true, true)), trained);
  edit_config(trained, [](json& c) { c["d_model"] = 20000; });
  CHECK(error_of([&] { load_gpt(trained); }) ==
        trained +
            ": model_config key 'd_model' is 20000 but tensor 'model.tok_embed.weight' has shape "
            "(17,16)");
}

TEST_CASE(
    "check_config_fits: each size that disagrees with the tensors is refused naming the key and "
    "the tensor") {
  TempDir tmp;
  const std::string sin_path = tmp.file("sin.safetensors"),
                    learned_path = tmp.file("learned.safetensors"),
                    gpt_path = tmp.file("gpt.safetensors");
  save_model(Seq2SeqTransformer(small_seq2seq(true, false, true)), sin_path);
  save_model(Seq2SeqTransformer(small_seq2seq(false, true, false)), learned_path);
  save_prefixed_gpt(GPT(small_gpt(true, false)), gpt_path);
  struct Case {
    const std::string* path;
    std::function<void(json&)> edit;
    std::string message;  // after "<path>: "
  };
  const std::vector<Case> cases = {
      {&sin_path, [](json& c) { c["src_vocab"] = 14; },
       "model_config key 'src_vocab' is 14 but tensor 'src_embed.weight' has shape (13,16)"},
      {&sin_path, [](json& c) { c["tgt_vocab"] = 0; },
       "model_config key 'tgt_vocab' is 0: must be at least 1"},
      {&sin_path, [](json& c) { c["d_model"] = -16; },
       "model_config key 'd_model' is -16: must be at least 1"},
      {&sin_path, [](json& c) { c["heads"] = 3; },
       "model_config key 'heads' is 3, which does not divide d_model 16"},
      {&sin_path, [](json& c) { c["heads"] = 0; },
       "model_config key 'heads' is 0: must be at least 1"},
      {&sin_path, [](json& c) { c["d_ff"] = 4096; },
       "model_config key 'd_ff' is 4096 but tensor 'encoder.layers.0.ffn.linear1.weight' has shape "
       "(32,16)"},
      {&sin_path, [](json& c) { c["encoder_layers"] = 6; },
       "model_config key 'encoder_layers' is 6 but the file has tensors for 1 "
       "('encoder.layers.0.*')"},
      {&sin_path, [](json& c) { c["decoder_layers"] = 1; },
       "model_config key 'decoder_layers' is 1 but the file has tensors for 2 "
       "('decoder.layers.0.*' to 'decoder.layers.1.*')"},
      {&sin_path, [](json& c) { c["decoder_layers"] = 0; },
       "model_config key 'decoder_layers' is 0: must be at least 1"},
      {&sin_path, [](json& c) { c["max_positions"] = -1; },
       "model_config key 'max_positions' is -1: must be at least 0"},
      {&sin_path, [](json& c) { c["learned_positions"] = true; },
       "model_config key 'max_positions' cannot be checked: the file has no tensor "
       "'src_pos.weight'"},
      {&sin_path, [](json& c) { c["dropout"] = 1.5; },
       "model_config key 'dropout' is 1.5: must be in [0, 1)"},
      {&learned_path, [](json& c) { c["max_positions"] = 4096; },
       "model_config key 'max_positions' is 4096 but tensor 'src_pos.weight' has shape (16,16)"},
      {&gpt_path, [](json& c) { c["vocab"] = 1000000; },
       "model_config key 'vocab' is 1000000 but tensor 'model.tok_embed.weight' has shape (17,16)"},
      {&gpt_path, [](json& c) { c["layers"] = 3; },
       "model_config key 'layers' is 3 but the file has tensors for 2 ('model.layers.0.*' to "
       "'model.layers.1.*')"},
      {&gpt_path, [](json& c) { c["d_ff"] = 33; },
       "model_config key 'd_ff' is 33 but tensor 'model.layers.0.ffn.linear1.weight' has shape "
       "(32,16)"},
      {&gpt_path, [](json& c) { c["max_positions"] = 65536; },
       "model_config key 'max_positions' is 65536 but tensor 'model.pos_embed.weight' has shape "
       "(24,16)"},
  };
  for (const Case& k : cases) {
    const std::string path = tmp.file("edited.safetensors");
    std::filesystem::copy_file(*k.path, path, std::filesystem::copy_options::overwrite_existing);
    edit_config(path, k.edit);
    const bool gpt = k.path == &gpt_path;
    const std::string msg =
        error_of([&] { gpt ? (void)load_gpt(path) : (void)load_seq2seq(path); });
    CHECK(msg == path + ": " + k.message);
  }
  // The unedited files load.
  CHECK_NOTHROW(load_seq2seq(sin_path));
  CHECK_NOTHROW(load_seq2seq(learned_path));
  CHECK_NOTHROW(load_gpt(gpt_path));
}

TEST_CASE(
    "check_config_fits: a layer count met by one stray tensor is refused by the parameter count, "
    "before the model is built") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  GPT m(small_gpt(true, true));
  NamedTensors tensors = state_dict(m);
  tensors.emplace_back("layers.999999.x",
                       Tensor::scalar(0));  // one number claims a millionth layer
  Metadata md = model_metadata(m);
  json c = json::parse(md.at("model_config"));
  c["layers"] = 1000000;  // 2224 numbers a layer: 8.9 GB of float32
  md["model_config"] = c.dump();
  write_safetensors(path, tensors, md);
  const double holds = numbers_in(m) + 1;
  GPTConfig claimed = small_gpt(true, true);
  claimed.layers = 1000000;
  char want[200];
  std::snprintf(want, sizeof want,
                "model_config describes a model of %.0f parameters but the file holds %.0f numbers",
                parameter_count(claimed), holds);
  const std::string msg = error_of([&] { load_gpt(path); });
  INFO(msg);
  CHECK(has(msg, path + ": " + want));
}

TEST_CASE("parameter_count is the number of numbers in named_parameters, for every model flavour") {
  for (bool pre_norm : {false, true})
    for (bool tied : {false, true}) {
      CAPTURE(pre_norm);
      CAPTURE(tied);
      for (bool learned : {false, true}) {
        CAPTURE(learned);
        const TransformerConfig c = small_seq2seq(pre_norm, learned, tied);
        CHECK(parameter_count(c) == numbers_in(Seq2SeqTransformer(c)));
      }
      const GPTConfig g = small_gpt(pre_norm, tied);
      CHECK(parameter_count(g) == numbers_in(GPT(g)));
      const EncoderOnlyConfig e = small_encoder(pre_norm);
      CHECK(parameter_count(e) == numbers_in(EncoderOnlyModel(e)));
    }
}

TEST_CASE(
    "check_config_fits accepts every model flavour save_model writes, and the loaders rebuild it "
    "exactly") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  auto same = [](const Module& a, const Module& b) {
    const NamedTensors x = state_dict(a), y = state_dict(b);
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK(x[i].first == y[i].first);
      CHECK(x[i].second.to_vector() == y[i].second.to_vector());
    }
  };
  for (bool pre_norm : {false, true})
    for (bool tied : {false, true}) {
      CAPTURE(pre_norm);
      CAPTURE(tied);
      for (bool learned : {false, true}) {
        CAPTURE(learned);
        Seq2SeqTransformer m(small_seq2seq(pre_norm, learned, tied));
        save_model(m, path);
        const TensorFile f = read_safetensors(path);
        CHECK_NOTHROW(check_config_fits(f, "", m.cfg));
        same(m, *load_seq2seq(path));
      }
      GPT g(small_gpt(pre_norm, tied));
      save_prefixed_gpt(g, path);
      CHECK_NOTHROW(check_config_fits(read_safetensors(path), "model.", g.cfg));
      same(g, *load_gpt(path));
      EncoderOnlyModel e(small_encoder(pre_norm));
      save_model(e, path);
      CHECK_NOTHROW(check_config_fits(read_safetensors(path)));
      same(e, *load_encoder_only(path));
      const std::unique_ptr<Model> any = load_model(path);
      CHECK(std::string(any->kind()) == "encoder");
      same(e, *any);
    }
}

TEST_CASE("load_model rebuilds each family from its file, and refuses an unknown kind by name") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  save_model(Seq2SeqTransformer(small_seq2seq(false, false, false)), path);
  CHECK(std::string(load_model(path)->kind()) == "seq2seq");
  save_model(GPT(small_gpt(true, true)), path);
  CHECK(std::string(load_model(path)->kind()) == "gpt");
  CHECK(error_of([&] { load_seq2seq(path); }) ==
        path + ": holds a 'gpt' model, not a 'seq2seq' model");
  // A file whose kind no family has.
  TensorFile f = read_safetensors(path);
  f.metadata["model_kind"] = "mamba";
  NamedTensors all(f.tensors.begin(), f.tensors.end());
  write_safetensors(path, all, f.metadata);
  CHECK(error_of([&] { load_model(path); }) ==
        path +
            ": metadata 'model_kind': unknown model kind 'mamba' (expected seq2seq, gpt, encoder, "
            "bert or vit)");
  // An encoder-only config that disagrees with its tensors.
  EncoderOnlyModel e(small_encoder(false));
  save_model(e, path);
  TensorFile g = read_safetensors(path);
  json mc = json::parse(g.metadata.at("model_config"));
  mc["classes"] = 7;
  g.metadata["model_config"] = mc.dump();
  write_safetensors(path, NamedTensors(g.tensors.begin(), g.tensors.end()), g.metadata);
  CHECK(has(error_of([&] { load_model(path); }),
            path + ": model_config key 'classes' is 7 but tensor 'head.weight' has shape (5,16)"));
}

TEST_CASE(
    "model files carry their special token ids: the decoders' defaults unless given, read back by "
    "special_tokens") {
  TempDir dir;
  GPTConfig c;
  c.vocab = 12;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 16;
  c.max_positions = 8;
  c.seed = test_seed();
  GPT model(c);
  const std::string plain = dir.file("plain.safetensors"), own = dir.file("own.safetensors");
  save_model(model, plain);
  const SpecialTokens d = special_tokens(read_safetensors(plain).metadata, plain);
  CHECK(d.pad == 0);
  CHECK(d.bos == 1);
  CHECK(d.eos == 2);
  CHECK(d.unk == -1);
  save_model(model, own, {{"special_tokens", special_tokens_json({5, 6, 7, 8})}});
  const SpecialTokens s = special_tokens(read_safetensors(own).metadata, own);
  CHECK(s.pad == 5);
  CHECK(s.bos == 6);
  CHECK(s.eos == 7);
  CHECK(s.unk == 8);
  CHECK(has(error_of([&] {
              special_tokens({{"special_tokens", R"({"pad":0,"bos":"one","eos":2})"}}, "f.st");
            }),
            "f.st: metadata 'special_tokens': key 'bos' has the wrong type"));
  CHECK(has(error_of([&] {
              special_tokens({{"special_tokens", R"({"pad":-1,"bos":1,"eos":2})"}}, "f.st");
            }),
            "key 'pad' is -1"));
}

TEST_CASE("a model file written before the rename (max_len, not max_positions) still loads") {
  TempDir tmp;
  const std::string path = tmp.file("old.safetensors");
  GPT g(small_gpt(true, true));
  save_model(g, path);
  TensorFile f = read_safetensors(path);
  json mc = json::parse(f.metadata.at("model_config"));
  mc["max_len"] = mc["max_positions"];
  mc.erase("max_positions");
  f.metadata["model_config"] = mc.dump();
  write_safetensors(path, f.tensors, f.metadata);
  const std::unique_ptr<GPT> back = load_gpt(path);
  CHECK(back->cfg.max_positions == g.cfg.max_positions);
  CHECK(state_dict(*back).back().second.to_vector() == state_dict(g).back().second.to_vector());
  mc["max_positions"] = mc["max_len"];
  f.metadata["model_config"] = mc.dump();
  write_safetensors(path, f.tensors, f.metadata);
  CHECK(error_of([&] { load_model(path); }) ==
        path + ": metadata 'model_config': holds both 'max_positions' and 'max_len', its old name");
}

TEST_CASE("a model file keeps its attention settings, and one written before them is standard") {
  TempDir tmp;
  const std::string path = tmp.file("sparse.safetensors");
  GPTConfig c = small_gpt(true, true);
  c.attention = AttentionKernel::Sparse;
  c.window = 3;
  c.global_every = 5;
  c.scaled = false;
  save_model(GPT(c), path);
  const std::unique_ptr<GPT> back = load_gpt(path);
  CHECK(back->cfg.attention == AttentionKernel::Sparse);
  CHECK(back->cfg.window == 3);
  CHECK(back->cfg.global_every == 5);
  CHECK_FALSE(back->cfg.scaled);
  CHECK(back->layers[0]->self_attn->kernel == AttentionKernel::Sparse);
  TensorFile f = read_safetensors(path);
  json mc = json::parse(f.metadata.at("model_config"));
  for (const char* k : {"attention", "window", "global_every", "scaled"}) mc.erase(k);
  f.metadata["model_config"] = mc.dump();
  write_safetensors(path, f.tensors, f.metadata);
  const std::unique_ptr<GPT> old = load_gpt(path);
  CHECK(old->cfg.attention == AttentionKernel::Standard);
  CHECK(old->cfg.scaled);
  mc["attention"] = "quantum";
  f.metadata["model_config"] = mc.dump();
  write_safetensors(path, f.tensors, f.metadata);
  CHECK(error_of([&] { load_model(path); }) ==
        path +
            ": metadata 'model_config': key 'attention' is 'quantum' (expected standard, "
            "memory-efficient, sparse, linear or auto)");
  mc["attention"] = "sparse";
  mc["window"] = 0;
  f.metadata["model_config"] = mc.dump();
  write_safetensors(path, f.tensors, f.metadata);
  CHECK(error_of([&] { load_model(path); }) ==
        path +
            ": metadata 'model_config': key 'window' must be >= 1 and 'global_every' >= 0, "
            "got 0 and 64");
}

TEST_CASE(
    "model file: rope_base beside rel_buckets is refused naming rope_base (one kind of positions; "
    "before: the library rotated, the trainer rebuilt the file without its rotation)") {
  TempDir tmp;
  const std::string gpt = tmp.file("g.safetensors");
  GPTConfig c = small_gpt(true, true);
  c.rel_buckets = 8;
  c.rel_max_distance = 16;
  save_model(GPT(c), gpt);
  edit_config(gpt, [](json& j) { j["rope_base"] = 10000; });
  CHECK(has(error_of([&] { load_model(gpt); }),
            "key 'rope_base': this file's positions are T5's relative bias ('rel_buckets')"));
}
