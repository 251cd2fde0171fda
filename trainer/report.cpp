// The trainer's reports: what it prints and draws (trainer/report.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "generation/decoding_methods.h"
#include "nn/ffn.h"
#include "trainer/eval_kinds.h"
#include "trainer/plots.h"
#include "trainer/report.h"

namespace qkv::train {

std::string label(const Trainer& t, int64_t id) {
  if (id == Vocab::kPad) return "_";
  const std::string& s = t.vocab.text(id);
  return s == " " ? "_" : s;
}

namespace {
// A float setting as typed (0.0001, not the float's 0.000100000005).
std::string short_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}
}  // namespace

void print_header(const Trainer& t, const RunOptions& o) {
  const TrainConfig& c = t.cfg;
  if (t.family().reads.images)
    std::printf("qkv train: images %s (%lldx%lld, %zu labels), held-out %zu, test %zu%s\n",
                c.data.c_str(), (long long)t.shape.rows, (long long)t.shape.cols, t.labels.size(),
                t.pairs ? t.pairs->heldout().size() : size_t{0}, t.test_set.size(),
                c.augment.empty() ? "" : (", training images augmented: " + c.augment).c_str());
  else if (c.data.empty())
    std::printf("qkv train: task %s, %lld symbols, lengths %lld..%lld, held-out %zu sequences\n",
                c.task.c_str(), (long long)c.vocab, (long long)c.min_len, (long long)c.max_len,
                t.pairs->heldout().size());
  else
    std::printf("qkv train: data %s (%s, %s tokens, vocabulary %lld%s%s), held-out %s\n",
                c.data.c_str(), c.format.c_str(), c.tokens.c_str(), (long long)t.vocab.size(),
                t.classifies() ? (", " + std::to_string(t.labels.size()) + " labels").c_str() : "",
                c.objective.empty() ? "" : (", objective " + c.objective).c_str(),
                t.text ? (std::to_string(t.text->heldout_tokens().size()) + " tokens" +
                          (t.text->by_lines()
                               ? " in " + std::to_string(t.text->heldout_sequences()) +
                                     " lines, one a sequence" +
                                     (c.group_by_length ? " (training batches of like length)" : "")
                               : ""))
                             .c_str()
                       : (std::to_string(t.pairs->heldout().size()) + " pairs").c_str());
  for (const std::string& note : t.data_notes) std::printf("note: %s\n", note.c_str());
  // The block's choices beside the paper's: the norm's kind, SwiGLU's hidden
  // width, no biases ("Pre-LN (rms), swiglu (hidden 176), no biases").
  const TrainConfig paper;
  const nn::Activation act = activation_of(c);
  const std::string norm = c.norm != paper.norm ? " (" + c.norm + ")" : "";
  const std::string block = c.activation +
                            (nn::ffn_hidden(act, c.d_ff) != c.d_ff
                                 ? " (hidden " + std::to_string(nn::ffn_hidden(act, c.d_ff)) + ")"
                                 : "") +
                            (c.no_bias ? ", no biases" : "");
  std::printf(
      "model: %s, d_model %lld, %lld heads%s, %s layers, d_ff %lld, %s%s, %s, %s positions%s, "
      "%lld parameters\n",
      c.model.c_str(), (long long)c.d_model, (long long)c.heads,
      ((c.d_k > 0 ? " (d_k " + std::to_string(c.d_k) + ")" : std::string()) +
       (c.kv_heads > 0 ? ", " + std::to_string(c.kv_heads) +
                             (c.kv_heads == 1 ? " key/value head" : " key/value heads")
                       : std::string()))
          .c_str(),
      layers_text(t.family(), c).c_str(), (long long)c.d_ff, c.pre_ln ? "Pre-LN" : "Post-LN",
      norm.c_str(), block.c_str(), c.positions.c_str(),
      (std::string(c.tie ? ", tied" : "") +
       (c.patch > 0 ? ", " + std::to_string(c.patch) + "x" + std::to_string(c.patch) + " patches"
                    : ""))
          .c_str(),
      (long long)t.model().num_parameters());
  if (c.experts > 0)  // a mixture of experts: what one token uses
    std::printf(
        "experts: %lld per FFN, %lld a token, capacity factor %.2f, aux loss %.3g; "
        "%lld parameters active per token\n",
        (long long)c.experts, (long long)c.experts_per_token, double(c.capacity_factor),
        double(c.aux_loss), (long long)t.model().active_parameters());
  const std::string optimizer = optim::find_optimizer(c.optimizer)->describe(optimizer_settings(c));
  std::string decay;
  if (c.weight_decay > 0)
    decay = ", weight decay " + short_number(c.weight_decay) + " on Linear weights";
  std::string floor;
  if (c.schedule == "cosine") floor = " to " + short_number(c.min_lr);
  std::printf(
      "training: batch %lld, up to %lld steps, %s%s, %s lr %.3g%s, warmup %lld, %d "
      "threads%s\n",
      (long long)c.batch, (long long)c.steps, optimizer.c_str(), decay.c_str(), c.schedule.c_str(),
      double(c.lr), floor.c_str(), (long long)c.warmup, get_num_threads(),
      !o.load_path.empty()   ? (", from step " + std::to_string(t.step_count())).c_str()
      : !o.init_from.empty() ? (", fine-tuning the weights of " + o.init_from).c_str()
                             : "");
  if (!o.init_from.empty()) {
    const nn::SharedLoad& s = t.init_shared;
    std::string fresh;
    for (const auto* list : {&s.fresh, &s.reshaped})
      for (const std::string& n : *list) fresh += (fresh.empty() ? "" : ", ") + n;
    std::printf("init-from: %zu tensors taken from %s by name and shape%s%s%s\n", s.loaded.size(),
                o.init_from.c_str(), fresh.empty() ? "" : "; fresh: ", fresh.c_str(),
                s.unused.empty()
                    ? ""
                    : (", unused: " + std::to_string(s.unused.size()) + " of the file's").c_str());
  }
  if (dist::size() > 1)
    std::printf(
        "data parallel: %d MPI ranks, each with %lld..%lld of the %lld sequences of a step\n",
        dist::size(), (long long)(c.batch / dist::size()),
        (long long)((c.batch + dist::size() - 1) / dist::size()), (long long)c.batch);
  if (matmul_precision() == MatmulPrecision::bf16)
    std::printf(
        "precision: bf16 matrix products (bfloat16 operands, float32 sums; weights, "
        "gradients and the checkpoint float32), %s\n",
        bf16_products_native()
            ? "on the CPU's AVX512-BF16 (vdpbf16ps)"
            : "emulated: this CPU (or this build) lacks AVX512-BF16, so the same "
              "numbers come slower than fp32's");
  if (t.unknown_heldout_tokens > 0)
    std::printf(
        "note: %lld held-out tokens are not in the training vocabulary; they read as <unk>\n",
        (long long)t.unknown_heldout_tokens);
  if (t.vocab.bpe() && t.text) {  // what the tokenizer learned, and what it makes of each part
    const Trainer::TokenizerInfo& k = t.tokenizer_info;
    std::printf(
        "tokenizer: byte-level BPE, %lld tokens (256 bytes + %zu merges) + %lld special, %s %.2f "
        "s; bytes per token: training %.3f (%lld bytes), held-out %.3f (%lld bytes)\n",
        (long long)t.vocab.bpe()->vocab_size(), t.vocab.bpe()->merges().size(),
        (long long)t.vocab.first_bpe_id(),
        k.learned ? "learned from the training bytes and encoded in"
                  : "from the checkpoint; encoded in",
        k.seconds, double(k.train_bytes) / double(std::max<int64_t>(1, k.train_tokens)),
        (long long)k.train_bytes,
        double(k.heldout_bytes) / double(std::max<int64_t>(1, k.heldout_tokens)),
        (long long)k.heldout_bytes);
  }
}

std::string eval_line(const EvalResult& r) { return r.kind->line(r); }

// Held-out results, a few examples and the length-generalisation check.
// --temperature, --top-k, --top-p as nn::SampleOptions (checked).
nn::SampleOptions sampling(const RunOptions& o) {
  nn::SampleOptions s;
  s.temperature = o.temperature;
  if (o.top_k > 0) s.top_k = o.top_k;
  s.top_p = o.top_p;
  try {
    nn::check_sample_options(s);
  } catch (const Error& e) {
    throw Error(std::string("--temperature / --top-k / --top-p: ") + e.what());
  }
  return s;
}

// A few continuations sampled from the start of held-out windows.
void print_samples(Trainer& t, const RunOptions& o) {
  const Seq& held = t.text->heldout_tokens();
  const int64_t prompt = std::max<int64_t>(1, std::min<int64_t>(16, t.cfg.context / 2)),
                n = std::min<int64_t>(o.max_new, 120);
  Generator gen(t.cfg.seed);
  std::printf("samples (temperature %g, top-p %g), each from a %lld-token held-out prompt:\n",
              o.temperature, o.top_p, (long long)prompt);
  for (int64_t k = 0; k < 3; ++k) {
    const size_t at = static_cast<size_t>(k) * held.size() / 3;
    if (at + static_cast<size_t>(prompt) > held.size()) break;
    const Seq p(held.begin() + static_cast<std::ptrdiff_t>(at),
                held.begin() + static_cast<std::ptrdiff_t>(at) + prompt);
    const Seq out = t.continue_text(p, n, sampling(o), gen);
    std::string text = data::utf8_or_replacement("[" + t.decode_text(p) + "]" + t.decode_text(out));
    for (char& c : text) c = c == '\n' ? ' ' : c;
    std::printf("  %s\n", text.c_str());
  }
}

// Held-out accuracy by one decoder, timed.
EvalResult timed_eval(Trainer& t, const std::string& method, const RunOptions& o, double* seconds) {
  const Trainer::Decoding keep = t.decoding;
  t.decoding = {method, o.beam, o.alpha, true};
  t.phase = "final evaluation (" + method + ")";
  const auto t0 = std::chrono::steady_clock::now();
  EvalResult r = t.evaluate();
  *seconds = detail::seconds_since(t0);
  t.decoding = keep;
  t.phase = "held-out evaluation";
  return r;
}

// --experts: the share of the kept assignments each expert received over
// this process's training steps, and the assignments dropped over capacity.
static void print_expert_summary(const Trainer& t) {
  if (t.experts.any()) std::printf("\n%s\n", t.experts.summary().c_str());
}

void check_long_lengths(const Trainer& t, const RunOptions& o) {
  const LengthRange len = parse_long_lengths(o.long_lengths);
  if (len.hi == 0) return;
  if (!t.pairs || t.pairs->from_file() || t.text || t.classifies())
    throw Error(
        "--long-lengths: sets the built-in task's longer set (--task, without --data); for "
        "pairs from a file, give --valid a file of longer pairs");
  // A source of B symbols, its answer of B and </s> must fit a learned table.
  const int64_t table = t.model().max_positions();
  const int64_t need = t.model().positions_to_answer(len.hi, len.hi + 1);
  if (table > 0 && need > table)
    throw Error("--long-lengths " + o.long_lengths + ": a sequence of " + std::to_string(len.hi) +
                " symbols and its answer need " + std::to_string(need) +
                " positions; this model's learned position table holds " + std::to_string(table) +
                " (train with --context " + std::to_string(need) + ")");
  t.check_source_fits(static_cast<size_t>(len.hi));
}

void check_finite_result(const EvalResult& r, const std::string& what) {
  if (std::isfinite(r.loss)) return;
  throw Error(what + ": the cross-entropy is " + (std::isnan(r.loss) ? "NaN" : "Inf") +
              ": the model's outputs are not finite (its weights are not finite, or too large "
              "for float32), so there is no accuracy or perplexity to report");
}

EvalResult final_report(Trainer& t, const RunOptions& o) {
  print_expert_summary(t);
  return eval_kind(t).final_report(t, o);
}

// The attention from the answer to the source (the encoder-decoder's
// cross-attention; no maps for a family without it): per layer (H, T, S)
// maps, the source and decoder-input labels.
struct AttentionPicture {
  std::vector<Tensor> maps;
  std::vector<std::string> src, tgt;
};
AttentionPicture attention_of(Trainer& t, const Seq& src, const Seq& answer) {
  AttentionPicture p;
  for (const Tensor& a : t.model().source_attention(src, answer))
    p.maps.push_back(a.reshape({a.size(1), a.size(2), a.size(3)}));
  for (int64_t tok : src) p.src.push_back(label(t, tok));
  p.tgt.push_back(label(t, Vocab::kBos));
  for (int64_t tok : answer) p.tgt.push_back(label(t, tok));
  return p;
}

void print_attention(const AttentionPicture& p) {
  if (p.maps.empty()) return;
  const Tensor& last = p.maps.back();
  const int64_t H = last.size(0), T = last.size(1), S = last.size(2);
  Tensor avg = Tensor::zeros({T, S});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t k = 0; k < T * S; ++k)
      avg.data()[k] += last.data()[h * T * S + k] / static_cast<real>(H);
  std::printf("cross-attention of the last decoder layer (mean over heads):\n%s",
              plots::ascii_heatmap(avg.data(), T, S, p.src, p.tgt).c_str());
}

// --ask: answer each line (the text, or stdin's lines for "-"); a language
// model continues the text instead.
int ask(Trainer& t, const RunOptions& o) {
  Generator gen(t.cfg.seed);
  auto one = [&](const std::string& line) {
    if (t.classifies()) {
      ask_classifier(t, line);
      if (o.show_attention)
        std::fprintf(stderr, "note: --show-attention: the %s model has no cross-attention%s\n",
                     t.model().kind(),
                     t.family().answers.class_attention
                         ? " (its run's class_attention.svg shows where "
                           "the class token looks)"
                         : "");
      return;
    }
    if (t.family().answers.token_probabilities && t.is_lm()) return ask_masked(t, line);
    if (t.family().answers.span_scores && t.cfg.objective == "qa")
      return ask_qa(t, line, o.passage);
    int64_t unknown = 0;
    const Seq src = t.encode_text(line, &unknown);
    if (src.empty()) return;
    if (t.continues_text() && static_cast<int64_t>(src.size()) > t.cfg.context)
      std::fprintf(stderr,
                   "note: the prompt has %zu tokens; the model sees its last %lld (its context)\n",
                   src.size(), (long long)t.cfg.context);
    if (!t.continues_text()) t.check_source_fits(src.size());
    const Seq out = t.continues_text() ? t.continue_text(src, o.max_new, sampling(o), gen)
                                       : t.answer({src}).front();
    // A BPE model's bytes need not be UTF-8 (a token may end inside a
    // character): bytes that are not print as U+FFFD.
    std::printf("%s\n", data::utf8_or_replacement(t.decode_text(out)).c_str());
    if (unknown)
      std::fprintf(stderr, "note: %lld input tokens are not in the vocabulary (read as <unk>)\n",
                   (long long)unknown);
    if (!o.show_attention) return;
    const AttentionPicture p = attention_of(t, src, out);
    if (p.maps.empty())  // gpt and encoder: no attention from an answer to a source
      std::fprintf(stderr, "note: --show-attention: the %s model has no cross-attention\n",
                   t.model().kind());
    print_attention(p);
  };
  // A BPE pattern PCRE2 gives up on, named with the text and its file's key.
  auto named = [&](const std::string& line) {
    try {
      one(line);
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.rfind(data::BPE::kPatternFailed, 0) != 0) throw;
      throw Error("--ask " + brief(line) + ": " + m + " (the pattern is metadata 'bpe' key " +
                  "'pattern' of " + brief(o.load_path) + ")");
    }
  };
  if (o.ask != "-") {
    named(o.ask);
    return 0;
  }
  for (std::string line; std::getline(std::cin, line);) named(line);
  return 0;
}

// Logs and plots, after the checkpoint. Each failure is reported; returns
// false if any happened.
bool write_plots(Trainer& t, const RunOptions& o, const History& h, const EvalResult& r,
                 std::vector<std::string>* written) {
  bool ok = true;
  auto attempt = [&](const char* what, auto&& f) {
    try {
      f();
      written->push_back(what);  // only what was written is reported as written
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error writing %s: %s\n", what, e.what());
      ok = false;
    }
  };
  const std::string name = run_name(t.cfg);
  if (!h.steps.empty())
    attempt("loss.svg", [&] {
      plots::write_loss_svg(o.out_dir + "/loss.svg", h.steps, h.losses, h.eval_steps, h.eval_accs,
                            "qkv: " + name + ", training loss and held-out " +
                                (r.kind->judged_by == plots::EvalKind::Loss ? "loss" : "accuracy"),
                            r.kind->judged_by);
    });
  if (!h.expert_shares.empty() && h.expert_shares.size() == h.steps.size())
    attempt("experts.svg", [&] {
      plots::write_shares_svg(o.out_dir + "/experts.svg", h.steps, h.expert_shares,
                              "qkv: " + name + ", share of the kept assignments per expert");
    });
  if (t.classifies())
    attempt("confusion.svg", [&] {
      write_confusion_svg(
          t, r, o.out_dir + "/confusion.svg",
          "qkv: " + name + ", held-out confusion: rows = true label, columns = answer");
    });
  if (t.classifies() && t.family().answers.class_attention)
    attempt("class_attention.svg", [&] {
      write_class_attention_svg(t, o.out_dir + "/class_attention.svg",
                                "qkv: " + name + ", where the class token looks, layer by layer");
    });
  AttentionPicture p;
  // (a run scored otherwise than by decoded answers, qa, has no predictions)
  if (t.pairs && !t.pairs->heldout().empty() && !t.classifies() && !r.predictions.empty())
    p = attention_of(t, t.pairs->heldout().at(0).src, r.predictions.at(0));
  if (!p.maps.empty())
    attempt("attention.svg", [&] {
      plots::write_attention_svg(
          o.out_dir + "/attention.svg", p.maps, p.src, p.tgt,
          "cross-attention, " + name + ": rows = decoder input, columns = source");
      std::printf("\n");
      print_attention(p);
    });
  return ok;
}

void print_first_attention(Trainer& t, const EvalResult& r) {
  if (!t.pairs || t.pairs->heldout().empty() || t.classifies() || r.predictions.empty()) return;
  const AttentionPicture p = attention_of(t, t.pairs->heldout().at(0).src, r.predictions.at(0));
  if (p.maps.empty()) return;
  std::printf("\n");
  print_attention(p);
}

std::string run_name(const TrainConfig& c) {
  return c.data.empty() ? c.task : std::filesystem::path(c.data).stem().string();
}

}  // namespace qkv::train
