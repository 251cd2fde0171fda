// The explorer's finite differences (explorer/trace.h) in float64: every
// element of every parameter and input of the step-through's models passes,
// a sample is what the options say it is, and a wrong backward fails.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/elementwise.h"
#include "explorer/trace.h"
#include "models/transformer.h"
#include "nn/cross_entropy.h"
#include "tests/test_seed.h"

using namespace qkv;
using Json = nlohmann::json;

namespace {

nn::TransformerConfig tiny() {
  nn::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 8;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = 5;
  return c;
}

// node id -> the flat indices checked
std::map<size_t, std::set<int64_t>> checked_elements(const Json& fd) {
  std::map<size_t, std::set<int64_t>> out;
  for (const auto& c : fd["checks"]) out[c[0].get<size_t>()].insert(c[1].get<int64_t>());
  return out;
}

}  // namespace

TEST_CASE(
    "explorer finite differences in float64: every element of every parameter of a 1+1-layer "
    "Transformer and of an attention example's inputs is checked and passes, relative error "
    "below 1e-6 where the gradient is above 1e-3") {
  static_assert(sizeof(real) == 8, "the float64 build");
  SUBCASE("a Transformer") {
    nn::Seq2SeqTransformer model(tiny());
    const nn::Tokens src{{3, 4, 5}, 1, 3, {}}, tgt{{1, 3, 4, 5}, 1, 4, {}};
    const std::vector<int64_t> next{3, 4, 5, 2};
    const explorer::Trace t = explorer::record_trace(
        [&] { return nn::cross_entropy(model.forward(src, tgt), next, 0); }, &model);
    CHECK(t.fd_checked == model.num_parameters());
    CHECK(t.fd_failed == 0);
    const Json j = Json::parse(t.json);
    const Json& fd = j["finite_differences"];
    CHECK(fd["precision"] == "float64");
    CHECK(fd["sampled_leaves"].empty());
    const auto elems = checked_elements(fd);
    for (const auto& n : j["nodes"])
      if (n["kind"] == "leaf") {
        int64_t numel = 1;
        for (const auto& d : n["shape"]) numel *= d.get<int64_t>();
        CHECK_MESSAGE(elems.at(n["id"].get<size_t>()).size() == static_cast<size_t>(numel),
                      n["name"]);
      }
    for (const auto& c : fd["checks"]) {
      const double engine = c[2], num = c[3];
      CHECK(c[5] == true);
      if (std::fabs(num) > 1e-3) CHECK(std::fabs(engine - num) / std::fabs(num) < 1e-6);
    }
  }
  SUBCASE("attention from primitive ops, inputs q, K, V") {
    Generator g = testing::test_generator();
    Var q(Tensor::normal({2, 3}, 0, 1, g), true), K(Tensor::normal({4, 3}, 0, 1, g), true),
        V(Tensor::normal({4, 2}, 0, 1, g), true);
    const explorer::Trace t = explorer::record_trace(
        [&] { return sum(matmul(softmax(matmul(q, K, false, true)), V)); }, nullptr);
    CHECK(t.fd_checked == 6 + 12 + 8);
    CHECK(t.fd_failed == 0);
    CHECK(t.fd_max_rel_err < 1e-6);
  }
  SUBCASE("a GPT with grouped-query attention (1 key/value head of 2) and rotary positions") {
    nn::GPTConfig c;
    c.vocab = 8;
    c.d_model = 8;
    c.heads = 2;
    c.kv_heads = 1;
    c.rope_base = 10000;
    c.layers = 1;
    c.d_ff = 16;
    c.max_positions = 4;
    c.dropout = 0;
    c.seed = 3;
    nn::GPT model(c);
    const nn::Tokens ids{{3, 4, 5, 1}, 1, 4, {}};
    const explorer::Trace t = explorer::record_trace(
        [&] {
          return nn::cross_entropy(model.forward(ids), {4, 5, 1, 2});
        },
        &model);
    CHECK(t.fd_checked == model.num_parameters());
    CHECK(t.fd_failed == 0);
    // The parsed page outlives the loop (a range over a temporary's member
    // would dangle).
    const Json page = Json::parse(t.json);
    int64_t compared = 0;
    for (const auto& check : page["finite_differences"]["checks"]) {
      const double engine = check[2], num = check[3];
      ++compared;
      // gradcheck's relative tolerance (1e-5; measured here: at most 1.5e-6).
      // This loop ran over a destroyed temporary until 2026-11-28 and never
      // checked anything; its 1e-6 then was stricter than gradcheck's.
      if (std::fabs(num) > 1e-3) CHECK(std::fabs(engine - num) / std::fabs(num) < 1e-5);
    }
    CHECK(compared == t.fd_checked);
  }
}

TEST_CASE(
    "explorer finite differences: a GPT with T5's relative position bias (a causal table shared "
    "by 2 layers): every parameter, the table's included, agrees") {
  nn::GPTConfig c;
  c.vocab = 8;
  c.d_model = 8;
  c.heads = 2;
  c.rel_buckets = 4;
  c.rel_max_distance = 3;
  c.layers = 2;
  c.d_ff = 16;
  c.max_positions = 6;
  c.dropout = 0;
  c.seed = 3;
  nn::GPT model(c);
  const nn::Tokens ids{{3, 4, 5, 1, 6, 2}, 1, 6, {}};
  const explorer::Trace t = explorer::record_trace(
      [&] {
        return nn::cross_entropy(model.forward(ids), {4, 5, 1, 6, 2, 7});
      },
      &model);
  CHECK(t.fd_checked == model.num_parameters());
  CHECK(t.fd_failed == 0);
  const Json j = Json::parse(t.json);
  bool table_seen = false;
  for (const auto& n : j["nodes"])
    if (n["kind"] == "leaf" && n["name"] == "rel_bias") table_seen = true;
  CHECK(table_seen);
  // Every element passed the explorer's own check, gradcheck's tolerance
  // (|engine - fd| <= 1e-6 + 1e-5 |fd|): fd_failed above.
}

TEST_CASE(
    "explorer finite differences: a sample is the largest-|gradient| elements plus random "
    "ones, as the options say") {
  Generator g = testing::test_generator();
  Var w(Tensor::normal({10, 10}, 0, 1, g), true), x(Tensor::normal({10}, 0, 1, g), true);
  explorer::TraceOptions opt;
  opt.fd_every_element_up_to = 20;  // w (100) is sampled, x (10) is not
  opt.fd_largest = 5;
  opt.fd_random = 7;
  const explorer::Trace t = explorer::record_trace(
      [&] {
        return sum(tanh(matmul(w, reshape(x, {10, 1}))));
      },
      nullptr, opt);
  const Json j = Json::parse(t.json);
  const auto elems = checked_elements(j["finite_differences"]);
  size_t wid = 0, xid = 0;
  for (const auto& n : j["nodes"])
    if (n["kind"] == "leaf") (n["shape"].size() == 2 ? wid : xid) = n["id"];
  CHECK(elems.at(wid).size() == 12);
  CHECK(elems.at(xid).size() == 10);
  CHECK(j["finite_differences"]["sampled_leaves"] == Json::array({wid}));
  // The 5 largest |dL/dw| are among the checked.
  std::vector<std::pair<double, int64_t>> mags;
  for (int64_t k = 0; k < 100; ++k) mags.push_back({-std::fabs(w.grad().data()[k]), k});
  std::sort(mags.begin(), mags.end());
  for (int k = 0; k < 5; ++k) CHECK(elems.at(wid).count(mags[k].second) == 1);
  CHECK(t.fd_failed == 0);
}

namespace {
// y = a^2 with a wrong rule: dy/da = a (the factor 2 dropped).
struct WrongSquareNode : Node {
  Tensor a;
  const char* name() const override { return "wrong_square"; }
  OpDoc doc() const override { return {"y = a^2", "da = dy * a  (wrong: the 2 is missing)", ""}; }
  TensorList backward(const Tensor& g) override { return {mul(g, a)}; }
};
Var wrong_square(const Var& a) {
  auto n = make_node<WrongSquareNode>();
  n->a = a.data();
  return make_result(mul(a.data(), a.data()), n, {a});
}
}  // namespace

TEST_CASE("explorer finite differences: a wrong backward rule fails every element it touches") {
  Generator g = testing::test_generator();
  Var a(Tensor::uniform({3, 2}, 0.5, 1.5, g), true);
  const explorer::Trace t = explorer::record_trace([&] { return sum(wrong_square(a)); }, nullptr);
  CHECK(t.fd_checked == 6);
  CHECK(t.fd_failed == 6);
  const Json j = Json::parse(t.json);
  for (const auto& c : j["finite_differences"]["checks"]) {
    CHECK(c[5] == false);
    CHECK(c[4].get<double>() > 0.3);  // |a - 2a| / |2a| = 1/2
  }
  CHECK(j["nodes"][1]["backward"] == "da = dy * a  (wrong: the 2 is missing)");
}

namespace {
// y = a^2 with a rule 1e-4 too large: dy/da = 2a (1 + 1e-4).
struct SlightlyWrongSquareNode : Node {
  Tensor a;
  const char* name() const override { return "slightly_wrong_square"; }
  OpDoc doc() const override { return {"y = a^2", "da = dy * 2a (1 + 1e-4)  (wrong)", ""}; }
  TensorList backward(const Tensor& g) override { return {mul(mul(g, a), real(2 * (1 + 1e-4)))}; }
};
Var slightly_wrong_square(const Var& a) {
  auto n = make_node<SlightlyWrongSquareNode>();
  n->a = a.data();
  return make_result(mul(a.data(), a.data()), n, {a});
}
}  // namespace

TEST_CASE(
    "explorer finite differences: a kink within h passes at a smaller step, a wrong rule "
    "fails at every step") {
  // L = sum(relu(x)): x[1] = 3e-6 lies within h = 1e-5 of the kink, so the
  // central difference there averages the slopes 0 and 1 ((x + h) / 2h =
  // 0.65 against the engine's 1); at h = 1e-6 the kink is outside and it passes.
  const explorer::TraceOptions opt;
  REQUIRE(opt.fd_step == 1e-5);
  REQUIRE(opt.fd_retries == 2);
  Var x(Tensor::from_vector({0.5, 3e-6, -0.25, 0.75}), true);
  const explorer::Trace t = explorer::record_trace([&] { return sum(relu(x)); }, nullptr);
  CHECK(t.fd_checked == 4);
  CHECK(t.fd_failed == 0);
  CHECK(t.fd_retried == 1);
  const Json j = Json::parse(t.json);
  for (const auto& c : j["finite_differences"]["checks"])
    CHECK(c[6].get<double>() == doctest::Approx(c[1] == 1 ? 1e-6 : 1e-5));
  CHECK(j["finite_differences"]["retried"] == 1);

  // A rule wrong by 1e-4 (relative) fails at h, h/10 and h/100 alike.
  Generator g = testing::test_generator();
  Var a(Tensor::uniform({3, 2}, 0.5, 1.5, g), true);
  const explorer::Trace w =
      explorer::record_trace([&] { return sum(slightly_wrong_square(a)); }, nullptr);
  CHECK(w.fd_failed == 6);
  CHECK(w.fd_retried == 0);  // none passed at a smaller step either
  const Json wrong = Json::parse(w.json);
  CHECK(wrong["finite_differences"]["checks"].size() == 6);
  for (const auto& c : wrong["finite_differences"]["checks"]) {
    CHECK(c[5] == false);
    CHECK(c[6].get<double>() == doctest::Approx(1e-7));  // every step was tried
  }
}
