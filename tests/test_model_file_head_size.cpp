// Model files of models whose query/key head size d_k is set apart from
// d_model / heads (Table 3 row B): the key d_k of model_config, written only
// when set, read back, counted by parameter_count and checked against the
// tensors by check_config_fits; a file without the key (every file written
// before it existed) reads as d_model / heads.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "compare.h"

#include "checkpoint/model_file.h"
#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using json = nlohmann::json;
using qkv::testing::error_of;
using qkv::testing::numbers_in;
using qkv::testing::test_seed;

namespace {

using testing::TempDir;

TransformerConfig seq2seq_with(int64_t d_k) {
  TransformerConfig c;
  c.src_vocab = 13;
  c.tgt_vocab = 11;
  c.d_model = 16;
  c.heads = 2;  // d_v 8
  c.encoder_layers = 1;
  c.decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0;
  c.max_positions = 16;
  c.d_k = d_k;
  c.seed = test_seed();
  return c;
}

GPTConfig gpt_with(int64_t d_k) {
  GPTConfig c;
  c.vocab = 17;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 24;
  c.d_k = d_k;
  c.seed = test_seed(1);
  return c;
}

EncoderOnlyConfig encoder_with(int64_t d_k) {
  EncoderOnlyConfig c;
  c.vocab = 13;
  c.classes = 5;
  c.d_model = 16;
  c.heads = 4;  // d_v 4
  c.layers = 2;
  c.d_ff = 32;
  c.d_k = d_k;
  c.seed = test_seed(2);
  return c;
}

json model_config_of(const std::string& path) {
  return json::parse(read_safetensors(path).metadata.at("model_config"));
}

// Rewrites the file's model_config by `edit`, tensors unchanged.
template <class F>
void edit_config(const std::string& path, F edit) {
  TensorFile f = read_safetensors(path);
  json c = json::parse(f.metadata.at("model_config"));
  edit(c);
  f.metadata["model_config"] = c.dump();
  write_safetensors(path, f.tensors, f.metadata);
}

}  // namespace

TEST_CASE("parameter_count counts W_Q and W_K as (heads*d_k, d_model) for every family") {
  for (int64_t d_k : {0, 3, 11}) {
    CAPTURE(d_k);
    CHECK(parameter_count(seq2seq_with(d_k)) == numbers_in(Seq2SeqTransformer(seq2seq_with(d_k))));
    CHECK(parameter_count(gpt_with(d_k)) == numbers_in(GPT(gpt_with(d_k))));
    CHECK(parameter_count(encoder_with(d_k)) == numbers_in(EncoderOnlyModel(encoder_with(d_k))));
  }
  Seq2SeqTransformer m(seq2seq_with(3));
  CHECK(m.encoder->layers[0]->self_attn->w_q->weight.shape() == Shape{6, 16});
  CHECK(m.decoder->layers[1]->cross_attn->w_k->weight.shape() == Shape{6, 16});
  CHECK(m.decoder->layers[1]->cross_attn->w_v->weight.shape() == Shape{16, 16});
}

TEST_CASE("a model file keeps d_k: save and load give the same config, weights and outputs") {
  TempDir tmp;
  const std::string path = tmp.file("dk.safetensors");
  Seq2SeqTransformer m(seq2seq_with(3));
  m.eval();
  save_model(m, path);
  CHECK(model_config_of(path).at("d_k") == 3);
  std::unique_ptr<Model> any = load_model(path);
  auto* back = dynamic_cast<Seq2SeqTransformer*>(any.get());
  REQUIRE(back);
  CHECK(back->cfg.d_k == 3);
  back->eval();
  const auto a = state_dict(m), b = state_dict(*back);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].second.to_vector() == b[i].second.to_vector());
  }
  const Tokens src{{3, 4, 5, 6, 7, 8}, 2, 3, {3, 2}}, tgt{{1, 2, 3, 1, 4, 5}, 2, 3, {}};
  NoGradGuard ng;
  CHECK(m.forward(src, tgt).data().to_vector() == back->forward(src, tgt).data().to_vector());

  const std::string gpt_path = tmp.file("gpt.safetensors");
  save_model(GPT(gpt_with(5)), gpt_path);
  CHECK(load_gpt(gpt_path)->cfg.d_k == 5);
  const std::string enc_path = tmp.file("enc.safetensors");
  save_model(EncoderOnlyModel(encoder_with(2)), enc_path);
  CHECK(load_encoder_only(enc_path)->cfg.d_k == 2);
}

TEST_CASE(
    "a model file without the key d_k (written before it existed) loads with d_k = "
    "d_model/heads") {
  TempDir tmp;
  const std::string path = tmp.file("old.safetensors");
  save_model(GPT(gpt_with(0)), path);
  // the default is not written: such a file is byte for byte what older qkv wrote
  CHECK_FALSE(model_config_of(path).contains("d_k"));
  edit_config(path, [](json& c) { c.erase("d_k"); });
  const std::unique_ptr<GPT> old = load_gpt(path);
  CHECK(old->cfg.d_k == 0);
  CHECK(old->layers[0]->self_attn->d_k == 8);
  CHECK(old->layers[0]->self_attn->w_q->weight.shape() == Shape{16, 16});
}

TEST_CASE("check_config_fits refuses a d_k that disagrees with W_Q, or is not a size, by name") {
  TempDir tmp;
  const std::string path = tmp.file("bad.safetensors");
  save_model(GPT(gpt_with(3)), path);
  // the key dropped: d_model / heads = 8 makes (16, 16), the tensor is (6, 16)
  edit_config(path, [](json& c) { c.erase("d_k"); });
  CHECK(error_of([&] { load_model(path); }) ==
        path +
            ": model_config keys 'heads' 2, 'd_k' 8 (d_model / heads) and 'd_model' 16 make "
            "(heads*d_k, d_model) but tensor 'layers.0.self_attn.w_q.weight' has shape (6,16)");
  edit_config(path, [](json& c) { c["d_k"] = 4; });
  CHECK(error_of([&] { load_model(path); }) ==
        path +
            ": model_config keys 'heads' 2, 'd_k' 4 and 'd_model' 16 make (heads*d_k, d_model) "
            "but tensor 'layers.0.self_attn.w_q.weight' has shape (6,16)");
  edit_config(path, [](json& c) { c["d_k"] = 0; });
  CHECK(error_of([&] { load_model(path); }) ==
        path +
            ": metadata 'model_config': key 'd_k' is 0: must be >= 1 (leave it out for d_model / "
            "heads)");
  edit_config(path, [](json& c) { c["d_k"] = 3; });
  CHECK(load_gpt(path)->cfg.d_k == 3);
}
