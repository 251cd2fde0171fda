// BERT (models/bert.h) in float32: shapes of both heads, segment ids, errors,
// model files, the names an mlm and a classify model share, answers, and
// PyTorch parity from committed fixtures (tests/pytorch/make_fixtures.py,
// make_bert). Masking (data/mlm.h) is tested in tests/test_mlm.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/qkv_autograd.h"
#include "checkpoint/bert_codec.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "generation/answer.h"
#include "io/run_program.h"
#include "models/bert.h"
#include "nn/span_logits.h"
#include "nn/cross_entropy.h"
#include "optim/adam.h"
#include "data/mlm.h"
#include "temp_dir.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::check_close;
using qkv::testing::check_error;
using qkv::testing::ids_of;

namespace {

BertConfig tiny(const std::string& head) {
  BertConfig c;
  c.vocab = 15;
  c.max_positions = 10;
  c.classes = 4;
  c.head = head;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = qkv::testing::test_seed();
  return c;
}

// "<s> 5 6 </s> 7 </s>" (two texts) and "<s> 8 9 </s>" (one).
const data::Seq kPair = {1, 5, 6, 2, 7, 2}, kSingle = {1, 8, 9, 2};

std::map<std::string, Shape> shapes_of(const Module& m) {
  std::map<std::string, Shape> out;
  for (const auto& [name, v] : m.named_parameters()) out[name] = v.shape();
  return out;
}

}  // namespace

TEST_CASE("Bert segment ids: 0 up to and including the first sep_id, 1 after, 0 at padding") {
  Bert m(tiny("mlm"));
  const Tokens t = data::right_padded({kPair, kSingle});  // (2, 6)
  CHECK(m.segment_ids(t) == std::vector<int64_t>{0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0});
  BertConfig one = tiny("mlm");
  one.segments = 1;  // a single segment row: every position is segment 0
  Bert m1(one);
  CHECK(m1.segment_ids(t) == std::vector<int64_t>(12, 0));
  CHECK(m1.segment_embed->weight.shape() == Shape{1, 8});
}

TEST_CASE("Bert segment 1's embedding row reaches a pair of texts, not a single text") {
  Bert m(tiny("mlm"));
  m.eval();
  NoGradGuard no_grad;
  const Tokens pair = data::right_padded({kPair}), single = data::right_padded({kSingle});
  const Tensor pair_before = m.encode(pair).data().clone();      // (1, 6, D)
  const Tensor single_before = m.encode(single).data().clone();  // (1, 4, D)
  real* row1 = m.segment_embed->weight.data().data() + 8;        // segment 1's row (D = 8)
  // not a constant shift: the embeddings' LayerNorm would remove that
  for (int64_t j = 0; j < 8; ++j) row1[j] += real(0.2) * real(j - 3);
  CHECK(max_abs_diff(m.encode(single).data(), single_before) == 0);
  CHECK(max_abs_diff(m.encode(pair).data(), pair_before) > real(1e-3));
}

TEST_CASE("Bert mlm forward_pairs: logits (B, T, V), targets (B*T) kPad off the chosen positions") {
  Bert m(tiny("mlm"));
  data::Seq tgt1(kPair.size(), data::kPad), tgt2(kSingle.size(), data::kPad);
  tgt1[1] = 5;
  tgt1[4] = 7;
  tgt2[2] = 9;
  data::Seq src1 = kPair, src2 = kSingle;
  src1[1] = src1[4] = src2[2] = 3;  // [MASK]
  TeacherForced f = m.forward_pairs({{src1, tgt1}, {src2, tgt2}});
  CHECK(f.logits.shape() == Shape{2, 6, 15});
  CHECK(f.targets == std::vector<int64_t>{0, 5, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0});
  CHECK(f.target_tokens == 3);
  CHECK(m.vocab_size() == 15);
  CHECK(m.max_positions() == 10);
  CHECK(std::string(m.kind()) == "bert");
  // The loss is finite and its gradient reaches the tied embedding.
  Var loss = cross_entropy(f.logits, f.targets, data::kPad);
  CHECK(std::isfinite(double(loss.item())));
  loss.backward();
  CHECK(m.embed->weight.grad().defined());
  CHECK(m.mlm->bias.grad().defined());
}

TEST_CASE("Bert forward_chosen: logits (1, M, V) of the M chosen positions, targets (M)") {
  Bert m(tiny("mlm"));
  data::Seq tgt1(kPair.size(), data::kPad), tgt2(kSingle.size(), data::kPad);
  tgt1[1] = 5;
  tgt1[4] = 7;
  tgt2[2] = 9;
  TeacherForced f = m.forward_chosen({{kPair, tgt1}, {kSingle, tgt2}});
  CHECK(f.logits.shape() == Shape{1, 3, 15});
  CHECK(f.targets == std::vector<int64_t>{5, 7, 9});
  CHECK(f.target_tokens == 3);
  // Nothing chosen: every position, every target kPad, a loss of 0.
  TeacherForced none = m.forward_chosen({{kSingle, data::Seq(4, data::kPad)}});
  CHECK(none.target_tokens == 0);
  CHECK(double(cross_entropy(none.logits, none.targets, data::kPad).item()) == 0);
  Bert cls(tiny("classify"));
  check_error([&] { cls.forward_chosen({{kPair, {1}}}); }, {"Bert::forward_chosen", "not mlm"});
  check_error(
      [&] {
        m.forward_chosen({{kPair, {0}}});
      },
      {"Bert::forward_chosen (mlm)", "6 ids but 1 targets"});
}

TEST_CASE("Bert classify forward_pairs: logits (B, 1, classes), targets (B)") {
  Bert m(tiny("classify"));
  TeacherForced f = m.forward_pairs({{kPair, {3}}, {kSingle, {1}}});
  CHECK(f.logits.shape() == Shape{2, 1, 4});
  CHECK(f.targets == std::vector<int64_t>{3, 1});
  CHECK(f.target_tokens == 2);
  CHECK(m.vocab_size() == 4);
  // The logits depend on position 0's hidden state only: padding a sequence
  // (a longer one beside it) changes nothing.
  m.eval();
  NoGradGuard no_grad;
  const Tensor alone = m.forward(data::right_padded({kSingle})).data().clone();  // (1, 4)
  const Tensor both = m.forward(data::right_padded({kPair, kSingle})).data();    // (2, 4)
  for (int64_t c = 0; c < 4; ++c) CHECK(both.data()[4 + c] == doctest::Approx(alone.data()[c]));
}

TEST_CASE("Bert refuses bad pairs and configs with one line naming the model and the sizes") {
  Bert mlm(tiny("mlm")), cls(tiny("classify"));
  const data::Seq long_seq(11, 5);
  check_error(
      [&] {
        mlm.forward_pairs({{long_seq, data::Seq(11, 0)}});
      },
      {"Bert::forward_pairs", "11 tokens", "max_positions = 10"});
  check_error(
      [&] {
        mlm.forward_pairs({{kPair, {0, 0}}});
      },
      {"Bert::forward_pairs (mlm)", "6 ids but 2 targets"});
  check_error(
      [&] {
        mlm.forward_pairs({{{1, 15, 2}, {0, 0, 0}}});
      },
      {"id 15 at position 1", "outside the vocabulary [0, 15)"});
  check_error([&] { mlm.forward_pairs({{{1, 5, 2}, {0, 99, 0}}}); }, {"target 99", "[0, 15)"});
  check_error([&] { cls.forward_pairs({{kPair, {4}}}); }, {"label 4", "outside [0, 4)"});
  check_error([&] { cls.forward_pairs({{kPair, {-1}}}); }, {"label -1", "outside [0, 4)"});
  // Label 0 is a class: scored, not ignored.
  CHECK(cls.forward_pairs({{kPair, {0}}}).ignore_index == -1);
  check_error([&] { cls.forward_pairs({{kPair, {1, 2}}}); }, {"2 labels, not 1"});
  check_error([&] { cls.forward_pairs({{{}, {1}}}); }, {"sequence 0 is empty"});
  check_error([&] { cls.forward_pairs({}); }, {"no pairs"});
  check_error(
      [&] {
        mlm.encode(Tokens{{1, 20}, 1, 2, {2}});
      },
      {"Bert::encode", "id 20", "(1, 2)", "[0, 15)"});
  check_error([&] { mlm.encode(data::right_padded({long_seq})); },
              {"Bert::encode", "(1, 11)", "max_positions = 10"});
  check_error([&] { cls.mlm_probabilities(kPair); }, {"mlm_probabilities", "classify"});
  check_error([&] { mlm.class_probabilities({kPair}); }, {"class_probabilities", "mlm"});
  BertConfig c = tiny("nsp");
  check_error([&] { Bert b(c); }, {"Bert: head 'nsp'", "mlm, classify or qa"});
  c = tiny("classify");
  c.classes = 0;
  check_error([&] { Bert b(c); }, {"classes >= 1"});
}

TEST_CASE("Bert probabilities: mlm (T, V) and classify (B, classes) rows sum to 1, no graph") {
  Bert mlm(tiny("mlm")), cls(tiny("classify"));
  const Tensor p = mlm.mlm_probabilities(kPair);
  REQUIRE(p.shape() == Shape{6, 15});
  for (int64_t t = 0; t < 6; ++t) {
    double s = 0;
    for (int64_t v = 0; v < 15; ++v) s += p.data()[t * 15 + v];
    CHECK(s == doctest::Approx(1).epsilon(1e-5));
  }
  CHECK(mlm.is_training());  // the mode is restored
  const Tensor q = cls.class_probabilities({kPair, kSingle});
  REQUIRE(q.shape() == Shape{2, 4});
  for (int64_t b = 0; b < 2; ++b)
    CHECK(q.data()[b * 4] + q.data()[b * 4 + 1] + q.data()[b * 4 + 2] + q.data()[b * 4 + 3] ==
          doctest::Approx(1).epsilon(1e-5));
}

TEST_CASE("Bert mlm and classify models share every tensor by name and shape except the heads") {
  Bert mlm(tiny("mlm")), cls(tiny("classify"));
  const auto a = shapes_of(mlm), b = shapes_of(cls);
  std::set<std::string> only_mlm, only_cls;
  for (const auto& [n, s] : a) {
    if (!b.count(n))
      only_mlm.insert(n);
    else
      CHECK_MESSAGE(b.at(n) == s, n);
  }
  for (const auto& [n, s] : b)
    if (!a.count(n)) only_cls.insert(n);
  CHECK(only_mlm == std::set<std::string>{"mlm.dense.weight", "mlm.dense.bias", "mlm.norm.weight",
                                          "mlm.norm.bias", "mlm.bias"});
  CHECK(only_cls == std::set<std::string>{"pooler.weight", "pooler.bias", "classifier.weight",
                                          "classifier.bias"});
  for (const char* n :
       {"embed.weight", "segment_embed.weight", "pos_embed.weight", "embed_norm.weight",
        "embed_norm.bias", "encoder.layers.0.self_attn.w_q.weight"})
    CHECK_MESSAGE(a.count(n), n);
  // The output layer is tied: no weight of its own (V*D counted once).
  CHECK(a.at("embed.weight") == Shape{15, 8});
  CHECK(double(mlm.num_parameters()) == parameter_count(mlm.cfg));
  CHECK(double(cls.num_parameters()) == parameter_count(cls.cfg));
}

TEST_CASE("Bert model files: save_model and load_model round-trip both heads with nothing else") {
  qkv::testing::TempDir dir("qkv_bert");
  for (const char* head : {"mlm", "classify"}) {
    INFO(head);
    BertConfig c = tiny(head);
    c.sep_id = 4;
    c.mask_id = 6;
    c.segments = 3;
    Bert m(c);
    m.eval();
    const std::string path = dir.file(std::string(head) + ".safetensors");
    save_model(m, path);
    std::unique_ptr<Model> any = load_model(path);
    REQUIRE(std::string(any->kind()) == "bert");
    std::unique_ptr<Bert> b = load_bert(path);
    CHECK(b->cfg.head == head);
    CHECK(b->cfg.sep_id == 4);
    CHECK(b->cfg.mask_id == 6);
    CHECK(b->cfg.segments == 3);
    CHECK(b->cfg.classes == 4);
    b->eval();
    NoGradGuard no_grad;
    const Tokens t = data::right_padded({kPair, kSingle});
    CHECK(max_abs_diff(m.forward(t).data(), b->forward(t).data()) == 0);
  }
  // Another family's file is refused by the typed loader.
  EncoderOnlyConfig e;
  e.vocab = 6;
  e.classes = 3;
  e.d_model = 8;
  e.heads = 2;
  e.layers = 1;
  e.d_ff = 16;
  EncoderOnlyModel enc(e);
  const std::string other = dir.file("enc.safetensors");
  save_model(enc, other);
  check_error([&] { load_bert(other); }, {"holds a 'encoder' model, not a 'bert' model"});
}

TEST_CASE("tools/qkv_checkpoint.py reads a bert model file, and refuses one with rope_base") {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) {
    MESSAGE("skipped: /usr/bin/python3 not found");
    return;
  }
  qkv::testing::TempDir dir("qkv_bert_py");
  const std::string path = dir.file("bert.safetensors");
  Bert m(tiny("classify"));
  std::vector<std::string> vocab = {"<pad>", "<s>", "</s>", "[MASK]"};
  while (vocab.size() < 15) vocab.push_back("w" + std::to_string(vocab.size()));
  save_model(m, path, {{"vocab", nlohmann::json(vocab).dump()}});
  const std::string tool = repo_root() + "/tools/qkv_checkpoint.py";
  ProgramRun r = run_program({python, tool, path});
  INFO("output: " << r.out << r.err);
  CHECK(r.status == 0);
  CHECK(qkv::testing::has(r.out, "model_kind: bert"));
  CHECK(qkv::testing::has(r.out, "\"head\": \"classify\""));
  CHECK(qkv::testing::has(r.out, "segment_embed.weight"));
  // The same file claiming rotary positions: refused naming the key.
  TensorFile f = read_safetensors(path);
  nlohmann::json mc = nlohmann::json::parse(f.metadata.at("model_config"));
  mc["rope_base"] = 10000.0;
  f.metadata["model_config"] = mc.dump();
  NamedTensors all(f.tensors.begin(), f.tensors.end());
  write_safetensors(path, all, f.metadata);
  r = run_program({python, tool, path});
  CHECK(r.status == 1);
  CHECK(qkv::testing::has(r.err, "key 'rope_base'"));
  check_error([&] { load_model(path); }, {"key 'rope_base'", "learned positions"});
}

TEST_CASE("a bert file whose model_config disagrees with its tensors is refused, naming the key") {
  qkv::testing::TempDir dir("qkv_bert_fits");
  const std::string path = dir.file("bert.safetensors");
  Bert m(tiny("mlm"));
  save_model(m, path);
  const TensorFile good = read_safetensors(path);
  // Rewrites the file with model_config key `key` set to `value`.
  auto with = [&](const char* key, const nlohmann::json& value) {
    TensorFile f = good;
    nlohmann::json mc = nlohmann::json::parse(f.metadata.at("model_config"));
    mc[key] = value;
    f.metadata["model_config"] = mc.dump();
    NamedTensors all(f.tensors.begin(), f.tensors.end());
    write_safetensors(path, all, f.metadata);
  };
  with("segments", 5);
  check_error([&] { load_model(path); },
              {"model_config key 'segments' is 5", "'segment_embed.weight' has shape (2,8)"});
  with("max_positions", 64);
  check_error([&] { load_model(path); },
              {"model_config key 'max_positions' is 64", "'pos_embed.weight'"});
  with("head", "classify");
  check_error([&] { load_model(path); }, {"no tensor 'classifier.weight'"});
  with("vocab", 16);
  check_error([&] { load_model(path); }, {"model_config key 'vocab' is 16", "'embed.weight'"});
  with("layers", 2);
  check_error([&] { load_model(path); }, {"model_config key 'layers' is 2", "tensors for 1"});
}

TEST_CASE("Bert model_config: optional keys default, bad values named by key") {
  BertConfig c = tiny("classify");
  nlohmann::json j = config_to_json(c);
  for (const char* k : {"segments", "classes", "sep_id", "mask_id"}) j.erase(k);
  j["head"] = "mlm";
  const BertConfig d = bert_config_from_json(j, "f.safetensors");
  CHECK(d.segments == 2);
  CHECK(d.classes == 0);
  CHECK(d.sep_id == 2);
  CHECK(d.mask_id == 3);
  j["head"] = "nsp";
  check_error([&] { bert_config_from_json(j, "f.safetensors"); },
              {"f.safetensors: key 'head' is 'nsp'"});
  j["head"] = "classify";
  check_error([&] { bert_config_from_json(j, "f.safetensors"); }, {"key 'classes' is 0"});
  j["head"] = "mlm";
  j["mask_id"] = 15;
  check_error([&] { bert_config_from_json(j, "f.safetensors"); },
              {"key 'mask_id' is 15", "[0, 15)"});
}

TEST_CASE("Bert answers: mlm fills each [MASK] only, classify gives one label") {
  Bert mlm(tiny("mlm")), cls(tiny("classify"));
  const data::Seq asked = {1, 5, 3, 7, 3, 2};  // two [MASK]s
  const std::vector<data::Seq> out = answer(mlm, {asked, kSingle});
  REQUIRE(out.size() == 2);
  REQUIRE(out[0].size() == asked.size());
  const Tensor p = mlm.mlm_probabilities(asked);  // (T, V)
  for (size_t i = 0; i < asked.size(); ++i) {
    if (asked[i] != 3) {
      CHECK(out[0][i] == asked[i]);
      continue;
    }
    const real* row = p.data() + i * 15;
    CHECK(out[0][i] == std::max_element(row, row + 15) - row);  // the argmax
  }
  CHECK(out[1] == kSingle);  // nothing to fill
  const std::vector<data::Seq> labels = answer(cls, {kPair, kSingle});
  const Tensor q = cls.class_probabilities({kPair, kSingle});
  for (int64_t b = 0; b < 2; ++b) {
    REQUIRE(labels[b].size() == 1);
    const real* row = q.data() + b * 4;
    CHECK(labels[b][0] == std::max_element(row, row + 4) - row);
  }
}

namespace {

// A Bert built from the fixture's model_config and weights against PyTorch:
// logits, loss and every parameter's gradient (through forward_pairs, so the
// segment ids and targets are the model's own).
void bert_parity(const char* file) {
  TensorFile f = load_fixture(file);
  Bert m(bert_config_from_json(nlohmann::json::parse(f.metadata.at("model_config")), file));
  std::set<std::string> ours, theirs;
  for (auto& [n, v] : m.named_parameters()) ours.insert(n);
  for (auto& [n, t] : f.tensors)
    if (n.rfind("param.", 0) == 0) theirs.insert(n.substr(6));
  CHECK(ours == theirs);
  load_params(m, f, "");
  const std::vector<int64_t> ids = ids_of(f.get("in.ids")), lens = ids_of(f.get("in.lens"));
  const std::vector<int64_t> targets = ids_of(f.get("in.targets"));
  const int64_t B = f.get("in.ids").size(0), T = f.get("in.ids").size(1);
  std::vector<data::Pair> pairs(B);
  for (int64_t b = 0; b < B; ++b) {
    pairs[b].src.assign(ids.begin() + b * T, ids.begin() + b * T + lens[b]);
    if (m.mlm)
      pairs[b].tgt.assign(targets.begin() + b * T, targets.begin() + b * T + lens[b]);
    else if (m.qa)
      pairs[b].tgt = {targets[2 * b], targets[2 * b + 1]};  // start, end
    else
      pairs[b].tgt = {targets[b]};
  }
  TeacherForced out = m.forward_pairs(pairs);
  const Tensor& want = f.get("out.logits");
  check_close(out.logits.data().reshape(want.shape()), want, "logits");
  Var loss = cross_entropy(out.logits, out.targets, out.ignore_index);
  check_close(loss.data().reshape({1}), f.get("out.loss"), "loss");
  loss.backward();
  qkv::testing::check_param_grads(m.named_parameters(), f, "grad.", "bert");
}

}  // namespace

TEST_CASE(
    "Bert mlm (Post-LN, GELU, tied output + bias) matches PyTorch: logits, loss, every gradient") {
  bert_parity("bert_mlm.safetensors");
}

TEST_CASE(
    "Bert classify (pooler tanh on position 0, classifier) matches PyTorch: logits, loss, every "
    "gradient") {
  bert_parity("bert_classify.safetensors");
}

TEST_CASE(
    "Bert qa (a start and an end logit a token, masked to [CLS] and segment 1) matches PyTorch: "
    "span logits, the span loss, every gradient") {
  bert_parity("bert_qa.safetensors");
}

TEST_CASE("Bert qa: spans may start and end at [CLS] and the context, a bad target is refused") {
  BertConfig c = tiny("qa");
  Bert m(c);
  // "[CLS] q q [SEP] c c c [SEP]" and a shorter one, padded: allowed are 0 and 4..6, and 0, 3.
  const data::Seq a = {1, 5, 6, 2, 7, 8, 9, 2}, b = {1, 5, 2, 7, 2};
  const nn::Tokens t = data::right_padded({a, b});
  const std::vector<uint8_t> want = {1, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0};
  CHECK(m.span_allowed(t) == want);
  std::vector<data::Pair> pairs(2);
  pairs[0].src = a;
  pairs[0].tgt = {4, 6};
  pairs[1].src = b;
  pairs[1].tgt = {0, 0};
  const TeacherForced f = m.forward_pairs(pairs);
  CHECK(f.logits.shape() == Shape{2, 2, 8});
  CHECK(f.targets == std::vector<int64_t>{4, 6, 0, 0});
  CHECK(f.ignore_index == -1);
  CHECK(f.logits.data().data()[1] == nn::kMaskedLogit);  // (0, start, 1): the question
  pairs[0].tgt = {2, 4};                                 // a question token
  check_error([&] { m.forward_pairs(pairs); }, {"Bert::forward_pairs (qa): sequence 0", "{2, 4}"});
  pairs[0].tgt = {6, 5};  // end before start
  check_error([&] { m.forward_pairs(pairs); }, {"sequence 0", "{6, 5}"});
  pairs[0].tgt = {4};
  check_error([&] { m.forward_pairs(pairs); }, {"sequence 0", "got 1 number(s)"});
}

TEST_CASE("Bert qa: a sequence's span logits alone equal its row in a padded batch") {
  Bert m(tiny("qa"));
  const data::Seq a = {1, 5, 6, 2, 7, 8, 9, 2}, b = {1, 5, 2, 7, 2};
  const Tensor both = m.span_scores({a, b});  // (2, 2, 8): b padded by 3
  const Tensor alone = m.span_scores({b});    // (1, 2, 5)
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t t = 0; t < 5; ++t) {
      const real x = alone.data()[c * 5 + t], y = both.data()[(2 + c) * 8 + t];
      CHECK(double(x) == doctest::Approx(double(y)).epsilon(1e-5));
    }
}

TEST_CASE(
    "a tiny Bert learns by masked language modelling: pairs whose second text copies the first, "
    "held-out masked-token accuracy from chance to above 60% in 400 steps") {
  const int64_t V = 24, L = 6;  // 20 word ids, texts of 6 words
  BertConfig c = tiny("mlm");
  c.vocab = V;
  c.max_positions = 2 * L + 3;
  c.d_model = 32;
  c.heads = 4;
  c.layers = 2;
  c.d_ff = 64;
  Bert m(c);
  optim::Adam opt(m.parameters(), real(3e-3));
  Generator g = qkv::testing::test_generator();
  data::MlmOptions o;
  o.vocab = V;
  // "<s> A </s> A </s>", masked: a masked word of one copy is readable in the other.
  auto batch = [&](int n) {
    std::vector<data::Pair> pairs;
    for (int b = 0; b < n; ++b) {
      data::Seq a;
      for (int64_t i = 0; i < L; ++i) a.push_back(g.randint(4, V));
      data::Seq ids = {1};
      ids.insert(ids.end(), a.begin(), a.end());
      ids.push_back(2);
      ids.insert(ids.end(), a.begin(), a.end());
      ids.push_back(2);
      pairs.push_back(data::mask_for_mlm(ids, o, g));
    }
    return pairs;
  };
  const std::vector<data::Pair> held = batch(200);
  auto accuracy = [&] {
    NoGradGuard no_grad;
    m.eval();
    TeacherForced f = m.forward_chosen(held);  // (1, M, V)
    int64_t right = 0;
    for (size_t r = 0; r < f.targets.size(); ++r) {
      const real* row = f.logits.data().data() + r * V;
      right += std::max_element(row, row + V) - row == f.targets[r];
    }
    m.train();
    return double(right) / double(f.targets.size());
  };
  const double before = accuracy();
  for (int step = 0; step < 400; ++step) {
    TeacherForced f = m.forward_chosen(batch(32));
    Var loss = cross_entropy(f.logits, f.targets, data::kPad);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  const double after = accuracy();
  INFO("held-out masked-token accuracy " << before << " -> " << after);
  CHECK(before < 0.2);  // chance is 1/20
  CHECK(after > 0.6);
}
