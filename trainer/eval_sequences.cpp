// The evaluation of a model that answers pairs (a built-in task, --format
// tsv): exact-sequence and token accuracy, BLEU and the teacher-forced
// perplexity of its greedy answers (and beam search's beside them, for a
// model that can search), a few answers, and how it does on sequences longer
// than any trained on. Its row of the evaluation table (trainer/eval_kinds.h).
#include <cstdio>
#include <string>

#include "generation/decoding_methods.h"
#include "trainer/eval_kinds.h"
#include "trainer/report.h"

namespace qkv::train {

namespace {

// --long-lengths A-B: o.long_eval task sequences of each length, drawn from
// one generator (seed + 7, as the default set) length after length, each
// length's exact and token accuracy, BLEU and teacher-forced perplexity.
void print_long_lengths(Trainer& t, const RunOptions& o) {
  const LengthRange len = parse_long_lengths(o.long_lengths);
  Generator long_gen(t.cfg.seed + 7);
  std::printf(
      "length generalization (%lld sequences of each length %lld..%lld; trained on "
      "%lld..%lld):\n",
      (long long)o.long_eval, (long long)len.lo, (long long)len.hi, (long long)t.cfg.min_len,
      (long long)t.cfg.max_len);
  for (int64_t L = len.lo; L <= len.hi; ++L) {
    t.phase = "length generalization, length " + std::to_string(L);
    const EvalResult lr = t.evaluate(t.pairs->length_set(o.long_eval, L, L, long_gen));
    std::printf("  length %lld: %s\n", (long long)L, eval_line(lr).c_str());
  }
}

EvalResult sequences_report(Trainer& t, const RunOptions& o) {
  // Greedy, and (for the encoder-decoder) beam search beside it.
  double greedy_s = 0, beam_s = 0;
  const EvalResult greedy = timed_eval(t, "greedy", o, &greedy_s);
  check_finite_result(greedy, "held-out evaluation");
  std::printf("\nheld-out (%lld sequences, never trained on):\n", (long long)greedy.sequences);
  // Teacher-forced: the same for every decoder.
  std::printf("  per-token perplexity %.3f (cross-entropy %.4f, teacher-forced)\n",
              greedy.perplexity(), greedy.loss);
  std::printf(
      "  greedy:                 exact-sequence accuracy %6.2f%%, token accuracy %6.2f%%, BLEU "
      "%6.2f (%.2f s)\n",
      100 * greedy.exact_acc(), 100 * greedy.token_acc(), greedy.bleu, greedy_s);
  EvalResult r = greedy;
  if (nn::can_beam_search(t.model())) {
    const EvalResult beam = timed_eval(t, "beam", o, &beam_s);
    std::printf(
        "  beam %lld (alpha %.2g):     exact-sequence accuracy %6.2f%%, token accuracy %6.2f%%, "
        "BLEU %6.2f (%.2f s)\n",
        (long long)o.beam, o.alpha, 100 * beam.exact_acc(), 100 * beam.token_acc(), beam.bleu,
        beam_s);
    if (nn::decoding_method(o.decode, "--decode").needs_search) r = beam;
  }
  std::vector<Pair> held;  // the first 5 held-out pairs, shown with their answers
  t.pairs->heldout().batch(0, std::min<size_t>(5, t.pairs->heldout().size()), held);
  for (size_t i = 0; i < held.size(); ++i)
    std::printf("  %-24s -> %-24s %s\n", t.decode_text(held[i].src).c_str(),
                t.decode_text(r.predictions[i]).c_str(),
                r.predictions[i] == held[i].tgt
                    ? "ok"
                    : ("WRONG, want " + t.decode_text(held[i].tgt)).c_str());
  if (!o.long_lengths.empty()) {  // --long-lengths A-B: each length its own line
    print_long_lengths(t, o);
    return r;
  }
  // The longer set's sources and answers (and </s>) must fit a position table.
  const int64_t longest = t.cfg.max_len + 3, table = t.model().max_positions();
  const bool table_ok = table == 0 || t.model().positions_to_answer(longest, longest + 1) <= table;
  if (!t.pairs->from_file() && table_ok) {
    Generator long_gen(t.cfg.seed + 7);
    t.phase = "length generalization";
    const EvalResult lr = t.evaluate(t.pairs->longer_set(o.long_eval, 3, long_gen));
    std::printf(
        "length generalization (%lld sequences of length %lld..%lld, longer than any trained on): "
        "%s\n",
        (long long)lr.sequences, (long long)t.cfg.max_len + 1, (long long)t.cfg.max_len + 3,
        eval_line(lr).c_str());
  }
  return r;
}

}  // namespace

EvalKind sequences_eval() {
  EvalKind k;
  k.name = "sequences";
  k.help = "exact-sequence and token accuracy, BLEU and perplexity of the answers";
  k.line = [](const EvalResult& r) {
    return printed("exact %.2f%%, token %.2f%%, BLEU %.2f, perplexity %.3f", 100 * r.exact_acc(),
                   100 * r.token_acc(), r.bleu, r.perplexity());
  };
  k.summary = [](const EvalResult& r) {
    return printed("held-out exact-sequence accuracy: %.2f%%", 100 * r.exact_acc());
  };
  k.cells = answer_cells;
  k.judged_by = plots::EvalKind::Accuracy;
  k.metric = [](const EvalResult& r) { return r.exact_acc(); };
  k.final_report = sequences_report;
  return k;
}

}  // namespace qkv::train
