// The training instruments (trainer/instruments.h) and their diagnosis
// (trainer/diagnosis.h): what a watched step records, checked against the
// same numbers computed here from the weights; that watching changes no
// number of the run; and each diagnosis rule on synthetic records made to
// show it and made not to.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "nn/attention.h"
#include "nn/feedforward.h"
#include "nn/swiglu.h"
#include "temp_dir.h"
#include "test_seed.h"
#include "trainer/diagnosis.h"
#include "trainer/instruments.h"
#include "trainer/instruments_plots.h"
#include "trainer/trainer.h"

using namespace qkv;
using namespace qkv::train;
using json = nlohmann::json;
using qkv::testing::test_generator;
using qkv::testing::test_seed;

namespace {
TrainConfig tiny_config() {
  TrainConfig c;
  c.task = "reverse";
  c.vocab = 6;
  c.min_len = 2;
  c.max_len = 5;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.batch = 16;
  c.steps = 10;
  c.warmup = 2;
  c.heldout = 20;
  c.clip = 0;  // the gradients after the step are the ones the record measured
  c.seed = test_seed();
  return c;
}

// One record of `ins` for a forward of `run` (no backward, no update).
json watch_forward(Instruments& ins, const std::function<void()>& run) {
  ins.watch(1);
  run();
  ins.unwatch();
  ins.gradients();
  ins.updated(0, 0, 0);
  return ins.records().back();
}
}  // namespace

TEST_CASE(
    "instruments: a watched step records each parameter's gradient norm and update ratio "
    "as computed here from the weights before and after the step") {
  Trainer t(tiny_config());
  t.instruments = std::make_unique<Instruments>(t.model(), 2, "");
  t.step();
  CHECK(t.instruments->records().empty());  // step 1: not watched
  const auto named = t.model().named_parameters();
  std::vector<Tensor> before;
  for (auto& [n, v] : named) before.push_back(v.data().clone());
  t.step();  // step 2: watched
  REQUIRE(t.instruments->records().size() == 1);
  const json& r = t.instruments->records()[0];
  CHECK(r["step"] == 2);
  REQUIRE(r["params"].size() == named.size());
  int checked = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const json& p = r["params"][i];
    CHECK(p["name"] == named[i].first);
    const Tensor& w = named[i].second.data();
    double g2 = 0, d = 0, d2 = 0, s = 0, s2 = 0;
    const int64_t n = w.numel();
    for (int64_t k = 0; k < n; ++k) {
      const double g = named[i].second.grad().data()[k];
      const double dw = double(w.data()[k]) - before[i].data()[k], b = before[i].data()[k];
      g2 += g * g;
      d += dw, d2 += dw * dw, s += b, s2 += b * b;
    }
    CHECK(p["grad_norm"].get<double>() == doctest::Approx(std::sqrt(g2)).epsilon(1e-6));
    const double sd_dw = std::sqrt(d2 / n - (d / n) * (d / n));
    const double sd_w = std::sqrt(s2 / n - (s / n) * (s / n));
    if (sd_w > 0 && sd_dw > 0) {
      // the same sums, in double, over the same floats: equal up to rounding
      CHECK(p["update_ratio"].get<double>() ==
            doctest::Approx(std::log10(sd_dw / sd_w)).epsilon(1e-9));
      ++checked;
    } else {
      CHECK(p["update_ratio"].is_null());
    }
  }
  CHECK(checked > 0);
  CHECK(r["layers"].size() >= 3);  // the encoder's and decoder's attention and FFN blocks
}

TEST_CASE("instruments: watching every step changes no number of the run (standard kernel)") {
  Trainer a(tiny_config()), b(tiny_config());
  b.instruments = std::make_unique<Instruments>(b.model(), 1, "");
  for (int s = 0; s < 3; ++s) CHECK(a.step() == b.step());
  const auto pa = a.model().named_parameters(), pb = b.model().named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    CHECK(pa[i].second.data().to_vector() == pb[i].second.data().to_vector());
  CHECK(b.instruments->records().size() == 3);
}

TEST_CASE(
    "instruments: a ReLU unit whose input is <= 0 for every token is dead, one positive "
    "once is not; GELU's below -3 and SwiGLU's gate below -6 likewise") {
  const int64_t D = 4, F = 3, N = 5;
  Tensor x = Tensor::full({N, D}, 1);  // every token all ones
  {
    nn::FeedForward ff(D, F, nn::Activation::ReLU, default_generator());
    ff.linear1->bias.data().zero_();
    ff.linear1->weight.data().fill_(0.5f);  // units 1, 2: input 2 > 0
    for (int64_t j = 0; j < D; ++j) ff.linear1->weight.data().at({0, j}) = -1;  // unit 0: -4
    Instruments ins(ff, 1, "");
    const json r = watch_forward(ins, [&] { ff.forward(Var(x)); });
    CHECK(r["layers"][0]["kind"] == "ffn");
    CHECK(r["layers"][0]["dead"].get<double>() == doctest::Approx(1.0 / 3));
  }
  {
    nn::FeedForward ff(D, F, nn::Activation::GELU, default_generator());
    ff.linear1->bias.data().zero_();
    ff.linear1->weight.data().fill_(-0.5f);  // units 1, 2: input -2: alive (above -3)
    for (int64_t j = 0; j < D; ++j) ff.linear1->weight.data().at({0, j}) = -1;  // unit 0: -4
    Instruments ins(ff, 1, "");
    const json r = watch_forward(ins, [&] { ff.forward(Var(x)); });
    CHECK(r["layers"][0]["dead"].get<double>() == doctest::Approx(1.0 / 3));
  }
  {
    nn::SwiGLU sw(D, F, default_generator());
    sw.gate->weight.data().fill_(-1.0f);  // every gate input -4: alive (above -6)
    for (int64_t j = 0; j < D; ++j) sw.gate->weight.data().at({2, j}) = -2;  // unit 2: -8
    Instruments ins(sw, 1, "");
    const json r = watch_forward(ins, [&] { sw.forward(Var(x)); });
    CHECK(r["layers"][0]["activation"] == "swiglu");
    CHECK(r["layers"][0]["dead"].get<double>() == doctest::Approx(1.0 / 3));
  }
}

TEST_CASE(
    "instruments: attention with equal scores has entropy log S in every head, causal "
    "rows the mean of log(t+1), and no saturated row; a memory-efficient layer keeps its "
    "kernel and records no entropy") {
  Generator g = test_generator();
  const int64_t B = 2, T = 6, D = 8, H = 2;
  nn::MultiHeadAttention mha(D, H, true, g);
  mha.w_q->weight.data().zero_();  // Q = 0: every score 0, every row uniform
  mha.w_q->bias.data().zero_();
  Var x(Tensor::normal({B, T, D}, 0, 1, g));
  {  // The memory-efficient kernel never holds P: its output's statistics, no entropy.
    mha.kernel = nn::AttentionKernel::MemoryEfficient;
    Instruments ins(mha, 1, "");
    const json r = watch_forward(ins, [&] { mha.forward(x, x); });
    const json& l = r["layers"][0];
    CHECK(l.contains("mean"));
    CHECK_FALSE(l.contains("entropy"));
    CHECK_FALSE(l.contains("saturated"));
  }
  {
    mha.kernel = nn::AttentionKernel::Standard;
    Instruments ins(mha, 1, "");
    json r = watch_forward(ins, [&] { mha.forward(x, x); });
    const json& l = r["layers"][0];
    CHECK(l["keys"] == T);
    for (double e : l["entropy"]) CHECK(e == doctest::Approx(std::log(double(T))).epsilon(1e-5));
    CHECK(l["saturated"].get<double>() == 0);
    r = watch_forward(ins, [&] { mha.forward(x, x, nn::AttentionMask::causal_mask()); });
    double mean_log = 0;
    for (int64_t t = 0; t < T; ++t) mean_log += std::log(double(t + 1)) / T;
    for (double e : r["layers"][0]["entropy"]) CHECK(e == doctest::Approx(mean_log).epsilon(1e-5));
    // row 0 sees one key: probability 1, saturated; 1 row of T per head
    CHECK(r["layers"][0]["saturated"].get<double>() == doctest::Approx(1.0 / T));
  }
  CHECK(mha.probe() == nullptr);  // unwatch took the probe off every module
}

TEST_CASE("instruments: --instruments 0 or below is refused naming the flag") {
  nn::FeedForward ff(4, 3, nn::Activation::ReLU, default_generator());
  CHECK_THROWS_WITH_AS(Instruments(ff, 0, ""), doctest::Contains("--instruments 0"), Error);
}

// ---- the diagnosis rules, on synthetic records -------------------------------

namespace {
json watched_step(int64_t step, double grad_norm, json params, json layers) {
  return {{"step", step},           {"loss", 1.0},      {"lr", 1e-3},
          {"grad_norm", grad_norm}, {"params", params}, {"layers", layers}};
}
std::vector<int> rules(const std::vector<Finding>& f) {
  std::vector<int> out;
  for (const Finding& x : f) out.push_back(x.rule);
  return out;
}
}  // namespace

TEST_CASE(
    "diagnosis rule 1: a weight matrix's median update ratio 1.5 decades past 1e-3 fires; "
    "one inside the band, or a vector's, does not") {
  auto run = [](double matrix_ratio, double vector_ratio) {
    std::vector<json> rec;
    for (int s = 1; s <= 3; ++s)
      rec.push_back(watched_step(
          10 * s, 1.0,
          {{{"name", "w"}, {"dims", 2}, {"grad_norm", 1.0}, {"update_ratio", matrix_ratio}},
           {{"name", "b"}, {"dims", 1}, {"grad_norm", 1.0}, {"update_ratio", vector_ratio}}},
          json::array()));
    return diagnose(rec);
  };
  const auto hot = run(-1.2, -3);
  REQUIRE(rules(hot) == std::vector<int>{1});
  CHECK(hot[0].text.find("w: update-to-data ratio 10^-1.20") != std::string::npos);
  CHECK(hot[0].text.find("too high") != std::string::npos);
  CHECK(rules(run(-4.7, -3)) == std::vector<int>{1});  // too slow
  CHECK(rules(run(-2.2, -0.5)).empty());               // inside; the vector is not judged
}

TEST_CASE(
    "diagnosis rule 2: a feed-forward block with over 25% dead units at the last record "
    "fires; 10% does not") {
  auto run = [](double dead) {
    return diagnose({watched_step(5, 1.0, json::array(),
                                  {{{"layer", "encoder.layers.0.ffn"},
                                    {"kind", "ffn"},
                                    {"activation", "relu"},
                                    {"dead", dead}}})});
  };
  const auto f = run(0.5);
  REQUIRE(rules(f) == std::vector<int>{2});
  CHECK(f[0].text.find("50.0% of its relu units dead at step 5") != std::string::npos);
  CHECK(rules(run(0.1)).empty());
}

TEST_CASE(
    "diagnosis rule 3: a head whose entropy fell below 0.1 nats over 4 or more keys fires; "
    "a spread head, or one over 2 keys, does not") {
  auto run = [](std::vector<double> e, int64_t keys) {
    return diagnose({watched_step(5, 1.0, json::array(),
                                  {{{"layer", "decoder.layers.0.self_attn"},
                                    {"kind", "attention"},
                                    {"entropy", e},
                                    {"keys", keys},
                                    {"saturated", 0.0}}})});
  };
  const auto f = run({0.02, 1.5}, 10);
  REQUIRE(rules(f) == std::vector<int>{3});
  CHECK(f[0].text.find("head 0: entropy 0.020 nats") != std::string::npos);
  CHECK(rules(run({1.2, 1.5}, 10)).empty());
  CHECK(rules(run({0.02, 0.02}, 2)).empty());
}

TEST_CASE(
    "diagnosis rule 4: a gradient norm 10 times the median of the records before it fires, "
    "and names the divergence after it; a steady norm does not") {
  auto run = [](double last, int64_t diverged) {
    std::vector<json> rec;
    const double norms[] = {1.0, 1.2, 0.9, last};
    for (int s = 0; s < 4; ++s)
      rec.push_back(watched_step(10 * (s + 1), norms[s], json::array(), json::array()));
    if (diverged) rec.push_back({{"step", diverged}, {"diverged", true}});
    return diagnose(rec);
  };
  const auto f = run(50, 43);
  REQUIRE(rules(f) == std::vector<int>{4});
  CHECK(f[0].text.find("gradient norm 50 at step 40, 50 times the median 1") != std::string::npos);
  CHECK(f[0].text.find("before the divergence at step 43") != std::string::npos);
  CHECK(rules(run(2, 0)).empty());
}

TEST_CASE(
    "diagnosis rule 5: a held-out loss above its best at a later step fires (keep-best's "
    "check); a loss still falling does not") {
  auto run = [](double last) {
    return diagnose({{{"step", 10}, {"heldout_loss", 2.0}},
                     {{"step", 20}, {"heldout_loss", 1.5}},
                     {{"step", 30}, {"heldout_loss", last}}});
  };
  const auto f = run(1.7);
  REQUIRE(rules(f) == std::vector<int>{5});
  CHECK(f[0].text.find("from its best 1.5000 (step 20) to 1.7000 (step 30)") != std::string::npos);
  CHECK(rules(run(1.4)).empty());
  CHECK(heldout_rose(1.5, 20, 1.7, 30));
  CHECK_FALSE(heldout_rose(1.5, 20, 1.5, 30));  // equal is no rise (keep_best: strictly lower)
}

TEST_CASE(
    "instruments: a run that diverged before its first record still draws axes with numbers "
    "(no point to scale them by: steps 0 to 1, no NaN, no 1e300)") {
  qkv::testing::TempDir dir("qkv_instruments_empty");
  const std::vector<json> records = {{{"step", 1}, {"diverged", true}}};
  write_instrument_pictures(records, dir.dir.string(), diagnose(records, 1));
  for (const char* name : {"update_ratio.svg", "grad_norm.svg", "entropy.svg"}) {
    std::ifstream in(dir.dir / name);
    REQUIRE(in);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(name);
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(svg.find("inf") == std::string::npos);
    CHECK(svg.find("100000000000") == std::string::npos);  // %.0f of 1e300
    CHECK(svg.find(">0</text>") != std::string::npos);     // the step axis starts at 0
  }
}
