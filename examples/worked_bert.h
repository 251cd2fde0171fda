// BERT's masked loss, worked (examples/worked_example.cpp,
// docs/bert-backward.md): the 80/10/10 rule as qkv implements it
// (data::mask_for_mlm) on one short row with a fixed seed, by the library and
// by hand (the same draws from the same Generator, the rule in plain code);
// then the loss over the chosen positions of fixed logits, and its gradient
// by the engine (nn::cross_entropy ignoring kPad), by hand (softmax minus
// one-hot over M, in double) and by finite differences of the by-hand loss.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "data/mlm.h"
#include "examples/by_hand.h"
#include "nn/cross_entropy.h"

namespace qkv::step {

// A vocabulary of 7: 0 <pad>, 1 <s>, 2 </s>, 3 [MASK], and the words 4, 5, 6.
// Rate 0.5, not qkv's default 0.15: of this row's 6 words, round(0.5 x 6) = 3
// are chosen (0.15 would choose max(1, round(0.9)) = 1), and seed 98 gives
// one of each outcome.
inline constexpr int64_t kMlmVocab = 7, kMlmMask = 3, kMlmFirstWord = 4;
inline constexpr double kMlmRate = 0.5;
inline constexpr uint64_t kMlmSeed = 98;

inline data::Seq mlm_row() { return {1, 4, 6, 5, 6, 4, 5, 2}; }

inline data::MlmOptions mlm_options() {
  data::MlmOptions o;
  o.rate = kMlmRate;
  o.mask_id = kMlmMask;
  o.first_random_id = kMlmFirstWord;
  o.vocab = kMlmVocab;
  return o;
}

// By hand: the rule of data/mlm.h, one draw at a time. The n choosable
// positions (a word, not [MASK]) in order; k = max(1, round(rate n)) of them
// by the first k steps of a Fisher-Yates shuffle (step j swaps place j with
// a uniform place in [j, n)); then one uniform u per chosen position:
// u < 0.8 [MASK], u < 0.9 a random word from [4, V), else unchanged.
struct MlmDraw {
  int64_t position = 0;
  double u = 0;
  int64_t becomes = 0;  // the masked id
};

struct MlmByHand {
  data::Seq src, tgt;  // the masked row; the targets (kPad where not chosen)
  std::vector<int64_t> choosable;
  std::vector<MlmDraw> draws;  // in draw order
};

inline MlmByHand mlm_by_hand(const data::Seq& ids, uint64_t seed) {
  Generator g(seed);
  MlmByHand h{ids, data::Seq(ids.size(), data::kPad), {}, {}};
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= kMlmFirstWord && ids[i] != kMlmMask)
      h.choosable.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> places = h.choosable;
  const int64_t n = static_cast<int64_t>(places.size());
  const int64_t k = std::max<int64_t>(1, std::llround(kMlmRate * double(n)));
  for (int64_t j = 0; j < k; ++j) {
    std::swap(places[j], places[g.randint(j, n)]);
    MlmDraw d;
    d.position = places[j];
    d.u = g.uniform();
    const int64_t id = ids[d.position];
    d.becomes = d.u < 0.8 ? kMlmMask : d.u < 0.9 ? g.randint(kMlmFirstWord, kMlmVocab) : id;
    h.src[d.position] = d.becomes;
    h.tgt[d.position] = id;
    h.draws.push_back(d);
  }
  return h;
}

// The model's output: fixed logits (T, V), logits[t, v] = sin(t + 2v), as a
// model's last layer might give them. The loss is the mean over the M chosen
// rows c of -log softmax(logits_c)[y_c]; rows whose target is kPad are in no term.
inline Mat mlm_logits() {
  Mat l(static_cast<int64_t>(mlm_row().size()), kMlmVocab);
  for (int64_t t = 0; t < l.rows; ++t)
    for (int64_t v = 0; v < l.cols; ++v) l(t, v) = std::sin(double(t + 2 * v));
  return l;
}

// By hand: p = softmax of each row, loss = (1/M) sum_c -log p_c[y_c],
// dlogits_c = (p_c - onehot(y_c)) / M on a chosen row, 0 on the others.
struct MlmLossByHand {
  Mat P, dlogits;  // (T,V)
  double loss = 0;
  int64_t M = 0;
};

inline MlmLossByHand mlm_loss_by_hand(const Mat& logits, const data::Seq& tgt) {
  MlmLossByHand r;
  r.P = hand::softmax(logits);
  r.dlogits = Mat(logits.rows, logits.cols);
  for (int64_t y : tgt) r.M += y != data::kPad;
  for (int64_t t = 0; t < logits.rows; ++t) {
    if (tgt[t] == data::kPad) continue;  // not chosen: no term, no gradient
    r.loss -= std::log(r.P(t, tgt[t])) / r.M;
    for (int64_t v = 0; v < logits.cols; ++v)
      r.dlogits(t, v) = (r.P(t, v) - (v == tgt[t] ? 1.0 : 0.0)) / r.M;
  }
  return r;
}

// The engine: the library's masking, then nn::cross_entropy(logits, tgt, kPad).
struct MlmPass {
  data::Pair masked;
  double loss = 0;
  Mat dlogits;  // (T,V)
};

inline MlmPass mlm_pass() {
  Generator g(kMlmSeed);
  MlmPass p;
  p.masked = data::mask_for_mlm(mlm_row(), mlm_options(), g);
  Var logits(tensor_of(mlm_logits()), true);
  Var loss = nn::cross_entropy(logits, p.masked.tgt, data::kPad);
  loss.backward();
  p.loss = loss.data().data()[0];
  p.dlogits = to_mat(logits.grad());
  return p;
}

inline Mat mlm_fd(const data::Seq& tgt) {
  return hand::central_difference([&](const Mat& l) { return mlm_loss_by_hand(l, tgt).loss; },
                                  mlm_logits());
}

}  // namespace qkv::step
