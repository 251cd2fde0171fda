// The run's settings: checking them (each error naming the flag, or the
// checkpoint's file and key), the optimizer and learning-rate schedule they
// ask for, and the architecture read back from a model file's own configuration.
#include "trainer/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/image_store.h"
#include "data/tasks.h"
#include "dist/distributed.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "optim/optimizers.h"
#include "trainer/data_sources.h"
#include "trainer/family.h"
#include "trainer/positions.h"
#include "trainer/token_kinds.h"

namespace qkv::train {

namespace {

void require(bool ok, const std::string& flag, const std::string& what) {
  if (!ok) throw Error(flag + ": " + what);
}
template <class T>
void require_range(T v, T lo, T hi, const std::string& label) {
  if (!(v >= lo && v <= hi)) {
    std::ostringstream m;
    m << "must be in [" << lo << ", " << hi << "], got " << v;
    throw Error(label + " " + m.str());
  }
}
// A number as a person would write it (1e+300, not 300 digits; 0.1, not 0.100000).
std::string num(double v) { return show_value(json(v)); }
}  // namespace

json TrainConfig::to_json() const {
  json j;
  for_each_field(*this, [&](const char* k, const auto& v) { j[k] = v; });
  return j;
}

json TrainConfig::run_json() const {
  json j = to_json();
  for (auto it = j.begin(); it != j.end();)
    it = is_arch_key(it.key()) ? j.erase(it) : std::next(it);
  return j;
}

TrainConfig TrainConfig::from_json(const json& j, const std::string& where) {
  TrainConfig c;
  for_each_field(c, [&](const char* k, auto& v) {
    if (j.is_object() && !j.contains(k) && is_added_key(k)) return;  // the default above
    nn::read_json_field(j, k, v, where);
  });
  if (j.is_object() && !j.contains("min_lr")) c.min_lr = c.lr * real(0.05);
  // Before 'truncate', a text longer than the window was refused: such a
  // file reads as --no-truncate (the value it had then).
  if (j.is_object() && !j.contains("truncate")) c.truncate = false;
  return c;
}

std::string show_value(const json& v) {
  if (v.is_string()) return brief(v.get<std::string>());
  if (!v.is_number()) return brief(v.dump());
  if (!v.is_number_float()) return v.dump();
  const double d = v.get<double>();
  const bool is_float = static_cast<double>(static_cast<float>(d)) == d;
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    const double back = std::strtod(buf, nullptr);
    if (is_float ? static_cast<float>(back) == static_cast<float>(d) : back == d) break;
  }
  return buf;
}

unsigned TrainConfig::key_kind(const std::string& k) {
  static const std::map<std::string, unsigned> kinds = [] {
    std::map<std::string, unsigned> m;
    TrainConfig probe;
    for_each_key(probe, [&](const char* key, auto&, unsigned kind) { m[key] = kind; });
    return m;
  }();
  const auto it = kinds.find(k);
  return it == kinds.end() ? kRun : it->second;
}

void validate(const TrainConfig& c, const std::string& where) {
  // "--d-model" on the command line; for a checkpoint's settings the file and
  // the key: "<file>: metadata 'model_config' key 'd_model'" (the
  // architecture, under the model's own names) or "... 'train_config' key 'lr'".
  const bool run_from_flags = where.rfind("--init-from ", 0) == 0;
  auto name = [&](const char* key) {
    if (where.empty() || (run_from_flags && !TrainConfig::is_arch_key(key))) return flag_of(key);
    if (!TrainConfig::is_arch_key(key))
      return where + ": metadata 'train_config' key '" + key + "'";
    const std::map<std::string, std::string> model_name = {{"pre_ln", "pre_norm"},
                                                           {"tie", "tie_weights"},
                                                           {"positions", "learned_positions"},
                                                           {"no_bias", "bias"},
                                                           {"layers", "layers"}};
    const auto it = model_name.find(key);
    // The file's key that made the positions what they are: the kind's own
    // (rope_base, rel_buckets) where it has one (a vit has no learned_positions key).
    std::string file_key = it == model_name.end() ? key : it->second;
    if (const PositionKind* k = find_position_kind(c.positions);
        std::string(key) == "positions" && k && k->file_key)
      file_key = k->file_key;
    return where + ": metadata 'model_config' key '" + file_key + "'";
  };
  require(find_family(c.model) != nullptr, name("model"),
          "expected " + family_names() + ", got '" + brief(c.model) + "'");
  const Family& fam = family(c.model, name("model"));
  require_range<int64_t>(c.d_model, 1, 16384, name("d_model"));
  require_range<int64_t>(c.heads, 1, 1024, name("heads"));
  require(c.d_model % c.heads == 0, name("heads"),
          std::to_string(c.heads) + " heads do not divide --d-model " + std::to_string(c.d_model));
  require_range<int64_t>(c.layers, 1, 128, name("layers"));
  require_range<int64_t>(c.d_ff, 1, 65536, name("d_ff"));
  require(c.dropout >= 0 && c.dropout < 1, name("dropout"),
          "must be in [0, 1), got " + num(c.dropout));
  const PositionKind& positions = position_kind(c.positions, name("positions"));
  require(
      c.kv_heads >= 0 && c.kv_heads <= c.heads && (c.kv_heads == 0 || c.heads % c.kv_heads == 0),
      name("kv_heads"),
      "must divide --heads " + std::to_string(c.heads) + " (0: every head), got " +
          std::to_string(c.kv_heads));
  // The rotation's angles base^(-2i/d_k) fall with i only for a base above 1.
  require(c.rope_base > 1 && c.rope_base <= real(1e9), name("rope_base"),
          "must be in (1, 1e9], got " + num(c.rope_base));
  auto report = [&](bool ok, const char* key, const std::string& why) {
    require(ok, name(key), why);
  };
  if (positions.check) positions.check(c, report);  // the kind's own rules (rope: d_k even)
  // T5's relative positions: buckets even (half per direction in an encoder)
  // and >= 4; the last bucket's distance past the exact ones (half of a causal
  // table's, which has the more), at most 2^30 (a distance fits any sequence).
  require_range<int64_t>(c.rel_buckets, 4, 4096, name("rel_buckets"));
  require(c.rel_buckets % 2 == 0, name("rel_buckets"),
          "must be even (half the buckets per direction in an encoder), got " +
              std::to_string(c.rel_buckets));
  require(c.rel_max_distance > c.rel_buckets / 2 && c.rel_max_distance <= (int64_t{1} << 30),
          name("rel_max_distance"),
          "must exceed the " + std::to_string(c.rel_buckets / 2) +
              " exact buckets (--rel-buckets " + std::to_string(c.rel_buckets) +
              " / 2) and be at most 2^30, got " + std::to_string(c.rel_max_distance));
  // A mixture of experts (nn/moe.h): its own rules, one line each.
  if (c.experts != 0) {
    require(c.experts >= 2 && c.experts <= 1024, name("experts"),
            "must be in 2..1024 (0: a dense FFN), got " + std::to_string(c.experts));
    require(c.experts_per_token >= 1 && c.experts_per_token <= c.experts, name("experts_per_token"),
            "must be in 1..--experts " + std::to_string(c.experts) + ", got " +
                std::to_string(c.experts_per_token));
    require(c.capacity_factor > 0 && c.capacity_factor <= 1024, name("capacity_factor"),
            "must be in (0, 1024], got " + num(c.capacity_factor));
    require(c.aux_loss >= 0 && c.aux_loss <= 1000, name("aux_loss"),
            "must be in [0, 1000], got " + num(c.aux_loss));
    // The recomputing forward runs without a graph: the load-balancing
    // loss would reach the router with no gradient.
    require(c.recompute == "none", name("recompute"),
            "recomputing in backward does not take --experts (the load-balancing loss "
            "would get no gradient); leave --recompute out");
  }
  // Rotary positions, relative bias and shared key/value heads live in the
  // softmax kernels: the sparse and linear kernels take none of them.
  std::vector<std::string> softmax_only;
  if (positions.softmax_kernels) softmax_only.push_back("--positions " + c.positions);
  if (c.kv_heads != 0) softmax_only.push_back("--kv-heads");
  if (!softmax_only.empty())
    require(
        c.attention != "sparse" && c.attention != "linear", name("attention"),
        "the " + c.attention + " kernel takes " +
            (softmax_only.size() == 1 ? "no " + softmax_only[0]
                                      : "neither " + softmax_only[0] + " nor " + softmax_only[1]) +
            " (standard, memory-efficient or auto do)");
  if (!c.objective.empty()) {
    const std::vector<std::string> objs = words_of(fam.objectives.names);  // {mlm, classify}
    const bool known = std::find(objs.begin(), objs.end(), c.objective) != objs.end();
    require(known, name("objective"),
            objs.empty() ? "the " + c.model + " model learns only its own way (pairs); got '" +
                               brief(c.objective) + "'"
                         : "the " + c.model + " model learns by " +
                               one_of(objs, [](const std::string& o) { return o; }) + "; got '" +
                               brief(c.objective) + "'");
  }
  // The kinds of positions the family takes (its row's list, the default first).
  const std::vector<std::string> takes = words_of(fam.model.positions);
  require(std::find(takes.begin(), takes.end(), c.positions) != takes.end(), name("positions"),
          (fam.model.positions_refused
               ? std::string(fam.model.positions_refused)
               : "the " + c.model + " model takes " +
                     one_of(takes, [](const std::string& k) { return k; }) + " positions") +
              ", not '" + brief(c.positions) + "'");
  if (fam.settings.check) fam.settings.check(c, report);  // the family's own rules (tying, ...)
  require(nn::find_activation(c.activation) != nullptr, name("activation"),
          "expected " + nn::activation_names() + ", got '" + brief(c.activation) + "'");
  require(nn::find_norm(c.norm) != nullptr, name("norm"),
          "expected " + nn::norm_kinds().names() + ", got '" + brief(c.norm) + "'");
  require_range<int64_t>(c.context, 0, 65536, name("context"));
  require(c.attention == "standard" || c.attention == "memory-efficient" ||
              c.attention == "sparse" || c.attention == "linear" || c.attention == "auto",
          name("attention"),
          "expected standard, memory-efficient, sparse, linear or auto, got '" +
              brief(c.attention) + "'");
  // d_k 0 is d_model / heads, the default; a flag that says 0 is refused in new_run
  require(c.d_k >= 0 && c.d_k <= 16384, name("d_k"),
          "must be >= 1 and <= 16384 (0: d_model / heads), got " + std::to_string(c.d_k));
  require_range<int64_t>(c.window, 1, 1 << 20, name("window"));
  require_range<int64_t>(c.global_every, 1, 1 << 20, name("global_every"));
  require(c.recompute == "none" || c.recompute == "ffn" || c.recompute == "layer",
          name("recompute"), "expected none, ffn or layer, got '" + brief(c.recompute) + "'");
  require_range<int64_t>(c.attention_budget, 0, 1 << 20, name("attention_budget"));
  const bool corpus = format_holds(c.format) == DataSource::Holds::kCorpus;  // --format text
  require(is_data_format(c.format), name("format"),
          "expected " + data_formats() + ", got '" + brief(c.format) + "'");
  require(c.label_names.empty() || fam.reads.images, name("label_names"),
          "names the labels of images (--format idx); a text classifier's labels are the words "
          "of its data");
  if (!c.label_names.empty()) {  // "a,b,c": no empty or repeated name
    std::vector<std::string> names;
    for (size_t at = 0; at <= c.label_names.size();) {
      const size_t comma = std::min(c.label_names.find(',', at), c.label_names.size());
      names.push_back(c.label_names.substr(at, comma - at));
      at = comma + 1;
    }
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    require(std::find(names.begin(), names.end(), "") == names.end(), name("label_names"),
            "has an empty name in '" + brief(c.label_names) + "'");
    require(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), name("label_names"),
            "names a label twice in '" + brief(c.label_names) + "'");
  }
  require(!c.line_by_line || (corpus && fam.objectives.text_pairs), name("line_by_line"),
          "reads a text one line a sequence for a model learning by masks (--model bert "
          "--objective mlm, --format text); the " +
              c.model + " model reads " +
              (corpus ? "windows of it" : "no corpus here (--format " + c.format + ")"));
  require(!c.group_by_length || c.line_by_line, name("group_by_length"),
          "groups the lines of a batch by length: it goes with --line-by-line (windows are all "
          "--context tokens long)");
  require(c.augment.empty() || fam.reads.images, name("augment"),
          "shifts and mirrors training images: it goes with a model that reads images (--model "
          "vit), not the " +
              c.model + " model");
  try {
    data::parse_augment(c.augment);
  } catch (const Error& e) {  // "augment 'x': why" under the flag's own name
    const std::string why = e.what();
    require(false, name("augment"), why.rfind("augment ", 0) == 0 ? why.substr(8) : why);
  }
  require(c.patch == 0 || fam.reads.images, name("patch"),
          "cuts images into patches: it goes with a model that reads images (--model vit)");
  require_range<int64_t>(c.patch, 0, 4096, name("patch"));
  // The kind of tokens (its row: trainer/token_kinds.h) and its own rules;
  // the learned kinds' size (--bpe-vocab) goes with them alone.
  const TokenKind& tokens = token_kind(c.tokens, name("tokens"));
  if (tokens.check) tokens.check(c, fam, report);
  if (!tokens.learned) {
    std::vector<std::string> learned;
    for (const TokenKind& k : token_kinds())
      if (k.learned) learned.push_back(k.name);
    require(c.bpe_vocab == 0, name("bpe_vocab"),
            "goes with --tokens " + one_of(learned, [](const std::string& k) { return k; }) +
                " (this run reads --tokens " + brief(c.tokens) + ")");
  }
  if (c.data.empty()) {
    data::parse_task(c.task);
    require(c.valid.empty(), name("valid"),
            "needs --data (the built-in tasks draw their own held-out set)");
    require_range<int64_t>(c.vocab, 1, 100000, name("vocab"));
    require_range<int64_t>(c.min_len, 1, 4096, name("min_len"));
    require_range<int64_t>(c.max_len, 1, 4096, name("max_len"));
    require(c.min_len <= c.max_len, name("min_len"),
            std::to_string(c.min_len) + " is more than --max-len " + std::to_string(c.max_len));
    require_range<int64_t>(c.heldout, 1, 1000000, name("heldout"));
  } else {
    // A family that learns from text another way (text_pairs) checks its
    // objective itself (seq2seq: span corruption).
    require(!(corpus && !fam.reads.text && !fam.objectives.text_pairs), name("format"),
            "text (a plain corpus) trains a language model: use --model gpt (or bert, or "
            "seq2seq with --objective span)");
    require((format_holds(c.format) == DataSource::Holds::kImages) == fam.reads.images,
            name("format"),
            fam.reads.images ? "the " + c.model + " model reads images: --format idx"
                             : "idx (images) is read by a model that reads images (--model vit)");
    if (c.valid.empty())
      require(c.valid_fraction > 0 && c.valid_fraction <= 0.5, name("valid_fraction"),
              "must be in (0, 0.5], got " + num(c.valid_fraction));
  }
  require_range<int64_t>(c.max_vocab, 1, 1000000, name("max_vocab"));
  require_range<int64_t>(c.doc_stride, 0, 1 << 20, name("doc_stride"));
  require_range<int64_t>(c.max_answer_tokens, 1, 1 << 20, name("max_answer_tokens"));
  // Question answering's settings, refused on a run that reads no questions.
  const bool questions = format_objective(c.format) == "qa" && !c.data.empty();
  require(questions || c.doc_stride == TrainConfig().doc_stride, name("doc_stride"),
          "goes with question answering (--format squad); this run reads no questions");
  require(questions || c.max_answer_tokens == TrainConfig().max_answer_tokens,
          name("max_answer_tokens"),
          "goes with question answering (--format squad); this run reads no questions");
  require_range<int64_t>(c.batch, 1, 65536, name("batch"));
  require(c.batch >= dist::size(), name("batch"),
          std::to_string(c.batch) + " sequences cannot be shared by " +
              std::to_string(dist::size()) + " MPI ranks (each needs at least one)");
  require_range<int64_t>(c.steps, 1, 1000000000, name("steps"));
  require(c.schedule == "noam" || c.schedule == "cosine" || c.schedule == "constant",
          name("schedule"), "expected noam, cosine or constant, got '" + brief(c.schedule) + "'");
  require(std::isfinite(c.lr) && c.lr > 0 && c.lr <= 1e6, name("lr"),
          "must be finite, > 0 and <= 1e6, got " + num(c.lr));
  require(std::isfinite(c.min_lr) && c.min_lr >= 0 && c.min_lr <= c.lr, name("min_lr"),
          "must be in [0, --lr " + num(c.lr) + "], got " + num(c.min_lr));
  require(optim::find_optimizer(c.optimizer) != nullptr, name("optimizer"),
          "expected " + optim::optimizer_names() + ", got '" + brief(c.optimizer) + "'");
  require(std::isfinite(c.weight_decay) && c.weight_decay >= 0 && c.weight_decay < 1,
          name("weight_decay"), "must be in [0, 1), got " + num(c.weight_decay));
  require(c.beta1 >= 0 && c.beta1 < 1, name("beta1"), "must be in [0, 1), got " + num(c.beta1));
  require(c.beta2 >= 0 && c.beta2 < 1, name("beta2"), "must be in [0, 1), got " + num(c.beta2));
  require(c.momentum >= 0 && c.momentum < 1, name("momentum"),
          "must be in [0, 1), got " + num(c.momentum));
  require_range<int64_t>(c.warmup, 0, 1000000000, name("warmup"));
  require(!(c.schedule == "noam" && c.warmup < 1), name("warmup"),
          "the noam schedule needs --warmup >= 1");
  require(!(c.schedule == "cosine" && c.warmup > c.steps), name("warmup"),
          std::to_string(c.warmup) + " is more than --steps " + std::to_string(c.steps) +
              " (the cosine schedule warms up within --steps)");
  require(c.label_smoothing >= 0 && c.label_smoothing < 1, name("label_smoothing"),
          "must be in [0, 1), got " + num(c.label_smoothing));
  require(std::isfinite(c.clip) && c.clip >= 0, name("clip"),
          "must be finite and >= 0, got " + num(c.clip));
}

std::unique_ptr<optim::Schedule> make_schedule(const TrainConfig& c) {
  if (c.schedule == "noam") return std::make_unique<optim::NoamSchedule>(c.d_model, c.warmup, c.lr);
  if (c.schedule == "cosine")
    return std::make_unique<optim::WarmupCosineSchedule>(c.lr, c.warmup, c.steps, c.min_lr);
  if (c.schedule == "constant") return std::make_unique<optim::ConstantSchedule>(c.lr, c.warmup);
  throw Error("--schedule: unknown schedule '" + brief(c.schedule) +
              "' (expected noam, cosine or constant)");
}

void attention_to_model(const TrainConfig& c, nn::AttentionSettings& a) {
  a.attention = nn::attention_kernel_from_string(c.attention);
  a.window = c.window;
  a.global_every = c.global_every;
  a.scaled = !c.no_scale;
  a.d_k = c.d_k;
  a.norm = c.norm;
  a.bias = !c.no_bias;
  a.kv_heads = c.kv_heads;
  a.rope_base = 0;  // no position in attention, unless the kind hands it one
  a.rel_buckets = 0;
  if (const PositionKind& k = position_kind(c.positions, "--positions"); k.to_attention)
    k.to_attention(c, a);
  a.recompute = c.recompute == "ffn"     ? nn::Recompute::FFN
                : c.recompute == "layer" ? nn::Recompute::Layer
                                         : nn::Recompute::None;
  a.attention_memory_budget = c.attention_budget * (int64_t(1) << 20);
  a.moe = nn::MoESettings{};  // experts 0: dense
  if (c.experts > 0)
    a.moe = nn::MoESettings{c.experts, c.experts_per_token, double(c.capacity_factor),
                            double(c.aux_loss)};
}

void attention_from_model(TrainConfig& c, const nn::AttentionSettings& a) {
  c.attention = nn::to_string(a.attention);
  c.window = a.window;
  c.global_every = a.global_every;
  c.no_scale = !a.scaled;
  c.d_k = a.d_k;
  c.norm = a.norm;
  c.no_bias = !a.bias;
  c.kv_heads = a.kv_heads;
  c.experts = a.moe.experts;
  if (a.moe.experts > 0) {
    c.experts_per_token = a.moe.experts_per_token;
    c.capacity_factor = real(a.moe.capacity_factor);
    c.aux_loss = real(a.moe.aux_loss);
  }
  // A kind the settings show (rope: rope_base > 0); the family's positions
  // otherwise. A file holds one kind at most (its loader refuses rope_base
  // beside rel_buckets).
  for (const PositionKind& k : position_kinds())
    if (k.from_attention && k.from_attention(c, a)) {
      c.positions = k.name;
      break;
    }
}

optim::OptimizerSettings optimizer_settings(const TrainConfig& c) {
  optim::OptimizerSettings s;
  s.lr = c.lr;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.momentum = c.momentum;
  s.weight_decay = c.weight_decay;
  return s;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const nn::Module& model) {
  const optim::OptimizerKind* kind = optim::find_optimizer(c.optimizer);
  if (!kind)
    throw Error("--optimizer: expected " + optim::optimizer_names() + ", got '" +
                brief(c.optimizer) + "'");
  std::unique_ptr<optim::Optimizer> opt = kind->make(model.parameters(), optimizer_settings(c));
  opt->set_weight_decay_mask(nn::weight_decay_mask(model));
  return opt;
}

void check_given_flags(const TrainConfig& c, const std::vector<std::string>& given) {
  auto said = [&](const char* k) {
    return std::find(given.begin(), given.end(), k) != given.end();
  };
  // --d-k's default 0 stands for d_model / heads; said, it must be a size.
  if (said("d_k") && c.d_k < 1)
    throw Error("--d-k: must be >= 1, got " + std::to_string(c.d_k) +
                " (leave it out for d_model / heads)");
  // --min-lr's default kAutoMinLr (-1) stands for 5% of --lr; said, -1 is a
  // negative rate like any other (validate() checks the rest of its range).
  if (said("min_lr") && !(c.min_lr >= 0))
    throw Error("--min-lr: must be >= 0, got " + num(c.min_lr) + " (leave it out for 5% of --lr)");
  // --max-vocab caps a vocabulary of counted tokens (characters, words); a
  // learned tokenizer's size is its own (BPE: --bpe-vocab), and the cap
  // would be dropped without a word.
  const TokenKind* tokens = find_token_kind(c.tokens);
  if (said("max_vocab") && tokens && tokens->learned)
    throw Error("--max-vocab: caps a vocabulary of characters or words; --tokens " + c.tokens +
                " has --bpe-vocab for its size (leave --max-vocab out)");
}

void fill_dependent_defaults(TrainConfig& c, const std::vector<std::string>& given) {
  auto said = [&](const char* k) {
    return std::find(given.begin(), given.end(), k) != given.end();
  };
  const optim::OptimizerKind* kind = optim::find_optimizer(c.optimizer);
  if (kind && kind->default_weight_decay != 0 && !said("weight_decay"))
    c.weight_decay = kind->default_weight_decay;
}

void set_arch_from_model(TrainConfig& c, const std::string& kind, const json& mc,
                         const std::string& where) {
  const Family* fam = find_family(kind);
  if (!fam) throw Error(where + ": model_kind '" + brief(kind) + "' is not " + family_names());
  // The family's default kind of positions, unless the file says another
  // (from_model: attention_from_model, or the family's own key).
  if (!words_of(fam->model.positions).empty()) c.positions = words_of(fam->model.positions).front();
  fam->model.from_model(c, mc, where);
}

std::vector<std::string> words_of(const char* space_separated) {
  std::vector<std::string> out;
  for (std::string all = space_separated ? space_separated : ""; !all.empty();) {
    const size_t sp = std::min(all.find(' '), all.size());
    if (sp > 0) out.push_back(all.substr(0, sp));
    all.erase(0, std::min(sp + 1, all.size()));
  }
  return out;
}

}  // namespace qkv::train
