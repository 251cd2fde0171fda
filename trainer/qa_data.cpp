// The data source "squad" (--format squad, the default for a .json data
// file; bert's --objective qa): SQuAD v1.1 / v2.0 JSON (data/squad.h) read
// into windows of --context tokens (384 when 0, as Hugging Face's run_qa.py)
// that overlap by --doc-stride, each a pair "[CLS] question [SEP] context
// part [SEP]" -> {start, end}, the answer's token positions in it, or
// {0, 0} ([CLS]) when the window does not hold all of it. Held out: --valid,
// else a share of the paragraphs (a context's questions stay together).
// The tokens are the run's kind (bert's qa: bpe unless said), whose `spans`
// say where each context token is, so that answers map to bytes and back.
#include "trainer/qa_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "trainer/data_sources.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

namespace {

// Hugging Face's run_qa.py: max_seq_length 384 when --context leaves it open.
constexpr int64_t kQaDefaultWindow = 384;

struct QaEncoded {
  std::vector<data::Seq> contexts;  // per paragraph
  std::vector<std::vector<data::ByteSpan>> spans;
};

}  // namespace

QaAnswer qa_answer(const QaData& d, const std::vector<int64_t>& windows,
                   const std::vector<const real*>& start, const std::vector<const real*>& end,
                   const std::vector<int64_t>& lengths, int64_t max_answer_tokens,
                   double null_margin) {
  QaAnswer out;
  out.score = -std::numeric_limits<double>::infinity();
  out.null_score = std::numeric_limits<double>::infinity();
  int64_t best_w = -1;
  data::Span best;
  for (size_t k = 0; k < windows.size(); ++k) {
    const QaWindowRef& w = d.windows[static_cast<size_t>(windows[k])];
    std::vector<uint8_t> allowed(static_cast<size_t>(lengths[k]), 0);
    allowed[0] = 1;
    for (int64_t i = w.offset; i + 1 < lengths[k]; ++i) allowed[static_cast<size_t>(i)] = 1;
    out.null_score = std::min(out.null_score, double(start[k][0]) + double(end[k][0]));
    const data::Span s = data::best_span(start[k], end[k], allowed, max_answer_tokens);
    if (s.score > out.score) {
      out.score = s.score;
      best = s;
      best_w = windows[k];
    }
  }
  if (best_w < 0) return out;  // no position but [CLS]: no answer
  const QaWindowRef& w = d.windows[static_cast<size_t>(best_w)];
  const QaContext& c = d.contexts[static_cast<size_t>(d.questions[size_t(w.question)].paragraph)];
  const int64_t first = w.context_first + best.start - w.offset;
  const int64_t last = w.context_first + best.end - w.offset;
  const int64_t b = c.spans[static_cast<size_t>(first)].begin;
  const int64_t e = c.spans[static_cast<size_t>(last)].end;
  out.text = c.text.substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
  // A byte-level BPE token carries the space before a word (" fig"): the
  // answer is the words, as Hugging Face's offsets trim it.
  const size_t lead = out.text.find_first_not_of(" \t\r\n");
  const size_t tail = out.text.find_last_not_of(" \t\r\n");
  out.text = lead == std::string::npos ? "" : out.text.substr(lead, tail - lead + 1);
  out.span = out.text;
  if (d.v2 && out.null_score > out.score + null_margin) out.text.clear();  // no answer
  return out;
}

QaNullChoice best_null_threshold(const std::vector<double>& null_minus_span,
                                 const std::vector<double>& span_f1,
                                 const std::vector<double>& null_f1) {
  const size_t n = null_minus_span.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return null_minus_span[a] < null_minus_span[b]; });
  // Threshold below every difference: all "no answer"; then, difference by
  // difference in increasing order, one more question answered by its span.
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += null_f1[i];
  QaNullChoice best{order.empty() ? 0.0 : null_minus_span[order[0]] - 1, total};
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    total += span_f1[i] - null_f1[i];
    if (total > best.f1) best = {null_minus_span[i], total};
  }
  if (n) best.f1 /= double(n);
  return best;
}

namespace {

DataNeed read_squad(Trainer& t, const Vocab* given) {
  const TokenKind& kind = run_token_kind(t.cfg);
  if (!kind.spans)
    throw Error("--tokens " + brief(t.cfg.tokens) +
                ": question answering needs each token's place in the text, which this token "
                "kind does not say");
  TextFile f = detail::read_flag_file("--data", t.cfg.data, kMaxDataFileBytes);
  detail::check_data_memory(64.0 * double(f.text.size()), "--data " + brief(t.cfg.data),
                            std::to_string(f.text.size()) + " bytes of SQuAD JSON");
  data::SquadFile train = data::parse_squad(f.text, "--data " + brief(f.path));
  data::SquadFile valid;
  *t.data_info = {{"kind", "squad"}, {"data", detail::file_info(f)}};
  if (!t.cfg.valid.empty()) {
    TextFile v = detail::read_flag_file("--valid", t.cfg.valid, kMaxDataFileBytes);
    valid = data::parse_squad(v.text, "--valid " + brief(v.path));
    (*t.data_info)["valid"] = detail::file_info(v);
  } else {  // a share of the paragraphs, as pairs and labels split lines
    if (train.paragraphs.size() < 2)
      throw Error("--data " + brief(t.cfg.data) +
                  ": one paragraph cannot be split into training and held-out (give --valid)");
    const detail::HeldoutSplit split =
        detail::heldout_split(train.paragraphs.size(), t.cfg.seed, t.cfg.valid_fraction);
    data::SquadFile kept;
    for (size_t i = 0; i < split.order.size(); ++i) {
      data::SquadFile& to = i < split.n_valid ? valid : kept;
      to.paragraphs.push_back(std::move(train.paragraphs[split.order[i]]));
      to.questions += static_cast<int64_t>(to.paragraphs.back().questions.size());
    }
    kept.v2 = valid.v2 = train.v2;
    train = std::move(kept);
  }

  // The vocabulary: the given one, a BPE learned from the training contexts
  // and questions, or their characters or words.
  if (given) {
    t.vocab = *given;
  } else if (kind.learned) {
    std::string all;
    for (const data::SquadParagraph& p : train.paragraphs) {
      all += p.context + "\n";
      for (const data::SquadQuestion& q : p.questions) all += q.question + "\n";
    }
    t.vocab = vocab_of_bpe(all, t.family(), t.cfg, "its training contexts and questions");
  } else {
    std::set<std::string, std::less<>> distinct;
    auto add = [&](const std::string& s) {
      data::for_each_token(s, kind.split, [&](std::string_view tok) {
        if (distinct.size() <= static_cast<size_t>(t.cfg.max_vocab)) distinct.emplace(tok);
      });
    };
    for (const data::SquadParagraph& p : train.paragraphs) {
      add(p.context);
      for (const data::SquadQuestion& q : p.questions) add(q.question);
    }
    t.vocab = vocab_of_tokens(std::move(distinct), t.family(), t.cfg);
  }

  if (t.cfg.context == 0) t.cfg.context = kQaDefaultWindow;
  const int64_t window = t.cfg.context;
  auto qa = std::make_shared<QaData>();
  qa->v2 = train.v2 || valid.v2;
  // Every question's windows, as pairs; `held` also records them in `qa`.
  auto windows_of = [&](const data::SquadFile& file, const std::string& flag, bool held,
                        int64_t* unknown, std::vector<Pair>& out) {
    for (const data::SquadParagraph& p : file.paragraphs) {
      const data::Seq ctx = kind.encode(t.vocab, p.context, unknown);
      std::vector<data::ByteSpan> spans = kind.spans(t.vocab, p.context, ctx);
      if (ctx.empty())
        throw Error(flag + " " + brief(flag == "--valid" ? t.cfg.valid : t.cfg.data) +
                    ": question '" + brief(p.questions.front().id) +
                    "': its context has no tokens");
      const int64_t paragraph = static_cast<int64_t>(qa->contexts.size());
      if (held) qa->contexts.push_back({p.context, spans});
      for (const data::SquadQuestion& q : p.questions) {
        const data::Seq question = kind.encode(t.vocab, q.question, unknown);
        if (static_cast<int64_t>(question.size()) + 4 > window)
          throw Error(flag + ": question '" + brief(q.id) + "' has " +
                      std::to_string(question.size()) + " tokens: with [CLS], two [SEP] and a " +
                      "context token it does not fit in --context " + std::to_string(window));
        int64_t first = -1, last = -1;
        if (!q.answers.empty()) {
          const data::SquadAnswer& a = q.answers.front();
          std::tie(first, last) =
              data::tokens_of_bytes(spans, a.start, a.start + static_cast<int64_t>(a.text.size()));
          if (first < 0) ++qa->answers_cut;  // only white space: no token holds it
        }
        std::vector<data::QaWindow> ws;
        try {
          ws = data::qa_windows(question, ctx, window, t.cfg.doc_stride, first, last, Vocab::kBos,
                                Vocab::kEos);
        } catch (const Error& e) {  // a --doc-stride as long as the room left
          throw Error(flag + ": question '" + brief(q.id) + "': " + e.what());
        }
        const int64_t qi = static_cast<int64_t>(qa->questions.size());
        if (held) {
          QaQuestion hq;
          hq.id = q.id;
          hq.paragraph = paragraph;
          for (const data::SquadAnswer& a : q.answers) hq.golds.push_back(a.text);
          qa->questions.push_back(std::move(hq));
        } else {
          ++qa->train_questions;
        }
        for (const data::QaWindow& w : ws) {
          Pair pr;
          pr.src = w.ids;
          pr.tgt = {w.start, w.end};
          out.push_back(std::move(pr));
          if (held) qa->windows.push_back({qi, w.context_first, w.offset});
        }
      }
    }
  };
  std::vector<Pair> train_p, valid_p;
  int64_t unknown_train = 0;
  windows_of(train, "--data", false, &unknown_train, train_p);
  windows_of(valid, t.cfg.valid.empty() ? "--data" : "--valid", true, &t.unknown_heldout_tokens,
             valid_p);
  qa->train_windows = static_cast<int64_t>(train_p.size());
  t.data_notes.push_back(std::to_string(qa->train_questions) + " training questions in " +
                         std::to_string(train_p.size()) + " windows of " + std::to_string(window) +
                         " tokens (--doc-stride " + std::to_string(t.cfg.doc_stride) + "), " +
                         std::to_string(qa->questions.size()) + " held-out in " +
                         std::to_string(valid_p.size()) +
                         (qa->v2 ? "; SQuAD v2: questions without an answer point at [CLS]" : ""));
  if (qa->answers_cut > 0)
    t.data_notes.push_back(std::to_string(qa->answers_cut) +
                           " answers cover no token (white space alone): they point at [CLS]");
  t.pairs = std::make_unique<PairData>(std::move(train_p), std::move(valid_p));
  t.qa = std::move(qa);
  return {window, "--context"};
}

}  // namespace

DataSource squad_source() {
  DataSource s;
  s.name = "squad";
  s.help = "questions on a context and their answers' spans, SQuAD's JSON";
  s.format = "squad";
  s.extension = ".json";
  s.objective = "qa";
  s.read = read_squad;
  return s;
}

}  // namespace qkv::train
