// The program's own options checked before any work (trainer/run.h):
// --threads, --precision, --long-lengths, --count-tokens and the rest, and
// the one line a run that failed ends with.
#include <new>

#include "core/blas.h"
#include "generation/decoding_methods.h"
#include "trainer/data_sources.h"
#include "trainer/output_paths.h"
#include "trainer/report.h"
#include "trainer/run.h"

namespace qkv::train {

std::string failure_message(const std::exception& e, const TrainConfig& flags,
                            const RunOptions& o) {
  if (!dynamic_cast<const std::bad_alloc*>(&e)) return e.what();
  std::string files;
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string*>{"--load", &o.load_path},
        {"--init-from", &o.init_from},
        {"--tokenizer-from", &o.tokenizer_from},
        {"--data", &flags.data},
        {"--valid", &flags.valid}})
    if (!path->empty()) files += std::string(files.empty() ? "" : ", ") + flag + " " + brief(*path);
  return "out of memory (std::bad_alloc)" +
         (files.empty() ? std::string(" building the model and the task's data (the settings "
                                      "ask for more memory than this machine has)")
                        : " reading " + files);
}

void prepare_count_tokens(TrainConfig& flags, RunOptions& o) {
  if (!o.count_tokens) return;
  if (!o.load_path.empty() || !o.ask.empty() || !o.explain.empty() || o.eval_only)
    throw Error(
        "--count-tokens: reads a new run's --data; give it without --load, --ask, --explain or "
        "--eval-only");
  // A classifier's texts are counted before any is cut (Trainer::uncut_*).
  o.count_window = flags.context;
  if (o.init_from.empty() && format_holds(flags.format) != DataSource::Holds::kCorpus)
    flags.context = 0;
}

LengthRange parse_long_lengths(const std::string& text) {
  if (text.empty()) return {};
  const auto bad = [&] {
    return Error("--long-lengths: expected A-B, two lengths with 1 <= A <= B <= 4096, got '" +
                 brief(text) + "'");
  };
  const size_t dash = text.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == text.size() || dash > 4 ||
      text.size() - dash - 1 > 4 || text.find_first_not_of("0123456789-") != std::string::npos ||
      text.find('-', dash + 1) != std::string::npos)
    throw bad();
  const LengthRange r{std::stoll(text.substr(0, dash)), std::stoll(text.substr(dash + 1))};
  if (r.lo < 1 || r.lo > r.hi || r.hi > 4096) throw bad();
  return r;
}

void check_options(const RunOptions& o) {
  parse_long_lengths(o.long_lengths);
  if (!o.long_lengths.empty() && (!o.ask.empty() || !o.explain.empty()))
    throw Error("--long-lengths: goes with a training run or --eval-only, not --ask or --explain");
  if (o.threads < 0 || o.threads > 1024)
    throw Error("--threads: must be in [0, 1024], got " + std::to_string(o.threads));
  if (o.eval_every < 0)
    throw Error("--eval-every: must be >= 0, got " + std::to_string(o.eval_every));
  if (o.log_every < 1) throw Error("--log-every: must be >= 1, got " + std::to_string(o.log_every));
  if (o.save_every < 0)
    throw Error("--save-every: must be >= 0, got " + std::to_string(o.save_every));
  if (o.instruments < 0)
    throw Error("--instruments: must be >= 0 (0: off), got " + std::to_string(o.instruments));
  if (o.instruments > 0 && (o.eval_only || !o.ask.empty() || !o.explain.empty()))
    throw Error(
        "--instruments: records a training run, not --eval-only, --ask or --explain (the "
        "instruments program redraws a finished run's pictures)");
  if (o.patience < 0)
    throw Error("--patience: must be >= 0 (0: never stop early), got " +
                std::to_string(o.patience));
  if (!(o.target > 0 && o.target <= 1))
    throw Error("--target: must be in (0, 1], got " + std::to_string(o.target));
  if ((o.eval_only || !o.ask.empty()) && o.load_path.empty())
    throw Error(std::string(o.eval_only ? "--eval-only" : "--ask") + " needs --load PATH");
  if (o.show_attention && o.ask.empty()) throw Error("--show-attention goes with --ask");
  if (!o.explain.empty() && o.load_path.empty()) throw Error("--explain needs --load PATH");
  if (!o.explain.empty() && o.html.empty()) throw Error("--explain needs --html PAGE");
  if (!o.html.empty() && o.explain.empty()) throw Error("--html goes with --explain TEXT");
  if (!o.explain.empty() && (o.eval_only || !o.ask.empty()))
    throw Error("--explain: give it alone, not with --eval-only or --ask");
  if (!o.html.empty())  // before any work
    outputs::check_file_path("--html", o.html);
  nn::decoding_method(o.decode, "--decode");
  if (o.beam < 1 || o.beam > 256)
    throw Error("--beam: must be in [1, 256], got " + std::to_string(o.beam));
  if (!(o.alpha >= 0 && o.alpha <= 10))
    throw Error("--alpha: must be in [0, 10], got " + std::to_string(o.alpha));
  if (o.max_new < 1 || o.max_new > 100000)
    throw Error("--max-new: must be in [1, 100000], got " + std::to_string(o.max_new));
  if (o.top_k < 0)
    throw Error("--top-k: must be >= 0 (0: all tokens), got " + std::to_string(o.top_k));
  sampling(o);  // --temperature, --top-p
  if (o.no_save && (!o.save_path.empty() || o.save_every > 0))
    throw Error("--no-save: contradicts --save / --save-every");
  if (o.allow_nonfinite && !(o.eval_only || !o.ask.empty()))
    throw Error("--allow-nonfinite: only with --eval-only or --ask (never to train on)");
  if (o.threads > 0) set_num_threads(o.threads);
  if (o.precision != "fp32" && o.precision != "bf16")
    throw Error("--precision: expected fp32 or bf16, got '" + brief(o.precision) + "'");
  // The explorer's finite differences are float64: a bf16 product has no place in them.
  if (!o.explain.empty() && o.precision != "fp32")
    throw Error("--precision " + o.precision +
                ": --explain computes every number in float64 (its finite differences need "
                "them); give it without --precision");
  set_matmul_precision(o.precision == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::fp32);
}

}  // namespace qkv::train
