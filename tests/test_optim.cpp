// Optimizers (float32): single steps against hand-computed values, three steps
// against PyTorch's torch.optim trajectories (tests/fixtures/adam.safetensors),
// state_dict round trips, error handling, and gradient clipping.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "compare.h"

#include "autograd/qkv_autograd.h"
#include "core/allocator.h"
#include "core/parallel.h"
#include "errors.h"
#include "fixture.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::optim;

using qkv::testing::bitwise_equal;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;
using qkv::testing::test_seed;

namespace {

Var param(const std::vector<real>& v, const Shape& shape) {
  return Var(Tensor::from_vector(v, shape), true);
}
Var param(const std::vector<real>& v) { return param(v, {static_cast<int64_t>(v.size())}); }

// What backward would leave in p.grad(): a fresh copy of g.
void set_grad(Var& p, const Tensor& g) { p.impl()->grad = g.clone(); }
void set_grad(Var& p, const std::vector<real>& g) {
  set_grad(p, Tensor::from_vector(g, p.shape()));
}

// max |got - want|, after checking the shapes agree.
double worst_abs_diff(const Tensor& got, const Tensor& want) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), to_string(got.shape())
                                                   << " vs " << to_string(want.shape()));
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = std::fabs(double(got.data()[i]) - double(want.data()[i]));
    if (!(d <= worst)) worst = d;  // also catches NaN
  }
  return worst;
}

const Tensor* find(const NamedTensors& st, const std::string& name) {
  for (const auto& [n, t] : st)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace

// ---- single steps, by hand ----------------------------------------------------

TEST_CASE("SGD: a plain step is p -= lr * (g + weight_decay * p)") {
  Var p = param({1, -2});
  SGD opt({p}, /*lr=*/0.1, /*momentum=*/0, /*weight_decay=*/0.1);
  set_grad(p, {0.5, 0.25});
  opt.step();
  // d = g + 0.1 p = [0.5 + 0.1, 0.25 - 0.2] = [0.6, 0.05]
  // p = [1 - 0.1 * 0.6, -2 - 0.1 * 0.05] = [0.94, -2.005]
  CHECK(p.data().at({0}) == doctest::Approx(0.94).epsilon(1e-6));
  CHECK(p.data().at({1}) == doctest::Approx(-2.005).epsilon(1e-6));
  CHECK(opt.step_count() == 1);
}

TEST_CASE("SGD momentum: buf = g on the first step, then momentum * buf + (1 - dampening) * g") {
  Var p = param({1});
  SGD opt({p}, /*lr=*/0.1, /*momentum=*/0.9, /*weight_decay=*/0, /*nesterov=*/false,
          /*dampening=*/0.5);
  set_grad(p, {2});
  opt.step();
  // buf = 2 (no dampening on the first step); p = 1 - 0.1 * 2 = 0.8
  CHECK(p.item() == doctest::Approx(0.8).epsilon(1e-6));
  set_grad(p, {1});
  opt.step();
  // buf = 0.9 * 2 + 0.5 * 1 = 2.3; p = 0.8 - 0.1 * 2.3 = 0.57
  CHECK(p.item() == doctest::Approx(0.57).epsilon(1e-6));
  CHECK(find(opt.state_dict(), "momentum.0")->item() == doctest::Approx(2.3).epsilon(1e-6));
}

TEST_CASE("SGD nesterov with weight decay: steps with d + momentum * buf, d = g + wd * p") {
  Var p = param({1});
  SGD opt({p}, /*lr=*/0.1, /*momentum=*/0.9, /*weight_decay=*/0.1, /*nesterov=*/true);
  set_grad(p, {2});
  opt.step();
  // d = 2 + 0.1 * 1 = 2.1; buf = 2.1; u = 2.1 + 0.9 * 2.1 = 3.99; p = 1 - 0.399 = 0.601
  CHECK(p.item() == doctest::Approx(0.601).epsilon(1e-6));
  set_grad(p, {1});
  opt.step();
  // d = 1 + 0.1 * 0.601 = 1.0601; buf = 0.9 * 2.1 + 1.0601 = 2.9501
  // u = 1.0601 + 0.9 * 2.9501 = 3.71519; p = 0.601 - 0.371519 = 0.229481
  CHECK(p.item() == doctest::Approx(0.229481).epsilon(1e-6));
}

TEST_CASE("Adam: two steps with bias correction match the hand-computed values") {
  Var p = param({1});
  Adam opt({p}, AdamOptions{/*lr=*/0.1, 0.9, 0.999, 1e-8, 0});
  set_grad(p, {0.5});
  opt.step();
  // m = 0.1 * 0.5 = 0.05, v = 0.001 * 0.25 = 2.5e-4; bc1 = 0.1, bc2 = 0.001
  // m_hat = 0.5, sqrt(v_hat) = 0.5; p = 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.9 (+2e-9)
  CHECK(p.item() == doctest::Approx(0.9).epsilon(1e-6));
  set_grad(p, {-1});
  opt.step();
  // m = 0.9 * 0.05 + 0.1 * (-1) = -0.055; v = 0.999 * 2.5e-4 + 0.001 * 1 = 1.24975e-3
  // bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.998001 = 1.999e-3
  // m_hat = -0.055 / 0.19 = -0.2894737; sqrt(v_hat) = sqrt(0.6251876) = 0.7906881
  // p = 0.9 + 0.1 * 0.2894737 / 0.7906881 = 0.9 + 0.0366104 = 0.9366104
  CHECK(p.item() == doctest::Approx(0.9366104).epsilon(1e-6));
  const NamedTensors st = opt.state_dict();
  CHECK(find(st, "exp_avg.0")->item() == doctest::Approx(-0.055).epsilon(1e-6));
  CHECK(find(st, "exp_avg_sq.0")->item() == doctest::Approx(1.24975e-3).epsilon(1e-6));
}

TEST_CASE("Adam adds eps after the bias correction of v, as PyTorch does") {
  Var p = param({1});
  Adam opt({p}, AdamOptions{/*lr=*/0.1, 0.9, 0.999, /*eps=*/0.5, 0});
  set_grad(p, {0.5});
  opt.step();
  // m_hat = 0.5, sqrt(v_hat) = 0.5: p = 1 - 0.1 * 0.5 / (0.5 + 0.5) = 0.95
  // (eps added before the correction would give 1 - 0.1 * 0.05 / (0.0158114 + 0.5)
  //  * sqrt(0.001) / 0.1 = 0.99693)
  CHECK(p.item() == doctest::Approx(0.95).epsilon(1e-6));
}

TEST_CASE("Adam weight_decay is coupled L2 (added to g); AdamW decays p before the update") {
  // g = -0.1 and p = 2 with wd 0.1: L2 turns the gradient positive, decoupled decay does not.
  // The first Adam step moves p by lr * g / (|g| + eps), i.e. by lr against the sign of g.
  Var a = param({2}), w = param({2});
  Adam adam({a}, AdamOptions{/*lr=*/0.1, 0.9, 0.999, 1e-8, /*weight_decay=*/0.1});
  AdamW adamw({w}, /*lr=*/0.1, 0.9, 0.999, 1e-8, /*weight_decay=*/0.1);
  set_grad(a, {-0.1});
  set_grad(w, {-0.1});
  adam.step();
  adamw.step();
  // Adam: g = -0.1 + 0.1 * 2 = 0.1 > 0, so p = 2 - 0.1 = 1.9
  CHECK(a.item() == doctest::Approx(1.9).epsilon(1e-6));
  // AdamW: p = 2 * (1 - 0.1 * 0.1) = 1.98, then g = -0.1 < 0, so p = 1.98 + 0.1 = 2.08
  CHECK(w.item() == doctest::Approx(2.08).epsilon(1e-6));
}

TEST_CASE(
    "AdamW defaults to weight_decay 0.01 and AdamOptions::paper to betas (0.9, 0.98), eps 1e-9") {
  Var p = param({1});
  AdamW w({p});
  CHECK(w.options().weight_decay == doctest::Approx(0.01));
  CHECK(w.options().lr == doctest::Approx(1e-3));
  CHECK(w.decoupled_weight_decay());
  const AdamOptions o = AdamOptions::paper(0.5);
  CHECK(o.lr == doctest::Approx(0.5));
  CHECK(o.beta1 == doctest::Approx(0.9));
  CHECK(o.beta2 == doctest::Approx(0.98));
  CHECK(o.eps == doctest::Approx(1e-9));
  CHECK(o.weight_decay == 0);
  Adam a({p}, o);
  CHECK_FALSE(a.decoupled_weight_decay());
  CHECK(a.options().beta2 == doctest::Approx(0.98));
}

// ---- against PyTorch ------------------------------------------------------------

namespace {

real meta_real(const TensorFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  REQUIRE_MESSAGE(it != f.metadata.end(), f.path << ": no metadata " << key);
  return static_cast<real>(std::stod(it->second));
}

// torch.optim.<optimizer>(**hyperparameters) as recorded in the fixture's metadata.
std::unique_ptr<Optimizer> make_from_metadata(const TensorFile& f, const std::string& key,
                                              const Var& p) {
  const std::string kind = f.metadata.at(key + ".optimizer");
  const real lr = meta_real(f, key + ".lr"), wd = meta_real(f, key + ".weight_decay");
  if (kind == "SGD") {
    return std::make_unique<SGD>(std::vector<Var>{p}, lr, meta_real(f, key + ".momentum"), wd,
                                 f.metadata.at(key + ".nesterov") == "True",
                                 meta_real(f, key + ".dampening"));
  }
  REQUIRE(f.metadata.at(key + ".amsgrad") == "False");
  const std::string betas = f.metadata.at(key + ".betas");  // "0.9,0.98"
  const size_t comma = betas.find(',');
  REQUIRE(comma != std::string::npos);
  AdamOptions o{lr, real(std::stod(betas.substr(0, comma))),
                real(std::stod(betas.substr(comma + 1))), meta_real(f, key + ".eps"), wd};
  if (kind == "Adam") return std::make_unique<Adam>(std::vector<Var>{p}, o);
  REQUIRE(kind == "AdamW");
  return std::make_unique<AdamW>(std::vector<Var>{p}, o.lr, o.beta1, o.beta2, o.eps,
                                 o.weight_decay);
}

}  // namespace

TEST_CASE(
    "Adam, Adam+L2, AdamW, SGD momentum and SGD nesterov+wd follow PyTorch's 3-step trajectories "
    "to 1e-6") {
  const TensorFile f = load_fixture("adam.safetensors");
  REQUIRE(f.metadata.at("steps") == "3");
  for (const char* key : {"adam", "adam_l2", "adamw", "sgd_mom", "sgd_nesterov"}) {
    CAPTURE(key);
    Var p(f.get("p0").clone(), true);
    auto opt = make_from_metadata(f, key, p);
    for (int k = 1; k <= 3; ++k) {
      CAPTURE(k);
      set_grad(p, f.get("g" + std::to_string(k)));
      opt->step();
      const Tensor& want = f.get(std::string(key) + ".p" + std::to_string(k));
      CHECK(worst_abs_diff(p.data(), want) <= 1e-6);
    }
    CHECK(opt->step_count() == 3);
  }
}

// ---- gradients that are missing, zero_grad ---------------------------------------

TEST_CASE(
    "step skips a parameter without a grad, and its first update later uses bias correction t = "
    "1") {
  Var a = param({1, 2}), b = param({3, -4});
  Adam opt({a, b}, AdamOptions{0.1, 0.9, 0.999, 1e-8, 0});
  set_grad(a, {0.5, 0.5});
  opt.step();  // b has no grad: untouched
  CHECK(b.data().to_vector() == std::vector<real>{3, -4});
  CHECK(find(opt.state_dict(), "param_steps")->to_vector() == std::vector<real>{1, 0});

  // b's first update, at optimizer step 2, equals a fresh Adam's first update.
  Var b_copy(b.data().clone(), true);
  Adam fresh({b_copy}, AdamOptions{0.1, 0.9, 0.999, 1e-8, 0});
  set_grad(a, {0.5, 0.5});
  set_grad(b, {0.25, -2});
  set_grad(b_copy, {0.25, -2});
  opt.step();
  fresh.step();
  CHECK(bitwise_equal(b.data(), b_copy.data()));
  // p -= lr * g / (|g| + eps): [3 - 0.1, -4 + 0.1]
  CHECK(b.data().at({0}) == doctest::Approx(2.9).epsilon(1e-6));
  CHECK(b.data().at({1}) == doctest::Approx(-3.9).epsilon(1e-6));
  CHECK(opt.step_count() == 2);
}

TEST_CASE("SGD skips a parameter without a grad") {
  Var a = param({1}), b = param({5});
  SGD opt({a, b}, 0.5, 0.9);
  set_grad(a, {1});
  opt.step();
  CHECK(a.item() == doctest::Approx(0.5));
  CHECK(b.item() == 5);
}

TEST_CASE("zero_grad zeroes every parameter's grad and keeps the buffers") {
  Var a = param({1, 2, 3}), b = param({4, 5}, {2, 1}), c = param({6});
  set_grad(a, {1, -1, 2});
  set_grad(b, {3, 4});
  const real* a_buf = a.grad().data();
  SGD opt({a, b, c}, 0.1);
  opt.zero_grad();
  CHECK(a.grad().to_vector() == std::vector<real>{0, 0, 0});
  CHECK(b.grad().to_vector() == std::vector<real>{0, 0});
  CHECK(a.grad().data() == a_buf);
  CHECK_FALSE(c.grad().defined());  // never had one; still none
}

// ---- performance contracts --------------------------------------------------------

TEST_CASE("Adam, AdamW and SGD steps allocate nothing after the first step") {
  Generator g = test_generator();
  Var p(Tensor::normal({64, 33}, 0, 1, g), true), q(Tensor::normal({7}, 0, 1, g), true);
  set_grad(p, Tensor::normal({64, 33}, 0, 1, g));
  set_grad(q, Tensor::normal({7}, 0, 1, g));
  Adam adam({p, q}, AdamOptions{1e-3, 0.9, 0.999, 1e-8, 0.1});
  AdamW adamw({p, q});
  SGD sgd({p, q}, 0.01, 0.9, 0.01, true);
  for (Optimizer* opt : std::vector<Optimizer*>{&adam, &adamw, &sgd}) {
    CAPTURE(opt->name());
    opt->step();  // allocates the state
    const AllocatorStats before = allocator_stats();
    for (int i = 0; i < 3; ++i) opt->step();
    const AllocatorStats after = allocator_stats();
    CHECK(after.system_allocs + after.cache_hits == before.system_allocs + before.cache_hits);
  }
}

TEST_CASE("Adam on a large tensor gives bitwise the same result with 1 and 2 threads") {
  const int saved = get_num_threads();
  const int64_t n = 3 * kParallelGrain + 17;  // several chunks, ragged end
  Generator gen = test_generator();
  const Tensor p0 = Tensor::normal({n}, 0, 1, gen);
  const Tensor g1 = Tensor::normal({n}, 0, 1, gen), g2 = Tensor::normal({n}, 0, 1, gen);
  std::vector<Tensor> results;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Var p(p0.clone(), true);
    AdamW opt({p}, 1e-2);
    set_grad(p, g1);
    opt.step();
    set_grad(p, g2);
    opt.step();
    results.push_back(p.data().clone());
  }
  set_num_threads(saved);
  CHECK(bitwise_equal(results[0], results[1]));
  // And every element follows the AdamW formula, evaluated here in double.
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  double worst = 0;
  for (int64_t j = 0; j < n; ++j) {
    double p = p0.data()[j], m = 0, v = 0;
    for (int t = 1; t <= 2; ++t) {
      const double g = (t == 1 ? g1 : g2).data()[j];
      p *= 1 - lr * wd;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      p -= lr / (1 - std::pow(b1, t)) * m / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
    }
    const double d = std::fabs(p - results[0].data()[j]);
    if (!(d <= worst)) worst = d;  // also catches NaN
  }
  CHECK(worst <= 1e-6);
}

// ---- state_dict -------------------------------------------------------------------

namespace {

// Two parameters of different shapes and a stream of gradients for them.
struct Problem {
  std::vector<Var> params;
  std::vector<std::vector<Tensor>> grads;  // grads[step][param]
  explicit Problem(uint64_t seed, int steps = 6) {
    Generator g(seed);
    params = {Var(Tensor::normal({2, 3}, 0, 1, g), true), Var(Tensor::normal({4}, 0, 1, g), true)};
    for (int s = 0; s < steps; ++s)
      grads.push_back({Tensor::normal({2, 3}, 0, 1, g), Tensor::normal({4}, 0, 1, g)});
  }
  std::vector<Var> copies() const {
    std::vector<Var> out;
    for (const Var& p : params) out.emplace_back(p.data().clone(), true);
    return out;
  }
};

void apply_grads(std::vector<Var>& params, const std::vector<Tensor>& g) {
  for (size_t i = 0; i < params.size(); ++i) set_grad(params[i], g[i]);
}

using Factory = std::unique_ptr<Optimizer> (*)(std::vector<Var>);

std::unique_ptr<Optimizer> make_adam(std::vector<Var> p) {
  return std::make_unique<Adam>(std::move(p), AdamOptions{0.01, 0.9, 0.98, 1e-9, 0.1});
}
std::unique_ptr<Optimizer> make_adamw(std::vector<Var> p) {
  return std::make_unique<AdamW>(std::move(p), 0.01);
}
std::unique_ptr<Optimizer> make_sgd_nesterov(std::vector<Var> p) {
  return std::make_unique<SGD>(std::move(p), 0.1, 0.9, 0.01, true);
}
std::unique_ptr<Optimizer> make_sgd_dampened(std::vector<Var> p) {
  return std::make_unique<SGD>(std::move(p), 0.1, 0.8, 0, false, 0.3);
}
std::unique_ptr<Optimizer> make_sgd_plain(std::vector<Var> p) {
  return std::make_unique<SGD>(std::move(p), 0.1);
}

// Runs A 3 steps, copies its state into B over copies of A's parameters, then
// steps both 3 more times; `transfer` moves the state from A to B.
template <class Transfer>
void check_resume(Factory make, Transfer transfer) {
  Problem prob(test_seed());
  auto a = make(prob.params);
  for (int s = 0; s < 3; ++s) {
    apply_grads(prob.params, prob.grads[s]);
    a->step();
  }
  std::vector<Var> copies = prob.copies();
  auto b = make(copies);
  transfer(*a, *b);
  CHECK(b->step_count() == 3);
  for (int s = 3; s < 6; ++s) {
    apply_grads(prob.params, prob.grads[s]);
    apply_grads(copies, prob.grads[s]);
    a->step();
    b->step();
  }
  for (size_t i = 0; i < copies.size(); ++i)
    CHECK(bitwise_equal(prob.params[i].data(), copies[i].data()));
  CHECK(b->step_count() == 6);
}

}  // namespace

TEST_CASE(
    "state_dict round trip: a fresh optimizer loaded with A's state continues bitwise like A") {
  for (Factory make :
       {make_adam, make_adamw, make_sgd_nesterov, make_sgd_dampened, make_sgd_plain}) {
    check_resume(make, [](Optimizer& a, Optimizer& b) {
      CAPTURE(a.name());
      b.load_state_dict(a.state_dict());
    });
  }
}

TEST_CASE("optimizer state survives a safetensors file round trip bitwise") {
  const std::string path =
      "/tmp/qkv_test_optim_state_" + std::to_string(::getpid()) + ".safetensors";
  for (Factory make : {make_adam, make_sgd_dampened}) {
    check_resume(make, [&](Optimizer& a, Optimizer& b) {
      write_safetensors(path, a.state_dict());
      b.load_state_dict(read_safetensors(path).tensors);
    });
  }
  std::remove(path.c_str());
}

TEST_CASE("Adam state_dict has step, param_steps, exp_avg.<i> and exp_avg_sq.<i>, as copies") {
  Problem prob(test_seed());
  Adam opt(prob.params);
  NamedTensors before = opt.state_dict();  // no step yet: counters only
  REQUIRE(before.size() == 2);
  CHECK(before[0].first == "step");
  CHECK(before[0].second.item() == 0);
  CHECK(before[1].first == "param_steps");
  CHECK(before[1].second.shape() == Shape{2});

  apply_grads(prob.params, prob.grads[0]);
  opt.step();
  opt.step();
  NamedTensors st = opt.state_dict();
  std::vector<std::string> names;
  for (const auto& [n, t] : st) names.push_back(n);
  CHECK(names == std::vector<std::string>{"step", "param_steps", "exp_avg.0", "exp_avg.1",
                                          "exp_avg_sq.0", "exp_avg_sq.1"});
  CHECK(find(st, "step")->item() == 2);
  CHECK(find(st, "exp_avg_sq.0")->shape() == Shape{2, 3});
  CHECK(find(st, "exp_avg.1")->shape() == Shape{4});
  // Copies: scribbling on the dict, or on a loaded optimizer, leaves the other alone.
  const std::vector<real> m0 = find(st, "exp_avg.0")->to_vector();
  std::vector<Var> copies = prob.copies();
  Adam other(copies);
  other.load_state_dict(st);
  const_cast<Tensor*>(find(st, "exp_avg.0"))->fill_(42);
  CHECK(find(opt.state_dict(), "exp_avg.0")->to_vector() == m0);
  CHECK(find(other.state_dict(), "exp_avg.0")->to_vector() == m0);
}

TEST_CASE("state_dict saved before the first step loads and clears the state") {
  Problem prob(test_seed());
  Adam fresh(prob.copies());
  Adam used(prob.params);
  apply_grads(prob.params, prob.grads[0]);
  used.step();
  used.load_state_dict(fresh.state_dict());
  CHECK(used.step_count() == 0);
  CHECK(used.state_dict().size() == 2);
}

TEST_CASE(
    "load_state_dict rejects a wrong parameter count, shapes, and missing, unknown or duplicate "
    "entries") {
  Problem prob(test_seed());
  Adam src(prob.params);
  apply_grads(prob.params, prob.grads[0]);
  src.step();
  const NamedTensors good = src.state_dict();

  // A target over the same shapes, already stepped twice: failures must leave it as it was.
  std::vector<Var> copies = prob.copies();
  Adam dst(copies);
  apply_grads(copies, prob.grads[1]);
  dst.step();
  dst.step();
  const NamedTensors dst_before = dst.state_dict();
  auto unchanged = [&] {
    const NamedTensors now = dst.state_dict();
    REQUIRE(now.size() == dst_before.size());
    for (size_t i = 0; i < now.size(); ++i)
      CHECK(bitwise_equal(now[i].second, dst_before[i].second));
    CHECK(dst.step_count() == 2);
  };

  SUBCASE("more parameters in the dict than in the optimizer") {
    Var only(prob.params[0].data().clone(), true);
    Adam one({only});
    CHECK_THROWS_WITH_AS(
        one.load_state_dict(good),
        doctest::Contains("Adam.load_state_dict: entry \"param_steps\": shape (2), "
                          "but this optimizer has 1 parameters"),
        Error);
  }
  SUBCASE("fewer parameters in the dict than in the optimizer") {
    std::vector<Var> three = prob.copies();
    three.emplace_back(Tensor::zeros({5}), true);
    Adam big(three);
    CHECK_THROWS_WITH_AS(big.load_state_dict(good), doctest::Contains("has 3 parameters"), Error);
  }
  SUBCASE("a buffer whose shape differs from its parameter's") {
    NamedTensors bad = good;
    for (auto& [n, t] : bad)
      if (n == "exp_avg_sq.0") t = Tensor::zeros({3, 2});
    CHECK_THROWS_WITH_AS(
        dst.load_state_dict(bad),
        doctest::Contains("entry \"exp_avg_sq.0\": shape (3,2) != parameter 0 shape (2,3)"), Error);
    unchanged();
  }
  SUBCASE("a missing buffer") {
    NamedTensors bad;
    for (const auto& e : good)
      if (e.first != "exp_avg.1") bad.push_back(e);
    CHECK_THROWS_WITH_AS(dst.load_state_dict(bad), doctest::Contains("missing entry \"exp_avg.1\""),
                         Error);
    unchanged();
  }
  SUBCASE("a missing step") {
    NamedTensors bad(good.begin() + 1, good.end());
    CHECK_THROWS_WITH_AS(dst.load_state_dict(bad), doctest::Contains("missing entry \"step\""),
                         Error);
    unchanged();
  }
  SUBCASE("an entry of another optimizer kind") {
    NamedTensors bad = good;
    bad.emplace_back("momentum.0", Tensor::zeros({2, 3}));
    CHECK_THROWS_WITH_AS(dst.load_state_dict(bad),
                         doctest::Contains("entry \"momentum.0\": unknown name"), Error);
    unchanged();
    // And Adam's state into SGD with momentum.
    SGD sgd(prob.copies(), 0.1, 0.9);
    CHECK_THROWS_WITH_AS(
        sgd.load_state_dict(good),
        doctest::Contains("SGD.load_state_dict: entry \"exp_avg.0\": unknown name"), Error);
  }
  SUBCASE("an index past the parameter count") {
    NamedTensors bad = good;
    bad.emplace_back("exp_avg.7", Tensor::zeros({2, 3}));
    CHECK_THROWS_WITH_AS(dst.load_state_dict(bad),
                         doctest::Contains("entry \"exp_avg.7\": parameter index 7 out of range"),
                         Error);
    unchanged();
  }
  SUBCASE("a duplicate entry") {
    NamedTensors bad = good;
    bad.push_back(good[3]);
    CHECK_THROWS_WITH_AS(dst.load_state_dict(bad), doctest::Contains("appears twice"), Error);
    unchanged();
  }
  SUBCASE("a step that is not a count") {
    NamedTensors bad = good;
    bad[0].second = Tensor::from_vector({1.5});
    CHECK_THROWS_WITH_AS(dst.load_state_dict(bad), doctest::Contains("entry \"step\""), Error);
    unchanged();
  }
}

TEST_CASE(
    "Adam and AdamW refuse a negative second moment on load, naming the entry, the index and the "
    "value, and change nothing") {
  // sqrt of a negative exp_avg_sq is NaN: one step with such a state turned
  // every parameter it touched to NaN.
  for (Factory make : {make_adam, make_adamw}) {
    Problem prob(test_seed());
    std::unique_ptr<Optimizer> src = make(prob.params);
    apply_grads(prob.params, prob.grads[0]);
    src->step();
    std::vector<Var> copies = prob.copies();
    std::unique_ptr<Optimizer> dst = make(copies);
    CAPTURE(dst->name());
    apply_grads(copies, prob.grads[1]);
    dst->step();
    const NamedTensors before = dst->state_dict();
    const std::vector<real> params_before = copies[0].data().to_vector();
    auto with = [&](const char* entry, int64_t index, real value) {
      NamedTensors st = src->state_dict();
      for (auto& [n, t] : st)
        if (n == entry) {
          t = t.clone();
          t.data()[index] = value;
        }
      return st;
    };
    const std::string opt = dst->name();
    CHECK(error_of([&] { dst->load_state_dict(with("exp_avg_sq.0", 5, real(-0.5))); }) ==
          opt +
              ".load_state_dict: entry \"exp_avg_sq.0\": holds -0.5 at index (1,2) of shape (2,3) "
              "(1 negative value in it); " +
              opt + "'s \"exp_avg_sq\" is never negative");
    CHECK(has(error_of([&] {
                dst->load_state_dict(
                    with("exp_avg_sq.1", 3, -std::numeric_limits<real>::infinity()));
              }),
              "entry \"exp_avg_sq.1\": holds -inf at index (3) of shape (4)"));
    // Nothing changed: the state and the parameters are as before.
    const NamedTensors now = dst->state_dict();
    REQUIRE(now.size() == before.size());
    for (size_t i = 0; i < now.size(); ++i) CHECK(bitwise_equal(now[i].second, before[i].second));
    CHECK(copies[0].data().to_vector() == params_before);
    // Controls: a negative first moment is an ordinary state, and -0 is not negative.
    CHECK_NOTHROW(dst->load_state_dict(with("exp_avg.0", 5, real(-0.5))));
    CHECK_NOTHROW(dst->load_state_dict(with("exp_avg_sq.0", 5, real(-0.0))));
    apply_grads(copies, prob.grads[2]);
    dst->step();
    for (const Var& p : copies)
      for (real v : p.data().to_vector()) CHECK(std::isfinite(v));
  }
}

TEST_CASE(
    "load_state_dict refuses a step count that is negative or not a whole number, in \"step\" and "
    "\"param_steps\"") {
  Problem prob(test_seed());
  Adam src(prob.params);
  apply_grads(prob.params, prob.grads[0]);
  src.step();
  std::vector<Var> copies = prob.copies();
  Adam dst(copies);
  for (real bad : {real(-1), real(2.5), std::numeric_limits<real>::quiet_NaN(),
                   std::numeric_limits<real>::infinity()}) {
    CAPTURE(bad);
    NamedTensors st = src.state_dict();
    st[0].second = Tensor::from_vector({bad});
    CHECK(has(error_of([&] { dst.load_state_dict(st); }),
              "Adam.load_state_dict: entry \"step\": expected a step count"));
    st = src.state_dict();
    st[1].second = Tensor::from_vector({1, bad});
    CHECK(has(error_of([&] { dst.load_state_dict(st); }),
              "Adam.load_state_dict: entry \"param_steps\": element 1 is not a step count"));
  }
  CHECK(dst.step_count() == 0);
  CHECK_NOTHROW(dst.load_state_dict(src.state_dict()));
  CHECK(dst.step_count() == 1);
}

// ---- bad arguments ------------------------------------------------------------------

TEST_CASE("optimizers reject empty, duplicate or non-leaf parameters and bad hyperparameters") {
  Var p = param({1, 2});
  CHECK_THROWS_WITH_AS(SGD({}, 0.1), doctest::Contains("SGD: got an empty parameter list"), Error);
  CHECK_THROWS_WITH_AS(Adam({p, p}), doctest::Contains("parameters 0 and 1 are the same Var"),
                       Error);
  Var nonleaf = p * real(2);
  CHECK_THROWS_WITH_AS(Adam({nonleaf}), doctest::Contains("is not a leaf"), Error);
  CHECK_THROWS_WITH_AS(SGD({p}, -0.1), doctest::Contains("SGD: lr must be finite and >= 0"), Error);
  CHECK_THROWS_WITH_AS(SGD({p}, 0.1, 0, 0, /*nesterov=*/true),
                       doctest::Contains("momentum must be > 0 with nesterov"), Error);
  CHECK_THROWS_WITH_AS(SGD({p}, 0.1, 0.9, 0, true, 0.1),
                       doctest::Contains("dampening must be 0 with nesterov"), Error);
  CHECK_THROWS_WITH_AS(Adam({p}, AdamOptions{0.1, 1.0, 0.999, 1e-8, 0}),
                       doctest::Contains("Adam: beta1 must be in [0, 1)"), Error);
  // One set of defaults however an AdamW is made (torch.optim.AdamW's weight decay 0.01).
  CHECK(AdamW({p}).options().weight_decay == AdamW({p}, AdamWOptions{}).options().weight_decay);
  CHECK(AdamW({p}).options().weight_decay == AdamW({p}, real(1e-3)).options().weight_decay);
  CHECK(AdamW({p}).options().weight_decay == doctest::Approx(0.01));
  CHECK_THROWS_WITH_AS(AdamW({p}, 0.1, 0.9, -0.5),
                       doctest::Contains("AdamW: beta2 must be in [0, 1)"), Error);
  CHECK_THROWS_WITH_AS(Adam({p}, 0.1, 0.9, 0.999, -1.0), doctest::Contains("eps"), Error);
  CHECK_THROWS_WITH_AS(AdamW({p}, 0.1, 0.9, 0.999, 1e-8, -0.01), doctest::Contains("weight_decay"),
                       Error);
}

TEST_CASE("step with a NaN lr or a gradient of the wrong shape throws and changes nothing") {
  Var a = param({1, 2}), b = param({3});
  Adam opt({a, b}, 0.1);
  set_grad(a, {1, 1});
  set_grad(b, {1});
  opt.lr = std::nanf("");
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("Adam: lr must be finite and >= 0"), Error);
  opt.lr = 0.1;
  b.impl()->grad = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(
      opt.step(),
      doctest::Contains("Adam.step: parameter 1 of shape (1) has a gradient of shape (2)"), Error);
  CHECK(a.data().to_vector() == std::vector<real>{1, 2});
  CHECK(opt.step_count() == 0);
}

// ---- clip_grad_norm ------------------------------------------------------------------

TEST_CASE("clip_grad_norm returns the pre-clip global norm and scales the grads to max_norm") {
  Var a = param({0, 0}), b = param({0}), none = param({0, 0, 0});
  set_grad(a, {3, 4});
  set_grad(b, {12});  // global norm sqrt(9 + 16 + 144) = 13; `none` has no grad
  const real norm = clip_grad_norm({a, b, none}, 6.5);
  CHECK(norm == doctest::Approx(13).epsilon(1e-7));
  // scale = 6.5 / (13 + 1e-6): a = [1.5, 2], b = [6]
  CHECK(a.grad().at({0}) == doctest::Approx(1.5).epsilon(1e-6));
  CHECK(a.grad().at({1}) == doctest::Approx(2).epsilon(1e-6));
  CHECK(b.grad().item() == doctest::Approx(6).epsilon(1e-6));
  CHECK_FALSE(none.grad().defined());
  // Clipping again measures the new norm: max_norm (within the 1e-6 guard), no further change.
  const std::vector<real> once = a.grad().to_vector();
  CHECK(clip_grad_norm({a, b, none}, 6.5) == doctest::Approx(6.5).epsilon(1e-6));
  CHECK(a.grad().to_vector() == once);
}

TEST_CASE("clip_grad_norm leaves grads below max_norm untouched") {
  Var a = param({0, 0});
  set_grad(a, {0.3, -0.4});
  const Tensor before = a.grad().clone();
  CHECK(clip_grad_norm({a}, 1) == doctest::Approx(0.5).epsilon(1e-7));
  CHECK(bitwise_equal(a.grad(), before));
}

TEST_CASE(
    "clip_grad_norm over a large gradient matches a double-precision sum and clips to max_norm") {
  const int64_t n = 5 * kParallelGrain + 3;
  Generator gen = test_generator();
  Var a(Tensor::zeros({n}), true);
  set_grad(a, Tensor::normal({n}, 0, 1, gen));
  double want = 0;
  for (real g : a.grad().to_vector()) want += double(g) * g;
  want = std::sqrt(want);
  const real norm = clip_grad_norm({a}, 2);
  CHECK(norm == doctest::Approx(want).epsilon(1e-6));
  double after = 0;
  for (real g : a.grad().to_vector()) after += double(g) * g;
  CHECK(std::sqrt(after) == doctest::Approx(2).epsilon(1e-5));
}

TEST_CASE(
    "clip_grad_norm returns a non-finite norm without touching the grads; bad max_norm throws") {
  Var a = param({0, 0});
  set_grad(a, {1, INFINITY});
  CHECK(std::isinf(clip_grad_norm({a}, 1)));
  CHECK(a.grad().at({0}) == 1);
  CHECK_THROWS_WITH_AS(clip_grad_norm({a}, 0),
                       doctest::Contains("clip_grad_norm: max_norm must be finite and > 0"), Error);
  CHECK_THROWS_WITH_AS(clip_grad_norm({a}, -1), doctest::Contains("max_norm"), Error);
}

TEST_CASE("a weight decay mask spares the parameters it marks false, in SGD, Adam and AdamW") {
  // Zero gradients: only the decay moves a parameter. SGD: p -= lr * wd * p;
  // AdamW: p *= 1 - lr * wd; Adam: g = wd * p, then the Adam step moves p by
  // about lr against its sign. The masked parameter must not move at all.
  for (int kind = 0; kind < 3; ++kind) {
    CAPTURE(kind);
    Var decayed = param({2, -4}), spared = param({2, -4});
    std::unique_ptr<Optimizer> opt;
    if (kind == 0) opt = std::make_unique<SGD>(std::vector<Var>{decayed, spared}, 0.1, 0, 0.5);
    if (kind == 1)
      opt = std::make_unique<Adam>(std::vector<Var>{decayed, spared}, 0.1, 0.9, 0.999, 1e-8, 0.5);
    if (kind == 2)
      opt = std::make_unique<AdamW>(std::vector<Var>{decayed, spared}, 0.1, 0.9, 0.999, 1e-8, 0.5);
    opt->set_weight_decay_mask({true, false});
    CHECK(opt->decays(0));
    CHECK_FALSE(opt->decays(1));
    for (Var* p : {&decayed, &spared}) set_grad(*p, {0, 0});
    opt->step();
    CHECK(spared.data().to_vector() == std::vector<real>{2, -4});
    const std::vector<real> d = decayed.data().to_vector();
    if (kind == 0) CHECK(d == std::vector<real>{real(2 - 0.1 * 0.5 * 2), real(-4 + 0.1 * 0.5 * 4)});
    if (kind == 1) {
      CHECK(d[0] == doctest::Approx(2 - 0.1).epsilon(1e-5));
      CHECK(d[1] == doctest::Approx(-4 + 0.1).epsilon(1e-5));
    }
    if (kind == 2)
      CHECK(d == std::vector<real>{real(2 * (1 - 0.1 * 0.5)), real(-4 * (1 - 0.1 * 0.5))});
  }
  Var a = param({1});
  SGD sgd({a}, 0.1);
  CHECK(error_of([&] {
          sgd.set_weight_decay_mask({true, false});
        }) == "SGD: a weight decay mask of 2 entries for 1 parameters");
}
