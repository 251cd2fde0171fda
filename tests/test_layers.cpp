// The Transformer's building-block layers in float32: parity with PyTorch
// (tests/fixtures/layers.safetensors: ffn_relu, ffn_gelu, ce, ce_plain),
// errors on bad input, dropout statistics, and the position tables.
// LayerNorm's own tests are in test_layernorm.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/qkv_autograd.h"
#include "core/error.h"
#include "compare.h"
#include "fixture.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/feedforward.h"
#include "nn/layernorm.h"
#include "nn/positional.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::ids_of;

namespace {

// Runs `f`, expecting a qkv::Error whose message contains every one of `parts`.
template <class F>
void check_error(F&& f, std::initializer_list<const char*> parts) {
  std::string msg;
  try {
    f();
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  REQUIRE_FALSE(msg.empty());
  for (const char* p : parts) CHECK(msg.find(p) != std::string::npos);
}

void ffn_fixture_case(const std::string& c, nn::Activation act) {
  TensorFile f = load_fixture("layers.safetensors");
  nn::FeedForward ffn(8, 16, act);
  load_params(ffn, f, c + ".");
  Var x(f.get(c + ".in.x").clone(), true);
  Var y = ffn(x);
  check_close(y.data(), f.get(c + ".out.y"), c + " out.y");
  y.backward(f.get(c + ".in.upstream"));  // loss = sum(y * upstream)
  check_close(x.grad(), f.get(c + ".grad.x"), c + " grad.x");
  for (auto& [name, p] : ffn.named_parameters()) check_close(p.grad(), f.get(c + ".grad." + name), c + " grad." + name);
}

void ce_fixture_case(const std::string& c, int64_t ignore_index, real eps) {
  TensorFile f = load_fixture("layers.safetensors");
  Var logits(f.get(c + ".in.logits").clone(), true);
  Var loss = nn::cross_entropy(logits, ids_of(f.get(c + ".in.targets")), ignore_index, eps);
  check_close(loss.data().reshape({1}), f.get(c + ".out.loss"), c + " out.loss");
  loss.backward();
  check_close(logits.grad(), f.get(c + ".grad.logits"), c + " grad.logits");
}

}  // namespace

// ---- PyTorch parity ------------------------------------------------------------

TEST_CASE("FeedForward (ReLU) matches PyTorch: output and every gradient (fixture ffn_relu)") {
  ffn_fixture_case("ffn_relu", nn::Activation::ReLU);
}

TEST_CASE("FeedForward (exact GELU) matches PyTorch: output and every gradient (fixture ffn_gelu)") {
  ffn_fixture_case("ffn_gelu", nn::Activation::GELU);
}

TEST_CASE("cross_entropy with ignore_index 0 and smoothing 0.2 matches F.cross_entropy (fixture ce)") {
  ce_fixture_case("ce", 0, 0.2);
}

TEST_CASE("cross_entropy without smoothing or ignores matches F.cross_entropy (fixture ce_plain)") {
  ce_fixture_case("ce_plain", -100, 0);
}

// ---- errors ----------------------------------------------------------------------

TEST_CASE("feed_forward rejects mismatched input, weight and bias shapes, naming them") {
  nn::FeedForward ffn(4, 6);
  check_error([&] { ffn(Var(Tensor::zeros({2, 5}))); }, {"feed_forward", "(2,5)", "(6,4)"});
  Var x(Tensor::zeros({2, 4}));
  check_error([&] {
    nn::feed_forward(x, ffn.linear1->weight, ffn.linear1->bias, Var(Tensor::zeros({4, 5})),
                     ffn.linear2->bias);
  }, {"feed_forward", "(4,5)"});
  check_error([&] {
    nn::feed_forward(x, ffn.linear1->weight, Var(Tensor::zeros({4})), ffn.linear2->weight,
                     ffn.linear2->bias);
  }, {"feed_forward", "b1", "(4)"});
  check_error([] { nn::FeedForward bad(4, 0); }, {"FeedForward", "F 0"});
}

TEST_CASE("cross_entropy rejects a target outside [0, V), naming the op, the index and V") {
  Var logits(Tensor::zeros({3, 5}), true);
  check_error([&] { nn::cross_entropy(logits, {1, 7, 2}); },
              {"cross_entropy", "target 7", "index 1", "V = 5"});
  check_error([&] { nn::cross_entropy(logits, {1, 2, -1}); },
              {"cross_entropy", "target -1", "index 2", "V = 5"});
  check_error([&] { nn::cross_entropy(logits, {5, 0, 0}, /*ignore_index=*/0); },
              {"cross_entropy", "target 5", "index 0", "V = 5"});
}

TEST_CASE("cross_entropy rejects a wrong number of targets, 1-D logits and bad smoothing") {
  check_error([] { nn::cross_entropy(Var(Tensor::zeros({2, 3, 5})), {1, 2, 3}); },
              {"cross_entropy", "(2,3,5)", "6 rows", "3 targets"});
  check_error([] { nn::cross_entropy(Var(Tensor::zeros({5})), {1}); }, {"cross_entropy", "(5)"});
  check_error([] { nn::cross_entropy(Var(Tensor::zeros({2, 5})), {1, 2}, -100, 1.5); },
              {"cross_entropy", "label_smoothing", "1.5"});
}

TEST_CASE("embedding rejects an out-of-range or negative id, naming the id, its position and V") {
  Generator g(1);
  nn::Embedding emb(10, 4, g);
  check_error([&] { emb({1, 2, 3, 10}, {2, 2}); }, {"embedding", "id 10", "position 3", "V = 10"});
  check_error([&] { emb({1, -2, 3, 4}, {2, 2}); }, {"embedding", "id -2", "position 1", "V = 10"});
  check_error([&] { emb({1, 2, 3}, {2, 2}); }, {"embedding", "3 ids", "(2,2)"});
  check_error([] { nn::Embedding bad(0, 4); }, {"Embedding", "V 0"});
}

TEST_CASE("dropout rejects p outside [0, 1), naming p") {
  Var x(Tensor::ones({4}));
  Generator g(1);
  check_error([&] { nn::dropout(x, 1, g); }, {"dropout", "p must be in [0, 1)", "1"});
  check_error([&] { nn::dropout(x, -0.1, g); }, {"dropout", "-0.1"});
  check_error([&] { nn::Dropout bad(1.5, g); }, {"Dropout", "1.5"});
  check_error([&] { nn::dropout(x, std::nan(""), g); }, {"dropout", "nan"});
}

TEST_CASE("LearnedPositionalEmbedding rejects T > max_len, naming T and max_len") {
  Generator g(1);
  nn::LearnedPositionalEmbedding pos(5, 4, g);
  check_error([&] { pos(Var(Tensor::zeros({2, 7, 4}))); }, {"T = 7", "max_len = 5"});
  check_error([&] { pos(Var(Tensor::zeros({2, 3, 6}))); }, {"LearnedPositionalEmbedding", "(2,3,6)"});
}

TEST_CASE("SinusoidalPositionalEncoding rejects an input whose last dim is not D") {
  nn::SinusoidalPositionalEncoding pe(8);
  check_error([&] { pe(Var(Tensor::zeros({2, 3, 6}))); }, {"SinusoidalPositionalEncoding", "(2,3,6)", "D = 8"});
  check_error([&] { nn::add_positions(Var(Tensor::zeros({2, 6, 4})), Var(Tensor::zeros({5, 4}))); },
              {"add_positions", "(2,6,4)", "(5,4)"});
}

// ---- dropout --------------------------------------------------------------------------

TEST_CASE("dropout zeroes a fraction near p of 100k elements and preserves the mean") {
  const int64_t n = 100000;
  const real p = 0.3;
  Generator g(7);
  Var x(Tensor::ones({n}), true);
  Var y = nn::dropout(x, p, g);
  int64_t zeros = 0, kept_exact = 0;
  double total = 0;
  const real keep = 1 / (1 - p);
  for (real v : y.data().to_vector()) {
    zeros += v == 0;
    kept_exact += v == keep;
    total += v;
  }
  CHECK(zeros + kept_exact == n);  // every element is 0 or 1 / (1 - p)
  // binomial: sd of the fraction is sqrt(p (1 - p) / n) ~ 0.0014; 0.01 is 7 sd
  CHECK(std::abs(static_cast<double>(zeros) / n - p) < 0.01);
  CHECK(std::abs(total / n - 1.0) < 0.02);  // inverted dropout keeps E[y] = x
  // backward multiplies by the same mask: dx = dy * mask = y for x = 1, dy = 1
  y.backward(Tensor::ones({n}));
  CHECK(max_abs_diff(x.grad(), y.data()) == 0);
}

TEST_CASE("dropout: the same generator seed gives the same mask, another seed a different one") {
  Tensor base = Tensor::ones({1000});
  Generator g1(42), g2(42), g3(43);
  Tensor a = nn::dropout(Var(base), 0.5, g1).data();
  Tensor b = nn::dropout(Var(base), 0.5, g2).data();
  Tensor c = nn::dropout(Var(base), 0.5, g3).data();
  CHECK(max_abs_diff(a, b) == 0);
  CHECK(max_abs_diff(a, c) > 0);
  // the stream moves on: a second call from g1 draws a new mask
  CHECK(max_abs_diff(nn::dropout(Var(base), 0.5, g1).data(), a) > 0);
}

TEST_CASE("Dropout module drops in training and is the identity in eval and with p = 0") {
  Generator g(3);
  nn::Dropout drop(0.5, g);
  Var x(Tensor::ones({2000}), true);
  CHECK(drop.is_training());
  CHECK(max_abs_diff(drop(x).data(), x.data()) > 0);
  drop.eval();
  Var y = drop(x);
  CHECK(y.same_as(x));
  drop.train();
  nn::Dropout none(0, g);
  CHECK(none(x).same_as(x));
}

// ---- positions ---------------------------------------------------------------------

TEST_CASE("sinusoidal table: PE(0) = [0,1,0,1,...], PE(1,0) = sin(1), PE(1,1) = cos(1), PE(pos,2i) formula") {
  const int64_t D = 16;
  nn::SinusoidalPositionalEncoding pe(D, 32);
  Tensor t = pe.table(32);
  REQUIRE(t.shape() == Shape{32, D});
  for (int64_t j = 0; j < D; ++j) CHECK(t.at({0, j}) == (j % 2 == 0 ? 0 : 1));
  CHECK(t.at({1, 0}) == doctest::Approx(std::sin(1.0)).epsilon(1e-7));
  CHECK(t.at({1, 1}) == doctest::Approx(std::cos(1.0)).epsilon(1e-7));
  // pos 7, i = 3: angle 7 / 10000^(6/16)
  const double angle = 7 / std::pow(10000.0, 6.0 / 16);
  CHECK(t.at({7, 6}) == doctest::Approx(std::sin(angle)).epsilon(1e-7));
  CHECK(t.at({7, 7}) == doctest::Approx(std::cos(angle)).epsilon(1e-7));
  // the last pair has the lowest frequency 1 / 10000^(14/16)
  const double slow = 31 / std::pow(10000.0, 14.0 / 16);
  CHECK(t.at({31, 14}) == doctest::Approx(std::sin(slow)).epsilon(1e-7));
}

TEST_CASE("SinusoidalPositionalEncoding adds PE[:T] to every batch row, gradient passes to x unchanged") {
  nn::SinusoidalPositionalEncoding pe(6, 10);
  Generator g(2);
  Var x(Tensor::normal({3, 4, 6}, 0, 1, g), true);
  Var y = pe(x);
  Tensor t = pe.table(4);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t j = 0; j < 6; ++j) CHECK(y.data().at({b, s, j}) == x.data().at({b, s, j}) + t.at({s, j}));
  Tensor up = Tensor::normal({3, 4, 6}, 0, 1, g);
  y.backward(up);
  CHECK(max_abs_diff(x.grad(), up) == 0);
}

TEST_CASE("SinusoidalPositionalEncoding grows its table for a sequence longer than max_len") {
  nn::SinusoidalPositionalEncoding pe(8, 4);
  CHECK(pe.max_len() == 4);
  Var y = pe(Var(Tensor::zeros({1, 11, 8})));
  CHECK(pe.max_len() >= 11);
  // row 10 of the grown table is the formula's value; rows below are unchanged
  const double a = 10 / std::pow(10000.0, 2.0 / 8);
  CHECK(y.data().at({0, 10, 2}) == doctest::Approx(std::sin(a)).epsilon(1e-7));
  CHECK(y.data().at({0, 10, 3}) == doctest::Approx(std::cos(a)).epsilon(1e-7));
  CHECK(y.data().at({0, 1, 0}) == doctest::Approx(std::sin(1.0)).epsilon(1e-7));
  nn::SinusoidalPositionalEncoding fresh(8, 11);
  CHECK(max_abs_diff(pe.table(11), fresh.table(11)) == 0);
}

TEST_CASE("LearnedPositionalEmbedding adds weight[:T] and sends the batch-summed gradient to those rows") {
  Generator g(5);
  nn::LearnedPositionalEmbedding pos(6, 3, g);
  REQUIRE(pos.named_parameters().size() == 1);
  CHECK(pos.named_parameters()[0].first == "weight");
  Var x(Tensor::zeros({2, 4, 3}), true);
  Var y = pos(x);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t j = 0; j < 3; ++j) CHECK(y.data().at({b, t, j}) == pos.weight.data().at({t, j}));
  y.backward(Tensor::ones({2, 4, 3}));
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(pos.weight.grad().at({3, j}) == 2);  // two sequences used row 3
    CHECK(pos.weight.grad().at({4, j}) == 0);  // rows >= T unused
  }
}

TEST_CASE("Embedding: weight (V, D) drawn N(0, 1) like nn.Embedding; forward gives (B, T, D) rows") {
  Generator g(9);
  nn::Embedding emb(1000, 16, g);
  REQUIRE(emb.weight.shape() == Shape{1000, 16});
  CHECK(emb.named_parameters()[0].first == "weight");
  double s = 0, s2 = 0;
  for (real v : emb.weight.data().to_vector()) {
    s += v;
    s2 += double(v) * v;
  }
  const double n = 16000, m = s / n, sd = std::sqrt(s2 / n - m * m);
  CHECK(std::abs(m) < 0.03);        // sd of the mean ~0.008
  CHECK(std::abs(sd - 1) < 0.03);   // sd of the sd ~0.006
  Var y = emb({7, 0, 999, 7, 3, 5}, {2, 3});
  REQUIRE(y.shape() == Shape{2, 3, 16});
  for (int64_t j = 0; j < 16; ++j) {
    CHECK(y.data().at({0, 2, j}) == emb.weight.data().at({999, j}));
    CHECK(y.data().at({1, 0, j}) == emb.weight.data().at({7, j}));
  }
}

// ---- numerics and threading -------------------------------------------------------------

TEST_CASE("fused layers give the same results on 1 and 2 threads (row loops split across threads)") {
  const int prev = get_num_threads();
  Generator g(12);
  const int64_t N = 600, D = 96, V = 80;  // N*D and N*V above the parallel grain
  Tensor x = Tensor::normal({N, D}, 0, 1, g), gam = Tensor::normal({D}, 1, 0.3, g),
         bet = Tensor::normal({D}, 0, 0.3, g), up = Tensor::normal({N, D}, 0, 1, g);
  Tensor logits = Tensor::normal({N, V}, 0, 2, g);
  std::vector<int64_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = i % 7 == 0 ? -100 : g.randint(0, V);
  struct Out { Tensor y, dx, dg, db, loss, dl; };
  auto run = [&](int threads) {
    set_num_threads(threads);
    Var vx(x.clone(), true), vg(gam.clone(), true), vb(bet.clone(), true), vl(logits.clone(), true);
    Var y = nn::layer_norm(vx, vg, vb);
    y.backward(up);
    Var loss = nn::cross_entropy(vl, tg, -100, 0.1);
    loss.backward();
    return Out{y.data(), vx.grad(), vg.grad(), vb.grad(), loss.data(), vl.grad()};
  };
  Out one = run(1), two = run(2);
  set_num_threads(prev);
  CHECK(max_abs_diff(one.y, two.y) == 0);    // rows are independent
  CHECK(max_abs_diff(one.dx, two.dx) == 0);
  CHECK(allclose(one.dg, two.dg, 1e-5, 1e-5));  // column sums: only the order of adds differs
  CHECK(allclose(one.db, two.db, 1e-5, 1e-5));
  CHECK(one.loss.item() == two.loss.item());  // per-row losses summed in row order
  CHECK(max_abs_diff(one.dl, two.dl) == 0);
}
