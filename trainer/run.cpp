// The program train as a component (trainer/run.h): the output paths checked
// before work, the training loop with its log, periodic saves and signals,
// and the order in which results are kept. Opening the run is
// trainer/open_run.cpp; the options checked before it, trainer/run_options.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>

#include <nlohmann/json.hpp>

#include "generation/decoding_methods.h"
#include "trainer/explain.h"
#include "trainer/instruments.h"
#include "trainer/instruments_plots.h"
#include "trainer/csv_log.h"
#include "trainer/eval_kinds.h"
#include "trainer/output_paths.h"
#include "trainer/presets.h"
#include "trainer/report.h"
#include "trainer/stop_signals.h"

namespace qkv::train {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Under MPI every rank must read the same data (same flags are not enough:
// each rank reads its own copy of the files). Compares the files' hashes and
// the vocabulary across ranks, before any collective could mismatch, naming
// the first rank that differs from rank 0 and the file.
void check_same_data_on_all_ranks(const Trainer& t) {
  if (dist::size() == 1) return;
  auto hash_of = [&](const char* part) {
    return t.data_info->contains(part) ? (*t.data_info)[part]["fnv1a64"].get<std::string>()
                                       : std::string("-");
  };
  const json mine = {hash_of("data"), hash_of("valid"),
                     train::detail::hex64(fnv1a64(t.vocab.to_json().dump()))};
  const std::vector<std::string> all = dist::all_gather(mine.dump());
  const json first = json::parse(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const json other = json::parse(all[r]);
    const char* what[] = {"--data file", "--valid file", "vocabulary"};
    for (size_t k = 0; k < 3; ++k)
      if (other[k] != first[k])
        throw Error("MPI rank " + std::to_string(r) + " reads a different " + what[k] +
                    " than rank 0 (hash " + other[k].get<std::string>() + " vs " +
                    first[k].get<std::string>() + (k == 0 ? ", " + brief(t.cfg.data) : "") +
                    "): every rank needs the same data files");
  }
}

// ---- output paths, checked before the first step ----------------------------------

// Creates --out when missing and checks that it and the checkpoint's directory
// take files. On failure nothing is left behind (a directory made here is
// removed again) and the error names the flag and the path.
void prepare_outputs(const RunOptions& o) {
  std::vector<fs::path> made;  // directories created here, deepest last
  auto undo = [&] {
    std::error_code ec;
    for (auto it = made.rbegin(); it != made.rend(); ++it)
      fs::remove(*it, ec);  // only if still empty
  };
  try {
    std::string why;
    const fs::path out(o.out_dir);
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_directory(out, ec))
      throw Error("--out " + brief(o.out_dir) + ": exists and is not a directory");
    if (!fs::exists(out, ec)) {
      for (fs::path p = fs::absolute(out); !p.empty() && !fs::exists(p, ec); p = p.parent_path())
        made.insert(made.begin(), p);
      if (!fs::create_directories(out, ec) && ec) {
        made.clear();
        throw Error("--out " + brief(o.out_dir) + ": cannot create the directory: " + ec.message());
      }
    }
    if (!outputs::can_create_in(out, &why))
      throw Error("--out " + brief(o.out_dir) + ": cannot write files there: " + why);
    for (const char* name :
         {"log.csv", "loss.svg", "attention.svg", "experts.svg", "diverged.html"})  // --out gets
      outputs::check_file_path("--out", (out / name).string());
    if (o.instruments > 0)  // and the instruments' records and pictures
      for (const char* name : {"instruments.jsonl", "update_ratio.svg", "grad_norm.svg",
                               "activations.svg", "entropy.svg", "index.html"})
        outputs::check_file_path("--out", (out / name).string());
    if (!o.save_path.empty()) outputs::check_file_path("--save", o.save_path);
    if (!o.best_path.empty())
      outputs::check_file_path("--save (its best held-out checkpoint)", o.best_path);
    fs::remove(out / "diverged.html", ec);  // an earlier run's divergence, not this run's
  } catch (...) {
    undo();
    throw;
  }
}

// Weights that are no longer finite mean the run diverged (e.g. in its last
// update, after the loss was checked): said so, never "could not be written".
void check_model_finite(const Trainer& t) {
  if (auto bad = find_nonfinite(nn::state_dict(t.model())))
    throw Diverged("after step " + std::to_string(t.step_count()) +
                   " the weights are not finite (tensor '" + bad->tensor + "' holds " +
                   std::to_string(bad->count) + " NaN or Inf values): training diverged");
}

// Writes the checkpoint; if that fails, tries fallback places and says where
// it went. Returns the path written, or "" when every attempt failed.
std::string save_with_fallback(const Trainer& t, const std::string& path) {
  const std::vector<std::string> dropout_states = t.dropout_states();  // every MPI rank's
  if (dist::rank() != 0) return path;                                  // rank 0 writes
  std::vector<std::string> tries{path};
  // The rescue names stay short enough for any file system, whatever --save's length.
  const std::string base = fs::path(path).filename().string().substr(0, 120);
  const std::string rescue = base + ".rescued-" + std::to_string(getpid());
  tries.push_back(rescue);  // the working folder
  std::error_code ec;       // a TMPDIR that does not exist must not stop the first try
  const fs::path tmp = fs::temp_directory_path(ec);
  std::string tmp_dir = tmp.string();
  while (tmp_dir.size() > 1 && tmp_dir.back() == '/') tmp_dir.pop_back();
  if (!ec && tmp_dir != "/tmp") tries.push_back((tmp / rescue).string());  // $TMPDIR
  tries.push_back("/tmp/" + rescue);  // $TMPDIR may take no files where /tmp does
  for (size_t i = 0; i < tries.size(); ++i) {
    try {
      t.write_checkpoint(tries[i], dropout_states);
      if (i > 0)
        std::fprintf(stderr, "checkpoint: could not write %s; wrote %s instead\n", path.c_str(),
                     tries[i].c_str());
      return tries[i];
    } catch (const std::exception& e) {
      std::fprintf(stderr, "checkpoint: %s\n", e.what());
    }
  }
  return "";
}

// ---- the training loop ----------------------------------------------------------

// --save-every: a failed periodic save is a warning, not the end of the run
// (the previous checkpoint stays whole: writes are atomic).
void periodic_save(const Trainer& t, const std::string& path) {
  check_model_finite(t);
  try {
    t.save(path);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::fprintf(
        stderr,
        "\nwarning: the checkpoint of step %lld could not be written (%s); training goes on%s\n",
        static_cast<long long>(t.step_count()), e.what(),
        fs::exists(path, ec) ? (", and " + brief(path) + " keeps the last good one").c_str() : "");
  }
}

void progress_bar(int64_t step, int64_t total, real loss, real lr, double tok_s, double eta) {
  const int width = 24;
  const int fill = static_cast<int>(width * step / std::max<int64_t>(total, 1));
  std::printf("\r[%s%s] %lld/%lld loss %.4f lr %.1e %5.1fk tok/s eta %3.0fs ",
              std::string(fill, '#').c_str(), std::string(width - fill, ' ').c_str(),
              static_cast<long long>(step), static_cast<long long>(total),
              static_cast<double>(loss), static_cast<double>(lr), tok_s / 1000, eta);
  std::fflush(stdout);
}

// A language model's evaluation at step s: a new best held-out loss is
// remembered (t.best, saved in every checkpoint) and its checkpoint written to
// o.best_path (a failed write is a warning). Returns the note for the
// held-out line.
std::string keep_best(Trainer& t, const RunOptions& o, const EvalResult& r, int64_t s) {
  char b[96];
  if (t.best.step >= 0 && !(r.loss < t.best.loss)) {
    std::snprintf(b, sizeof b, " (best %.4f at step %lld)", t.best.loss, (long long)t.best.step);
    return b;
  }
  t.best = {r.loss, s};
  if (o.best_path.empty()) return " (best so far)";
  periodic_save(t, o.best_path);
  return " (best so far: " + o.best_path + ")";
}

// Trains until --steps, the --target accuracy or --patience. Throws Diverged.
void train_loop(Trainer& t, const RunOptions& o, CsvLog& log, History& h) {
  const bool tty = isatty(STDOUT_FILENO);
  h.first_step = t.step_count();
  double window_loss = 0;
  int64_t window_n = 0;
  while (t.step_count() < t.cfg.steps) {
    const auto t0 = Clock::now();
    const real loss = t.step();
    h.train_seconds += detail::seconds_since(t0);
    h.tokens += t.last_target_tokens;
    h.allreduce_seconds += t.last_allreduce_seconds;
    const int64_t s = t.step_count();
    h.steps.push_back(double(s));
    h.losses.push_back(loss);
    if (t.experts.any())  // --experts: this step's share per expert
      h.expert_shares.push_back(t.experts.last_shares());
    window_loss += loss;
    window_n++;
    const double tok_s = double(h.tokens) / std::max(h.train_seconds, 1e-9);
    const double eta = h.train_seconds / double(s - h.first_step) * double(t.cfg.steps - s);
    log.row(s, loss, t.current_lr(), tok_s, t.last_grad_norm, "", "", "", "", "");
    if (tty && (s % 10 == 0 || s == t.cfg.steps))
      progress_bar(s, t.cfg.steps, loss, t.current_lr(), tok_s, eta);
    if (!tty && (s % o.log_every == 0 || s == t.cfg.steps)) {
      std::printf("step %6lld  loss %.4f  lr %.2e  %.0f tok/s  %.1fs\n", static_cast<long long>(s),
                  window_loss / window_n, static_cast<double>(t.current_lr()), tok_s,
                  h.train_seconds);
      window_loss = 0;
      window_n = 0;
    }
    if (o.save_every > 0 && s % o.save_every == 0 && !o.save_path.empty())
      periodic_save(t, o.save_path);
    if (stop_requested()) {
      h.stopped_by = stop_signal();
      break;
    }
    if (o.eval_every > 0 && s % o.eval_every == 0) {
      const auto e0 = Clock::now();
      const EvalResult r = t.evaluate();
      h.eval_seconds += detail::seconds_since(e0);
      h.eval_steps.push_back(double(s));
      // The run's evaluation kind says what it shows, logs and judges by.
      const EvalKind& kind = *r.kind;
      const bool by_loss = kind.judged_by == plots::EvalKind::Loss;
      h.eval_accs.push_back(kind.metric(r));
      const EvalCells c = kind.cells(r);
      log.row(s, "", "", "", "", c.exact_acc, c.token_acc, c.loss, c.bleu, c.bits_per_byte);
      if (t.instruments) t.instruments->heldout(s, r.loss);
      if (tty) std::printf("\n");
      std::printf("  held-out at step %lld: %s%s\n", static_cast<long long>(s),
                  kind.line(r).c_str(), by_loss ? keep_best(t, o, r, s).c_str() : "");
      const int64_t since_best =
          t.best.step < 0 ? 0 : s / o.eval_every - t.best.step / o.eval_every;
      if (!o.no_early_stop && by_loss && o.patience > 0 && since_best >= o.patience) {
        std::printf("  no new best held-out loss in %lld evaluations (best %.4f at step %lld)%s\n",
                    static_cast<long long>(since_best), t.best.loss,
                    static_cast<long long>(t.best.step),
                    s < t.cfg.steps ? ": stopping early (--patience)" : "");
        break;
      }
      if (!o.no_early_stop && !by_loss && kind.metric(r) >= o.target) {
        std::printf("  reached the %.1f%% target at step %lld%s\n", 100 * o.target,
                    static_cast<long long>(s), s < t.cfg.steps ? ": stopping early" : "");
        break;
      }
      if (stop_requested()) {  // a signal during the evaluation
        h.stopped_by = stop_signal();
        break;
      }
    }
  }
  if (tty) std::printf("\n");
  if (h.stopped_by)
    std::printf(
        "stopped by %s after step %lld%s\n", signal_name(h.stopped_by),
        static_cast<long long>(t.step_count()),
        o.save_path.empty() ? " (--no-save: nothing is written)" : ": writing the checkpoint");
  const int64_t n = t.step_count() - h.first_step;
  std::printf(
      "trained %lld steps in %.1f s (%.1f ms/step, %.0f target tokens/s); evaluation took %.1f s\n",
      static_cast<long long>(n), h.train_seconds,
      1000 * h.train_seconds / double(std::max<int64_t>(1, n)),
      double(h.tokens) / std::max(h.train_seconds, 1e-9), h.eval_seconds);
  if (dist::size() > 1)
    std::printf("gradient allreduce over %d MPI ranks: %.2f ms/step (%.1f%% of the step)\n",
                dist::size(), 1000 * h.allreduce_seconds / double(std::max<int64_t>(1, n)),
                100 * h.allreduce_seconds / std::max(h.train_seconds, 1e-9));
}

// Training stopped on an error that is not a divergence (out of memory in an
// evaluation, a failed read): the weights of the last finished step are
// finite and valuable, so they are written (to the checkpoint or its rescue
// path) before the error is reported.
void keep_before_rethrow(const Trainer& t, const RunOptions& o, const std::exception& e) {
  if (o.save_path.empty() || t.step_count() == 0) return;
  if (find_nonfinite(nn::state_dict(t.model()))) return;
  std::fprintf(stderr, "\nerror during training: %s\nwriting the checkpoint of step %lld first\n",
               e.what(), static_cast<long long>(t.step_count()));
  const std::string written = save_with_fallback(t, o.save_path);
  if (!written.empty())
    std::fprintf(stderr, "checkpoint: %s (step %lld)\n", written.c_str(),
                 (long long)t.step_count());
}

// The final evaluation comes after the last --eval-every check: when it
// beats the best one, it is the best, and the best file is the final model
// (the checkpoint is written again, its 'best_heldout' this step, and
// copied to o.best_path). One process only: with MPI a save is collective
// and the report runs on rank 0 alone (report_best then says to use the
// final checkpoint). Returns whether it did.
bool keep_final_as_best(Trainer& t, const RunOptions& o, const EvalResult& final,
                        std::string& written) {
  if (dist::size() != 1 || t.best.step < 0 || o.best_path.empty() || written.empty() ||
      t.step_count() <= t.best.step || !(final.loss < t.best.loss))
    return false;
  t.best = {final.loss, t.step_count()};
  const std::string again = save_with_fallback(t, written);
  if (again.empty()) return false;
  written = again;
  periodic_save(t, o.best_path);
  return true;
}

// The final report's lines on a language model's best held-out loss: where
// its checkpoint is, and whether the loss rose past it by the end (`final`:
// the final evaluation, at the last step).
void report_best(const Trainer& t, const RunOptions& o, const EvalResult& final) {
  if (t.best.step < 0) return;
  std::error_code ec;
  const bool kept = !o.best_path.empty() && fs::exists(o.best_path, ec);
  const std::string where =
      kept ? o.best_path : "not kept in a file (--no-save, or resumed into another --save)";
  std::printf("best held-out loss %.4f at step %lld%s: %s\n", t.best.loss,
              static_cast<long long>(t.best.step),
              t.best.step == t.step_count() ? " (the final evaluation)" : "", where.c_str());
  if (t.step_count() <= t.best.step) return;
  // Compared as printed: a rise below the fourth decimal is no rise to report.
  char best[32], last[32];
  std::snprintf(best, sizeof best, "%.4f", t.best.loss);
  std::snprintf(last, sizeof last, "%.4f", final.loss);
  if (final.loss > t.best.loss && std::string(best) != last)
    std::printf("held-out loss rose from %s (step %lld) to %s (step %lld): %s\n", best,
                static_cast<long long>(t.best.step), last, static_cast<long long>(t.step_count()),
                kept ? ("the best checkpoint is " + o.best_path).c_str()
                     : "the best step's weights were not kept in a file");
  // The final evaluation comes after the last check: it may beat them all.
  else if (final.loss < t.best.loss && std::string(best) != last)
    std::printf(
        "the final model (step %lld, held-out loss %s) is better than the best check's: "
        "use the final checkpoint (written above)\n",
        static_cast<long long>(t.step_count()), last);
}

}  // namespace

std::string best_checkpoint_path(const std::string& save_path) {
  const std::string ext = ".safetensors";
  if (save_path.size() > ext.size() &&
      save_path.compare(save_path.size() - ext.size(), ext.size(), ext) == 0)
    return save_path.substr(0, save_path.size() - ext.size()) + ".best" + ext;
  return save_path + ".best";
}

int run(Trainer& t, RunOptions& o, const std::string& flags_text) {
  ignore_broken_pipe();  // `train | head`: the run goes on to its checkpoint
  t.decoding = {o.decode, o.beam, o.alpha, true};
  t.check_decoding();  // --decode beam on a model that cannot search: refused before any work
  // Under mpirun: every rank must run the same settings (they take part in
  // the same collective calls); rank 0 alone prints and writes files.
  const bool lead = dist::rank() == 0;
  if (!dist::all_equal(t.cfg.to_json().dump() + flags_text))
    throw Error(
        "the MPI ranks were started with different flags; every rank needs the same command line");
  check_same_data_on_all_ranks(t);
  if (!lead && !std::freopen("/dev/null", "w", stdout))
    throw Error("cannot silence stdout of a rank > 0");
  if (o.count_tokens) {
    count_tokens(t, o);
    return 0;
  }
  if (!o.ask.empty()) return ask(t, o);
  if (!o.explain.empty()) {
    write_explanation(t, o.explain, o.html, "train --load " + o.load_path, o.passage);
    return 0;
  }

  // What the final report holds: refused now, not after training.
  t.check_report_fits(500, parse_long_lengths(o.long_lengths).hi);
  check_long_lengths(t, o);
  // 3. Every output path, before any work: a run that cannot keep its
  //    result is refused now, not after training.
  const bool training = !o.eval_only;
  if (training) {
    if (o.out_dir.empty()) o.out_dir = "runs/" + run_name(t.cfg);
    if (!o.no_save && o.save_path.empty()) o.save_path = o.out_dir + "/model.safetensors";
    // A run judged by its held-out loss keeps its best checkpoint beside the last.
    if (eval_kind(t).judged_by == plots::EvalKind::Loss && !o.save_path.empty())
      o.best_path = best_checkpoint_path(o.save_path);
    if (lead) prepare_outputs(o);
    if (lead && o.instruments > 0)  // --instruments: opened before any work, as every output
      t.instruments =
          std::make_unique<Instruments>(t.model(), o.instruments, o.out_dir + "/instruments.jsonl",
                                        !o.load_path.empty(), t.step_count());
  }
  print_header(t, o);
  if (o.eval_only && o.detect_anomaly)
    std::printf(
        "anomaly check (one forward and backward pass on held-out data): no NaN or Inf, loss "
        "%.4f\n",
        double(t.check_anomalies()));

  // 4. Train (or only evaluate).
  History h;
  bool outputs_ok = true, log_ok = true;
  if (training) {
    CsvLog log(lead ? o.out_dir + "/log.csv" : "", !o.load_path.empty());
    try {
      DetectAnomalyGuard anomaly(o.detect_anomaly);
      catch_stop_signals(true);
      train_loop(t, o, log, h);
      if (!o.save_path.empty()) check_model_finite(t);
    } catch (const std::exception& e) {  // Diverged, or AnomalyError from --detect-anomaly
      const bool anomaly = dynamic_cast<const AnomalyError*>(&e) != nullptr;
      if (!anomaly && !dynamic_cast<const Diverged*>(&e)) {
        keep_before_rethrow(t, o, e);
        throw;
      }
      log.close();
      std::fprintf(stderr, "\nerror: %s%s\nstopped; no checkpoint was written%s\n",
                   anomaly ? ("step " + std::to_string(t.step_count() + 1) + ": ").c_str() : "",
                   e.what(),
                   o.save_path.empty() ? "" : (" (" + o.save_path + " is as it was)").c_str());
      // Which op: the step again in detect-anomaly mode, and its page (also
      // after --detect-anomaly stopped it: the rerun keeps the inputs' values).
      if (std::optional<DivergedStep> d = t.rerun_diverged_step()) {
        d->stopped = e.what();
        if (!anomaly)
          std::fprintf(stderr, "step %lld rerun in detect-anomaly mode (float32): %s\n",
                       static_cast<long long>(d->step), d->said().c_str());
        if (lead) try {
            std::fprintf(stderr, "which op made it: %s\n",
                         write_diverged_page(*d, o.out_dir).c_str());
          } catch (const std::exception& w) {
            std::fprintf(stderr, "warning: %s\n", w.what());
          }
      }
      if (t.instruments) {
        t.instruments->diverged(t.step_count() + 1);
        finish_instruments(*t.instruments, o.out_dir, t.step_count() + 1);
      }
      return kExitDiverged;
    }
    log.close();
    log_ok = !log.failed();
    outputs_ok = log_ok;
  }

  // 5. The model first, then everything else.
  std::string written;
  if (training && !o.save_path.empty()) {
    written = save_with_fallback(t, o.save_path);
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
  // A signal that came while the checkpoint was written: no final evaluation either.
  if (!h.stopped_by && stop_signal() != 0) h.stopped_by = stop_signal();
  if (h.stopped_by) {  // no final evaluation: the user asked to stop
    if (lead && !written.empty())
      std::printf("log: %s/log.csv; resume with --load %s\n", o.out_dir.c_str(), written.c_str());
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
  } else {  // --eval-only writes no file, so as not to touch the run's own
    print_first_attention(t, r);
  }
  if (training && r.kind->judged_by == plots::EvalKind::Loss) {
    keep_final_as_best(t, o, r, written);
    report_best(t, o, r);
  }
  if (training && t.instruments) {
    t.instruments->heldout(t.step_count(), r.loss);  // the final evaluation, for rule 5
    outputs_ok = finish_instruments(*t.instruments, o.out_dir, 0) && outputs_ok;
  }
  std::printf("%s\n", r.kind->summary(r).c_str());
  return outputs_ok ? 0 : kExitError;
}

}  // namespace qkv::train
