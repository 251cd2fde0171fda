// The evaluation of a language model (--format text, the next token): the
// held-out loss, perplexity and bits per byte, and a few continuations
// sampled from held-out prompts. Its row of the evaluation table
// (trainer/eval_kinds.h).
#include <cstdio>
#include <string>

#include "trainer/eval_kinds.h"
#include "trainer/report.h"

namespace qkv::train {

namespace {

EvalResult text_report(Trainer& t, const RunOptions& o) {
  t.phase = "final evaluation";
  EvalResult r = t.evaluate();
  check_finite_result(r, "held-out evaluation");
  std::printf(
      "\nheld-out (%lld tokens): loss %.4f, perplexity %.3f, %.4f bits per byte (%lld bytes)\n",
      (long long)r.tokens, r.loss, r.perplexity(), r.bits_per_byte, (long long)r.bytes);
  print_samples(t, o);
  return r;
}

}  // namespace

EvalKind text_eval() {
  EvalKind k;
  k.name = "text";
  k.help = "held-out loss, perplexity and bits per byte of the next token";
  // The next token (text another way is the masked kind's).
  k.takes = [](const Trainer& t) {
    return t.text != nullptr && t.family().objectives.text_pairs == nullptr;
  };
  k.line = [](const EvalResult& r) {
    return printed("loss %.4f, perplexity %.3f, %.4f bits per byte", r.loss, r.perplexity(),
                   r.bits_per_byte);
  };
  k.summary = [](const EvalResult& r) {
    return printed("held-out perplexity: %.3f, bits per byte: %.4f", r.perplexity(),
                   r.bits_per_byte);
  };
  k.cells = text_cells;
  k.judged_by = plots::EvalKind::Loss;
  k.metric = [](const EvalResult& r) { return r.loss; };
  k.final_report = text_report;
  return k;
}

}  // namespace qkv::train
