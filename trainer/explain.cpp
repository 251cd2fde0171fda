#include "trainer/explain.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "explorer/page.h"
#include "explorer/program.h"
#include "explorer/trace.h"

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
}  // namespace

Seq explain_input(const Trainer& t, const std::string& text) {
  const bool words = t.cfg.data.empty() || t.cfg.tokens == "word";
  const std::vector<std::string> toks = data::split_tokens(text, words ? Split::Word : Split::Char);
  if (toks.empty()) throw Error("--explain: the text has no tokens");
  for (const std::string& tok : toks)
    if (t.vocab.find(tok) < 3)
      throw Error("--explain: the token '" + brief(tok, 40) +
                  "' is not in the model's vocabulary (its gradients would be those of <unk>)");
  return t.vocab.encode(toks);
}

void write_explanation(Trainer& t, const std::string& text, const std::string& html_path,
                       const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  const Seq src = explain_input(t, text);
  nn::Model& model = t.model();
  explorer::TraceOptions opt;
  opt.fd_every_element_up_to = kExplainEveryElement;
  std::function<Var()> loss_fn;
  std::string what;
  if (t.is_lm()) {
    if (src.size() < 2) throw Error("--explain: a language model needs at least two tokens");
    if (static_cast<int64_t>(src.size()) > t.cfg.context + 1)
      throw Error("--explain: the text has " + std::to_string(src.size()) +
                  " tokens; this model reads at most " + std::to_string(t.cfg.context + 1) +
                  " (its context and the token predicted after it)");
    data::LMBatch b;
    const int64_t T = static_cast<int64_t>(src.size()) - 1;
    b.ids = {Seq(src.begin(), src.end() - 1), 1, T, {T}};
    b.targets.assign(src.begin() + 1, src.end());
    b.target_tokens = T;
    const std::vector<std::string> seq = labels(t, b.ids.ids);
    opt.attention_tokens = [seq](const std::string&, int64_t, int64_t) {
      return explorer::AttentionAxes{seq, seq};
    };
    loss_fn = [&model, b] {
      const nn::TeacherForced f = model.forward_text(b);
      return nn::cross_entropy(f.logits, f.targets, Vocab::kPad);
    };
    what = "reads \"" + t.decode_text(src) + "\", each token predicting the next";
  } else {
    t.check_source_fits(src.size());
    const Seq answer = t.answer({src}).front();
    const std::vector<Pair> pair{{src, answer}};
    Seq tgt_in{Vocab::kBos};
    tgt_in.insert(tgt_in.end(), answer.begin(), answer.end());
    const std::vector<std::string> s = labels(t, src), y = labels(t, tgt_in);
    std::vector<std::string> seq = s;  // gpt on pairs: "source <s> answer"
    seq.insert(seq.end(), y.begin(), y.end());
    const bool one_sequence = t.family().one_sequence;
    opt.attention_tokens = [=](const std::string& module, int64_t, int64_t) {
      if (one_sequence) return explorer::AttentionAxes{seq, seq};
      if (module.find("cross_attn") != std::string::npos) return explorer::AttentionAxes{y, s};
      if (module.rfind("encoder", 0) == 0) return explorer::AttentionAxes{s, s};
      return explorer::AttentionAxes{y, y};
    };
    loss_fn = [&model, pair] {
      const nn::TeacherForced f = model.forward_pairs(pair);
      return nn::cross_entropy(f.logits, f.targets, Vocab::kPad);
    };
    what = t.family().explain_what(t.decode_text(src), t.decode_text(answer));
  }
  opt.title = t.cfg.model + " model, step " + std::to_string(t.step_count());
  opt.description = "The " + t.cfg.model + " model of " + command + " " + what +
                    ". Tensors of at most " + std::to_string(kExplainEveryElement) +
                    " numbers are checked element by element; larger ones at their 16 largest "
                    "gradients and 16 random elements.";
  model.eval();
  const explorer::Trace trace = explorer::record_trace(loss_fn, &model, opt);
  explorer::PageOptions page;
  page.title = "qkv gradient explorer: " + t.decode_text(src);
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
  if (trace.fd_failed)
    throw Error("--explain: " + std::to_string(trace.fd_failed) +
                " finite-difference checks failed");
}

}  // namespace qkv::train
