// Whole models in float64: every parameter tensor of a tiny model checked
// against finite differences through the loss, end to end.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "nn/cross_entropy.h"
#include "models/transformer.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::test_seed;

namespace {
void check_model(Module& model, const std::function<Var()>& loss_fn) {
  std::vector<Var> params = model.parameters();
  auto r = gradcheck([&](const std::vector<Var>&) { return loss_fn(); }, params);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.max_abs_err < 1e-6);
  CHECK(r.checked == model.num_parameters());  // every element of every parameter
  // Every parameter tensor took part (each got a gradient somewhere).
  loss_fn().backward();
  for (auto& [name, v] : model.named_parameters()) {
    INFO(name);
    CHECK(v.grad().defined());
  }
}
}  // namespace

TEST_CASE(
    "Seq2SeqTransformer (d_model 8, 2 heads, 1+1 layers) gradcheck of every parameter, with "
    "padding and smoothing") {
  for (bool pre_norm : {false, true}) {
    TransformerConfig c;
    c.src_vocab = 7;
    c.tgt_vocab = 6;
    c.d_model = 8;
    c.heads = 2;
    c.encoder_layers = 1;
    c.decoder_layers = 1;
    c.d_ff = 16;
    c.dropout = 0;
    c.pre_norm = pre_norm;
    c.tie_weights = pre_norm;
    c.activation = pre_norm ? Activation::GELU : Activation::ReLU;
    c.seed = test_seed();
    Seq2SeqTransformer m(c);
    Tokens src{{1, 4, 5, 2, 3, 6, 0, 0}, 2, 4, {4, 2}};
    Tokens tgt{{1, 3, 4, 1, 5, 0}, 2, 3, {3, 2}};
    std::vector<int64_t> target{3, 4, 2, 5, 2, 0};
    INFO("pre_norm " << pre_norm);
    check_model(m, [&] { return cross_entropy(m.forward(src, tgt), target, 0, real(0.1)); });
  }
}

TEST_CASE("GPT (2 layers) gradcheck of every parameter") {
  GPTConfig c;
  c.vocab = 9;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 16;
  c.max_positions = 8;
  c.seed = test_seed();
  GPT m(c);
  Tokens ids{{1, 2, 3, 4, 5, 6, 7, 0}, 2, 4, {4, 3}};
  std::vector<int64_t> target{2, 3, 4, 0, 6, 7, 0, 0};
  check_model(m, [&] { return cross_entropy(m.forward(ids), target, 0, 0); });
}

TEST_CASE("encoder-only model gradcheck of every parameter") {
  EncoderOnlyConfig c;
  c.vocab = 6;
  c.classes = 3;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = test_seed();
  EncoderOnlyModel m(c);
  Tokens ids{{1, 2, 3, 4, 5, 0}, 2, 3, {3, 2}};
  std::vector<int64_t> target{0, 1, 2, 1, 0, -100};
  check_model(m, [&] { return cross_entropy(m.forward(ids), target); });
}
