// BERT's gradients in float64 (models/bert.h, docs/bert-backward.md): the
// masked loss, the classify head's pooler on position 0, the segment
// embeddings, the tied output layer and its bias, and a whole tiny Bert of
// each head, every parameter against finite differences. Bert has no fused
// op of its own: it is composed of nn:: layers (embedding, linear, norm,
// encoder) and autograd primitives (add, gelu, tanh, reshape), each proven
// in its own file; the one new composition, the gather of position 0 by the
// embedding op, is checked against the same gather as a matrix product.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "models/bert.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::test_generator;
using qkv::testing::test_seed;

namespace {

BertConfig tiny(const std::string& head) {
  BertConfig c;
  c.vocab = 9;
  c.max_positions = 8;
  c.classes = 3;
  c.head = head;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 12;
  c.dropout = 0;
  c.seed = test_seed();
  return c;
}

// "<s> 5 3 </s> 6 7 </s>" (a pair, [MASK] 3 at position 2) and "<s> 4 3 </s>", padded.
const std::vector<data::Seq> kSeqs = {{1, 5, 3, 2, 6, 7, 2}, {1, 4, 3, 2}};

void check(const GradcheckResult& r) {
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.max_abs_err < 1e-6);
}

// The loss of a whole Bert on kSeqs: mlm scored at positions 1, 2 and 5 of
// the first sequence and 2 of the second; classify labels 2 and 1.
Var bert_loss(Bert& m) {
  std::vector<data::Pair> pairs;
  if (m.mlm) {
    pairs = {{kSeqs[0], {0, 5, 4, 0, 0, 7, 0}}, {kSeqs[1], {0, 0, 8, 0}}};
  } else {
    pairs = {{kSeqs[0], {2}}, {kSeqs[1], {1}}};
  }
  TeacherForced f = m.forward_pairs(pairs);
  return cross_entropy(f.logits, f.targets, data::kPad);
}

}  // namespace

TEST_CASE(
    "masked loss (cross_entropy ignoring kPad): gradcheck of the logits, and exactly zero "
    "gradient rows at unchosen positions") {
  Generator g = test_generator();
  const int64_t B = 2, T = 5, V = 7;
  Var logits(Tensor::normal({B, T, V}, 0, 1, g), true);
  // chosen: (0,1), (0,4), (1,2); kPad elsewhere
  std::vector<int64_t> targets(B * T, data::kPad);
  targets[1] = 3;
  targets[4] = 6;
  targets[T + 2] = 5;
  check(gradcheck([&](const std::vector<Var>& in) { return cross_entropy(in[0], targets, 0); },
                  {logits}));
  logits.clear_grad();
  Var loss = cross_entropy(logits, targets, data::kPad);
  loss.backward();
  const Tensor& d = logits.grad();  // (B, T, V)
  for (int64_t r = 0; r < B * T; ++r) {
    double row = 0;
    for (int64_t v = 0; v < V; ++v) row += std::fabs(double(d.data()[r * V + v]));
    INFO("row " << r << " target " << targets[r]);
    if (targets[r] == data::kPad)
      CHECK(row == 0);  // exactly: unchosen positions carry no gradient
    else
      CHECK(row > 0);
  }
  // The mean over the 3 chosen rows: row r's gradient is (softmax(x_r) - onehot(y_r)) / 3.
  for (int64_t r : {int64_t(1), int64_t(4), T + 2}) {
    const real* x = logits.data().data() + r * V;
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(double(x[v]));
    for (int64_t v = 0; v < V; ++v) {
      const double want = (std::exp(double(x[v])) / z - (v == targets[r])) / 3;
      CHECK(double(d.data()[r * V + v]) == doctest::Approx(want).epsilon(1e-12));
    }
  }
}

TEST_CASE("Bert mlm: the gradient of the logits is zero at unchosen positions, end to end") {
  Bert m(tiny("mlm"));
  const Tokens t = data::right_padded(kSeqs);
  Var logits = m.forward(t);
  logits.retain_grad();
  const std::vector<int64_t> targets = {0, 5, 4, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 0};
  cross_entropy(logits, targets, data::kPad).backward();
  const Tensor& d = logits.grad();  // (2, 7, 9)
  for (int64_t r = 0; r < 14; ++r) {
    double row = 0;
    for (int64_t v = 0; v < 9; ++v) row += std::fabs(double(d.data()[r * 9 + v]));
    INFO("row " << r);
    CHECK((row == 0) == (targets[r] == data::kPad));
  }
}

TEST_CASE(
    "Bert classify head: gradcheck of the hidden states, pooler and classifier; only position 0 "
    "of each sequence gets a gradient") {
  Bert m(tiny("classify"));
  Generator g = test_generator();
  const int64_t B = 2, T = 4, D = 8;
  Var h(Tensor::normal({B, T, D}, 0, 1, g), true);
  std::vector<Var> inputs = {h, m.pooler->weight, m.pooler->bias, m.classifier->weight,
                             m.classifier->bias};
  check(gradcheck([&](const std::vector<Var>&) { return m.head(h); }, inputs));
  h.clear_grad();
  cross_entropy(m.head(h), {1, 2}).backward();
  const Tensor& dh = h.grad();  // (B, T, D)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double row = 0;
      for (int64_t j = 0; j < D; ++j) row += std::fabs(double(dh.data()[(b * T + t) * D + j]));
      INFO("b " << b << " t " << t);
      CHECK((row > 0) == (t == 0));
    }
}

TEST_CASE("the gather of position 0 by the embedding op equals the same gather as a matmul") {
  Generator g = test_generator();
  const int64_t B = 3, T = 4, D = 5;
  Var h(Tensor::normal({B, T, D}, 0, 1, g), true);
  Tensor e0 = Tensor::zeros({1, 1, T});  // (1,1,T): one-hot at position 0
  e0.data()[0] = 1;
  const Var select(e0);
  qkv::testing::check_fused_equals_composed(
      [&](const std::vector<Var>& in) {
        return embedding(reshape(in[0], {B * T, D}), {0, T, 2 * T}, {B});  // (B, D)
      },
      [&](const std::vector<Var>& in) {
        return reshape(matmul(select, in[0]), {B, D});  // (1,1,T) x (B,T,D) -> (B,1,D)
      },
      {h});
}

TEST_CASE(
    "Bert mlm head: gradcheck of the hidden states, the tied embedding, the output bias and the "
    "transform") {
  Bert m(tiny("mlm"));
  Generator g = test_generator();
  Var h(Tensor::normal({2, 3, 8}, 0, 1, g), true);
  std::vector<Var> inputs = {h,
                             m.embed->weight,
                             m.mlm->bias,
                             m.mlm->dense->weight,
                             m.mlm->dense->bias,
                             m.mlm->norm->weight,
                             m.mlm->norm->bias};
  check(gradcheck([&](const std::vector<Var>&) { return m.head(h); }, inputs));
}

TEST_CASE(
    "Bert segment embeddings: gradcheck, and a scatter-add by segment id (no gradient for a "
    "segment no position has)") {
  Bert m(tiny("mlm"));
  check(
      gradcheck([&](const std::vector<Var>&) { return bert_loss(m); }, {m.segment_embed->weight}));
  // Single texts only: segment 1's row gets exactly nothing.
  m.zero_grad();
  const Tokens t = data::right_padded({{1, 4, 5, 2}, {1, 6, 2}});
  Var logits = m.forward(t);
  cross_entropy(logits, {0, 4, 0, 0, 0, 6, 0, 0}, data::kPad).backward();
  const Tensor& d = m.segment_embed->weight.grad();  // (2, D)
  double row0 = 0, row1 = 0;
  for (int64_t j = 0; j < 8; ++j) {
    row0 += std::fabs(double(d.data()[j]));
    row1 += std::fabs(double(d.data()[8 + j]));
  }
  CHECK(row0 > 0);
  CHECK(row1 == 0);
}

TEST_CASE("whole Bert (1 layer, both heads) gradcheck of every parameter") {
  for (const char* head : {"mlm", "classify"}) {
    INFO(head);
    Bert m(tiny(head));
    const std::vector<Var> params = m.parameters();
    auto r = gradcheck([&](const std::vector<Var>&) { return bert_loss(m); }, params);
    check(r);
    CHECK(r.checked == m.num_parameters());  // every element of every parameter
    m.zero_grad();
    bert_loss(m).backward();
    for (auto& [name, v] : m.named_parameters()) {
      INFO(name);
      CHECK(v.grad().defined());
    }
  }
}

TEST_CASE(
    "Bert forward_chosen (the mlm head at the chosen positions only) equals forward_pairs: the "
    "loss and every parameter's gradient") {
  Bert m(tiny("mlm"));
  const std::vector<data::Pair> pairs = {{kSeqs[0], {0, 5, 4, 0, 0, 7, 0}},
                                         {kSeqs[1], {0, 0, 8, 0}}};
  qkv::testing::check_fused_equals_composed(
      [&](const std::vector<Var>&) {
        TeacherForced f = m.forward_chosen(pairs);
        return cross_entropy(f.logits, f.targets, data::kPad);
      },
      [&](const std::vector<Var>&) {
        TeacherForced f = m.forward_pairs(pairs);
        return cross_entropy(f.logits, f.targets, data::kPad);
      },
      m.parameters(), 1e-12);
}
