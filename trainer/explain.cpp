#include "trainer/explain.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "explorer/page.h"
#include "explorer/program.h"
#include "explorer/trace.h"
#include "trainer/report.h"
#include "trainer/token_kinds.h"

namespace qkv::train {

namespace {
std::string token_label(const Trainer& t, int64_t id) {
  if (id == Vocab::kPad) return "pad";
  if (id == Vocab::kBos) return "<s>";
  if (id == Vocab::kEos) return "</s>";
  const std::string& s = t.vocab.text(id);
  return s == " " ? "_" : s;
}
std::vector<std::string> labels(const Trainer& t, const Seq& ids) {
  std::vector<std::string> out;
  for (int64_t id : ids) out.push_back(token_label(t, id));
  return out;
}

// Refuses, before any work, a text whose trace would not fit in memory (a
// long text would otherwise end in std::bad_alloc minutes later). The trace
// keeps every value and every gradient of the graph, in qkv::real (float64:
// --explain runs in the float64 build), attention's P (H,T,S) of every
// attention layer among them, and writes each again as base64 into the JSON
// and the page. n: the text's tokens; T queries and S keys per attention
// (for the encoder-decoder, T the answer with <s>). Against peak RSS
// (/usr/bin/time -v) of train --explain on tests/cli/lib.bash's TINY reverse
// model (d_model 16, 2 heads, 1+1 layers, d_ff 32), 100, 200, 400 tokens:
// measured 27, 36, 57 MB; estimated 18, 43, 112 MiB (over where it matters:
// P has no gradient but is counted as if it had). 20,000 tokens: 134 GiB
// estimated; the run it refuses ended in std::bad_alloc at 9.3 GB.
void check_trace_fits(const Trainer& t, int64_t n, int64_t T, int64_t S) {
  const TrainConfig& c = t.cfg;
  const double L = double(c.layers), H = double(c.heads), W = double(std::max(c.d_model, c.d_ff));
  const double Td = double(T), Sd = double(S);
  // per layer, as the family counts them (the encoder-decoder: three maps)
  const double maps = attention_maps(t.family(), Td, Sd);
  const double numbers = L * H * maps + L * (Td + Sd) * 40 * W + 3 * Td * double(t.vocab.size());
  // value and gradient, each in memory and twice as base64 text (JSON, page)
  const double copies = 2 * (1 + 4.0 / 3 + 4.0 / 3);
  const double bytes = numbers * double(sizeof(real)) * copies;
  const double have = detail::physical_memory_bytes();
  if (bytes > 0.5 * have)
    throw Error("--explain: the text has " + std::to_string(n) +
                " tokens; its trace (every value and gradient, in " + explorer::precision_name() +
                ") needs about " + detail::gib(bytes) + ", more than half of this machine's " +
                detail::gib(have));
}
}  // namespace

Seq explain_input(const Trainer& t, const std::string& text) {
  if (text.find("<extra_id_") != std::string::npos && t.vocab.find("<extra_id_0>") >= 0) {
    const Seq ids = t.encode_text(text);  // span corruption's sentinels: tokens of their own
    if (ids.empty()) throw Error("--explain: the text has no tokens");
    return ids;
  }
  if (t.vocab.bpe()) {  // any bytes are BPE tokens (labelled in GPT-2's byte mapping)
    const Seq ids = t.vocab.encode_bytes(text);
    if (ids.empty()) throw Error("--explain: the text has no tokens");
    return ids;
  }
  const std::vector<std::string> toks = data::split_tokens(text, run_token_kind(t.cfg).split);
  if (toks.empty()) throw Error("--explain: the text has no tokens");
  for (const std::string& tok : toks)
    if (t.vocab.find(tok) < 3)
      throw Error("--explain: the token '" + brief(tok) +
                  "' is not in the model's vocabulary (its gradients would be those of <unk>)");
  return t.vocab.encode(toks);
}

void write_explanation(Trainer& t, const std::string& text, const std::string& html_path,
                       const std::string& command, const std::string& passage) {
  const auto start = std::chrono::steady_clock::now();
  nn::Model& model = t.model();
  explorer::TraceOptions opt;
  opt.fd_every_element_up_to = kExplainEveryElement;
  std::function<Var()> loss_fn;
  std::string what;
  const bool masked = t.is_lm() && t.family().answers.token_probabilities;  // bert's mlm
  // A question-answering model reads the question with the window of
  // --passage that holds its answer, scored on that answer (its start and end).
  const bool qa = t.family().answers.span_scores && t.cfg.objective == "qa";
  QaPick pick;
  if (qa) pick = qa_pick(t, text, passage, "--explain");
  // A classifier reads an image (vit) or "<s> text </s>" (bert); a masked
  // language model "<s> text with [MASK] </s>".
  const Seq src = qa               ? pick.ids
                  : t.classifies() ? classifier_input(t, text, "--explain")
                  : masked         ? masked_input(t, text, "--explain")
                                   : explain_input(t, text);
  if (qa) {
    const int64_t n = static_cast<int64_t>(src.size());
    check_trace_fits(t, n, n, n);
    const std::vector<Pair> pairs{{src, {pick.start, pick.end}}};
    const std::vector<std::string> seq = labels(t, src);
    opt.attention_tokens = [seq](const std::string&, int64_t, int64_t) {
      return explorer::AttentionAxes{seq, seq};
    };
    loss_fn = [&model, pairs] {
      const nn::TeacherForced f = model.forward_pairs(pairs);
      return nn::cross_entropy(f.logits, f.targets, f.ignore_index);
    };
    what = "reads the question \"" + text + "\" with the window of " + brief(passage) +
           " that holds its answer \"" + pick.answer.text + "\" (positions " +
           std::to_string(pick.start) + " to " + std::to_string(pick.end) +
           "), scored with the span loss on that answer: the start's and the end's "
           "cross-entropy over the context's positions";
  } else if (t.classifies() || masked) {
    const int64_t n = static_cast<int64_t>(src.size());
    check_trace_fits(t, n, n, n);
    // Scored against the model's own answer: its label, or its likeliest
    // token at each mask (the gradient then shows what made that guess).
    Pair pair{src, {}};
    std::string answer;
    if (t.classifies()) {
      pair.tgt = t.answer({src}).front();
      answer = t.labels.at(static_cast<size_t>(pair.tgt.at(0)));
    } else {
      const Tensor p = t.family().answers.token_probabilities(model, src);  // (T, V)
      const int64_t V = p.size(1), mask_id = t.shape.mask_id;
      pair.tgt.assign(src.size(), Vocab::kPad);
      for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] != mask_id) continue;
        const real* row = p.data() + static_cast<int64_t>(i) * V;
        pair.tgt[i] = std::max_element(row, row + V) - row;
        answer += (answer.empty() ? "" : " ") + t.decode_text({pair.tgt[i]});
      }
    }
    std::vector<std::string> seq;
    if (t.family().reads.images) {  // the class token, then the patches row by row
      const int64_t P = std::max<int64_t>(1, t.cfg.patch);
      seq.push_back("cls");
      for (int64_t r = 0; r < t.shape.rows / P; ++r)
        for (int64_t c = 0; c < t.shape.cols / P; ++c)
          seq.push_back(std::to_string(r) + "," + std::to_string(c));
    } else {
      seq = labels(t, src);
    }
    opt.attention_tokens = [seq](const std::string&, int64_t, int64_t) {
      return explorer::AttentionAxes{seq, seq};
    };
    const std::vector<Pair> pairs{pair};
    loss_fn = [&model, pairs] {
      const nn::TeacherForced f = model.forward_pairs(pairs);
      return nn::cross_entropy(f.logits, f.targets, f.ignore_index);
    };
    what = t.family().reads.images ? "labels the image " + text + " \"" + answer +
                                         "\", scored with cross-entropy on "
                                         "that label"
                                   : "reads \"" + text + "\" and answers \"" + answer +
                                         "\", scored with cross-entropy on that answer";
  } else if (t.continues_text()) {
    if (src.size() < 2) throw Error("--explain: a language model needs at least two tokens");
    if (static_cast<int64_t>(src.size()) > t.cfg.context + 1)
      throw Error("--explain: the text has " + std::to_string(src.size()) +
                  " tokens; this model reads at most " + std::to_string(t.cfg.context + 1) +
                  " (its context and the token predicted after it)");
    data::LMBatch b;
    const int64_t T = static_cast<int64_t>(src.size()) - 1;
    check_trace_fits(t, T + 1, T, T);
    b.ids = {Seq(src.begin(), src.end() - 1), 1, T, {T}};
    b.targets.assign(src.begin() + 1, src.end());
    b.target_tokens = T;
    const std::vector<std::string> seq = labels(t, b.ids.ids);
    opt.attention_tokens = [seq](const std::string&, int64_t, int64_t) {
      return explorer::AttentionAxes{seq, seq};
    };
    loss_fn = [&model, b] {
      const nn::TeacherForced f = model.forward_text(b);
      return nn::cross_entropy(f.logits, f.targets, f.ignore_index);
    };
    what = "reads \"" + t.decode_text(src) + "\", each token predicting the next";
  } else {
    t.check_source_fits(src.size());
    const int64_t n = static_cast<int64_t>(src.size());
    // The answer is not known yet: as long as the input, with <s> (or </s>).
    const auto [T, S] = attention_lengths(t.family(), n, n);
    check_trace_fits(t, n, T, S);
    const Seq answer = t.answer({src}).front();
    const std::vector<Pair> pair{{src, answer}};
    Seq tgt_in{Vocab::kBos};
    tgt_in.insert(tgt_in.end(), answer.begin(), answer.end());
    const std::vector<std::string> s = labels(t, src), y = labels(t, tgt_in);
    std::vector<std::string> seq = s;  // gpt on pairs: "source <s> answer"
    seq.insert(seq.end(), y.begin(), y.end());
    const bool one_sequence = t.family().reads.one_sequence;
    opt.attention_tokens = [=](const std::string& module, int64_t, int64_t) {
      if (one_sequence) return explorer::AttentionAxes{seq, seq};
      if (module.find("cross_attn") != std::string::npos) return explorer::AttentionAxes{y, s};
      if (module.rfind("encoder", 0) == 0) return explorer::AttentionAxes{s, s};
      return explorer::AttentionAxes{y, y};
    };
    loss_fn = [&model, pair] {
      const nn::TeacherForced f = model.forward_pairs(pair);
      return nn::cross_entropy(f.logits, f.targets, f.ignore_index);
    };
    what = t.family().reports.explain_what(t.decode_text(src), t.decode_text(answer));
  }
  opt.title = t.cfg.model + " model, step " + std::to_string(t.step_count());
  opt.description = "The " + t.cfg.model + " model of " + command + " " + what +
                    ". Tensors of at most " + std::to_string(kExplainEveryElement) +
                    " numbers are checked element by element; larger ones at their 16 largest "
                    "gradients and 16 random elements.";
  model.eval();
  const explorer::Trace trace = explorer::record_trace(loss_fn, &model, opt);
  explorer::PageOptions page;
  page.title = "qkv gradient explorer: " + (t.family().reads.images ? text : t.decode_text(src));
  page.command = command;
  page.docs_base = explorer::docs_url_beside_build();
  explorer::write_page({trace}, html_path, page);
  std::error_code ec;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "wrote %s (%.0f KB in %.2f s; every number in %s): %zu ops, %lld finite-difference "
      "checks, %lld fail, largest relative error %.1e\n",
      html_path.c_str(), double(std::filesystem::file_size(html_path, ec)) / 1024.0, secs,
      explorer::precision_name(), trace.ops, (long long)trace.fd_checked,
      (long long)trace.fd_failed, trace.fd_max_rel_err);
  if (trace.fd_retried)
    std::printf(
        "  %lld of them passed at a smaller step than h = %g: a kink (a ReLU's input near 0) lay "
        "within h; the page shows the step of each check\n",
        (long long)trace.fd_retried, opt.fd_step);
  if (trace.fd_failed)
    throw Error("--explain: " + std::to_string(trace.fd_failed) +
                " finite-difference checks failed (the page shows them in red: " + html_path + ")");
}

}  // namespace qkv::train
