// qkv's main job: train a Transformer (encoder-decoder, decoder-only or
// encoder-only) on a built-in toy task or on your own data, watch the loss
// fall, then evaluate it on held-out data; or load a checkpoint and evaluate
// it, or ask it questions.
//
//   build/rel-f32/train --task reverse                  (what `make demo` runs)
//   build/rel-f32/train --data pairs.tsv --out runs/mine
//   build/rel-f32/train --load runs/reverse/model.safetensors --eval-only
//   build/rel-f32/train --load runs/reverse/model.safetensors --ask "c a d b"
//   build/rel-f32/train --help
//   mpirun -np 2 build/rel-mpi-f32/train --threads 1 ...   (make MPI=1: data parallel)
//
// This file is the command line only: every flag, each value checked as typed,
// then trainer/run.h does the run (open it, check every output path, train,
// write the checkpoint, then the logs and plots, then report).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "explorer/program.h"
#include "generation/decoding_methods.h"
#include "trainer/data_sources.h"
#include "trainer/positions.h"
#include "trainer/presets.h"
#include "trainer/run.h"
#include "trainer/stop_signals.h"
#include "trainer/token_kinds.h"

using namespace qkv;
using namespace qkv::train;

namespace {

// ---- flags --------------------------------------------------------------------

// Every value is checked as typed, before CLI11 converts it: an empty string
// is a value (refused here, never read as "not given" or as 0), numbers are
// plain decimal (no "0x10", no "1e3" for a count, no "-1" for an unsigned
// seed), and a number out of the type's range is refused as typed, not
// clamped. Errors quote the value briefly (a 300-digit number is cut).
std::string check_number_text(const std::string& s, bool integer, bool may_be_negative, double lo,
                              double hi) {
  if (s.empty()) return "expected a number, got an empty string";
  const std::string shown = "'" + brief(s) + "'";
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (s[0] == '-' && !may_be_negative) return "must not be negative, got " + shown;
  if (integer) {
    if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos)
      return "expected a whole number in decimal digits, got " + shown;
    errno = 0;
    const double v = may_be_negative ? double(std::strtoll(s.c_str(), nullptr, 10))
                                     : double(std::strtoull(s.c_str(), nullptr, 10));
    if (errno == ERANGE || v < lo || v > hi) return shown + " is out of range";
    return "";
  }
  if (s.find_first_of("xXpP") != std::string::npos)
    return "expected a decimal number, got " + shown;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || i == s.size()) return "expected a number, got " + shown;
  if (errno == ERANGE || !std::isfinite(v) || v < lo || v > hi) {
    if (s.find_first_of("nN") != std::string::npos) return "expected a finite number, got " + shown;
    return shown + " is out of range";
  }
  return "";
}

template <class T>
CLI::Option* add_value(CLI::App& app, const std::string& name, T& ref, const std::string& help) {
  CLI::Option* opt = app.add_option(name, ref, help);
  if constexpr (std::is_same_v<T, std::string>) {
    opt->check(CLI::Validator(
        [](std::string& s) {
          return s.empty() ? std::string("the value is empty") : std::string();
        },
        "TEXT", "non-empty"));
  } else {
    constexpr bool integer = std::is_integral_v<T>, negative = std::is_signed_v<T>;
    const double lo = double(std::numeric_limits<T>::lowest()),
                 hi = double(std::numeric_limits<T>::max());
    opt->check(CLI::Validator(
        [=](std::string& s) { return check_number_text(s, integer, negative, lo, hi); },
        integer ? "INT" : "NUMBER", "number"));
  }
  return opt;
}

void add_flags(CLI::App& app, TrainConfig& c, RunOptions& o) {
  app.get_formatter()->column_width(27);
  app.option_defaults()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  add_value(app, "--model", c.model, family_help())->capture_default_str();
  add_value(app, "--task", c.task, "copy, reverse or sort (without --data)")->capture_default_str();
  add_value(app, "--data", c.data, "train on a file: source<TAB>target lines");
  add_value(app, "--format", c.format, train::data_format_help())->capture_default_str();
  add_value(app, "--tokens", c.tokens, train::token_help())->capture_default_str();
  add_value(app, "--bpe-vocab", c.bpe_vocab, "bpe: 256 bytes + merges (specials on top)");
  add_value(app, "--valid", c.valid, "held-out file (else part of --data)");
  add_value(app, "--valid-fraction", c.valid_fraction, "share of --data held out")
      ->capture_default_str();
  add_value(app, "--max-vocab", c.max_vocab, "refuse data with more tokens")->capture_default_str();
  add_value(app, "--label-names", c.label_names, "idx: names of labels 0, 1, .. (a,b,..)");
  add_value(app, "--augment", c.augment, "idx: crop:K (pad K, crop back), flip (mirror)");
  app.add_flag("--line-by-line,!--no-line-by-line", c.line_by_line,
               "mlm: one line a sequence (bert: on), else windows");
  app.add_flag("--group-by-length,!--no-group-by-length", c.group_by_length,
               "line-by-line: batches of like-length lines (faster)");
  app.add_flag("--truncate,!--no-truncate", c.truncate,
               "classify: cut texts over --context (on) or refuse");
  add_value(app, "--doc-stride", c.doc_stride, "qa: context tokens two windows share")
      ->capture_default_str();
  add_value(app, "--max-answer-tokens", c.max_answer_tokens, "qa: the longest answer, in tokens")
      ->capture_default_str();
  add_value(app, "--objective", c.objective, "gpt lm; bert mlm, classify, qa; seq2seq pairs, span");
  add_value(app, "--patch", c.patch, "vit: P x P pixels a patch (default 7)");
  add_value(app, "--symbols,--vocab", c.vocab, "number of symbols of the task")
      ->capture_default_str();
  add_value(app, "--min-len", c.min_len, "shortest task sequence")->capture_default_str();
  add_value(app, "--max-len", c.max_len, "longest task sequence")->capture_default_str();
  add_value(app, "--heldout", c.heldout, "held-out task sequences")->capture_default_str();
  add_value(app, "--d-model", c.d_model, "model width D")->capture_default_str();
  add_value(app, "--heads", c.heads, "attention heads H")->capture_default_str();
  add_value(app, "--layers", c.layers, "layers (encoder = decoder)")->capture_default_str();
  add_value(app, "--d-ff", c.d_ff, "feed-forward width")->capture_default_str();
  add_value(app, "--dropout", c.dropout, "dropout rate")->capture_default_str();
  app.add_flag("--pre-ln,!--post-ln", c.pre_ln, "Pre-LN (default: Post-LN; gpt: Pre-LN)");
  app.add_flag("--tie,!--no-tie", c.tie, "tie output and embedding (gpt: on)");
  add_value(app, "--positions", c.positions, train::position_help())->capture_default_str();
  add_value(app, "--rope-base", c.rope_base, "rope: the rotation's base")->capture_default_str();
  add_value(app, "--rel-buckets", c.rel_buckets, "relative: buckets per table (even)")
      ->capture_default_str();
  add_value(app, "--rel-max-distance", c.rel_max_distance, "relative: the last bucket's distance")
      ->capture_default_str();
  add_value(app, "--kv-heads", c.kv_heads, "key/value heads (GQA; 0: --heads)")
      ->capture_default_str();
  add_value(app, "--activation", c.activation,
            "relu, gelu (gpt) or swiglu (hidden 2/3 d_ff, to 8s)")
      ->capture_default_str();
  add_value(app, "--experts", c.experts, "mixture of experts: E expert FFNs (0: dense)")
      ->capture_default_str();
  add_value(app, "--experts-per-token", c.experts_per_token, "experts: k a token (Switch: 1)")
      ->capture_default_str();
  add_value(app, "--capacity-factor", c.capacity_factor, "experts: capacity N k / E times this")
      ->capture_default_str();
  add_value(app, "--aux-loss", c.aux_loss, "experts: load-balancing loss coefficient")
      ->capture_default_str();
  add_value(app, "--norm", c.norm, "layer (LayerNorm) or rms (RMSNorm)")->capture_default_str();
  app.add_flag("--no-bias", c.no_bias, "attention and FFN Linears without biases");
  add_value(app, "--preset", o.preset, preset_help());
  add_value(app, "--attention", c.attention, "standard, memory-efficient, sparse, linear, auto")
      ->capture_default_str();
  add_value(app, "--window", c.window, "sparse attention: the local window")->capture_default_str();
  add_value(app, "--global-every", c.global_every, "sparse attention: a global position every N")
      ->capture_default_str();
  app.add_flag("--no-scale", c.no_scale, "attention scores without 1/sqrt(d_k)");
  add_value(app, "--d-k", c.d_k, "query/key head size (0: d_model / heads)")->capture_default_str();
  add_value(app, "--recompute", c.recompute, "none, ffn or layer: recompute in backward")
      ->capture_default_str();
  add_value(app, "--attention-budget", c.attention_budget,
            "MiB for attention probabilities (auto; 0: no limit)")
      ->capture_default_str();
  add_value(app, "--context", c.context, "position table rows (0: as needed)")
      ->capture_default_str();
  add_value(app, "--batch", c.batch, "sequences per batch")->capture_default_str();
  add_value(app, "--steps", c.steps, "training steps (may stop early)")->capture_default_str();
  add_value(app, "--lr", c.lr, "peak learning rate (noam: factor)")->capture_default_str();
  add_value(app, "--min-lr", c.min_lr, "cosine schedule's floor (default: 5% of --lr)");
  add_value(app, "--warmup", c.warmup, "warm-up steps")->capture_default_str();
  add_value(app, "--optimizer", c.optimizer, optim::optimizer_names())->capture_default_str();
  add_value(app, "--weight-decay", c.weight_decay, "on Linear weights (adamw: 0.01)")
      ->capture_default_str();
  add_value(app, "--beta1", c.beta1, "Adam's first-moment decay")->capture_default_str();
  add_value(app, "--beta2", c.beta2, "Adam's second-moment decay")->capture_default_str();
  add_value(app, "--momentum", c.momentum, "sgd's momentum")->capture_default_str();
  add_value(app, "--schedule", c.schedule, "cosine, noam or constant")->capture_default_str();
  add_value(app, "--label-smoothing", c.label_smoothing, "label smoothing epsilon")
      ->capture_default_str();
  add_value(app, "--clip", c.clip, "clip the gradient norm (0: off)")->capture_default_str();
  add_value(app, "--seed", c.seed, "seed of data, init and dropout")->capture_default_str();
  add_value(app, "--threads", o.threads, "threads (0: all cores)")->capture_default_str();
  add_value(app, "--precision", o.precision, "matrix products fp32|bf16 (--load: the file's)")
      ->capture_default_str();
  add_value(app, "--eval-every", o.eval_every, "steps between held-out checks")
      ->capture_default_str();
  add_value(app, "--long-lengths", o.long_lengths, "task: evaluate lengths A-B, one line each");
  add_value(app, "--target", o.target, "stop once held-out exact >= this")->capture_default_str();
  add_value(app, "--patience", o.patience, "text: stop after N evals with no new best (0: never)")
      ->capture_default_str();
  app.add_flag("--no-early-stop", o.no_early_stop, "always run all --steps");
  add_value(app, "--log-every", o.log_every, "steps between log lines")->capture_default_str();
  add_value(app, "--out", o.out_dir, "logs and plots (default runs/<name>)");
  add_value(app, "--save", o.save_path, "checkpoint (default <out>/model.safetensors)");
  app.add_flag("--no-save", o.no_save, "write no checkpoint");
  add_value(app, "--save-every", o.save_every, "also write it every N steps (0: off)")
      ->capture_default_str();
  add_value(app, "--load", o.load_path, "resume from a checkpoint");
  app.add_flag("--eval-only", o.eval_only, "only evaluate the --load checkpoint");
  app.add_flag("--count-tokens", o.count_tokens,
               "--data's lengths in tokens, the number over --context");
  add_value(app, "--init-from", o.init_from, "fine-tune: the tensors shared with a file");
  add_value(app, "--tokenizer-from", o.tokenizer_from, "a new model on a file's tokens");
  add_value(app, "--ask", o.ask, "with --load: answer this text or PNG (- : stdin)");
  add_value(app, "--passage", o.passage, "with --ask on a qa model: the context file");
  app.add_flag("--show-attention", o.show_attention, "with --ask: print cross-attention");
  add_value(app, "--explain", o.explain, "with --load: the gradient explorer on this text");
  add_value(app, "--html", o.html, "with --explain: the page to write (one HTML file)");
  add_value(app, "--decode", o.decode, nn::decoding_method_names() + " (checks, --ask)")
      ->capture_default_str();
  add_value(app, "--beam", o.beam, "beam width")->capture_default_str();
  add_value(app, "--alpha", o.alpha, "beam length penalty exponent")->capture_default_str();
  add_value(app, "--temperature", o.temperature, "gpt text sampling (0: greedy)")
      ->capture_default_str();
  add_value(app, "--top-k", o.top_k, "keep the k likeliest tokens (0: all)")->capture_default_str();
  add_value(app, "--top-p", o.top_p, "nucleus: keep this much probability")->capture_default_str();
  add_value(app, "--max-new", o.max_new, "tokens a language model writes")->capture_default_str();
  app.add_flag("--allow-nonfinite", o.allow_nonfinite, "load a checkpoint holding NaN/Inf");
  app.add_flag("--detect-anomaly", o.detect_anomaly, "name the first op making NaN/Inf");
  add_value(app, "--instruments", o.instruments,
            "every N steps: gradient, update, layer stats (0: off)");
}

// The JSON keys of the run settings given on the command line.
std::vector<std::string> given_keys(const CLI::App& app) {
  std::vector<std::string> keys;
  TrainConfig probe;
  TrainConfig::for_each_field(probe, [&](const char* k, auto&) {
    if (app.count(flag_of(k)) > 0) keys.push_back(k);
  });
  return keys;
}

}  // namespace

int train_main(int argc, char** argv) {
  TrainConfig flags;
  RunOptions o;
  CLI::App app{"Train a Transformer on a toy task or your own data (qkv)"};
  // An on/off flag takes no value: CLI11 would read "--tie=-1" as off and
  // echo a refused value whole; its --no- twin says off.
  app.option_defaults()->disable_flag_override();
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    const std::string m = e.what(), tail = " was given a disallowed flag override";
    if (m.size() > tail.size() && m.compare(m.size() - tail.size(), tail.size(), tail) == 0)
      return "error: --" + m.substr(0, m.size() - tail.size()) +
             ": an on/off flag takes no value (give it, or leave it out)\n";
    return CLI::FailureMessage::simple(a, e);
  });
  add_flags(app, flags, o);
  app.footer(
      "Output files (--save, --save-every, --out's log.csv and plots, --html): a\n"
      "symlink is written through to its file and stays a link; a device, FIFO,\n"
      "socket or dangling symlink is refused (docs/reliability.md#output-paths).");
  CLI11_PARSE(app, argc, argv);
  o.precision_given = app.count("--precision") > 0;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time when piped to a file or CI log
  try {
    check_options(o);
    // The explorer's proofs are float64: a float32 build hands --explain to
    // its float64 twin (build/rel-f64/train), after the flags are checked.
    if (!o.explain.empty()) explorer::run_in_float64("--explain", argv);
    prepare_count_tokens(flags, o);
    Trainer t = open_run(flags, given_keys(app), o);
    return run(t, o, app.config_to_str(true, false));
  } catch (const std::exception& e) {
    const std::string what = failure_message(e, flags, o);
    if (dist::size() > 1) {  // the other ranks may wait for this one: end them all
      std::fprintf(stderr, "error (MPI rank %d of %d): %s\n", dist::rank(), dist::size(),
                   what.c_str());
      dist::abort_all(kExitError);
    }
    std::fprintf(stderr, "error: %s\n", what.c_str());
    return kExitError;
  }
}
// Under mpirun (make MPI=1) every rank runs train_main; see dist/distributed.h.
int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  // `train ... | head`: printing into the closed pipe before the run starts
  // (the data read, a BPE learned) ends nothing either.
  train::ignore_broken_pipe();
  const int status = train_main(argc, argv);
  // A rank that stops alone (a bad flag) ends them all; a divergence stops
  // every rank at the same step (they check the same global loss and norm).
  if (status != 0 && status != kExitDiverged && dist::size() > 1) dist::abort_all(status);
  dist::finalize();
  return status;
}
