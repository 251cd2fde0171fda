// The settings of a training run (TrainConfig): every one is a flag of the
// program train, a key of a checkpoint's train_config, or (the architecture)
// a field of the model's own config. Checking them, the schedule they ask
// for, and the architecture read back from a model file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "checkpoint/model_file.h"
#include "core/error.h"
#include "core/real.h"
#include "optim/optimizer.h"
#include "optim/optimizers.h"
#include "optim/schedule.h"

namespace qkv::train {

using json = nlohmann::json;

// Everything that defines a run. Each field is a flag of the program: the
// JSON key with '_' as '-' (d_model is --d-model); see for_each_field.
// --seed's default. Any fixed value: the same flags then train the same model
// (initialisation, data order and dropout all come from it).
inline constexpr uint64_t kTrainSeed = 1;
// --min-lr's default: 5% of --lr, set when the Trainer is built (its
// checkpoint then stores the number).
inline constexpr real kAutoMinLr = -1;

struct TrainConfig {
  // model
  std::string model = "seq2seq";  // seq2seq (encoder-decoder) | gpt (decoder-only) | encoder
  int64_t d_model = 64, heads = 4, layers = 2, d_ff = 256;
  real dropout = 0;
  bool pre_ln = false;                      // Pre-LN (default Post-LN for seq2seq, Pre-LN for gpt)
  bool tie = false;                         // output layer shares the target embedding
  std::string positions = "sinusoidal";     // sinusoidal | learned | rope (gpt) | relative (T5)
  real rope_base = 10000;                   // rope: the rotation's base (Llama's 10000)
  int64_t rel_buckets = 32;                 // relative: T5's buckets per table
  int64_t rel_max_distance = 128;           // relative: the last bucket's distance
  std::string activation = "relu";          // relu | gelu | swiglu (nn/activation.h's table)
  std::string norm = "layer";               // layer | rms (nn/norm.h's table)
  bool no_bias = false;                     // attention and FFN Linears without biases
  int64_t context = 0;                      // position table rows (0: what the data needs)
  std::string attention = "standard";       // standard | memory-efficient | sparse | linear | auto
  int64_t window = 128, global_every = 64;  // sparse attention's pattern
  bool no_scale = false;                    // attention scores without 1/sqrt(d_k)
  int64_t d_k = 0;                          // query/key head size (0: d_model / heads)
  int64_t kv_heads = 0;                     // self-attention's key/value heads (0: heads)
  int64_t patch = 0;                        // vit: P x P pixels a patch (0: not a vit)
  // A mixture of experts in every FFN (nn/moe.h): E experts (0: dense), k a
  // token, the capacity factor, and the load-balancing loss's coefficient.
  int64_t experts = 0, experts_per_token = 1;
  real capacity_factor = real(1.25), aux_loss = real(0.01);
  // what the model learns: "" (the family's own), lm, mlm, classify or qa (trainer/family.h)
  std::string objective;
  // data
  std::string task = "reverse";       // copy | reverse | sort, when no --data
  std::string data, valid;            // data file, held-out file
  std::string format = "tsv";         // tsv (pairs) | text (language model) | idx (images)
  std::string tokens = "char";        // char | word | bpe (text only)
  int64_t bpe_vocab = 0;              // bpe: 256 bytes + merges (specials not counted); 0 unset
  double valid_fraction = 0.1;        // held out from --data when no --valid
  int64_t vocab = 10;                 // the task's alphabet size: --symbols
  int64_t min_len = 3, max_len = 10;  // the task's sequence lengths
  int64_t heldout = 1000;             // the task's held-out sequences
  int64_t max_vocab = 10000;          // refuse data with more distinct tokens
  std::string label_names;    // images: the names of labels 0, 1, ... ("a,b,c"; "": numbers)
  std::string augment;        // images: training batches' "crop:K,flip" (image_store.h); "": none
  bool line_by_line = false;  // text: one line a sequence, padded (bert's mlm: on); else windows
  bool group_by_length = false;  // line_by_line: a batch's lines of like length (off unless asked)
  // classify texts: a text longer than --context is cut to it, as Hugging
  // Face's truncation=True (the run says how many); false refuses it.
  bool truncate = true;
  // qa (--format squad): windows of a long context overlap by doc_stride
  // tokens; an answer is at most max_answer_tokens (Hugging Face's defaults)
  int64_t doc_stride = 128, max_answer_tokens = 30;
  // optimisation
  int64_t batch = 64;
  int64_t steps = 1000;             // upper bound, and the cosine schedule's length
  std::string schedule = "cosine";  // noam | cosine | constant
  real lr = 2e-3;                   // peak lr (cosine/constant); factor for noam
  real min_lr = kAutoMinLr;         // the cosine schedule's floor (kAutoMinLr: 5% of --lr)
  int64_t warmup = 100;
  std::string optimizer = "adam";  // adam | adamw | sgd
  real weight_decay = 0;           // Linear weights only (nn::weight_decay_mask); adamw: 0.01
  real beta1 = 0.9, beta2 = 0.98;  // Adam's moment decays (the paper's, section 5.3)
  real momentum = 0.9;             // sgd only
  std::string recompute = "none";  // none | ffn | layer: recomputed in backward, not kept
  int64_t attention_budget = 0;    // MiB for attention probabilities (auto); 0: no limit
  real label_smoothing = 0;
  real clip = 1;  // global grad-norm clip; 0 = off
  uint64_t seed = kTrainSeed;

  json to_json() const;
  // The run's keys without the architecture's (kArch): a checkpoint's
  // train_config (the architecture is its model_config).
  json run_json() const;
  // A checkpoint's train_config (and model_config's keys): a key added
  // later (kAdded) that the file lacks keeps its default.
  static TrainConfig from_json(const json& j, const std::string& where);
  // Every field with its JSON key (its flag: flag_of) and what kind of key it
  // is, once, so that flags, JSON, checks and the key lists agree:
  //   kArch   the architecture: what the model's own config holds (a
  //           checkpoint stores it once, as model_config; run_json() the rest)
  //   kAdded  added after checkpoints were first written: a file without it
  //           ran with the value it had then, which from_json fills in: the
  //           member's default here (Adam with the paper's betas, no weight
  //           decay, ...), but for min_lr (5% of the file's lr) and truncate
  //           (false: such files refused long texts)
  // A new setting is its member above and one line here.
  static constexpr unsigned kRun = 0, kArch = 1, kAdded = 2;
  template <class C, class F>
  static void for_each_key(C& c, F&& f) {
    f("model", c.model, kArch);
    f("d_model", c.d_model, kArch);
    f("heads", c.heads, kArch);
    f("layers", c.layers, kArch);
    f("d_ff", c.d_ff, kArch);
    f("dropout", c.dropout, kArch);
    f("pre_ln", c.pre_ln, kArch);
    f("tie", c.tie, kArch);
    f("positions", c.positions, kArch);
    f("activation", c.activation, kArch);
    f("norm", c.norm, kArch | kAdded);
    f("no_bias", c.no_bias, kArch | kAdded);
    f("context", c.context, kRun);
    f("attention", c.attention, kArch | kAdded);
    f("window", c.window, kArch | kAdded);
    f("global_every", c.global_every, kArch | kAdded);
    f("no_scale", c.no_scale, kArch | kAdded);
    f("d_k", c.d_k, kArch | kAdded);
    f("kv_heads", c.kv_heads, kArch | kAdded);
    f("rope_base", c.rope_base, kArch | kAdded);
    f("rel_buckets", c.rel_buckets, kArch | kAdded);
    f("rel_max_distance", c.rel_max_distance, kArch | kAdded);
    f("patch", c.patch, kArch | kAdded);
    f("experts", c.experts, kArch | kAdded);
    f("experts_per_token", c.experts_per_token, kArch | kAdded);
    f("capacity_factor", c.capacity_factor, kArch | kAdded);
    f("aux_loss", c.aux_loss, kArch | kAdded);
    f("objective", c.objective, kAdded);
    f("task", c.task, kRun);
    f("data", c.data, kRun);
    f("valid", c.valid, kRun);
    f("format", c.format, kRun);
    f("tokens", c.tokens, kRun);
    f("bpe_vocab", c.bpe_vocab, kAdded);
    f("valid_fraction", c.valid_fraction, kRun);
    f("vocab", c.vocab, kRun);
    f("min_len", c.min_len, kRun);
    f("max_len", c.max_len, kRun);
    f("heldout", c.heldout, kRun);
    f("max_vocab", c.max_vocab, kRun);
    f("label_names", c.label_names, kAdded);
    f("augment", c.augment, kAdded);
    f("line_by_line", c.line_by_line, kAdded);
    f("group_by_length", c.group_by_length, kAdded);
    f("truncate", c.truncate, kAdded);
    f("doc_stride", c.doc_stride, kAdded);
    f("max_answer_tokens", c.max_answer_tokens, kAdded);
    f("batch", c.batch, kRun);
    f("steps", c.steps, kRun);
    f("schedule", c.schedule, kRun);
    f("lr", c.lr, kRun);
    f("min_lr", c.min_lr, kAdded);
    f("warmup", c.warmup, kRun);
    f("optimizer", c.optimizer, kAdded);
    f("weight_decay", c.weight_decay, kAdded);
    f("beta1", c.beta1, kAdded);
    f("beta2", c.beta2, kAdded);
    f("momentum", c.momentum, kAdded);
    f("recompute", c.recompute, kAdded);
    f("attention_budget", c.attention_budget, kAdded);
    f("label_smoothing", c.label_smoothing, kRun);
    f("clip", c.clip, kRun);
    f("seed", c.seed, kRun);
  }
  // Every field with its JSON key: f(key, member).
  template <class C, class F>
  static void for_each_field(C& c, F&& f) {
    for_each_key(c, [&](const char* k, auto& v, unsigned) { f(k, v); });
  }
  // What kind of key `k` is (its kArch and kAdded bits; 0 for a run's own
  // key or an unknown one), as for_each_key says.
  static unsigned key_kind(const std::string& k);
  static bool is_arch_key(const std::string& k) { return key_kind(k) & kArch; }
  static bool is_added_key(const std::string& k) { return key_kind(k) & kAdded; }
};

// "--d-model" for "d_model". The task's symbol count, key "vocab" in a
// checkpoint's train_config, is the flag --symbols (--vocab, its old name,
// is still read): it is not the vocabulary, which adds <pad>, <s> and </s>.
inline std::string flag_of(const std::string& key) {
  if (key == "vocab") return "--symbols";
  std::string f = "--" + key;
  for (char& c : f) c = c == '_' ? '-' : c;
  return f;
}

// A setting's value as a person would type it: strings bare, numbers in the
// shortest form that reads back to the same float (1e-07, not 1.00000001e-07).
// Values from a file are quoted briefly (qkv::brief).
std::string show_value(const json& v);

// validate()'s require(ok, key, why): the rules of a family or position kind
// on the run's settings report through it, so that the error names the flag
// or the file's key.
using Require = std::function<void(bool ok, const char* key, const std::string& why)>;

// Checks every setting before anything is read or built; each error names the
// flag, or with a non-empty `where` (a checkpoint's "<file>: train_config")
// the file and the key. A `where` of "--init-from <file>" (a new run on a
// file's model) names the flag for the run's settings and the file and key
// for the architecture, which is the file's. The bounds keep any value from
// hanging the program or exhausting memory before it says what is wrong.
void validate(const TrainConfig& c, const std::string& where);

// The architecture keys of `c` from a model file's kind and model_config
// (`where` names them in errors). The trainer's models have one layer count
// and one vocabulary for both sides: an encoder-decoder with other shapes is
// refused naming the keys.
void set_arch_from_model(TrainConfig& c, const std::string& kind, const json& model_config,
                         const std::string& where);

// The architecture settings a TrainConfig shares with a model's own config
// (nn::TransformerConfig, nn::GPTConfig or nn::EncoderOnlyConfig), visited in
// pairs, so that building a model from the settings and reading the settings
// back from a model file cannot drift apart: f(train_value, model_value) for
// d_model, heads, d_ff, dropout, pre_ln/pre_norm and tie/tie_weights (a
// family with no output to tie, the encoder-only model, has no tie_weights).
template <class M, class = void>
struct has_tie_weights : std::false_type {};
template <class M>
struct has_tie_weights<M, std::void_t<decltype(std::declval<M&>().tie_weights)>> : std::true_type {
};
template <class C, class M, class F>
void shared_arch_fields(C& c, M& m, F&& f) {
  f(c.d_model, m.d_model);
  f(c.heads, m.heads);
  f(c.d_ff, m.d_ff);
  f(c.dropout, m.dropout);
  f(c.pre_ln, m.pre_norm);
  if constexpr (has_tie_weights<M>::value) f(c.tie, m.tie_weights);
}

// The attention settings (--attention, --window, --global-every, --no-scale,
// --d-k, --norm, --no-bias, --recompute, --attention-budget) into a model's
// config, and the first seven back from one (the others are run settings, not
// stored with the model).
void attention_to_model(const TrainConfig& c, nn::AttentionSettings& a);
void attention_from_model(TrainConfig& c, const nn::AttentionSettings& a);

std::unique_ptr<optim::Schedule> make_schedule(const TrainConfig& c);
// The optimizer the settings name, over `model`'s parameters, with the weight
// decay on its Linear weights only (nn::weight_decay_mask).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const nn::Module& model);
// The settings an optimizer's row (optim/optimizers.h) reads, from the run's.
optim::OptimizerSettings optimizer_settings(const TrainConfig& c);
// The checks a value needs only when the command line gave it (`given` lists
// the keys it set): --d-k 0, its default's value, is refused when said.
void check_given_flags(const TrainConfig& c, const std::vector<std::string>& given);
// A new run's settings that follow from others when the command line left
// them unsaid (`given` lists the keys it set): --optimizer adamw decays
// weights by 0.01 (torch.optim.AdamW's default).
void fill_dependent_defaults(TrainConfig& c, const std::vector<std::string>& given);

// The words of a space-separated list, in order ("learned rope relative" ->
// {learned, rope, relative}: a family's position kinds or objectives); null: none.
std::vector<std::string> words_of(const char* space_separated);

}  // namespace qkv::train
