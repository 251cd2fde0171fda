// Question answering's head in float64 (nn/span_logits.h): span_logits'
// backward against finite differences, the fused op against the same maths
// composed from primitives (transpose, then a 0/1 mask and a -1e9 mask), the
// span loss (cross_entropy over the positions) through the head's linear
// layer against finite differences, and its gradient against the formula
// docs/qa-backward.md derives, (p - onehot) / 2B, computed here by hand.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/cross_entropy.h"
#include "nn/span_logits.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;

namespace {

// Two sequences of T = 6: "[CLS] q q [SEP] c c" and "[CLS] q [SEP] c c c":
// a span may start or end at [CLS] and at the context's tokens.
constexpr int64_t kSpanB = 2, kSpanT = 6, kSpanD = 3;
const std::vector<uint8_t> kSpanAllowed = {1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1};
// Start and end of each sequence, in the order of the logits' rows (b, c):
// sequence 0 answers with positions 4..5, sequence 1 with "none" ([CLS]).
const std::vector<int64_t> kSpanTargets = {4, 5, 0, 0};

Var span_leaf(const Shape& s, Generator& g, const char* name) {
  return Var(Tensor::normal(s, 0, 1, g), true).set_name(name);
}

// The masks of the composed version, (B, 2, T): keep (1 where allowed) and
// fill (kMaskedLogit where not).
Tensor span_mask(bool fill) {
  Tensor m = Tensor::empty({kSpanB, 2, kSpanT});
  for (int64_t b = 0; b < kSpanB; ++b)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t t = 0; t < kSpanT; ++t) {
        const bool on = kSpanAllowed[static_cast<size_t>(b * kSpanT + t)] != 0;
        m.data()[(b * 2 + c) * kSpanT + t] = fill ? (on ? 0 : nn::kMaskedLogit) : (on ? 1 : 0);
      }
  return m;
}

Var composed_span_logits(const Var& z) {
  return transpose(z, 1, 2) * Var(span_mask(false)) + Var(span_mask(true));
}

// The head and the loss: h (B, T, D) -> z = h W^T + b (B, T, 2) -> span_logits -> CE.
Var span_loss(const Var& h, const Var& w, const Var& b) {
  Var z = matmul(h, w, false, true) + b;
  return nn::cross_entropy(nn::span_logits(z, kSpanAllowed), kSpanTargets);
}

}  // namespace

// Through exp: the masked outputs (-1e9) then weigh exactly 0 in the
// checker's loss, which would otherwise carry constants of 1e9 that drown a
// finite difference of 1e-6 in rounding.
TEST_CASE("span_logits backward matches finite differences (through exp)") {
  Generator g = test_generator();
  Var z = span_leaf({kSpanB, kSpanT, 2}, g, "z");
  auto r = gradcheck(
      [](const std::vector<Var>& v) { return exp(nn::span_logits(v[0], kSpanAllowed)); }, {z});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == kSpanB * kSpanT * 2);
}

TEST_CASE("span_logits fused equals transpose, times a 0/1 mask, plus a -1e9 mask, composed") {
  Generator g = test_generator();
  Var z = span_leaf({kSpanB, kSpanT, 2}, g, "z");
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::span_logits(v[0], kSpanAllowed); },
      [](const std::vector<Var>& v) { return composed_span_logits(v[0]); }, {z});
}

TEST_CASE("the span loss through the head: finite differences for h, W and b") {
  Generator g = test_generator();
  Var h = span_leaf({kSpanB, kSpanT, kSpanD}, g, "h"), w = span_leaf({2, kSpanD}, g, "qa.weight"),
      b = span_leaf({2}, g, "qa.bias");
  auto r =
      gradcheck([](const std::vector<Var>& v) { return span_loss(v[0], v[1], v[2]); }, {h, w, b});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == kSpanB * kSpanT * kSpanD + 2 * kSpanD + 2);
}

TEST_CASE(
    "the span loss's gradient on z is (p - onehot) / 2B over allowed positions, 0 elsewhere") {
  Generator g = test_generator();
  Var z = span_leaf({kSpanB, kSpanT, 2}, g, "z");
  Var loss = nn::cross_entropy(nn::span_logits(z, kSpanAllowed), kSpanTargets);
  loss.backward();
  // By hand: for each (b, c) a softmax over the allowed t of z[b,t,c] alone.
  double expected_loss = 0;
  for (int64_t b = 0; b < kSpanB; ++b)
    for (int64_t c = 0; c < 2; ++c) {
      double top = -1e300, sum = 0;
      for (int64_t t = 0; t < kSpanT; ++t)
        if (kSpanAllowed[static_cast<size_t>(b * kSpanT + t)])
          top = std::fmax(top, double(z.data().data()[(b * kSpanT + t) * 2 + c]));
      for (int64_t t = 0; t < kSpanT; ++t)
        if (kSpanAllowed[static_cast<size_t>(b * kSpanT + t)])
          sum += std::exp(double(z.data().data()[(b * kSpanT + t) * 2 + c]) - top);
      const int64_t y = kSpanTargets[static_cast<size_t>(b * 2 + c)];
      expected_loss -= (double(z.data().data()[(b * kSpanT + y) * 2 + c]) - top - std::log(sum)) /
                       double(2 * kSpanB);
      for (int64_t t = 0; t < kSpanT; ++t) {
        const bool on = kSpanAllowed[static_cast<size_t>(b * kSpanT + t)] != 0;
        const double p =
            on ? std::exp(double(z.data().data()[(b * kSpanT + t) * 2 + c]) - top) / sum : 0.0;
        const double want = on ? (p - (t == y ? 1.0 : 0.0)) / double(2 * kSpanB) : 0.0;
        CHECK(double(z.grad().data()[(b * kSpanT + t) * 2 + c]) ==
              doctest::Approx(want).epsilon(1e-12));
      }
    }
  CHECK(double(loss.item()) == doctest::Approx(expected_loss).epsilon(1e-12));
}

TEST_CASE("span_logits refuses a shape without two logits and a mask of the wrong size") {
  Var z(Tensor::zeros({2, 6, 3}), true);
  CHECK_THROWS_WITH(nn::span_logits(z, kSpanAllowed),
                    doctest::Contains("span_logits: input (2,6,3): expected (B, T, 2)"));
  Var z2(Tensor::zeros({2, 5, 2}), true);
  CHECK_THROWS_WITH(nn::span_logits(z2, kSpanAllowed),
                    doctest::Contains("mask of 12: expected a mask of B*T = 10"));
}
