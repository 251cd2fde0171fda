// The evaluation of a model that answers questions on a context (bert's
// --objective qa, the data source "squad"): every held-out question's
// windows read by the model, the best span over them mapped back to the
// context's text (trainer/qa_data.h), scored by SQuAD's exact match and F1
// (data/squad.h), with the teacher-forced span loss beside them. Judged by
// F1, as SQuAD's leaderboard is. Its row of the evaluation table
// (trainer/eval_kinds.h).
#include <cstdio>
#include <limits>
#include <string>

#include "trainer/eval_kinds.h"
#include "trainer/data_sources.h"
#include "trainer/token_kinds.h"
#include "trainer/qa_data.h"
#include "trainer/report.h"

namespace qkv::train {

namespace {

// The held-out windows `at` a time: their span logits (one forward, no
// graph) and the teacher-forced loss; each question answered once its last
// window is read (a question's windows are consecutive).
EvalResult evaluate_qa(Trainer& t) {
  const QaData& d = *t.qa;
  const PairSet& set = t.pairs->heldout();
  if (!t.family().answers.span_scores)
    throw Error("--objective qa: the " + t.cfg.model + " model answers no questions");
  EvalResult r;
  r.kind = &eval_kind(t);
  NoGradGuard no_grad;
  const bool was_training = t.model().is_training();
  t.model().eval();
  const int64_t at = std::max<int64_t>(1, t.cfg.batch);
  double loss = 0, f1 = 0;
  int64_t loss_rows = 0;
  std::vector<Pair> batch;
  std::vector<double> null_minus_span, span_f1, null_f1;  // v2: for the threshold
  // The current question's windows: their logits kept until it is answered.
  std::vector<int64_t> q_windows, q_lengths;
  std::vector<std::vector<real>> q_start, q_end;
  auto answer_question = [&]() {
    if (q_windows.empty()) return;
    std::vector<const real*> s, e;
    for (size_t k = 0; k < q_windows.size(); ++k) {
      s.push_back(q_start[k].data());
      e.push_back(q_end[k].data());
    }
    const QaAnswer a =
        qa_answer(d, q_windows, s, e, q_lengths, t.cfg.max_answer_tokens, /*null_margin*/ 0);
    const QaQuestion& q =
        d.questions[static_cast<size_t>(d.windows[size_t(q_windows[0])].question)];
    r.sequences++;
    r.exact += data::squad_exact(a.text, q.golds) == 1.0;
    f1 += data::squad_f1(a.text, q.golds);
    r.qa_answers.push_back(a.text);
    if (d.v2) {
      null_minus_span.push_back(a.null_score - a.score);
      span_f1.push_back(data::squad_f1(a.span, q.golds));
      null_f1.push_back(data::squad_f1("", q.golds));
    }
    q_windows.clear();
    q_lengths.clear();
    q_start.clear();
    q_end.clear();
  };
  for (size_t i = 0; i < set.size(); i += static_cast<size_t>(at)) {
    const size_t end = std::min(set.size(), i + static_cast<size_t>(at));
    set.batch(i, end, batch);
    const nn::TeacherForced f = t.model().forward_pairs(batch);
    loss += double(nn::cross_entropy(f.logits, f.targets, f.ignore_index).item()) *
            double(f.target_tokens);
    loss_rows += f.target_tokens;
    const Tensor& y = f.logits.data();  // (B, 2, T): the same logits span_scores gives
    const int64_t T = y.size(2);
    for (size_t k = i; k < end; ++k) {
      const QaWindowRef& w = d.windows[k];
      if (!q_windows.empty() && d.windows[size_t(q_windows[0])].question != w.question)
        answer_question();
      const real* row = y.data() + static_cast<int64_t>(k - i) * 2 * T;
      q_windows.push_back(static_cast<int64_t>(k));
      q_lengths.push_back(static_cast<int64_t>(batch[k - i].src.size()));
      q_start.emplace_back(row, row + T);
      q_end.emplace_back(row + T, row + 2 * T);
    }
  }
  answer_question();
  r.loss = loss_rows ? loss / double(loss_rows) : 0;
  r.f1 = r.sequences ? f1 / double(r.sequences) : 0;
  if (d.v2) {
    const QaNullChoice c = best_null_threshold(null_minus_span, span_f1, null_f1);
    r.qa_null_threshold = c.threshold;
    r.qa_null_f1 = c.f1;
  }
  r.tokens = loss_rows;
  r.unknown_tokens = t.unknown_heldout_tokens;
  if (was_training) t.model().train();
  return r;
}

std::string qa_line(const EvalResult& r) {
  return printed("exact match %.2f%%, F1 %.2f%%, span loss %.4f (%lld questions)",
                 100 * r.exact_acc(), 100 * r.f1, r.loss, (long long)r.sequences);
}

EvalResult qa_report(Trainer& t, const RunOptions& o) {
  t.phase = "held-out questions";
  const EvalResult r = t.evaluate();
  check_finite_result(r, "held-out evaluation");
  std::printf("\nheld-out (%lld questions, never trained on): %s\n", (long long)r.sequences,
              qa_line(r).c_str());
  const QaData& d = *t.qa;
  if (d.v2)
    std::printf(
        "  SQuAD v2: \"no answer\" when its score beats the best span's (threshold 0); with the "
        "threshold chosen on this split, %.3f, F1 %.2f%%\n",
        r.qa_null_threshold, 100 * r.qa_null_f1);
  for (size_t i = 0; i < std::min<size_t>(5, d.questions.size()); ++i) {
    const QaQuestion& q = d.questions[i];
    const std::string& got = r.qa_answers[i];
    const bool ok = data::squad_exact(got, q.golds) == 1.0;
    std::printf("  %-12s -> %-30s %s\n", brief(q.id).c_str(), ("\"" + brief(got) + "\"").c_str(),
                ok ? "ok" : ("want \"" + brief(q.golds.empty() ? "" : q.golds[0]) + "\"").c_str());
  }
  return r;
}

}  // namespace

QaPick qa_pick(Trainer& t, const std::string& question, const std::string& passage,
               const std::string& flag) {
  if (passage.empty())
    throw Error(flag + ": a question-answering model answers from a context: give it with " +
                "--passage FILE");
  const TokenKind& kind = run_token_kind(t.cfg);
  const TextFile f = detail::read_flag_file("--passage", passage, kMaxDataFileBytes);
  QaData d;
  QaContext c;
  c.text = f.text;
  const Seq ctx = kind.encode(t.vocab, c.text, nullptr);
  if (ctx.empty()) throw Error("--passage " + brief(passage) + ": no tokens in it");
  c.spans = kind.spans(t.vocab, c.text, ctx);
  d.contexts.push_back(std::move(c));
  d.questions.push_back({flag, 0, {}});
  const Seq q = kind.encode(t.vocab, question, nullptr);
  const int64_t window = t.model().max_positions();
  std::vector<data::QaWindow> ws;
  try {
    ws = data::qa_windows(q, ctx, window, std::min(t.cfg.doc_stride, window / 4), -1, -1,
                          Vocab::kBos, Vocab::kEos);
  } catch (const Error& e) {
    throw Error(flag + ": " + e.what());
  }
  std::vector<Seq> seqs;
  std::vector<int64_t> idx, lengths;
  for (const data::QaWindow& w : ws) {
    idx.push_back(static_cast<int64_t>(d.windows.size()));
    d.windows.push_back({0, w.context_first, w.offset});
    seqs.push_back(w.ids);
    lengths.push_back(static_cast<int64_t>(w.ids.size()));
  }
  const Tensor y = t.family().answers.span_scores(t.model(), seqs);  // (W, 2, T)
  const int64_t T = y.size(2);
  std::vector<const real*> s, e;
  for (size_t k = 0; k < seqs.size(); ++k) {
    s.push_back(y.data() + static_cast<int64_t>(k) * 2 * T);
    e.push_back(y.data() + static_cast<int64_t>(k) * 2 * T + T);
  }
  QaPick pick;
  pick.answer = qa_answer(d, idx, s, e, lengths, t.cfg.max_answer_tokens, 0);
  pick.windows = static_cast<int64_t>(ws.size());
  pick.window_tokens = window;
  // The window that holds the best span, and the span's positions in it.
  double best = -std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < seqs.size(); ++k) {
    std::vector<uint8_t> allowed = ws[k].allowed;
    const data::Span sp = data::best_span(s[k], e[k], allowed, t.cfg.max_answer_tokens);
    if (sp.score > best) {
      best = sp.score;
      pick.ids = seqs[k];
      pick.start = sp.start;
      pick.end = sp.end;
    }
  }
  return pick;
}

void ask_qa(Trainer& t, const std::string& question, const std::string& passage) {
  const QaPick p = qa_pick(t, question, passage, "--ask");
  std::printf("%s\n", data::utf8_or_replacement(p.answer.text).c_str());
  std::fprintf(stderr,
               "note: score %.3f (start + end logit; no answer: %.3f), %lld window%s of %lld "
               "tokens\n",
               p.answer.score, p.answer.null_score, (long long)p.windows, p.windows == 1 ? "" : "s",
               (long long)p.window_tokens);
}

EvalKind qa_eval() {
  EvalKind k;
  k.name = "qa";
  k.help = "questions answered by a span of their context: SQuAD's exact match and F1";
  k.takes = [](const Trainer& t) { return t.qa != nullptr; };
  k.line = qa_line;
  k.summary = [](const EvalResult& r) {
    return printed("held-out exact match: %.2f%%, F1: %.2f%%", 100 * r.exact_acc(), 100 * r.f1);
  };
  k.cells = [](const EvalResult& r) {
    // exact match in heldout_exact_acc; F1 is the run's metric (the lines, the plot)
    return EvalCells{std::to_string(r.exact_acc()), "", std::to_string(r.loss), "", ""};
  };
  k.judged_by = plots::EvalKind::Accuracy;
  k.metric = [](const EvalResult& r) { return r.f1; };
  k.evaluate = evaluate_qa;
  k.final_report = qa_report;
  return k;
}

}  // namespace qkv::train
