// Reading a checkpoint or a model file back into a Trainer: the format's
// rules (docs/checkpoint-format.md), every part checked against the others,
// data files found again, and fine-tuning from any model file.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "trainer/checkpoint_parts.h"
#include "trainer/positions.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

TrainConfig Trainer::checkpoint_config(const TensorFile& f) {
  auto fmt = f.metadata.find("format");
  if (fmt == f.metadata.end())
    throw Error(brief(f.path) + ": not a qkv training checkpoint (metadata has no 'format')");
  const bool v2 = fmt->second == kCheckpointFormatV2;
  if (fmt->second != kCheckpointFormat && !v2)
    throw Error(brief(f.path) + ": checkpoint format '" + brief(fmt->second) + "' is not the '" +
                kCheckpointFormat + "' (or v2) this program reads");
  const std::string where = brief(f.path) + ": metadata 'train_config'";
  json run = nn::metadata_json(f.metadata, "train_config", f.path);
  if (!run.is_object()) throw Error(where + ": expected a JSON object");
  const auto [kind, mc] = detail::model_of(f);
  TrainConfig arch;
  set_arch_from_model(arch, kind, mc, brief(f.path) + ": metadata 'model_config'");
  const json from_model = arch.to_json();
  for (auto& [k, v] : from_model.items()) {
    if (!TrainConfig::is_arch_key(k)) continue;
    // Version 2 stored the architecture twice: both must say the same.
    if (!v2 && run.contains(k))
      throw Error(brief(f.path) + ": metadata 'train_config' holds '" + k +
                  "', which is model_config's alone (the architecture is stored once)");
    if (v2 && run.contains(k) && run[k] != v)
      throw Error(brief(f.path) + ": the file's parts disagree: train_config says " + k + " = " +
                  brief(run[k].dump()) + " but model_config gives " + brief(v.dump()));
    run[k] = v;
  }
  TrainConfig c = TrainConfig::from_json(run, where);
  const int64_t table = detail::model_max_positions(mc);
  if (fixed_positions(train::family(c.model, where), c) && c.context != table)
    throw Error(brief(f.path) + ": the file's parts disagree: train_config says context = " +
                std::to_string(c.context) + " but model_config's max_positions is " +
                std::to_string(table));
  return c;
}

Vocab Trainer::checkpoint_vocab(const TensorFile& f, int64_t model_vocab) {
  Vocab v;
  // A family that reads no tokens (vit) may leave 'vocab' out: the special
  // tokens alone. A token family's file must name its tokens.
  if (!f.metadata.count("vocab")) {
    const auto [kind, mc] = detail::model_of(f);
    if (train::family(kind, brief(f.path) + ": metadata 'model_kind'").model.vocab_key)
      throw Error(brief(f.path) +
                  ": metadata has no 'vocab': the trainer reads and writes the model's tokens "
                  "through it (a JSON list of strings, one per id)");
  }
  // A BPE tokenizer: metadata 'tokenizer' "bpe", its merges and pattern in 'bpe'.
  const auto tok = f.metadata.find("tokenizer");
  const bool bpe = tok != f.metadata.end() && learned_tokens(tok->second);
  if (bpe != (f.metadata.count("bpe") > 0))
    throw Error(brief(f.path) + ": the file's parts disagree: metadata 'tokenizer' is '" +
                (tok == f.metadata.end() ? std::string("(none)") : brief(tok->second)) + "' but " +
                (bpe ? "there is no 'bpe' (the merges)" : "it has a 'bpe' (merges)"));
  std::optional<json> merges;
  if (bpe) merges = nn::metadata_json(f.metadata, "bpe", f.path);
  try {
    if (f.metadata.count("vocab"))
      v = Vocab::from_json(nn::metadata_json(f.metadata, "vocab", f.path),
                           merges ? &*merges : nullptr);
  } catch (const json::exception& e) {
    throw Error(brief(f.path) + ": metadata 'vocab' is not a list of strings (" + brief(e.what()) +
                ")");
  } catch (const Error& e) {  // "vocab: ..." or, from the merges, "bpe: ..." / "BPE: ..."
    const std::string what = e.what();
    const bool of_vocab = what.rfind("vocab:", 0) == 0;
    throw Error(brief(f.path) + ": metadata '" + (of_vocab ? "vocab" : "bpe") + "': " + what);
  }
  if (v.size() != model_vocab)
    throw Error(brief(f.path) + ": the file's parts disagree: metadata 'vocab' has " +
                std::to_string(v.size()) + " tokens but model_config's vocabulary size is " +
                std::to_string(model_vocab));
  const nn::SpecialTokens sp = nn::special_tokens(f.metadata, f.path);
  for (const auto& [key, id, want] :
       {std::tuple<const char*, int64_t, int64_t>{"pad", sp.pad, Vocab::kPad},
        {"bos", sp.bos, Vocab::kBos},
        {"eos", sp.eos, Vocab::kEos}})
    if (id != want)
      throw Error(brief(f.path) + ": metadata 'special_tokens' key '" + key + "' must be " +
                  std::to_string(want) + " (the vocabulary's <pad>, <s>, </s> are ids 0, 1, 2)");
  return v;
}

namespace detail {
// The run's weights, optimizer state, step and random streams from `f`, after
// checking that its data files are the ones the checkpoint was trained on.
void restore(Trainer& t, const TensorFile& f, bool allow_nonfinite, DataUse use) {
  const auto precision = f.metadata.find("matmul_precision");
  t.trained_in_bf16 = precision != f.metadata.end() && precision->second == "bf16";
  // Weights and optimizer state alike; --allow-nonfinite loads such a file for inspection.
  if (!allow_nonfinite)
    check_finite(f.tensors, brief(f.path) + ": refused (--allow-nonfinite loads it anyway)");
  const json saved = nn::metadata_json(f.metadata, "data", f.path);
  // A BPE run resumes on the bytes its tokenizer learned from (unless it came
  // from another file, --init-from): the tokenizer must match --data.
  const json learned = bpe_trained_on(f);
  if (use == DataUse::Train && t.vocab.bpe() && learned.is_object() &&
      !(saved.is_object() && saved.contains("tokenizer_from"))) {
    const json now = {{"bytes", t.tokenizer_info.train_bytes},
                      {"fnv1a64", hex64(t.tokenizer_info.train_hash)}};
    auto bytes_hash = [](const json& j) {
      return brief(j.value("bytes", json()).dump()) + " bytes, FNV-1a " +
             brief(j.value("fnv1a64", json()).dump());
    };
    if (learned != now)
      throw Error(brief(f.path) + ": metadata 'bpe' key 'trained_on': its tokenizer was learned " +
                  "from " + bytes_hash(learned) + ", not from the training part of --data " +
                  brief(t.cfg.data) + " (" + bytes_hash(now) +
                  "): resume on the run's own data, or fine-tune on this text with --init-from");
  }
  for (const char* part : {"data", "valid"}) {
    if (!t.data_info->contains(part)) continue;
    const json& now = (*t.data_info)[part];
    if ((!saved.contains(part) || !saved[part].is_object()) && use == DataUse::Evaluate &&
        std::string(part) ==
            "valid") {  // trained on a split of --data: another held-out file is taken
      std::printf("note: evaluating on %s, not the held-out part of the run's data file\n",
                  brief(now["path"].get<std::string>()).c_str());
      continue;
    }
    if (!saved.contains(part) || !saved[part].is_object() || !saved[part].contains("fnv1a64"))
      throw Error(brief(f.path) + ": metadata 'data' has no '" + part +
                  "' file entry, but this run reads " + brief(now["path"].get<std::string>()));
    // Evaluating on a held-out file named anew (not the run's own path): taken, with a note.
    const bool named_anew = saved[part].value("path", "") != now["path"] &&
                            saved[part].value("abspath", "") != now["abspath"];
    if (saved[part]["fnv1a64"] != now["fnv1a64"] && use == DataUse::Evaluate &&
        std::string(part) == "valid" && named_anew) {
      std::printf("note: evaluating on %s, not the held-out file the run was trained with\n",
                  brief(now["path"].get<std::string>()).c_str());
      continue;
    }
    if (saved[part]["fnv1a64"] != now["fnv1a64"])
      throw Error(brief(f.path) + ": was trained on a " + part + " file with hash " +
                  brief(saved[part]["fnv1a64"].dump()) + " but " +
                  brief(now["path"].get<std::string>()) + " now has hash " + now["fnv1a64"].dump() +
                  " (the file changed)");
  }
  nn::LoadOptions lo;
  lo.prefix = "model.";
  lo.allow_nonfinite = allow_nonfinite;
  nn::load_state_dict(t.model(), f, lo);
  NamedTensors st;
  for (auto& [n, x] : f.tensors)
    if (n.rfind("optim.", 0) == 0) st.emplace_back(n.substr(6), x);
  t.opt->load_state_dict(st);
  const auto step = f.metadata.find("step");
  if (step == f.metadata.end()) throw Error(brief(f.path) + ": metadata has no 'step'");
  if (step->second != std::to_string(t.opt->step_count()))
    throw Error(brief(f.path) + ": the file's parts disagree: metadata 'step' is '" +
                brief(step->second) + "' but the optimizer state (optim.step) is at step " +
                std::to_string(t.opt->step_count()));
  for (const char* key : {"data_gen", "dropout_gen"})
    if (!f.metadata.count(key))
      throw Error(brief(f.path) + ": metadata has no '" + std::string(key) + "'");
  set_generator_state(t.data_gen, f.metadata.at("data_gen"),
                      brief(f.path) + ": metadata 'data_gen'");
  set_generator_state(t.dropout_gen(), f.metadata.at("dropout_gen"),
                      brief(f.path) + ": metadata 'dropout_gen'");
  // Optional (older files have none): the best held-out loss so far and its step.
  if (f.metadata.count("best_heldout")) {
    const json b = nn::metadata_json(f.metadata, "best_heldout", f.path);
    const bool ok = b.is_object() && b.size() == 2 && b.contains("loss") && b.contains("step") &&
                    b["loss"].is_number() && std::isfinite(b["loss"].get<double>()) &&
                    b["loss"].get<double>() >= 0 && b["step"].is_number_integer() &&
                    b["step"].get<int64_t>() >= 0 && b["step"].get<int64_t>() <= t.step_count();
    if (!ok)
      throw Error(brief(f.path) +
                  ": metadata 'best_heldout' must be {\"loss\": a finite number >= 0, " +
                  "\"step\": an integer in [0, " + std::to_string(t.step_count()) + "]}, got " +
                  brief(b.dump()));
    t.best = {b["loss"].get<double>(), b["step"].get<int64_t>()};
  }
  // MPI rank r > 0 continues its own saved dropout stream when the run had
  // as many ranks; otherwise (another rank count) a new stream of its own.
  if (dist::rank() > 0) {
    const auto it = f.metadata.find("dropout_gen_ranks");
    const json ranks = it == f.metadata.end()
                           ? json::array()
                           : nn::metadata_json(f.metadata, "dropout_gen_ranks", f.path);
    if (ranks.is_array() && static_cast<int>(ranks.size()) == dist::size() &&
        ranks[dist::rank()].is_string())
      set_generator_state(t.dropout_gen(), ranks[dist::rank()].get<std::string>(),
                          brief(f.path) + ": metadata 'dropout_gen_ranks'");
    else
      t.dropout_gen().manual_seed(
          rank_dropout_seed(t.cfg.seed ^ static_cast<uint64_t>(t.step_count()), dist::rank()));
  }
}
}  // namespace detail

namespace detail {
// A data file named in a checkpoint, found again: as typed (from the current
// folder), else at its absolute path when that file has the same hash.
void find_moved_data(TrainConfig& c, const TensorFile& f) {
  std::error_code ec;
  const auto it = f.metadata.find("data");
  if (it == f.metadata.end()) return;
  const json saved = nn::metadata_json(f.metadata, "data", f.path);
  auto relocate = [&](std::string& path, const char* part) {
    if (path.empty() || std::filesystem::exists(path, ec)) return;
    if (!saved.is_object() || !saved.contains(part) || !saved[part].is_object()) return;
    const json& e = saved[part];
    if (e.contains("abspath") && e["abspath"].is_string() &&
        std::filesystem::exists(e["abspath"].get<std::string>(), ec))
      path = e["abspath"].get<std::string>();
  };
  relocate(c.data, "data");
  relocate(c.valid, "valid");
  for (const std::string* p : {&c.data, &c.valid})
    if (!p->empty() && !std::filesystem::exists(*p, ec))
      throw Error(brief(f.path) + ": its " + (p == &c.data ? "data" : "held-out") + " file " +
                  brief(*p) + " is gone (moved or deleted): give its new path with " +
                  (p == &c.data ? "--data" : "--valid") + " (its hash is checked)" +
                  (p == &c.data ? "" : ", or another held-out file"));
}
}  // namespace detail

Trainer Trainer::resume(const std::string& path,
                        const std::function<void(TrainConfig&, bool)>& adjust, bool allow_nonfinite,
                        DataUse use) {
  TensorFile f = read_safetensors(path);
  const auto [kind, mc] = detail::model_of(f);
  const std::string prefix = detail::model_prefix_of(f);
  if (f.metadata.count("format") && prefix != "model.")
    throw Error(brief(path) + ": metadata 'model_prefix' is '" + brief(prefix) +
                "', but a training checkpoint keeps its weights under 'model.'");
  nn::check_config_fits(f);
  if (!f.metadata.count("format")) {
    // A model file: the weights and the architecture, no training state.
    if (use == DataUse::Train)
      throw Error(
          brief(path) +
          ": a model file without training state (no 'format'): --ask and --eval-only read it, "
          "--init-from fine-tunes it with a new optimizer");
    TrainConfig c;
    set_arch_from_model(c, kind, mc, brief(path) + ": metadata 'model_config'");
    c.context = detail::model_max_positions(mc);
    const auto tok = f.metadata.find("tokenizer");
    c.tokens = tok == f.metadata.end() ? "char" : tok->second;
    // A decoder-only model file is a language model unless the flags say otherwise.
    const Family& fam = train::family(kind, path + ": metadata 'model_kind'");
    const FileShape shape = detail::file_shape(f, kind, mc);
    if (fam.reads.text && shape.shape.classes == 0) c.format = "text";  // not a classifier
    if (fam.reads.images) c.format = "idx";
    const Vocab v = checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
    if (v.bpe()) c.bpe_vocab = v.bpe()->vocab_size();
    if (!v.has_unk() && !v.bpe()) c.vocab = v.size() - 3;  // a built-in task's symbols
    if (adjust) adjust(c, true);
    // Its tokens are the file's: a flag may not name other ones.
    if (v.bpe() && !learned_tokens(c.tokens))
      throw Error("--tokens " + brief(c.tokens) + ": the model file " + brief(path) +
                  " has metadata 'tokenizer' \"bpe\" (its embeddings are BPE tokens): leave the "
                  "flag out");
    if (v.bpe() && c.bpe_vocab != v.bpe()->vocab_size())
      throw Error("--bpe-vocab " + std::to_string(c.bpe_vocab) + ": the model file " + brief(path) +
                  " holds a BPE tokenizer of " + std::to_string(v.bpe()->vocab_size()) +
                  " tokens (metadata 'bpe'): leave the flag out");
    if (!v.bpe() && learned_tokens(c.tokens))
      throw Error("--tokens bpe: the model file " + brief(path) +
                  " has no BPE tokenizer (metadata 'tokenizer' is '" +
                  (tok == f.metadata.end() ? std::string("char") : brief(tok->second)) + "')");
    if (v.bpe() && c.data.empty() && use == DataUse::Evaluate)
      throw Error(brief(path) +
                  ": a model file does not record its data: give the text to evaluate on with "
                  "--data FILE");
    // A family that learns from no built-in task (bert, vit) has data to
    // name for an evaluation, and none to ask for an answer.
    const bool tasks = detail::takes_tasks(fam, c);
    if (use == DataUse::Evaluate && c.data.empty() && !tasks)
      throw Error(brief(path) + ": a model file does not record its data: give the " +
                  (fam.reads.images ? "images to evaluate on with --data DIR"
                                    : "text to evaluate on with --data FILE"));
    if (use == DataUse::Evaluate && c.data.empty())
      std::printf(
          "note: a model file does not record its task: evaluating on --task %s, lengths "
          "%lld..%lld "
          "(--task, --min-len, --max-len choose another)\n",
          c.task.c_str(), static_cast<long long>(c.min_len), static_cast<long long>(c.max_len));
    if (use == DataUse::None && c.data.empty() && (v.has_unk() || v.bpe() || !tasks))
      c.data = "(model file)";  // text is cut by c.tokens
    Trainer t(c, &v, path, use, &shape);
    *t.tokenizer_info.trained_on = detail::bpe_trained_on(f);
    nn::LoadOptions lo;
    lo.prefix = prefix;
    lo.allow_nonfinite = allow_nonfinite;
    nn::load_state_dict(t.model(), f, lo);
    return t;
  }
  TrainConfig c = checkpoint_config(f);
  if (adjust) adjust(c, false);
  if (use != DataUse::None) detail::find_moved_data(c, f);  // resumed or evaluated from anywhere
  const Vocab v = checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
  detail::check_tokenizer_agrees(f, c, v);
  const FileShape shape = detail::file_shape(f, kind, mc);
  Trainer t(c, &v, path, use, &shape);
  *t.tokenizer_info.trained_on = detail::bpe_trained_on(f);
  detail::restore(t, f, allow_nonfinite, use);
  return t;
}

Trainer Trainer::init_from(const std::string& path, TrainConfig c,
                           const std::vector<std::string>& given) {
  TensorFile f = read_safetensors(path);
  const auto [kind, mc] = detail::model_of(f);
  const std::string prefix = detail::model_prefix_of(f);
  TrainConfig arch = c;
  set_arch_from_model(arch, kind, mc, brief(path) + ": metadata 'model_config'");
  nn::check_config_fits(f);
  // The file's family decides the run's own defaults the command line left
  // unsaid (bert: --objective from --format); its architecture is the file's.
  arch.objective = c.objective;  // the run's, not what the file learned (bert: mlm)
  if (const Family* fam = find_family(arch.model); fam && fam->settings.defaults) {
    TrainConfig d = arch;
    fam->settings.defaults(
        d, [&](const char* k) { return std::find(given.begin(), given.end(), k) != given.end(); });
    arch.objective = d.objective;
    arch.format = d.format;
    arch.line_by_line = d.line_by_line;  // bert's mlm: one line a sequence
  }
  const json mine = c.to_json(), theirs = arch.to_json();
  for (const std::string& k : given)
    if (TrainConfig::is_arch_key(k) && mine[k] != theirs[k])
      throw Error(flag_of(k) + ": --init-from " + brief(path) + " holds a model with " +
                  flag_of(k) + " " + show_value(theirs[k]) + ", but the command line gives " +
                  show_value(mine[k]) + " (leave the flag out)");
  arch.context = detail::model_max_positions(mc);
  // A computed table (sinusoidal: seq2seq or encoder) grows on demand.
  if (position_kind(arch.positions, "--init-from").table == PositionTable::Computed)
    arch.context = c.context;
  // A model with a position table of its own reads at most that many
  // positions; one without (rope, relative) reads the --context given.
  if (std::find(given.begin(), given.end(), "context") != given.end() &&
      c.context != arch.context) {
    if (fixed_positions(train::family(arch.model, "--model"), arch))
      throw Error("--context " + std::to_string(c.context) + ": --init-from " + brief(path) +
                  " holds a position table of " + std::to_string(arch.context) +
                  " rows (its context; leave the flag out)");
    arch.context = c.context;
  }
  const Vocab v = checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
  // A task model's vocabulary is the task's symbols: their count comes from the file.
  const bool vocab_given = std::find(given.begin(), given.end(), "vocab") != given.end();
  if (arch.data.empty() && !v.has_unk() && !vocab_given) arch.vocab = v.size() - 3;
  // The file's BPE tokenizer is the run's (every embedding row is one of its
  // tokens): --tokens and --bpe-vocab, when given, must say the same.
  auto said = [&](const char* k) {
    return std::find(given.begin(), given.end(), k) != given.end();
  };
  if (v.bpe()) {
    const int64_t n = v.bpe()->vocab_size();
    if (said("tokens") && !learned_tokens(arch.tokens))
      throw Error("--tokens " + arch.tokens + ": --init-from " + brief(path) +
                  " has metadata 'tokenizer' \"bpe\" (its embeddings are BPE tokens): leave the "
                  "flag out");
    if (said("bpe_vocab") && arch.bpe_vocab != n)
      throw Error("--bpe-vocab " + std::to_string(arch.bpe_vocab) + ": --init-from " + brief(path) +
                  " holds a BPE tokenizer of " + std::to_string(n) +
                  " tokens (metadata 'bpe'): leave the flag out");
    arch.tokens = "bpe";
    arch.bpe_vocab = n;
  } else if (const auto tok = f.metadata.find("tokenizer");
             tok != f.metadata.end() && find_token_kind(tok->second) &&
             !find_token_kind(tok->second)->learned && v.has_unk()) {
    // A data vocabulary's tokens are words or characters, as the file says.
    if (said("tokens") && arch.tokens != tok->second)
      throw Error("--tokens " + brief(arch.tokens) + ": --init-from " + brief(path) +
                  " has metadata 'tokenizer' \"" + tok->second +
                  "\" (its embeddings are those tokens): leave the flag out");
    arch.tokens = tok->second;
  } else if (learned_tokens(arch.tokens)) {
    const auto tok = f.metadata.find("tokenizer");
    throw Error("--tokens bpe: --init-from " + brief(path) + " has metadata 'tokenizer' '" +
                (tok == f.metadata.end() ? std::string("char") : brief(tok->second)) +
                "', not a BPE tokenizer (its embeddings are those tokens)");
  }
  // The images' size is the file's; the labels are the data's (a new
  // classifier head when they differ).
  FileShape shape = detail::file_shape(f, kind, mc);
  shape.labels.clear();
  shape.shape.classes = 0;
  Trainer t(arch, &v, "--init-from " + brief(path), DataUse::Train, &shape);
  if (v.bpe()) {  // a tokenizer learned from another text: a resume does not compare it with --data
    *t.tokenizer_info.trained_on = detail::bpe_trained_on(f);
    (*t.data_info)["tokenizer_from"] = brief(path);
  }
  nn::LoadOptions lo;
  lo.prefix = prefix;
  // Every tensor the new model shares with the file by name and shape; the
  // rest (a new head) start fresh, and the header names them.
  t.init_shared = nn::load_shared(t.model(), f, lo);
  return t;
}

Vocab Trainer::file_tokenizer(const std::string& path, std::string* tokenizer) {
  const TensorFile f = read_safetensors(path);
  const auto [kind, mc] = detail::model_of(f);
  nn::check_config_fits(f);
  if (tokenizer) {
    const auto tok = f.metadata.find("tokenizer");
    *tokenizer = tok == f.metadata.end() ? "char" : tok->second;
  }
  return checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
}

void Trainer::load(const std::string& path) {
  TensorFile f = read_safetensors(path);
  const json have = checkpoint_config(f).to_json(), want = cfg.to_json();
  for (auto& [k, v] : want.items()) {
    if (k == "steps" || have[k] == v) continue;
    throw Error(brief(path) + ": was trained with " + flag_of(k) + " " + show_value(have[k]) +
                " but this run has " + flag_of(k) + " " + show_value(v));
  }
  detail::restore(*this, f, /*allow_nonfinite=*/false, DataUse::Train);
}

}  // namespace qkv::train
