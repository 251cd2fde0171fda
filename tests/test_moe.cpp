// The mixture of experts in float32: parity with PyTorch (fixture
// moe.safetensors, plain torch ops in float64, with drops), the capacity
// (which assignments are dropped, in which order, the counts, and that a
// dropped token's row gets nothing: it passes only through the residual),
// and the errors. The float64 gradient checks are in test_moe_grad.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "checkpoint/model_file.h"
#include "core/elementwise.h"
#include "models/gpt.h"
#include "nn/moe.h"
#include "temp_dir.h"

using namespace qkv;

using qkv::nn::Activation;
using qkv::testing::check_close;
using qkv::testing::check_error;

TEST_CASE("MoE matches PyTorch composed in float64: output, aux, drops and every gradient") {
  TensorFile f = load_fixture("moe.safetensors");
  nn::MoE moe(Activation::GELU, 8, 12, {4, 2, 1.0});
  load_params(moe, f, "moe.");
  Var x(f.get("moe.in.x").clone(), true);
  Var y = moe(x);
  check_close(y.data(), f.get("moe.out.y"), "moe out.y");
  check_close(moe.aux_loss().data().reshape({1}), f.get("moe.out.aux"), "moe out.aux");
  REQUIRE(moe.routing()->dropped > 0);
  CHECK(moe.routing()->dropped == int64_t(f.get("moe.out.dropped").data()[0]));
  Var loss = sum(y * Var(f.get("moe.in.upstream"))) + moe.aux_loss() * real(0.5);
  loss.backward();
  check_close(x.grad(), f.get("moe.grad.x"), "moe grad.x");
  for (auto& [name, v] : moe.named_parameters())
    check_close(v.grad(), f.get("moe.grad." + name), "moe grad." + name);
}

TEST_CASE(
    "MoE capacity: first choices claim before second ones, drops are counted, a dropped "
    "token's row is zero") {
  // D 2: tokens 0-3 are (1, 0) and prefer expert 0 then 1; tokens 4-7 are
  // (0, 1) and prefer 1 then 0; experts 2 and 3 are never chosen.
  nn::MoE moe(Activation::ReLU, 2, 3, {4, 2, 0.5});  // capacity ceil(0.5 * 8 * 2 / 4) = 2
  moe.router->weight.data().copy_(Tensor::from_vector({4, 2, 2, 4, -4, -4, -4, -4}, {4, 2}));
  Tensor X = Tensor::zeros({8, 2});
  for (int n = 0; n < 8; ++n) X.data()[n * 2 + (n < 4 ? 0 : 1)] = 1;
  Var x(X, true);
  Var y = moe(x);
  const nn::MoERouting& r = *moe.routing();
  CHECK(r.capacity == 2);
  // By rank then token: expert 0 takes tokens 0, 1 (first choices), expert 1
  // tokens 4, 5; every other assignment, second choices included, is dropped.
  // (In token order alone, tokens 0 and 1 would fill expert 1 with second
  // choices before tokens 4 and 5 reach it.)
  CHECK(r.rows[0] == std::vector<int64_t>{0, 1});
  CHECK(r.rows[1] == std::vector<int64_t>{4, 5});
  CHECK(r.rows[2].empty());
  CHECK(r.rows[3].empty());
  // before drops: every token chose experts 0 and 1
  CHECK(r.chosen[0] == 8);
  CHECK(r.chosen[1] == 8);
  CHECK(r.chosen[2] == 0);
  CHECK(r.chosen[3] == 0);
  CHECK(r.dropped == 12);
  // Kept rows: gate * expert(x_n), the gate renormalised over both choices
  // (the dropped second choice still counts in the renormaliser).
  Tensor P = nn::moe_router(x, moe.router->weight).data();
  for (int n : {0, 1, 4, 5}) {
    const int e = n < 4 ? 0 : 1;
    const real g = P.data()[n * 4 + e] / (P.data()[n * 4 + 0] + P.data()[n * 4 + 1]);
    Var xn(X.reshape({8, 2}).clone());
    Tensor out = moe.experts[e]->forward(xn).data();  // (8, 2): expert e on every token
    for (int i = 0; i < 2; ++i)
      CHECK(y.data().data()[n * 2 + i] == doctest::Approx(g * out.data()[n * 2 + i]).epsilon(1e-6));
  }
  // Dropped tokens: nothing from any expert, so x + ffn(x) = x.
  for (int n : {2, 3, 6, 7})
    for (int i = 0; i < 2; ++i) CHECK(y.data().data()[n * 2 + i] == 0);
  // Their gradient reaches x only through the router (dx of a dropped token
  // is the router's share; the experts send it nothing): backward runs and
  // the experts never chosen get no gradient.
  sum(y).backward();
  CHECK(!moe.experts[2]->parameters()[0].grad().defined());
  CHECK(moe.experts[0]->parameters()[0].grad().defined());
}

TEST_CASE("MoE refuses a bad setting or input in one line naming it") {
  check_error([] { nn::MoE(Activation::ReLU, 4, 8, {1, 1, 1.25}); }, {"MoE", "experts 1", "2"});
  check_error(
      [] {
        nn::MoE(Activation::ReLU, 4, 8, {4, 5, 1.25});
      },
      {"MoE", "experts per token 5", "1..4"});
  check_error([] { nn::MoE(Activation::ReLU, 4, 8, {4, 0, 1.25}); }, {"experts per token 0"});
  check_error([] { nn::MoE(Activation::ReLU, 4, 8, {4, 1, 0.0}); }, {"MoE", "capacity factor"});
  check_error([] { nn::MoE(Activation::ReLU, 4, 8, {4, 1, -1.0}); }, {"capacity factor"});
  nn::MoE moe(Activation::ReLU, 4, 8, {4, 1, 1.25});
  check_error([&] { moe(Var(Tensor::zeros({2, 3}))); }, {"MoE", "(2,3)", "4"});
  check_error(
      [&] {
        nn::moe_router(Var(Tensor::zeros({2, 3})), moe.router->weight);
      },
      {"moe_router", "(2,3)", "(4,4)"});
}

TEST_CASE("MoE counts a token's parameters: the router's and k experts'") {
  nn::MoE moe(Activation::GELU, 8, 32, {4, 2, 1.25});
  const int64_t expert = 8 * 32 + 32 + 32 * 8 + 8;
  CHECK(moe.num_parameters() == 8 * 4 + 4 * expert);
  CHECK(moe.active_parameters() == 8 * 4 + 2 * expert);
  std::vector<std::string> names;
  for (auto& [name, v] : moe.named_parameters()) names.push_back(name);
  CHECK(names.front() == "router.weight");
  CHECK(names[1] == "experts.0.linear1.weight");
  CHECK(names.back() == "experts.3.linear2.bias");
}

TEST_CASE("A gpt with experts saves and loads its experts keys; a dense one writes none") {
  nn::GPTConfig c;
  c.vocab = 11;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 16;
  c.max_positions = 8;
  CHECK(!nn::config_to_json(c).contains("experts"));  // files as before
  CHECK(!nn::config_to_json(c).contains("aux_loss"));
  c.moe = {4, 2, 1.5, 0.02};
  nn::GPT m(c);
  const nlohmann::json j = nn::config_to_json(c);
  CHECK(j.at("experts") == 4);
  CHECK(j.at("experts_per_token") == 2);
  CHECK(j.at("capacity_factor") == 1.5);
  CHECK(j.at("aux_loss") == 0.02);
  // every layer's FFN is a mixture; the model's aux is their mean, after a forward
  CHECK(m.named_parameters().size() > 0);
  bool router = false;
  for (auto& [name, v] : m.named_parameters())
    router = router || name == "layers.1.ffn.router.weight";
  CHECK(router);
  CHECK(!m.aux_loss().defined());
  nn::Tokens t{{1, 2, 3, 4, 5, 6, 7, 8}, 2, 4, {}};
  Var logits = m.forward(t);
  REQUIRE(m.aux_loss().defined());
  CHECK(m.routings().size() == 2);
  const real a0 = m.routings()[0]->N;
  CHECK(a0 == 8);
  // 2 layers, each leaving out E - k = 2 experts of gelu (8 -> 16 -> 8, biases)
  CHECK(m.active_parameters() == m.num_parameters() - 2 * 2 * (8 * 16 + 16 + 16 * 8 + 8));
  testing::TempDir dir;
  nn::save_model(m, dir.file("moe.safetensors"));
  std::unique_ptr<nn::Model> back = nn::load_model(dir.file("moe.safetensors"));
  Var again = dynamic_cast<nn::GPT&>(*back).forward(t);
  CHECK(max_abs_diff(again.data(), logits.data()) == 0);
  // the keys go together
  nlohmann::json bad = j;
  bad.erase("capacity_factor");
  check_error([&] { nn::gpt_config_from_json(bad, "f"); },
              {"f", "'experts' without 'capacity_factor'"});
  bad = j;
  bad["experts_per_token"] = 5;
  check_error([&] { nn::gpt_config_from_json(bad, "f"); }, {"f", "experts per token 5", "1..4"});
  // recomputing would run the first forward without a graph: refused
  nn::GPTConfig rc = c;
  rc.recompute = nn::Recompute::FFN;
  check_error([&] { nn::GPT{rc}; }, {"MoE", "recomputed"});
  nlohmann::json dense = nn::config_to_json(nn::GPTConfig{});
  dense["aux_loss"] = 0.1;
  check_error([&] { nn::gpt_config_from_json(dense, "f"); }, {"f", "'aux_loss' without 'experts'"});
}

TEST_CASE(
    "moe_route's top k equals a stable sort's, for every k (each of its three ways), with ties and "
    "NaN") {
  // Probabilities on a grid of 5 values (many ties), some NaN: the choice is
  // the stable sort of -P with NaN last, its first k.
  Generator g(11);
  const int64_t N = 30, E = 40;
  Tensor P = Tensor::empty({N, E});
  for (int64_t i = 0; i < N * E; ++i)
    P.data()[i] = g.uniform() < 0.05 ? std::nanf("") : real(int(g.uniform() * 5)) / 5;
  for (int64_t k : {1, 2, 5, 16, 17, 40}) {
    const nn::MoERouting r = nn::moe_route(P, {E, k, 1.0}, false);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<int32_t> want(E);
      for (int32_t e = 0; e < E; ++e) want[e] = e;
      const real* pn = P.data() + n * E;
      std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) {
        if (std::isnan(pn[a]) || std::isnan(pn[b])) return !std::isnan(pn[a]) && std::isnan(pn[b]);
        return pn[a] > pn[b];
      });
      CAPTURE(k);
      CAPTURE(n);
      CHECK(std::vector<int32_t>(r.expert.begin() + n * k, r.expert.begin() + (n + 1) * k) ==
            std::vector<int32_t>(want.begin(), want.begin() + k));
    }
    CHECK(r.dropped == 0);  // at inference (capacity_applies false) nothing is dropped
  }
}
