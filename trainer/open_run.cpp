// Opening a run (trainer/run.h's open_run): a new run with its family's
// defaults, a resumed one with the flags it may change, or a fine-tuning run
// from a model file (--init-from), each refused with the flag at fault when
// the flags do not fit together.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/blas.h"
#include "dist/distributed.h"

#include "trainer/positions.h"
#include "trainer/presets.h"
#include "trainer/token_kinds.h"
#include "trainer/run.h"

namespace qkv::train {

namespace {

// A new run, with the family's own defaults (trainer/family.h; gpt: Pre-LN,
// GELU, tied output, learned positions) for whatever the command line left unsaid.
Trainer new_run(TrainConfig c, const std::vector<std::string>& given,
                const std::string& tokenizer_from = "") {
  auto said = [&](const char* k) {
    return std::find(given.begin(), given.end(), k) != given.end();
  };
  const Family* fam = find_family(c.model);  // an unknown one is refused by Trainer
  if (fam && !said("positions") && !words_of(fam->model.positions).empty())
    c.positions = words_of(fam->model.positions).front();  // the family's default
  if (fam && fam->settings.defaults) fam->settings.defaults(c, said);
  if (tokenizer_from.empty()) return Trainer(c);
  if (fam && fam->reads.images)
    throw Error("--tokenizer-from: the " + c.model + " model reads images, not tokens");
  std::string kind;
  Vocab v;
  try {
    v = Trainer::file_tokenizer(tokenizer_from, &kind);
  } catch (const Error& e) {  // the file's own words, with the flag that named it
    throw Error(std::string("--tokenizer-from: ") + e.what());
  }
  // The file's tokens are the run's: words, characters or its BPE.
  if (!find_token_kind(kind))
    throw Error("--tokenizer-from " + brief(tokenizer_from) + ": metadata 'tokenizer' is '" +
                brief(kind) + "' (expected " + token_kinds().names() + ")");
  if (said("tokens") && c.tokens != kind)
    throw Error("--tokens " + brief(c.tokens) + ": --tokenizer-from " + brief(tokenizer_from) +
                " holds " + kind + " tokens (leave the flag out)");
  c.tokens = kind;
  // The file's vocabulary is the run's: a size asked for as well would be dropped.
  if (said("bpe_vocab") && (!v.bpe() || c.bpe_vocab != v.bpe()->vocab_size()))
    throw Error("--bpe-vocab " + std::to_string(c.bpe_vocab) + ": --tokenizer-from " +
                brief(tokenizer_from) + " holds " +
                (v.bpe() ? "a BPE tokenizer of " + std::to_string(v.bpe()->vocab_size()) + " tokens"
                         : kind + " tokens, not BPE") +
                " (leave the flag out)");
  if (said("max_vocab"))
    throw Error("--max-vocab: --tokenizer-from " + brief(tokenizer_from) +
                " gives the run its vocabulary (leave the flag out)");
  if (v.bpe()) c.bpe_vocab = v.bpe()->vocab_size();
  return Trainer(c, &v);
}

// Resumes (or, for --eval-only and --decode, reopens) a checkpoint. Its file
// holds every setting; a flag given as well must agree with it, except --steps.
Trainer resumed_run(const std::string& path, const TrainConfig& flags,
                    const std::vector<std::string>& given, bool allow_nonfinite, DataUse use) {
  const json mine = flags.to_json();
  return Trainer::resume(
      path,
      [&](TrainConfig& c, bool model_file) {
        const json saved = c.to_json();
        if (model_file) {  // no run to agree with: the flags say how to read and evaluate it
          json j = saved;
          for (const std::string& k : given) {
            if (TrainConfig::is_arch_key(k) && saved[k] != mine[k])
              throw Error(flag_of(k) + ": the model file " + brief(path) + " holds a model with " +
                          flag_of(k) + " " + show_value(saved[k]) +
                          ", but the command line gives " + show_value(mine[k]));
            j[k] = mine[k];
          }
          c = TrainConfig::from_json(j, "the command line");
          return;
        }
        for (const std::string& k : given) {
          if (k == "steps" || saved[k] == mine[k]) continue;
          // The data may be named anew (moved, another folder, another path to
          // the same file): its hash decides (restore() checks it). Evaluating,
          // a model trained on a task may also read a file.
          if (k == "data" || k == "valid" ||
              (use == DataUse::Evaluate && k == "format" && saved["data"] == "")) {
            (k == "data" ? c.data : k == "valid" ? c.valid : c.format) = mine[k].get<std::string>();
            continue;
          }
          throw Error(flag_of(k) + ": the checkpoint " + brief(path) + " was trained with " +
                      flag_of(k) + " " + show_value(saved[k]) + ", but the command line gives " +
                      show_value(mine[k]) + " (leave the flag out to use the checkpoint's)");
        }
        c.steps = flags.steps;
        if (std::find(given.begin(), given.end(), "steps") == given.end())
          c.steps = saved["steps"].get<int64_t>();
      },
      allow_nonfinite, use);
}

}  // namespace

Trainer open_run(const TrainConfig& flags, const std::vector<std::string>& given,
                 const RunOptions& o) {
  if (!o.init_from.empty() && !o.load_path.empty())
    throw Error("--init-from: starts a new run; --load resumes one (give one of them)");
  if (!o.tokenizer_from.empty() && (!o.init_from.empty() || !o.load_path.empty()))
    throw Error(
        "--tokenizer-from: starts a new model on a file's tokens; --init-from and --load "
        "take the file's tokens already");
  check_given_flags(flags, given);
  const DataUse use = !o.ask.empty() || !o.explain.empty() ? DataUse::None
                      : o.eval_only                        ? DataUse::Evaluate
                                                           : DataUse::Train;
  if (!o.load_path.empty()) {
    if (!o.preset.empty())
      throw Error("--preset: sets a new run's architecture; the checkpoint " + brief(o.load_path) +
                  " holds its own (leave --preset out)");
    Trainer t = resumed_run(o.load_path, flags, given, o.allow_nonfinite, use);
    // Fewer --steps than the checkpoint has taken would train nothing and
    // write a file whose schedule ends before its step.
    if (use == DataUse::Train && t.step_count() > t.cfg.steps)
      throw Error("--steps " + std::to_string(t.cfg.steps) + ": the checkpoint " +
                  brief(o.load_path) + " is already at step " + std::to_string(t.step_count()) +
                  ": give more --steps to train on, or --eval-only to evaluate it");
    // A resumed training run goes on with the products it was trained with
    // (the file's metadata 'matmul_precision'), unless --precision says
    // otherwise; an evaluation or an answer is float32 unless asked.
    if (use == DataUse::Train && !o.precision_given && t.trained_in_bf16) {
      try {
        set_matmul_precision(MatmulPrecision::bf16);
      } catch (const Error& e) {  // the float64 build has no bf16 products
        throw Error("--load " + brief(o.load_path) +
                    ": trained with bf16 products (metadata 'matmul_precision'), and " + e.what() +
                    "; give --precision fp32 to resume in float32");
      }
      if (dist::rank() == 0)
        std::printf(
            "note: resuming with bf16 products, as %s was trained (--precision fp32 "
            "changes it)\n",
            brief(o.load_path).c_str());
    }
    return t;
  }
  TrainConfig c = flags;
  std::vector<std::string> said = given;
  if (!o.preset.empty()) {
    if (!o.init_from.empty())
      throw Error("--preset: sets a new model's architecture; --init-from takes the file's");
    apply_preset(o.preset, c, said);  // the flags given win over the preset
  }
  // --experts-per-token, --capacity-factor and --aux-loss belong to --experts.
  for (const char* k : {"experts_per_token", "capacity_factor", "aux_loss"})
    if (std::find(given.begin(), given.end(), k) != given.end() && c.experts == 0)
      throw Error(flag_of(k) + ": sets the mixture of experts; give --experts E too (or leave " +
                  "it out)");
  // A setting of one kind of positions (--rope-base: rope) alone would be ignored.
  for (const PositionKind& k : position_kinds())
    for (const PositionKey& key : k.keys)
      if (std::find(given.begin(), given.end(), key.key) != given.end() && c.positions != k.name)
        throw Error(flag_of(key.key) + ": sets " + key.sets + "; give --positions " + k.name +
                    " too (or leave it out)");
  fill_dependent_defaults(c, said);
  Trainer t = !o.init_from.empty() ? Trainer::init_from(o.init_from, c, said)
                                   : new_run(c, said, o.tokenizer_from);
  return t;
}

}  // namespace qkv::train
