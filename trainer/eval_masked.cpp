// The evaluation of a model that learns made targets from text (bert's
// masked tokens, seq2seq's span corruption): the held-out targets, made the
// same way at every evaluation, scored by accuracy, loss and perplexity. Its
// row of the evaluation table (trainer/eval_kinds.h).
#include <cstdio>
#include <string>

#include "trainer/eval_kinds.h"
#include "trainer/report.h"

namespace qkv::train {

namespace {

EvalResult masked_report(Trainer& t, const RunOptions&) {
  t.phase = "final evaluation";
  EvalResult r = t.evaluate();
  check_finite_result(r, "held-out evaluation");
  std::printf(
      "\nheld-out %s accuracy %.2f%% (%lld tokens, made the same way at every check), loss "
      "%.4f, perplexity %.3f\n",
      r.made, 100 * r.token_acc(), (long long)r.tokens, r.loss, r.perplexity());
  return r;
}

}  // namespace

EvalKind masked_eval() {
  EvalKind k;
  k.name = "masked";
  k.help = "accuracy, loss and perplexity on the made targets of held-out text (mlm, span)";
  // Text another way than the next token (Family::objectives.text_pairs).
  k.takes = [](const Trainer& t) {
    return t.text != nullptr && t.family().objectives.text_pairs != nullptr;
  };
  k.line = [](const EvalResult& r) {
    return printed("%s accuracy %.2f%%, loss %.4f, perplexity %.3f", r.made, 100 * r.token_acc(),
                   r.loss, r.perplexity());
  };
  k.summary = [](const EvalResult& r) {
    return printed("held-out %s accuracy: %.2f%%, perplexity: %.3f", r.made, 100 * r.token_acc(),
                   r.perplexity());
  };
  k.cells = text_cells;
  k.judged_by = plots::EvalKind::Loss;
  k.metric = [](const EvalResult& r) { return r.loss; };
  k.final_report = masked_report;
  return k;
}

}  // namespace qkv::train
