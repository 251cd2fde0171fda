// Data-parallel training (dist/distributed.h and the Trainer's hooks), the
// parts one process can check: how a batch is shared among ranks, and that the
// ranks' token-weighted losses give, summed, the gradient of the whole batch
// (what mpirun -np N computes, here done rank after rank). tests/cli/mpi_*.sh
// run the real thing under mpirun.
#include <doctest/doctest.h>

#include <cmath>

#include "trainer/trainer.h"
#include "dist/distributed.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;
using qkv::testing::test_seed;

TEST_CASE(
    "dist::share gives every row to exactly one rank, in order, shares differing by at most one") {
  for (int64_t n : {1, 2, 5, 7, 64}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      if (n < ranks) continue;
      int64_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < ranks; ++r) {
        const dist::Share s = dist::share(n, r, ranks);
        CHECK(s.begin == next);
        next = s.end;
        lo = std::min(lo, s.end - s.begin);
        hi = std::max(hi, s.end - s.begin);
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
      CHECK(lo >= 1);
    }
  }
  CHECK_THROWS_AS(dist::share(4, 2, 2), Error);
  CHECK_THROWS_AS(dist::share(4, 0, 0), Error);
}

TEST_CASE("one process is rank 0 of 1: sums are the value itself and no gradient is touched") {
  if (dist::built_with_mpi() && dist::size() > 1) return;  // only meaningful outside mpirun
  CHECK(dist::rank() == 0);
  CHECK(dist::size() == 1);
  CHECK(dist::sum(2.5) == 2.5);
  CHECK(dist::sum(int64_t(7)) == 7);
  CHECK(dist::all_equal("anything"));
  CHECK(dist::all_gather("x") == std::vector<std::string>{"x"});
  Var p(Tensor::from_vector({1, 2, 3}, {3}), true);
  p.impl()->grad = Tensor::from_vector({4, 5, 6}, {3});
  CHECK(dist::allreduce_gradients({p}) == 0);
  CHECK(p.grad().data()[1] == 5);
}

namespace {

// The gradients of every parameter, copied.
std::vector<Tensor> grads_of(nn::Module& m) {
  std::vector<Tensor> g;
  for (Var& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

// max |a - b| / (max |a| + tiny) over all tensors.
double relative_gap(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double gap = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i)
    for (int64_t k = 0; k < a[i].numel(); ++k) {
      gap = std::max(gap, double(std::fabs(a[i].data()[k] - b[i].data()[k])));
      scale = std::max(scale, double(std::fabs(a[i].data()[k])));
    }
  return gap / scale;
}

}  // namespace

TEST_CASE(
    "the ranks' losses weighted by local/global target tokens sum to the whole batch's loss and "
    "gradient") {
  // Sequences of different lengths, so the ranks hold different numbers of
  // target tokens: a plain average of the ranks' mean losses would be wrong.
  nn::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 9;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = test_seed(1);  // stream 0 is g's
  nn::Seq2SeqTransformer m(c);
  Generator g = test_generator();
  data::PairData data(data::TaskConfig{data::Task::Reverse, 6, 1, 7}, 10, g);
  const std::vector<data::Pair> batch = data.draw(7, g);

  auto loss_of = [&](const std::vector<data::Pair>& rows) {
    data::Batch b = data::collate_pairs(rows);
    return std::make_pair(
        nn::cross_entropy(m.forward(b.src, b.tgt_in), b.tgt_out, data::Vocab::kPad),
        b.target_tokens);
  };
  for (Var& p : m.parameters()) p.zero_grad();
  auto [whole, N] = loss_of(batch);
  whole.backward();
  const std::vector<Tensor> want = grads_of(m);
  const double want_loss = whole.item();

  for (int ranks : {2, 3}) {
    for (Var& p : m.parameters()) p.zero_grad();
    double total = 0;
    int64_t tokens = 0;
    for (int r = 0; r < ranks; ++r) {  // rank r's work; backward accumulates = the allreduce's sum
      const dist::Share s = dist::share(7, r, ranks);
      auto [mean, n] =
          loss_of(std::vector<data::Pair>(batch.begin() + s.begin, batch.begin() + s.end));
      Var share = train::detail::share_of_loss(mean, n, N);
      total += share.item();
      tokens += n;
      share.backward();
    }
    CAPTURE(ranks);
    CHECK(tokens == N);
    CHECK(total == doctest::Approx(want_loss).epsilon(1e-6));
    CHECK(relative_gap(grads_of(m), want) < 1e-5);
  }
}

TEST_CASE(
    "rows_of keeps a language-model batch's rows with their targets and counts their tokens") {
  data::TextData text(data::Seq{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, data::Seq{3, 4, 5, 6}, 3);
  Generator g = test_generator();
  const data::LMBatch b = text.draw(5, g);
  const data::LMBatch part = train::detail::rows_of(b, dist::share(5, 1, 2));  // rows 3, 4
  CHECK(part.ids.batch == 2);
  CHECK(part.ids.len == 3);
  CHECK(part.target_tokens == 6);
  for (int64_t k = 0; k < 6; ++k) {
    CHECK(part.ids.ids[k] == b.ids.ids[9 + k]);
    CHECK(part.targets[k] == b.targets[9 + k]);
  }
}
