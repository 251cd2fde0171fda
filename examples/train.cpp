// qkv's main job: train an encoder-decoder Transformer on a toy task (copy,
// reverse, sort), watch the loss fall, then decode a held-out set greedily.
//
//   build/rel-f32/train --task reverse            (what `make demo` runs)
//   build/rel-f32/train --help
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "examples/plots.h"
#include "examples/trainer.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

namespace {

std::string symbol_label(int64_t tok) {
  if (tok == tasks::kPad) return "_";
  if (tok == tasks::kBos) return "<s>";
  if (tok == tasks::kEos) return "</s>";
  const int64_t k = tok - tasks::kFirstSymbol;
  return k < 26 ? std::string(1, static_cast<char>('a' + k)) : std::to_string(k);
}

std::string seq_string(const std::vector<int64_t>& s) {
  std::string o;
  for (int64_t t : s) o += (o.empty() ? "" : " ") + symbol_label(t);
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void progress_bar(int64_t step, int64_t total, real loss, real lr, double tok_s, double eta) {
  const int width = 24;
  const int fill = static_cast<int>(width * step / std::max<int64_t>(total, 1));
  std::printf("\r[%s%s] %lld/%lld loss %.4f lr %.1e %5.1fk tok/s eta %3.0fs ", std::string(fill, '#').c_str(),
              std::string(width - fill, ' ').c_str(), static_cast<long long>(step),
              static_cast<long long>(total), static_cast<double>(loss), static_cast<double>(lr), tok_s / 1000, eta);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  train::TrainConfig cfg;
  std::string task = "reverse", save_path, load_path, out_dir;
  int threads = 0;
  int64_t eval_every = 250, log_every = 100, long_eval = 200;
  double target = 0.99;
  bool eval_only = false, no_early_stop = false;

  CLI::App app{"Train a Transformer on a toy sequence-to-sequence task (qkv)"};
  app.add_option("--task", task, "copy, reverse or sort")->capture_default_str();
  app.add_option("--steps", cfg.steps, "training steps, and the cosine schedule's length (may stop early)")->capture_default_str();
  app.add_option("--batch", cfg.batch, "sequences per batch")->capture_default_str();
  app.add_option("--d-model", cfg.d_model, "model width D")->capture_default_str();
  app.add_option("--heads", cfg.heads, "attention heads H")->capture_default_str();
  app.add_option("--layers", cfg.layers, "encoder layers = decoder layers")->capture_default_str();
  app.add_option("--d-ff", cfg.d_ff, "feed-forward width F")->capture_default_str();
  app.add_option("--dropout", cfg.dropout, "dropout rate")->capture_default_str();
  app.add_option("--min-len", cfg.task.min_len, "shortest sequence")->capture_default_str();
  app.add_option("--max-len", cfg.task.max_len, "longest training sequence")->capture_default_str();
  app.add_option("--vocab", cfg.task.symbols, "alphabet size (symbols, plus pad/bos/eos)")->capture_default_str();
  app.add_option("--lr", cfg.lr, "peak learning rate (noam: scale factor)")->capture_default_str();
  app.add_option("--warmup", cfg.warmup, "warm-up steps")->capture_default_str();
  app.add_option("--schedule", cfg.schedule, "noam, cosine or constant")->capture_default_str();
  app.add_option("--label-smoothing", cfg.label_smoothing, "label smoothing epsilon")->capture_default_str();
  app.add_option("--clip", cfg.clip, "clip the global gradient norm (0: off)")->capture_default_str();
  app.add_flag("--pre-ln", cfg.pre_ln, "Pre-LN layers (default: Post-LN, as the paper)");
  app.add_option("--seed", cfg.seed, "random seed (data, init, dropout)")->capture_default_str();
  app.add_option("--threads", threads, "threads for OpenMP and BLAS (0: all cores)")->capture_default_str();
  app.add_option("--heldout", cfg.heldout, "held-out sequences (drawn first, never trained on)")->capture_default_str();
  app.add_option("--eval-every", eval_every, "steps between held-out checks (0: only at the end)")->capture_default_str();
  app.add_option("--target", target, "stop early once held-out exact accuracy reaches this")->capture_default_str();
  app.add_flag("--no-early-stop", no_early_stop, "always run all --steps");
  app.add_option("--log-every", log_every, "steps between log lines when not on a terminal")->capture_default_str();
  app.add_option("--out", out_dir, "directory for log.csv, loss.svg, attention.svg (default runs/<task>)");
  app.add_option("--save", save_path, "write a checkpoint (model, optimizer, step, config) at the end");
  app.add_option("--load", load_path, "resume from (or, with --eval-only, evaluate) a checkpoint");
  app.add_flag("--eval-only", eval_only, "no training: evaluate the --load checkpoint");
  CLI11_PARSE(app, argc, argv);

  // One line at a time when piped to a file or CI log.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    cfg.task.task = tasks::parse_task(task);
    if (eval_only && load_path.empty()) throw Error("--eval-only needs --load PATH");
    if (threads > 0) set_num_threads(threads);
    if (out_dir.empty()) out_dir = "runs/" + task;
    std::filesystem::create_directories(out_dir);

    train::Trainer t(cfg);
    if (!load_path.empty()) t.load(load_path);
    const bool tty = isatty(STDOUT_FILENO);
    std::printf("qkv train: task %s, %lld symbols, lengths %lld..%lld, held-out %zu sequences\n", task.c_str(),
                static_cast<long long>(cfg.task.symbols), static_cast<long long>(cfg.task.min_len),
                static_cast<long long>(cfg.task.max_len), t.data.heldout().size());
    std::printf("model: d_model %lld, %lld heads, %lld+%lld layers, d_ff %lld, %s, %lld parameters\n",
                static_cast<long long>(cfg.d_model), static_cast<long long>(cfg.heads),
                static_cast<long long>(cfg.layers), static_cast<long long>(cfg.layers),
                static_cast<long long>(cfg.d_ff), cfg.pre_ln ? "Pre-LN" : "Post-LN",
                static_cast<long long>(t.model.num_parameters()));
    std::printf("training: batch %lld, up to %lld steps, Adam(0.9, 0.98, 1e-9), %s lr %.2g, warmup %lld, %d threads%s\n",
                static_cast<long long>(cfg.batch), static_cast<long long>(cfg.steps), cfg.schedule.c_str(),
                static_cast<double>(cfg.lr), static_cast<long long>(cfg.warmup), get_num_threads(),
                load_path.empty() ? "" : (", resumed at step " + std::to_string(t.step_count())).c_str());

    std::ofstream csv(out_dir + "/log.csv");
    csv << "step,loss,lr,tokens_per_s,heldout_exact,heldout_token\n";
    std::vector<double> steps, losses, eval_steps, eval_accs;
    double train_seconds = 0, eval_seconds = 0;
    int64_t tokens = 0;
    bool reached = false;

    if (!eval_only) {
      const int64_t first = t.step_count();
      double window_loss = 0;
      int64_t window_n = 0;
      while (t.step_count() < cfg.steps) {
        const auto t0 = Clock::now();
        const real loss = t.step();
        train_seconds += seconds_since(t0);
        tokens += t.last_target_tokens;
        const int64_t s = t.step_count();
        steps.push_back(static_cast<double>(s));
        losses.push_back(loss);
        window_loss += loss;
        window_n++;
        const double tok_s = tokens / std::max(train_seconds, 1e-9);
        const double eta = train_seconds / static_cast<double>(s - first) * static_cast<double>(cfg.steps - s);
        csv << s << "," << loss << "," << t.current_lr() << "," << tok_s << ",,\n";
        if (tty && (s % 10 == 0 || s == cfg.steps)) progress_bar(s, cfg.steps, loss, t.current_lr(), tok_s, eta);
        if (!tty && (s % log_every == 0 || s == cfg.steps)) {
          std::printf("step %6lld  loss %.4f  lr %.2e  %.0f tok/s  %.1fs\n", static_cast<long long>(s),
                      window_loss / window_n, static_cast<double>(t.current_lr()), tok_s, train_seconds);
          window_loss = 0;
          window_n = 0;
        }
        if (eval_every > 0 && s % eval_every == 0) {
          const auto e0 = Clock::now();
          train::EvalResult r = t.evaluate(t.data.heldout());
          eval_seconds += seconds_since(e0);
          eval_steps.push_back(static_cast<double>(s));
          eval_accs.push_back(r.exact_acc());
          csv << s << ",,,," << r.exact_acc() << "," << r.token_acc() << "\n";
          if (tty) std::printf("\n");
          std::printf("  held-out at step %lld: exact %.1f%%, token %.1f%%\n", static_cast<long long>(s),
                      100 * r.exact_acc(), 100 * r.token_acc());
          if (!no_early_stop && r.exact_acc() >= target) {
            std::printf("  reached the %.1f%% target at step %lld%s\n", 100 * target, static_cast<long long>(s),
                        s < cfg.steps ? ": stopping early" : "");
            reached = true;
            break;
          }
        }
      }
      if (tty) std::printf("\n");
      std::printf("trained %lld steps in %.1f s (%.1f ms/step, %.0f target tokens/s); evaluation took %.1f s\n",
                  static_cast<long long>(t.step_count() - first), train_seconds,
                  1000 * train_seconds / std::max<int64_t>(1, t.step_count() - first),
                  tokens / std::max(train_seconds, 1e-9), eval_seconds);
    }
    (void)reached;

    // ---- final evaluation ----
    train::EvalResult r = t.evaluate(t.data.heldout());
    std::printf("\nheld-out (%lld sequences, lengths %lld..%lld, never trained on): exact-sequence accuracy %.2f%%, token accuracy %.2f%%\n",
                static_cast<long long>(r.sequences), static_cast<long long>(cfg.task.min_len),
                static_cast<long long>(cfg.task.max_len), 100 * r.exact_acc(), 100 * r.token_acc());
    for (int i = 0; i < 5 && i < static_cast<int>(r.sequences); ++i) {
      const auto& src = t.data.heldout()[i];
      const auto want = tasks::apply_task(cfg.task.task, src);
      std::printf("  %-22s -> %-22s %s\n", seq_string(src).c_str(), seq_string(r.predictions[i]).c_str(),
                  r.predictions[i] == want ? "ok" : ("WRONG, want " + seq_string(want)).c_str());
    }
    Generator long_gen(cfg.seed + 7);
    const auto longer = t.data.longer_set(long_eval, 3, long_gen);
    train::EvalResult lr_ = t.evaluate(longer);
    std::printf("length generalization (%lld sequences of length %lld..%lld, longer than any trained on): exact %.2f%%, token %.2f%%\n",
                static_cast<long long>(lr_.sequences), static_cast<long long>(cfg.task.max_len + 1),
                static_cast<long long>(cfg.task.max_len + 3), 100 * lr_.exact_acc(), 100 * lr_.token_acc());

    // ---- attention picture of one held-out example ----
    {
      NoGradGuard no_grad;
      const auto& src_seq = t.data.heldout()[0];
      tasks::Batch one = tasks::collate(cfg.task.task, {src_seq});
      t.model.eval();
      t.model.keep_attention(true);
      t.model.forward(one.src, one.tgt_in);
      std::vector<Tensor> maps;  // per layer (H, T, S)
      for (const Tensor& a : t.model.cross_attention()) maps.push_back(a.reshape({a.size(1), a.size(2), a.size(3)}));
      t.model.keep_attention(false);
      std::vector<std::string> src_l, tgt_l;
      for (int64_t tok : one.src.ids) src_l.push_back(symbol_label(tok));
      for (int64_t tok : one.tgt_in.ids) tgt_l.push_back(symbol_label(tok));
      plots::write_attention_svg(out_dir + "/attention.svg", maps, src_l, tgt_l,
                                 "cross-attention, task " + task + ": rows = decoder input, columns = source");
      const int64_t H = maps.back().size(0), T = maps.back().size(1), S = maps.back().size(2);
      Tensor avg = Tensor::zeros({T, S});
      for (int64_t h = 0; h < H; ++h)
        for (int64_t k = 0; k < T * S; ++k) avg.data()[k] += maps.back().data()[h * T * S + k] / static_cast<real>(H);
      std::printf("\ncross-attention of the last decoder layer (mean over heads) for one held-out example:\n%s",
                  plots::ascii_heatmap(avg.data(), T, S, src_l, tgt_l).c_str());
    }

    if (!eval_only && !steps.empty())
      plots::write_loss_svg(out_dir + "/loss.svg", steps, losses, eval_steps, eval_accs,
                            "qkv: " + task + " task, training loss and held-out accuracy");
    if (!save_path.empty()) {
      t.save(save_path);
      std::printf("checkpoint: %s (step %lld)\n", save_path.c_str(), static_cast<long long>(t.step_count()));
    }
    std::printf("\nwrote %s/log.csv", out_dir.c_str());
    if (!eval_only) std::printf(", %s/loss.svg", out_dir.c_str());
    std::printf(", %s/attention.svg\n", out_dir.c_str());
    std::printf("held-out exact-sequence accuracy: %.2f%%\n", 100 * r.exact_acc());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
}
