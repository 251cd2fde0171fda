// qkv's main job: train a Transformer (encoder-decoder or decoder-only) on a
// built-in toy task or on your own data, watch the loss fall, then evaluate it
// on held-out data; or load a checkpoint and evaluate it, or ask it questions.
//
//   build/rel-f32/train --task reverse                  (what `make demo` runs)
//   build/rel-f32/train --data pairs.tsv --out runs/mine
//   build/rel-f32/train --load runs/reverse/model.safetensors --eval-only
//   build/rel-f32/train --load runs/reverse/model.safetensors --ask "c a d b"
//   build/rel-f32/train --help
//   mpirun -np 2 build/rel-mpi-f32/train --threads 1 ...   (make MPI=1: data parallel)
//
// main() reads as the run does: parse the flags, build (or resume) the run,
// check every output path, train, evaluate, write the checkpoint, then the logs
// and plots.
#include <unistd.h>

#include <csignal>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <type_traits>

#include "trainer/output_paths.h"
#include "trainer/plots.h"
#include "trainer/trainer.h"

using namespace qkv;
using namespace qkv::train;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

// Settings of this invocation that are not part of the run (not checked
// against a checkpoint).
struct Options {
  int threads = 0;
  int64_t eval_every = 250, log_every = 100, save_every = 0, long_eval = 200;
  double target = 0.99;
  bool eval_only = false, no_early_stop = false, no_save = false, show_attention = false, allow_nonfinite = false;
  bool detect_anomaly = false;
  std::string out_dir, save_path, load_path, ask, init_from;
  std::string decode = "greedy";  // held-out checks and --ask: greedy | beam
  int64_t beam = 4, max_new = 200, top_k = 0;
  double alpha = 0.6, temperature = 0.8, top_p = 0.95;
};

// Exit statuses: 0 done; 1 bad flags, bad input or a failed output;
// 3 training diverged.
constexpr int kExitError = 1, kExitDiverged = 3;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- flags --------------------------------------------------------------------

// Every value is checked as typed, before CLI11 converts it: an empty string
// is a value (refused here, never read as "not given" or as 0), numbers are
// plain decimal (no "0x10", no "1e3" for a count, no "-1" for an unsigned
// seed), and a number out of the type's range is refused as typed, not
// clamped. Errors quote the value briefly (a 300-digit number is cut).
std::string check_number_text(const std::string& s, bool integer, bool may_be_negative, double lo, double hi) {
  if (s.empty()) return "expected a number, got an empty string";
  const std::string shown = "'" + brief(s, 40) + "'";
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (s[0] == '-' && !may_be_negative) return "must not be negative, got " + shown;
  if (integer) {
    if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos)
      return "expected a whole number in decimal digits, got " + shown;
    errno = 0;
    const double v = may_be_negative ? double(std::strtoll(s.c_str(), nullptr, 10)) : double(std::strtoull(s.c_str(), nullptr, 10));
    if (errno == ERANGE || v < lo || v > hi) return shown + " is out of range";
    return "";
  }
  if (s.find_first_of("xXpP") != std::string::npos) return "expected a decimal number, got " + shown;
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
    opt->check(CLI::Validator([](std::string& s) { return s.empty() ? std::string("the value is empty") : std::string(); },
                              "TEXT", "non-empty"));
  } else {
    constexpr bool integer = std::is_integral_v<T>, negative = std::is_signed_v<T>;
    const double lo = double(std::numeric_limits<T>::lowest()), hi = double(std::numeric_limits<T>::max());
    opt->check(CLI::Validator([=](std::string& s) { return check_number_text(s, integer, negative, lo, hi); },
                              integer ? "INT" : "NUMBER", "number"));
  }
  return opt;
}

void add_flags(CLI::App& app, TrainConfig& c, Options& o) {
  app.get_formatter()->column_width(27);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  add_value(app, "--model", c.model, "seq2seq or gpt (decoder-only)")->capture_default_str();
  add_value(app, "--task", c.task, "copy, reverse or sort (without --data)")->capture_default_str();
  add_value(app, "--data", c.data, "train on a file: source<TAB>target lines");
  add_value(app, "--format", c.format, "tsv (pairs) or text (gpt corpus)")->capture_default_str();
  add_value(app, "--tokens", c.tokens, "char or word tokens for --data")->capture_default_str();
  add_value(app, "--valid", c.valid, "held-out file (else part of --data)");
  add_value(app, "--valid-fraction", c.valid_fraction, "share of --data held out")->capture_default_str();
  add_value(app, "--max-vocab", c.max_vocab, "refuse data with more tokens")->capture_default_str();
  add_value(app, "--vocab", c.vocab, "number of symbols of the task")->capture_default_str();
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
  add_value(app, "--positions", c.positions, "sinusoidal or learned (gpt)")->capture_default_str();
  add_value(app, "--activation", c.activation, "relu or gelu (gpt: gelu)")->capture_default_str();
  add_value(app, "--context", c.context, "position table rows (0: as needed)")->capture_default_str();
  add_value(app, "--batch", c.batch, "sequences per batch")->capture_default_str();
  add_value(app, "--steps", c.steps, "training steps (may stop early)")->capture_default_str();
  add_value(app, "--lr", c.lr, "peak learning rate (noam: factor)")->capture_default_str();
  add_value(app, "--warmup", c.warmup, "warm-up steps")->capture_default_str();
  add_value(app, "--schedule", c.schedule, "cosine, noam or constant")->capture_default_str();
  add_value(app, "--label-smoothing", c.label_smoothing, "label smoothing epsilon")->capture_default_str();
  add_value(app, "--clip", c.clip, "clip the gradient norm (0: off)")->capture_default_str();
  add_value(app, "--seed", c.seed, "seed of data, init and dropout")->capture_default_str();
  add_value(app, "--threads", o.threads, "threads (0: all cores)")->capture_default_str();
  add_value(app, "--eval-every", o.eval_every, "steps between held-out checks")->capture_default_str();
  add_value(app, "--target", o.target, "stop once held-out exact >= this")->capture_default_str();
  app.add_flag("--no-early-stop", o.no_early_stop, "always run all --steps");
  add_value(app, "--log-every", o.log_every, "steps between log lines")->capture_default_str();
  add_value(app, "--out", o.out_dir, "logs and plots (default runs/<name>)");
  add_value(app, "--save", o.save_path, "checkpoint (default <out>/model.safetensors)");
  app.add_flag("--no-save", o.no_save, "write no checkpoint");
  add_value(app, "--save-every", o.save_every, "also write it every N steps (0: off)")->capture_default_str();
  add_value(app, "--load", o.load_path, "resume from a checkpoint");
  app.add_flag("--eval-only", o.eval_only, "only evaluate the --load checkpoint");
  add_value(app, "--init-from", o.init_from, "fine-tune: weights, model, vocab of a file");
  add_value(app, "--ask", o.ask, "with --load: answer this text (- : stdin)");
  app.add_flag("--show-attention", o.show_attention, "with --ask: print cross-attention");
  add_value(app, "--decode", o.decode, "greedy or beam (checks, --ask)")->capture_default_str();
  add_value(app, "--beam", o.beam, "beam width")->capture_default_str();
  add_value(app, "--alpha", o.alpha, "beam length penalty exponent")->capture_default_str();
  add_value(app, "--temperature", o.temperature, "gpt text sampling (0: greedy)")->capture_default_str();
  add_value(app, "--top-k", o.top_k, "keep the k likeliest tokens (0: all)")->capture_default_str();
  add_value(app, "--top-p", o.top_p, "nucleus: keep this much probability")->capture_default_str();
  add_value(app, "--max-new", o.max_new, "tokens a language model writes")->capture_default_str();
  app.add_flag("--allow-nonfinite", o.allow_nonfinite, "load a checkpoint holding NaN/Inf");
  app.add_flag("--detect-anomaly", o.detect_anomaly, "name the first op making NaN/Inf");
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

// ---- building the run -----------------------------------------------------------

// A new run, with the decoder-only model's own defaults (Pre-LN, GELU, tied
// output, learned positions) for whatever the command line left unsaid.
Trainer new_run(TrainConfig c, const std::vector<std::string>& given) {
  auto said = [&](const char* k) { return std::find(given.begin(), given.end(), k) != given.end(); };
  if (c.is_gpt()) {
    if (!said("pre_ln")) c.pre_ln = true;
    if (!said("activation")) c.activation = "gelu";
    if (!said("tie")) c.tie = true;
    if (!said("positions")) c.positions = "learned";
  }
  return Trainer(c);
}

// Resumes (or, for --eval-only and --decode, reopens) a checkpoint. Its file
// holds every setting; a flag given as well must agree with it, except --steps.
Trainer resumed_run(const std::string& path, const TrainConfig& flags, const std::vector<std::string>& given,
                    bool allow_nonfinite, DataUse use) {
  const json mine = flags.to_json();
  return Trainer::resume(path, [&](TrainConfig& c, bool model_file) {
    const json saved = c.to_json();
    if (model_file) {  // no run to agree with: the flags say how to read and evaluate it
      json j = saved;
      for (const std::string& k : given) {
        if (TrainConfig::is_arch_key(k) && saved[k] != mine[k])
          throw Error(flag_of(k) + ": the model file " + path + " holds a model with " + flag_of(k) + " " +
                      show_value(saved[k]) + ", but the command line gives " + show_value(mine[k]));
        j[k] = mine[k];
      }
      c = TrainConfig::from_json(j, "the command line");
      return;
    }
    for (const std::string& k : given) {
      if (k == "steps" || saved[k] == mine[k]) continue;
      // Evaluating: the data may be named anew (moved, or another folder); its hash decides.
      if (use == DataUse::Evaluate && (k == "data" || k == "valid" || (k == "format" && saved["data"] == ""))) {
        (k == "data" ? c.data : k == "valid" ? c.valid : c.format) = mine[k].get<std::string>();
        continue;
      }
      throw Error(flag_of(k) + ": the checkpoint " + path + " was trained with " + flag_of(k) + " " +
                  show_value(saved[k]) + ", but the command line gives " + show_value(mine[k]) +
                  " (leave the flag out to use the checkpoint's)");
    }
    c.steps = flags.steps;
    if (std::find(given.begin(), given.end(), "steps") == given.end()) c.steps = saved["steps"].get<int64_t>();
  }, allow_nonfinite, use);
}

// Under MPI every rank must read the same data (same flags are not enough:
// each rank reads its own copy of the files). Compares the files' hashes and
// the vocabulary across ranks, before any collective could mismatch, naming
// the first rank that differs from rank 0 and the file.
void check_same_data_on_all_ranks(const Trainer& t) {
  if (dist::size() == 1) return;
  auto hash_of = [&](const char* part) {
    return t.data_info.contains(part) ? t.data_info[part]["fnv1a64"].get<std::string>() : std::string("-");
  };
  const json mine = {hash_of("data"), hash_of("valid"), train::detail::hex64(fnv1a64(t.vocab.to_json().dump()))};
  const std::vector<std::string> all = dist::all_gather(mine.dump());
  const json first = json::parse(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const json other = json::parse(all[r]);
    const char* what[] = {"--data file", "--valid file", "vocabulary"};
    for (size_t k = 0; k < 3; ++k)
      if (other[k] != first[k])
        throw Error("MPI rank " + std::to_string(r) + " reads a different " + what[k] + " than rank 0 (hash " +
                    other[k].get<std::string>() + " vs " + first[k].get<std::string>() + (k == 0 ? ", " + t.cfg.data : "") +
                    "): every rank needs the same data files");
  }
}

std::string run_name(const TrainConfig& c) {
  return c.data.empty() ? c.task : fs::path(c.data).stem().string();
}

// ---- output paths, checked before the first step ----------------------------------

// Creates --out when missing and checks that it and the checkpoint's directory
// take files. On failure nothing is left behind (a directory made here is
// removed again) and the error names the flag and the path.
void prepare_outputs(const Options& o) {
  std::vector<fs::path> made;  // directories created here, deepest last
  auto undo = [&] {
    std::error_code ec;
    for (auto it = made.rbegin(); it != made.rend(); ++it) fs::remove(*it, ec);  // only if still empty
  };
  try {
    std::string why;
    const fs::path out(o.out_dir);
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_directory(out, ec)) throw Error("--out " + o.out_dir + ": exists and is not a directory");
    if (!fs::exists(out, ec)) {
      for (fs::path p = fs::absolute(out); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) made.insert(made.begin(), p);
      if (!fs::create_directories(out, ec) && ec) {
        made.clear();
        throw Error("--out " + o.out_dir + ": cannot create the directory: " + ec.message());
      }
    }
    if (!outputs::can_create_in(out, &why)) throw Error("--out " + o.out_dir + ": cannot write files there: " + why);
    if (!o.save_path.empty())
      outputs::check_file_path("--save", o.save_path, fs::path(safetensors_temp_path(o.save_path)).filename().string());
  } catch (...) {
    undo();
    throw;
  }
}

// Weights that are no longer finite mean the run diverged (e.g. in its last
// update, after the loss was checked): said so, never "could not be written".
void check_model_finite(const Trainer& t) {
  if (auto bad = find_nonfinite(nn::state_dict(t.model())))
    throw Diverged("after step " + std::to_string(t.step_count()) + " the weights are not finite (tensor '" +
                   bad->tensor + "' holds " + std::to_string(bad->count) + " NaN or Inf values): training diverged");
}

// Writes the checkpoint; if that fails, tries fallback places and says where
// it went. Returns the path written, or "" when every attempt failed.
std::string save_with_fallback(const Trainer& t, const std::string& path) {
  const std::vector<std::string> dropout_states = t.dropout_states();  // every MPI rank's
  if (dist::rank() != 0) return path;  // rank 0 writes
  std::vector<std::string> tries{path};
  // The rescue names stay short enough for any file system, whatever --save's length.
  const std::string base = fs::path(path).filename().string().substr(0, 120);
  tries.push_back(base + ".rescued-" + std::to_string(getpid()));
  tries.push_back((fs::temp_directory_path() / (base + ".rescued-" + std::to_string(getpid()))).string());
  for (size_t i = 0; i < tries.size(); ++i) {
    try {
      t.write_checkpoint(tries[i], dropout_states);
      if (i > 0) std::fprintf(stderr, "checkpoint: could not write %s; wrote %s instead\n", path.c_str(), tries[i].c_str());
      return tries[i];
    } catch (const std::exception& e) {
      std::fprintf(stderr, "checkpoint: %s\n", e.what());
    }
  }
  return "";
}

// ---- the training loop ----------------------------------------------------------

// log.csv, with every write checked: a failed write is reported once and the
// run ends with a non-zero status, but training goes on (the model matters more).
class CsvLog {
 public:
  explicit CsvLog(const std::string& path) : path_(path), f_(path) {
    if (!f_) fail("cannot open it");
    f_ << "step,loss,lr,tokens_per_s,grad_norm,heldout_exact,heldout_token,heldout_loss\n";
  }
  template <class... A>
  void row(const A&... fields) {
    if (failed_) return;
    int i = 0;
    ((f_ << (i++ ? "," : "") << fields), ...);
    f_ << "\n";
    if (!f_.flush()) fail("write failed");
  }
  bool failed() const { return failed_; }
  void close() {
    if (!failed_) {
      f_.close();
      if (f_.fail()) fail("close failed");
    }
  }

 private:
  void fail(const char* what) {
    if (!failed_) std::fprintf(stderr, "\nwarning: %s: %s (%s); training goes on\n", path_.c_str(), what, std::strerror(errno));
    failed_ = true;
  }
  std::string path_;
  std::ofstream f_;
  bool failed_ = false;
};

struct History {
  std::vector<double> steps, losses, eval_steps, eval_accs;  // eval_accs: a loss for a language model
  double train_seconds = 0, eval_seconds = 0, allreduce_seconds = 0;
  int64_t tokens = 0, first_step = 0;
  int stopped_by = 0;  // the signal that ended training early, or 0
};

// ---- stopping on a signal ---------------------------------------------------------
// SIGINT (Ctrl-C), SIGTERM (kill, a job scheduler) and SIGHUP (the terminal
// closed) while training: the current step finishes, the checkpoint is
// written, the program says where and exits with 128 + the signal's number.
// A second signal ends the program at once (its default action).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // the second one: as if no handler were installed
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

void catch_stop_signals(bool on) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = on ? on_stop_signal : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

// Whether to stop now. Under MPI the ranks agree (any rank's signal stops
// them all after the same step), so no rank waits in a collective for one
// that left.
bool stop_requested() {
  if (dist::size() == 1) return g_stop_signal != 0;
  const double any = dist::sum(g_stop_signal != 0 ? 1.0 : 0.0);
  if (any > 0 && g_stop_signal == 0) g_stop_signal = SIGTERM;  // another rank's
  return any > 0;
}

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM"; }

// --save-every: a failed periodic save is a warning, not the end of the run
// (the previous checkpoint stays whole: writes are atomic).
void periodic_save(const Trainer& t, const std::string& path) {
  check_model_finite(t);
  try {
    t.save(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nwarning: the checkpoint of step %lld could not be written (%s); training goes on%s\n",
                 static_cast<long long>(t.step_count()), e.what(),
                 fs::exists(path) ? (", and " + path + " keeps the last good one").c_str() : "");
  }
}

void progress_bar(int64_t step, int64_t total, real loss, real lr, double tok_s, double eta) {
  const int width = 24;
  const int fill = static_cast<int>(width * step / std::max<int64_t>(total, 1));
  std::printf("\r[%s%s] %lld/%lld loss %.4f lr %.1e %5.1fk tok/s eta %3.0fs ", std::string(fill, '#').c_str(),
              std::string(width - fill, ' ').c_str(), static_cast<long long>(step),
              static_cast<long long>(total), static_cast<double>(loss), static_cast<double>(lr), tok_s / 1000, eta);
  std::fflush(stdout);
}

std::string eval_line(const EvalResult& r) {
  char b[160];
  if (r.is_lm)
    std::snprintf(b, sizeof b, "loss %.4f, perplexity %.3f", r.loss, r.perplexity());
  else
    std::snprintf(b, sizeof b, "exact %.2f%%, token %.2f%%", 100 * r.exact_acc(), 100 * r.token_acc());
  return b;
}

// Trains until --steps or the --target accuracy. Throws Diverged.
void train_loop(Trainer& t, const Options& o, CsvLog& log, History& h) {
  const bool tty = isatty(STDOUT_FILENO);
  h.first_step = t.step_count();
  double window_loss = 0;
  int64_t window_n = 0;
  while (t.step_count() < t.cfg.steps) {
    const auto t0 = Clock::now();
    const real loss = t.step();
    h.train_seconds += seconds_since(t0);
    h.tokens += t.last_target_tokens;
    h.allreduce_seconds += t.last_allreduce_seconds;
    const int64_t s = t.step_count();
    h.steps.push_back(double(s));
    h.losses.push_back(loss);
    window_loss += loss;
    window_n++;
    const double tok_s = double(h.tokens) / std::max(h.train_seconds, 1e-9);
    const double eta = h.train_seconds / double(s - h.first_step) * double(t.cfg.steps - s);
    log.row(s, loss, t.current_lr(), tok_s, t.last_grad_norm, "", "", "");
    if (tty && (s % 10 == 0 || s == t.cfg.steps)) progress_bar(s, t.cfg.steps, loss, t.current_lr(), tok_s, eta);
    if (!tty && (s % o.log_every == 0 || s == t.cfg.steps)) {
      std::printf("step %6lld  loss %.4f  lr %.2e  %.0f tok/s  %.1fs\n", static_cast<long long>(s), window_loss / window_n,
                  static_cast<double>(t.current_lr()), tok_s, h.train_seconds);
      window_loss = 0;
      window_n = 0;
    }
    if (o.save_every > 0 && s % o.save_every == 0 && !o.save_path.empty()) periodic_save(t, o.save_path);
    if (stop_requested()) {
      h.stopped_by = g_stop_signal;
      break;
    }
    if (o.eval_every > 0 && s % o.eval_every == 0) {
      const auto e0 = Clock::now();
      const EvalResult r = t.evaluate();
      h.eval_seconds += seconds_since(e0);
      h.eval_steps.push_back(double(s));
      h.eval_accs.push_back(r.is_lm ? r.loss : r.exact_acc());
      log.row(s, "", "", "", "", r.is_lm ? "" : std::to_string(r.exact_acc()), r.is_lm ? "" : std::to_string(r.token_acc()),
              r.is_lm ? std::to_string(r.loss) : "");
      if (tty) std::printf("\n");
      std::printf("  held-out at step %lld: %s\n", static_cast<long long>(s), eval_line(r).c_str());
      if (!o.no_early_stop && !r.is_lm && r.exact_acc() >= o.target) {
        std::printf("  reached the %.1f%% target at step %lld%s\n", 100 * o.target, static_cast<long long>(s),
                    s < t.cfg.steps ? ": stopping early" : "");
        break;
      }
      if (stop_requested()) {  // a signal during the evaluation
        h.stopped_by = g_stop_signal;
        break;
      }
    }
  }
  if (tty) std::printf("\n");
  if (h.stopped_by)
    std::printf("stopped by %s after step %lld: writing the checkpoint\n", signal_name(h.stopped_by),
                static_cast<long long>(t.step_count()));
  const int64_t n = t.step_count() - h.first_step;
  std::printf("trained %lld steps in %.1f s (%.1f ms/step, %.0f target tokens/s); evaluation took %.1f s\n",
              static_cast<long long>(n), h.train_seconds, 1000 * h.train_seconds / double(std::max<int64_t>(1, n)),
              double(h.tokens) / std::max(h.train_seconds, 1e-9), h.eval_seconds);
  if (dist::size() > 1)
    std::printf("gradient allreduce over %d MPI ranks: %.2f ms/step (%.1f%% of the step)\n", dist::size(),
                1000 * h.allreduce_seconds / double(std::max<int64_t>(1, n)),
                100 * h.allreduce_seconds / std::max(h.train_seconds, 1e-9));
}

// ---- reporting --------------------------------------------------------------------

std::string label(const Trainer& t, int64_t id) {
  if (id == Vocab::kPad) return "_";
  const std::string& s = t.vocab.text(id);
  return s == " " ? "_" : s;
}

void print_header(const Trainer& t, const Options& o) {
  const TrainConfig& c = t.cfg;
  if (c.data.empty())
    std::printf("qkv train: task %s, %lld symbols, lengths %lld..%lld, held-out %zu sequences\n", c.task.c_str(),
                (long long)c.vocab, (long long)c.min_len, (long long)c.max_len, t.pairs->heldout().size());
  else
    std::printf("qkv train: data %s (%s, %s tokens, vocabulary %lld), held-out %s\n", c.data.c_str(), c.format.c_str(),
                c.tokens.c_str(), (long long)t.vocab.size(),
                t.text ? (std::to_string(t.text->heldout_tokens().size()) + " tokens").c_str()
                       : (std::to_string(t.pairs->heldout().size()) + " pairs").c_str());
  std::printf("model: %s, d_model %lld, %lld heads, %lld%s layers, d_ff %lld, %s, %s, %s positions%s, %lld parameters\n",
              c.model.c_str(), (long long)c.d_model, (long long)c.heads, (long long)c.layers,
              c.is_gpt() ? "" : ("+" + std::to_string(c.layers)).c_str(), (long long)c.d_ff,
              c.pre_ln ? "Pre-LN" : "Post-LN", c.activation.c_str(), c.positions.c_str(), c.tie ? ", tied" : "",
              (long long)t.model().num_parameters());
  std::printf("training: batch %lld, up to %lld steps, Adam(0.9, 0.98, 1e-9), %s lr %.3g, warmup %lld, %d threads%s\n",
              (long long)c.batch, (long long)c.steps, c.schedule.c_str(), double(c.lr), (long long)c.warmup,
              get_num_threads(), o.load_path.empty() ? "" : (", from step " + std::to_string(t.step_count())).c_str());
  if (dist::size() > 1)
    std::printf("data parallel: %d MPI ranks, each with %lld..%lld of the %lld sequences of a step\n", dist::size(),
                (long long)(c.batch / dist::size()), (long long)((c.batch + dist::size() - 1) / dist::size()),
                (long long)c.batch);
  if (t.unknown_heldout_tokens > 0)
    std::printf("note: %lld held-out tokens are not in the training vocabulary; they read as <unk>\n",
                (long long)t.unknown_heldout_tokens);
}

// Held-out results, a few examples and the length-generalisation check.
// --temperature, --top-k, --top-p as nn::SampleOptions (checked).
nn::SampleOptions sampling(const Options& o) {
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
void print_samples(Trainer& t, const Options& o) {
  const Seq& held = t.text->heldout_tokens();
  const int64_t prompt = std::min<int64_t>(16, t.cfg.context / 2), n = std::min<int64_t>(o.max_new, 120);
  Generator gen(t.cfg.seed);
  std::printf("samples (temperature %g, top-p %g), each from a %lld-token held-out prompt:\n", o.temperature, o.top_p,
              (long long)prompt);
  for (int64_t k = 0; k < 3; ++k) {
    const size_t at = static_cast<size_t>(k) * held.size() / 3;
    if (at + static_cast<size_t>(prompt) > held.size()) break;
    const Seq p(held.begin() + static_cast<std::ptrdiff_t>(at), held.begin() + static_cast<std::ptrdiff_t>(at) + prompt);
    const Seq out = t.continue_text(p, n, sampling(o), gen);
    std::string text = "[" + t.decode_text(p) + "]" + t.decode_text(out);
    for (char& c : text) c = c == '\n' ? ' ' : c;
    std::printf("  %s\n", text.c_str());
  }
}

// Held-out accuracy by one decoder, timed.
EvalResult timed_eval(Trainer& t, const std::string& method, const Options& o, double* seconds) {
  const Trainer::Decoding keep = t.decoding;
  t.decoding = {method, o.beam, o.alpha, true};
  const auto t0 = Clock::now();
  EvalResult r = t.evaluate();
  *seconds = seconds_since(t0);
  t.decoding = keep;
  return r;
}

EvalResult final_report(Trainer& t, const Options& o) {
  if (t.text) {
    EvalResult r = t.evaluate();
    std::printf("\nheld-out (%lld tokens): loss %.4f, perplexity %.3f\n", (long long)r.tokens, r.loss, r.perplexity());
    print_samples(t, o);
    return r;
  }
  // Greedy, and (for the encoder-decoder) beam search beside it.
  double greedy_s = 0, beam_s = 0;
  const EvalResult greedy = timed_eval(t, "greedy", o, &greedy_s);
  std::printf("\nheld-out (%lld sequences, never trained on):\n", (long long)greedy.sequences);
  std::printf("  greedy:                 exact-sequence accuracy %6.2f%%, token accuracy %6.2f%% (%.2f s)\n",
              100 * greedy.exact_acc(), 100 * greedy.token_acc(), greedy_s);
  EvalResult r = greedy;
  if (t.s2s) {
    const EvalResult beam = timed_eval(t, "beam", o, &beam_s);
    std::printf("  beam %lld (alpha %.2g):     exact-sequence accuracy %6.2f%%, token accuracy %6.2f%% (%.2f s)\n",
                (long long)o.beam, o.alpha, 100 * beam.exact_acc(), 100 * beam.token_acc(), beam_s);
    if (o.decode == "beam") r = beam;
  }
  const auto& held = t.pairs->heldout();
  for (size_t i = 0; i < 5 && i < held.size(); ++i)
    std::printf("  %-24s -> %-24s %s\n", t.decode_text(held[i].src).c_str(), t.decode_text(r.predictions[i]).c_str(),
                r.predictions[i] == held[i].tgt ? "ok" : ("WRONG, want " + t.decode_text(held[i].tgt)).c_str());
  const bool table_ok = t.cfg.positions == "sinusoidal" || t.cfg.context >= (t.cfg.is_gpt() ? 2 : 1) * (t.cfg.max_len + 3) + 1;
  if (!t.pairs->from_file() && table_ok) {
    Generator long_gen(t.cfg.seed + 7);
    const EvalResult lr = t.evaluate(t.pairs->longer_set(o.long_eval, 3, long_gen));
    std::printf("length generalization (%lld sequences of length %lld..%lld, longer than any trained on): %s\n",
                (long long)lr.sequences, (long long)t.cfg.max_len + 1, (long long)t.cfg.max_len + 3, eval_line(lr).c_str());
  }
  return r;
}

// The cross-attention of one source (seq2seq only): per layer (H, T, S) maps,
// the source and decoder-input labels.
struct AttentionPicture {
  std::vector<Tensor> maps;
  std::vector<std::string> src, tgt;
};
AttentionPicture cross_attention_of(Trainer& t, const Seq& src, const Seq& answer) {
  NoGradGuard no_grad;
  AttentionPicture p;
  tasks::Batch one = collate_pairs({{src, answer}});
  t.s2s->eval();
  t.s2s->keep_attention(true);
  t.s2s->forward(one.src, one.tgt_in);
  for (const Tensor& a : t.s2s->cross_attention()) p.maps.push_back(a.reshape({a.size(1), a.size(2), a.size(3)}));
  t.s2s->keep_attention(false);
  t.s2s->train();
  for (int64_t tok : one.src.ids) p.src.push_back(label(t, tok));
  for (int64_t tok : one.tgt_in.ids) p.tgt.push_back(label(t, tok));
  return p;
}

void print_attention(const AttentionPicture& p) {
  const Tensor& last = p.maps.back();
  const int64_t H = last.size(0), T = last.size(1), S = last.size(2);
  Tensor avg = Tensor::zeros({T, S});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t k = 0; k < T * S; ++k) avg.data()[k] += last.data()[h * T * S + k] / static_cast<real>(H);
  std::printf("cross-attention of the last decoder layer (mean over heads):\n%s",
              plots::ascii_heatmap(avg.data(), T, S, p.src, p.tgt).c_str());
}


// --ask: answer each line (the text, or stdin's lines for "-"); a language
// model continues the text instead.
int ask(Trainer& t, const Options& o) {
  Generator gen(t.cfg.seed);
  auto one = [&](const std::string& line) {
    int64_t unknown = 0;
    const Seq src = t.encode_text(line, &unknown);
    if (src.empty()) return;
    if (t.is_lm() && static_cast<int64_t>(src.size()) > t.cfg.context)
      std::fprintf(stderr, "note: the prompt has %zu tokens; the model sees its last %lld (its context)\n", src.size(),
                   (long long)t.cfg.context);
    if (!t.is_lm()) t.check_source_fits(src.size());
    const Seq out = t.is_lm() ? t.continue_text(src, o.max_new, sampling(o), gen) : t.answer({src}).front();
    std::printf("%s\n", t.decode_text(out).c_str());
    if (unknown) std::fprintf(stderr, "note: %lld input tokens are not in the vocabulary (read as <unk>)\n", (long long)unknown);
    if (o.show_attention && t.s2s) print_attention(cross_attention_of(t, src, out));
  };
  if (o.ask != "-") {
    one(o.ask);
    return 0;
  }
  for (std::string line; std::getline(std::cin, line);) one(line);
  return 0;
}

// Logs and plots, after the checkpoint. Each failure is reported; returns
// false if any happened.
bool write_plots(Trainer& t, const Options& o, const History& h, const EvalResult& r, std::vector<std::string>* written) {
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
                            "qkv: " + name + ", training loss and held-out " + (r.is_lm ? "loss" : "accuracy"),
                            r.is_lm ? plots::EvalKind::Loss : plots::EvalKind::Accuracy);
    });
  if (t.s2s && !t.pairs->heldout().empty())
    attempt("attention.svg", [&] {
      const Seq& src = t.pairs->heldout()[0].src;
      AttentionPicture p = cross_attention_of(t, src, r.predictions.at(0));
      plots::write_attention_svg(o.out_dir + "/attention.svg", p.maps, p.src, p.tgt,
                                 "cross-attention, " + name + ": rows = decoder input, columns = source");
      std::printf("\n");
      print_attention(p);
    });
  return ok;
}

}  // namespace

int train_main(int argc, char** argv) {
  TrainConfig flags;
  Options o;
  CLI::App app{"Train a Transformer on a toy task or your own data (qkv)"};
  add_flags(app, flags, o);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time when piped to a file or CI log
  try {
    // 1. Settings that need no model.
    if (o.threads < 0 || o.threads > 1024) throw Error("--threads: must be in [0, 1024], got " + std::to_string(o.threads));
    if (o.eval_every < 0) throw Error("--eval-every: must be >= 0, got " + std::to_string(o.eval_every));
    if (o.log_every < 1) throw Error("--log-every: must be >= 1, got " + std::to_string(o.log_every));
    if (o.save_every < 0) throw Error("--save-every: must be >= 0, got " + std::to_string(o.save_every));
    if (!(o.target > 0 && o.target <= 1)) throw Error("--target: must be in (0, 1], got " + std::to_string(o.target));
    if ((o.eval_only || !o.ask.empty()) && o.load_path.empty())
      throw Error(std::string(o.eval_only ? "--eval-only" : "--ask") + " needs --load PATH");
    if (o.show_attention && o.ask.empty()) throw Error("--show-attention goes with --ask");
    if (o.decode != "greedy" && o.decode != "beam") throw Error("--decode: expected greedy or beam, got '" + o.decode + "'");
    if (o.beam < 1 || o.beam > 256) throw Error("--beam: must be in [1, 256], got " + std::to_string(o.beam));
    if (!(o.alpha >= 0 && o.alpha <= 10)) throw Error("--alpha: must be in [0, 10], got " + std::to_string(o.alpha));
    if (o.max_new < 1 || o.max_new > 100000) throw Error("--max-new: must be in [1, 100000], got " + std::to_string(o.max_new));
    if (o.top_k < 0) throw Error("--top-k: must be >= 0 (0: all tokens), got " + std::to_string(o.top_k));
    sampling(o);  // --temperature, --top-p
    if (o.no_save && (!o.save_path.empty() || o.save_every > 0)) throw Error("--no-save: contradicts --save / --save-every");
    if (o.allow_nonfinite && !(o.eval_only || !o.ask.empty()))
      throw Error("--allow-nonfinite: only with --eval-only or --ask (never to train on)");
    if (o.threads > 0) set_num_threads(o.threads);

    // 2. The run: new, or every setting from the checkpoint.
    const std::vector<std::string> given = given_keys(app);
    if (!o.init_from.empty() && !o.load_path.empty()) throw Error("--init-from: starts a new run; --load resumes one (give one of them)");
    const DataUse use = !o.ask.empty() ? DataUse::None : o.eval_only ? DataUse::Evaluate : DataUse::Train;
    Trainer t = !o.load_path.empty() ? resumed_run(o.load_path, flags, given, o.allow_nonfinite, use)
                : !o.init_from.empty() ? Trainer::init_from(o.init_from, flags, given)
                                       : new_run(flags, given);
    t.decoding = {o.decode, o.beam, o.alpha, true};
    // Under mpirun: every rank must run the same settings (they take part in
    // the same collective calls); rank 0 alone prints and writes files.
    const bool lead = dist::rank() == 0;
    if (!dist::all_equal(t.cfg.to_json().dump() + app.config_to_str(true, false)))
      throw Error("the MPI ranks were started with different flags; every rank needs the same command line");
    check_same_data_on_all_ranks(t);
    if (!lead && !std::freopen("/dev/null", "w", stdout)) throw Error("cannot silence stdout of a rank > 0");
    if (!o.ask.empty()) return ask(t, o);

    // 3. Every output path, before any work: a run that cannot keep its
    //    result is refused now, not after training.
    const bool training = !o.eval_only;
    if (training) {
      if (o.out_dir.empty()) o.out_dir = "runs/" + run_name(t.cfg);
      if (!o.no_save && o.save_path.empty()) o.save_path = o.out_dir + "/model.safetensors";
      if (lead) prepare_outputs(o);
    }
    print_header(t, o);
    if (o.eval_only && o.detect_anomaly)
      std::printf("anomaly check (one forward and backward pass on held-out data): no NaN or Inf, loss %.4f\n",
                  double(t.check_anomalies()));

    // 4. Train (or only evaluate).
    History h;
    bool outputs_ok = true, log_ok = true;
    if (training) {
      CsvLog log(lead ? o.out_dir + "/log.csv" : "/dev/null");
      try {
        DetectAnomalyGuard anomaly(o.detect_anomaly);
        catch_stop_signals(true);
        train_loop(t, o, log, h);
        if (!o.save_path.empty()) check_model_finite(t);
      } catch (const Error& e) {  // Diverged, or AnomalyError from --detect-anomaly
        const bool anomaly = dynamic_cast<const AnomalyError*>(&e) != nullptr;
        if (!anomaly && !dynamic_cast<const Diverged*>(&e)) throw;
        log.close();
        std::fprintf(stderr, "\nerror: %s%s\nstopped; no checkpoint was written%s\n",
                     anomaly ? ("step " + std::to_string(t.step_count() + 1) + ": ").c_str() : "", e.what(),
                     o.save_path.empty() ? "" : (" (" + o.save_path + " is as it was)").c_str());
        return kExitDiverged;
      }
      log.close();
      log_ok = !log.failed();
      outputs_ok = log_ok;
    }

    // 5. The model first, then everything else.
    if (training && !o.save_path.empty()) {
      const std::string written = save_with_fallback(t, o.save_path);
      if (written.empty()) {
        std::fprintf(stderr, "error: the checkpoint could not be written anywhere%s\n",
                     o.save_every > 0 ? "; the last periodic checkpoint is the one on disk" : "");
        outputs_ok = false;
      } else {
        std::printf("checkpoint: %s (step %lld)\n", written.c_str(), (long long)t.step_count());
        outputs_ok = outputs_ok && written == o.save_path;
      }
    }
    catch_stop_signals(false);  // the model is safe: a signal now ends the program at once
    if (h.stopped_by) {  // no final evaluation: the user asked to stop
      if (lead) std::printf("log: %s/log.csv; resume with --load %s\n", o.out_dir.c_str(), o.save_path.c_str());
      return 128 + h.stopped_by;
    }
    if (!lead) return outputs_ok ? 0 : kExitError;
    const EvalResult r = final_report(t, o);
    if (training) {
      std::vector<std::string> written;
      outputs_ok = write_plots(t, o, h, r, &written) && outputs_ok;
      std::string list = log_ok ? o.out_dir + "/log.csv" : "";
      for (const std::string& w : written) list += (list.empty() ? o.out_dir + "/" : ", ") + w;
      if (!list.empty()) std::printf("\nwrote %s\n", list.c_str());
    } else if (t.s2s) {  // --eval-only writes no file, so as not to touch the run's own
      std::printf("\n");
      print_attention(cross_attention_of(t, t.pairs->heldout()[0].src, r.predictions.at(0)));
    }
    if (r.is_lm)
      std::printf("held-out perplexity: %.3f\n", r.perplexity());
    else
      std::printf("held-out exact-sequence accuracy: %.2f%%\n", 100 * r.exact_acc());
    return outputs_ok ? 0 : kExitError;
  } catch (const std::exception& e) {
    if (dist::size() > 1) {  // the other ranks may wait for this one: end them all
      std::fprintf(stderr, "error (MPI rank %d of %d): %s\n", dist::rank(), dist::size(), e.what());
      dist::abort_all(kExitError);
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitError;
  }
}

// Under mpirun (make MPI=1) every rank runs train_main; see dist/distributed.h.
int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  const int status = train_main(argc, argv);
  // A rank that stops alone (a bad flag) ends them all; a divergence stops
  // every rank at the same step (they check the same global loss and norm).
  if (status != 0 && status != kExitDiverged && dist::size() > 1) dist::abort_all(status);
  dist::finalize();
  return status;
}
