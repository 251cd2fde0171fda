// The tables a newcomer adds a row to (CONTRIBUTING.md, "Adding a family, a
// norm, an optimizer or a decoding method"): each row is what the programs
// read, and a name outside the table is refused naming the table's names.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/registry.h"
#include "errors.h"
#include "generation/answer.h"
#include "generation/decoding_methods.h"
#include "models/transformer.h"
#include "nn/layernorm.h"
#include "nn/norm.h"
#include "nn/rmsnorm.h"
#include "nn/sublayer.h"
#include "optim/optimizers.h"
#include "test_seed.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::test_generator;

namespace {

Tensor random_tensor(const Shape& shape, Generator& g) {
  Tensor t = Tensor::zeros(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<real>(g.normal());
  return t;
}

std::vector<real> values(const Var& v) {
  return std::vector<real>(v.data().data(), v.data().data() + v.data().numel());
}

// A norm that only records how the sublayer called it (the identity).
struct RecordingNorm : nn::Norm {
  RecordingNorm() : nn::Norm(4, 1e-5) {}
  Var forward(const Var& x) const override {
    calls.push_back("forward");
    return x;
  }
  Var add_norm(const Var& x, const Var& fx) const override {
    calls.push_back("add_norm");
    return x + fx;
  }
  mutable std::vector<std::string> calls;
};

}  // namespace

TEST_CASE("the decoding methods are one table: names, help and which need a model that searches") {
  CHECK(nn::decoding_method_names() == "greedy or beam");
  CHECK(nn::decoding_method_names("'") == "'greedy' or 'beam'");
  for (const nn::DecodingMethod& m : nn::decoding_methods()) {
    CAPTURE(m.name);
    CHECK(nn::find_decoding_method(m.name) == &m);
    CHECK(std::string(m.help).size() > 10);
    CHECK(&nn::decoding_method(m.name, "--decode") == &m);
  }
  CHECK(nn::find_decoding_method("sample") == nullptr);
  CHECK(error_of([] { nn::decoding_method("nucleus", "--decode"); }) ==
        "--decode: expected greedy or beam, got 'nucleus'");

  // nn::answer takes every row for a model that searches, and refuses a row
  // that needs search for one that does not.
  nn::TransformerConfig sc;
  sc.src_vocab = sc.tgt_vocab = 9;
  sc.d_model = 8;
  sc.heads = 2;
  sc.encoder_layers = sc.decoder_layers = 1;
  sc.d_ff = 16;
  nn::Seq2SeqTransformer s2s(sc);
  nn::GPTConfig gc;
  gc.vocab = 9;
  gc.d_model = 8;
  gc.heads = 2;
  gc.layers = 1;
  gc.d_ff = 16;
  gc.max_positions = 16;
  nn::GPT gpt(gc);
  for (const nn::DecodingMethod& m : nn::decoding_methods()) {
    CAPTURE(m.name);
    nn::AnswerOptions o;
    o.method = m.name;
    o.max_new_tokens = 3;
    CHECK(nn::answer(s2s, {{4, 5, 6}}, o).size() == 1);
    if (m.needs_search)
      CHECK(error_of([&] {
              nn::answer(gpt, {{4, 5, 6}}, o);
            }) == "answer: beam search here is for the encoder-decoder (seq2seq), not gpt");
    else
      CHECK(nn::answer(gpt, {{4, 5, 6}}, o).size() == 1);
  }
}

TEST_CASE("each optimizer row builds its optimizer, whose state_dict holds the row's buffers") {
  CHECK(optim::optimizer_names() == "adam, adamw or sgd");
  CHECK(optim::find_optimizer("lion") == nullptr);
  Generator g = test_generator();
  optim::OptimizerSettings s;
  s.lr = real(0.01);
  s.beta1 = real(0.8);
  s.beta2 = real(0.9);
  s.momentum = real(0.5);
  for (const optim::OptimizerKind& k : optim::optimizer_kinds()) {
    CAPTURE(k.name);
    CHECK(optim::find_optimizer(k.name) == &k);
    CHECK(std::string(k.help).size() > 10);
    Var p(random_tensor({3, 2}, g), true);
    const std::vector<real> before = values(p);
    std::unique_ptr<optim::Optimizer> opt = k.make({p}, s);
    sum(p * p).backward();
    opt->step();
    CHECK(values(p) != before);  // it stepped
    std::set<std::string> buffers;
    for (const auto& [name, t] : opt->state_dict()) {
      const size_t dot = name.find('.');
      if (dot != std::string::npos) buffers.insert(name.substr(0, dot));
    }
    CHECK(buffers == std::set<std::string>(k.state.begin(), k.state.end()));
  }
  CHECK(optim::find_optimizer("adam")->describe(s) == "Adam(0.8, 0.9, 1e-9)");
  CHECK(optim::find_optimizer("adamw")->describe(s) == "AdamW(0.8, 0.9, 1e-9)");
  CHECK(optim::find_optimizer("sgd")->describe(s) == "SGD(momentum 0.5)");
  CHECK(optim::find_optimizer("adamw")->default_weight_decay == real(0.01));
  CHECK(optim::find_optimizer("adam")->default_weight_decay == 0);
}

TEST_CASE("the norm table makes LayerNorm, whose forward and add_norm are layer_norm's ops") {
  REQUIRE(nn::norm_kinds().size() >= 2);
  CHECK(std::string(nn::norm_kinds()[0].name) == "layer");
  CHECK(error_of([] { nn::make_norm("batch", 4); }) == "norm: expected layer or rms, got 'batch'");
  Generator g = test_generator();
  std::shared_ptr<nn::Norm> n = nn::make_norm("layer", 4);
  REQUIRE(dynamic_cast<nn::LayerNorm*>(n.get()) != nullptr);
  n->weight.data().copy_(random_tensor({4}, g));
  n->bias.data().copy_(random_tensor({4}, g));
  const Var x(random_tensor({2, 3, 4}, g)), fx(random_tensor({2, 3, 4}, g));
  CHECK(values(n->forward(x)) == values(nn::layer_norm(x, n->weight, n->bias, n->eps)));
  CHECK(values(n->add_norm(x, fx)) ==
        values(nn::add_layer_norm(x, fx, n->weight, n->bias, n->eps)));
}

TEST_CASE("the norm table makes RMSNorm, whose forward and add_norm are rms_norm's ops") {
  Generator g = test_generator();
  std::shared_ptr<nn::Norm> n = nn::make_norm("rms", 4);
  REQUIRE(dynamic_cast<nn::RMSNorm*>(n.get()) != nullptr);
  CHECK(!n->bias.defined());
  CHECK(n->named_parameters().size() == 1);
  n->weight.data().copy_(random_tensor({4}, g));
  const Var x(random_tensor({2, 3, 4}, g)), fx(random_tensor({2, 3, 4}, g));
  CHECK(values(n->forward(x)) == values(nn::rms_norm(x, n->weight, n->eps)));
  CHECK(values(n->add_norm(x, fx)) == values(nn::add_rms_norm(x, fx, n->weight, n->eps)));
}

TEST_CASE("a sublayer takes any nn::Norm: Pre-LN calls forward, Post-LN the fused add_norm") {
  Generator g = test_generator();
  RecordingNorm norm;
  nn::Dropout drop(0, g);
  const Var x(random_tensor({1, 2, 4}, g));
  auto f = [](const Var& v) { return v * real(2); };
  const Var pre = nn::sublayer(x, norm, drop, true, f);  // x + 2 norm(x) = 3x
  CHECK(norm.calls == std::vector<std::string>{"forward"});
  norm.calls.clear();
  const Var post = nn::sublayer(x, norm, drop, false, f);  // norm(x + 2x) = 3x
  CHECK(norm.calls == std::vector<std::string>{"add_norm"});
  for (size_t i = 0; i < values(x).size(); ++i) {
    CHECK(values(pre)[i] == doctest::Approx(3 * values(x)[i]));
    CHECK(values(post)[i] == doctest::Approx(3 * values(x)[i]));
  }
}

namespace {
struct Row {
  const char* name;
  int value;
};
struct KindRow {
  const char* kind;
  int value;
};
}  // namespace

TEST_CASE(
    "Registry: rows in order, found by name, added and removed; a taken or empty name refused") {
  Registry<Row> t("register_row", {{"a", 1}, {"b", 2}});
  REQUIRE(t.size() == 2);
  CHECK(std::string(t[0].name) == "a");
  CHECK(t.find("b")->value == 2);
  CHECK(t.find("c") == nullptr);
  CHECK(t.names() == "a or b");
  CHECK(t.names("'") == "'a' or 'b'");
  CHECK(t.at("a", "--row").value == 1);
  CHECK(error_of([&] { t.at("z\x1b", "--row"); }) == "--row: expected a or b, got 'z\\x1b'");
  t.add({"c", 3});
  CHECK(t.names() == "a, b or c");
  CHECK(error_of([&] { t.add({"b", 9}); }) == "register_row: a row named 'b' exists");
  CHECK(t.find("b")->value == 2);  // the first row stays
  CHECK(error_of([&] { t.add({"", 9}); }) == "register_row: a row needs a name");
  CHECK(error_of([&] { t.add({nullptr, 9}); }) == "register_row: a row needs a name");
  t.remove("a");
  t.remove("nothing");
  CHECK(t.names() == "b or c");
  // Built-in rows are checked as added rows are.
  CHECK(error_of([] {
          Registry<Row>("register_row", {{"a", 1}, {"a", 2}});
        }) == "register_row: a row named 'a' exists");
  // A table whose rows are named by another member.
  Registry<KindRow, &KindRow::kind> k("register_kind", {{"gpt", 1}});
  CHECK(k.find("gpt")->value == 1);
}
