// The Trainer's definitions (trainer/trainer.h holds the class and reads
// first): the data, the model, one step, evaluation, answers and writing a
// checkpoint. Reading one back is in trainer/checkpoint.cpp.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trainer/trainer.h"
#include "nn/moe.h"
#include "trainer/data_sources.h"
#include "trainer/instruments.h"
#include "trainer/token_kinds.h"

namespace qkv::train {

namespace detail {
// data/ names the file in its errors; the trainer adds the flag that named it.
TextFile read_flag_file(const std::string& flag, const std::string& path, int64_t max_bytes,
                        bool any_bytes) {
  try {
    return data::read_text_file(path, max_bytes, any_bytes);
  } catch (const Error& e) {
    throw Error(flag + " " + e.what());
  }
}

// A family that labels each source token (the encoder model): pairs whose
// target is not as long as its source are refused, naming the first such line of `file`.
void check_one_label_per_token(const TrainConfig& c, const std::vector<data::TokenPair>& pairs,
                               const std::string& file) {
  if (!family(c.model, "--model").reads.labels_tokens) return;
  if (const data::TokenPair* p = data::first_length_mismatch(pairs))
    throw Error("--model " + c.model + ": " + brief(file) + ":" + std::to_string(p->line) +
                ": the source has " + std::to_string(p->src.size()) + " tokens and the target " +
                std::to_string(p->tgt.size()) + " (the " + c.model +
                " model gives one label per source token)");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string hex64(uint64_t h) {
  char b[20];
  std::snprintf(b, sizeof b, "%016" PRIx64, h);
  return b;
}
// A data file as a checkpoint records it: the path as typed and absolute (so
// the file is found from another folder), its size and hash.
json file_info(const TextFile& f) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(f.path, ec).lexically_normal().string();
  return {{"path", f.path},
          {"abspath", ec ? f.path : abs},
          {"bytes", f.text.size()},
          {"fnv1a64", hex64(f.hash)}};
}
// An odd 64-bit constant with well-mixed bits (a multiplier from the R2
// quasi-random sequence): multiplying the rank by it spreads ranks 1, 2, ...
// over far-apart seeds.
constexpr uint64_t kRankSeedMultiplier = 0xd1b54a32d192ed03ULL;

HeldoutSplit heldout_split(size_t n, uint64_t seed, double valid_fraction) {
  HeldoutSplit s;
  s.order.resize(n);
  std::iota(s.order.begin(), s.order.end(), size_t{0});
  Generator split_gen(seed ^ kSplitSeedSalt);
  for (size_t i = n; i > 1; --i)
    std::swap(s.order[i - 1],
              s.order[static_cast<size_t>(split_gen.randint(0, static_cast<int64_t>(i)))]);
  s.n_valid =
      std::clamp<size_t>(static_cast<size_t>(std::llround(valid_fraction * double(n))), 1, n - 1);
  return s;
}

int64_t argmax_hits(const nn::TeacherForced& f) {
  const Tensor& z = f.logits.data();  // (B, T, V)
  const int64_t V = z.size(-1);
  int64_t hits = 0;
  for (size_t i = 0; i < f.targets.size(); ++i) {
    if (f.targets[i] == f.ignore_index) continue;
    const real* row = z.data() + static_cast<int64_t>(i) * V;
    hits += std::max_element(row, row + V) - row == f.targets[i];
  }
  return hits;
}

// The dropout seed of MPI rank r > 0 (rank 0 uses the model's own).
uint64_t rank_dropout_seed(uint64_t seed, int r) {
  return seed ^ (kRankSeedMultiplier * static_cast<uint64_t>(r + 1));
}

// Data parallel: the rows [begin, end) of a batch drawn on every rank.
LMBatch rows_of(const LMBatch& b, dist::Share r) {
  const int64_t T = b.ids.len, n = r.end - r.begin;
  LMBatch out{{std::vector<int64_t>(b.ids.ids.begin() + r.begin * T, b.ids.ids.begin() + r.end * T),
               n,
               T,
               {}},
              std::vector<int64_t>(b.targets.begin() + r.begin * T, b.targets.begin() + r.end * T),
              0};
  if (!b.ids.lengths.empty())
    out.ids.lengths.assign(b.ids.lengths.begin() + r.begin, b.ids.lengths.begin() + r.end);
  for (int64_t t : out.targets) out.target_tokens += t != Vocab::kPad;
  return out;
}

// This rank's share of the global batch's mean loss. The loss of the global
// batch is the mean over its N non-pad target tokens, L = (1/N) sum_i l_i;
// rank r holds n_r of them and computes the mean over its own, L_r. Since
// L = sum_r (n_r / N) L_r, each rank scales its L_r by n_r / N: the sum of
// the ranks' scaled losses, and of their gradients (dist::allreduce_gradients
// sums), is the one-process loss and gradient of the global batch, up to the
// order of float additions. (Averaging the ranks' unscaled gradients would
// be right only when every rank has the same number of target tokens.) In
// one process n_r = N and nothing is scaled.
Var share_of_loss(const Var& local_mean, int64_t local_tokens, int64_t global_tokens) {
  if (local_tokens == global_tokens) return local_mean;
  return local_mean * static_cast<real>(double(local_tokens) / double(global_tokens));
}
}  // namespace detail

Trainer::Trainer(Trainer&& other) = default;
Trainer& Trainer::operator=(Trainer&& other) = default;
Trainer::~Trainer() = default;

bool Trainer::is_lm() const { return reads_corpus(cfg); }

Trainer::Trainer(const TrainConfig& c, const Vocab* given, const std::string& where, DataUse use,
                 const FileShape* file)
    : cfg(c), data_gen(c.seed) {
  if (file) {
    labels = file->labels;
    shape = file->shape;
  }
  if (cfg.min_lr == kAutoMinLr) cfg.min_lr = cfg.lr * real(0.05);
  validate(cfg, where);
  if (use == DataUse::None) {
    if (!given) throw Error("Trainer: DataUse::None needs the vocabulary");
    vocab = *given;  // the position table (cfg.context) is the file's
    detail::check_memory(cfg, vocab.size(), std::max<int64_t>(1, cfg.context));
  } else {
    try {
      build_data(given);
    } catch (const Error& e) {  // a BPE pattern PCRE2 gave up on: which text, which pattern
      const std::string m = e.what();
      if (m.rfind(data::BPE::kPatternFailed, 0) != 0) throw;
      throw Error("--data " + brief(cfg.data) + ": " + m + " (" +
                  (given && given->bpe()
                       ? "the pattern is metadata 'bpe' key 'pattern' of " +
                             (where.empty() ? std::string("--tokenizer-from's file") : where)
                       : std::string("the pattern is GPT-4's")) +
                  ")");
    }
  }
  build_model();
  opt = make_optimizer(cfg, model());
  schedule = make_schedule(cfg);
  // Each MPI rank drops out its own units: rank 0 keeps the model's stream
  // (so one rank is a one-process run), rank r > 0 gets a stream of its own.
  if (dist::rank() > 0)
    dropout_gen().manual_seed(detail::rank_dropout_seed(cfg.seed, dist::rank()));
}

// Reads the data (the row of the data-source table that takes the run's
// settings: trainer/data_sources.h), fixes the vocabulary and checks every
// sequence against the position table (--context; 0 takes what the data needs).
void Trainer::build_data(const Vocab* given) {
  const DataNeed need = data_source(cfg).read(*this, given);
  if (pairs && pairs->heldout().empty())
    throw Error("--valid " + brief(cfg.valid) + ": no held-out pairs");
  if (cfg.context == 0) cfg.context = need.tokens;
  const bool table_is_fixed = fixed_positions(family(), cfg);
  if (table_is_fixed && need.tokens > cfg.context)
    throw Error("--context " + std::to_string(cfg.context) +
                ": the position table is shorter than a sequence of " +
                std::to_string(need.tokens) + " tokens (" + need.where + ")");
  detail::check_memory(cfg, vocab.size(), need.tokens);
}

void Trainer::build_model() {
  shape.vocab = vocab.size();
  shape.classes = static_cast<int64_t>(labels.size());
  if (const char* extra = family().objectives.extra_special) {
    // A file's model_config names its mask token (Family::shape_from_model);
    // a new model's is the vocabulary's "[MASK]".
    if (shape.mask_id < 0) shape.mask_id = vocab.find(extra);
    // Masking text needs the token (a vocabulary from --tokenizer-from or
    // another family's file may lack it).
    if (text && family().objectives.text_pairs && shape.mask_id < 0)
      throw Error("--objective " + cfg.objective + ": the vocabulary has no " + extra +
                  " token (a tokenizer taken from a file of another family?): let this run "
                  "learn its own");
  }
  net_ = family().model.build(cfg, shape);
}

// Every MPI rank draws the whole global batch from data_gen (so data_gen
// stays the same on all ranks, and the batch is a one-process run's) and
// keeps its own rows (dist::share). *target_tokens gets the global count.
Var Trainer::loss_on_batch(int64_t* target_tokens) {
  const dist::Share mine = dist::share(cfg.batch, dist::rank(), dist::size());
  nn::TeacherForced f;
  if (text && family().objectives.text_pairs) {  // another objective on text (bert's mlm)
    const LMBatch b = text->draw(cfg.batch, data_gen, cfg.group_by_length ? data::kLengthPool : 1);
    std::vector<Pair> made = family().objectives.text_pairs(cfg, shape, b, vocab, data_gen);
    if (dist::size() > 1)
      made = std::vector<Pair>(made.begin() + mine.begin, made.begin() + mine.end);
    f = net_->forward_pairs(made);
    *target_tokens = dist::sum(f.target_tokens);
  } else if (text) {
    LMBatch b = text->draw(cfg.batch, data_gen);
    *target_tokens = b.target_tokens;
    if (dist::size() > 1) b = detail::rows_of(b, mine);
    f = net_->forward_text(b);
  } else {
    std::vector<Pair> drawn = pairs->draw(cfg.batch, data_gen, augment);
    if (dist::size() > 1)
      drawn = std::vector<Pair>(drawn.begin() + mine.begin, drawn.begin() + mine.end);
    f = net_->forward_pairs(drawn);
    // The tokens scored over all ranks (the model family decides which are).
    *target_tokens = dist::sum(f.target_tokens);
  }
  return detail::share_of_loss(
      nn::cross_entropy(f.logits, f.targets, f.ignore_index, cfg.label_smoothing), f.target_tokens,
      *target_tokens);
}

real Trainer::step() {
  model().train();
  opt->zero_grad();
  const int64_t s = step_count() + 1;
  int64_t tokens = 0;
  before_step_data_ = data_gen.state();
  before_step_dropout_ = net_->dropout_generator().state();
  // --instruments: a watched step's layers report to it during the forward.
  Instruments* watching = instruments && instruments->due(s) ? instruments.get() : nullptr;
  if (watching) watching->watch(s);
  Var loss = loss_on_batch(&tokens);
  if (watching) watching->unwatch();
  // The global batch's loss (the ranks' shares summed): the same on every
  // rank, so the checks below stop all ranks at the same step.
  const real value = static_cast<real>(dist::sum(double(loss.item())));
  if (!std::isfinite(value))
    throw Diverged("step " + std::to_string(s) + ": the loss is " + std::to_string(value) +
                   " (training diverged)");
  // A cross-entropy far above a uniform guess's (ln V) means the weights have
  // blown up even if every number is still finite: also a divergence.
  const double uniform = std::log(double(model().vocab_size()));
  if (value > kExplodedLoss * uniform) {
    char m[200];
    std::snprintf(m, sizeof m,
                  "step %lld: the loss %.4g is over %g times a uniform guess's (ln V = %.3f): "
                  "training diverged",
                  (long long)s, double(value), kExplodedLoss, uniform);
    throw Diverged(m);
  }
  // --experts: the task's loss plus --aux-loss times the load-balancing
  // loss (nn/moe.h); each rank's share, as the task loss's (a mean over
  // ranks). The value reported stays the task's.
  Var total = loss;
  if (Var aux = net_->aux_loss(); aux.defined()) {
    const double ranks = double(dist::size());
    total = loss + aux * static_cast<real>(double(cfg.aux_loss) / ranks);
    experts.add_step(net_->routings(), static_cast<real>(dist::sum(double(aux.item())) / ranks));
  }
  total.backward();
  // The global batch's gradient on every rank, before clipping sees it.
  last_allreduce_seconds = dist::allreduce_gradients(opt->params());
  if (watching) watching->gradients();  // before clipping; keeps w for the update ratio
  // The norm before clipping; with --clip 0 nothing is scaled.
  last_grad_norm = optim::clip_grad_norm(
      opt->params(), cfg.clip > 0 ? cfg.clip : std::numeric_limits<real>::max());
  if (!std::isfinite(last_grad_norm))
    throw Diverged(
        "step " + std::to_string(s) + ": the gradient norm is " + std::to_string(last_grad_norm) +
        " (training diverged; the parameters are those of step " + std::to_string(s - 1) + ")");
  opt->lr = schedule->lr(s);
  opt->step();
  if (watching) watching->updated(value, double(opt->lr), double(last_grad_norm));
  last_target_tokens = tokens;
  return value;
}

std::optional<DivergedStep> Trainer::rerun_diverged_step() {
  if (dist::size() > 1) return std::nullopt;
  DivergedStep d;
  d.step = step_count() + 1;
  // Weights already not finite: an earlier step's update made them.
  for (auto [name, p] : model().named_parameters()) {
    if (p.name().empty()) p.set_name(name);  // the page names a parameter an op read
    TensorStats st = tensor_stats(p.data());
    if (!st.finite()) {
      d.cause = DivergedStep::Cause::Weights;
      d.bad_params.emplace_back(name, st);
    }
    d.largest_params.emplace_back(name, std::move(st));
  }
  // The weights the updates grew furthest: the 5 of largest |w| (for Optimizer).
  std::stable_sort(
      d.largest_params.begin(), d.largest_params.end(),
      [](const auto& a, const auto& b) { return a.second.max_abs > b.second.max_abs; });
  if (d.largest_params.size() > 5) d.largest_params.resize(5);
  const Generator::State data_after = data_gen.state(),
                         dropout_after = net_->dropout_generator().state();
  data_gen.set_state(before_step_data_);
  net_->dropout_generator().set_state(before_step_dropout_);
  model().train();
  opt->zero_grad();
  try {
    DetectAnomalyGuard anomaly;
    RetainValuesGuard keep;  // the inputs' values, for the page's statistics in backward
    int64_t tokens = 0;
    Var loss = loss_on_batch(&tokens);
    loss.backward();
    d.loss = double(loss.item());
  } catch (const AnomalyError& e) {
    const DivergedStep::Cause weights = d.cause;
    d.anomaly = e;
    d.largest_params.clear();
    d.cause = !d.bad_params.empty()         ? weights
              : !e.backward && e.input >= 0 ? DivergedStep::Cause::Input
                                            : DivergedStep::Cause::Op;
  }
  opt->zero_grad();
  data_gen.set_state(data_after);
  net_->dropout_generator().set_state(dropout_after);
  return d;
}

std::vector<std::string> Trainer::dropout_states() const {
  return dist::all_gather(generator_state_string(net_->dropout_generator()));
}

void Trainer::save(const std::string& path) const {
  const std::vector<std::string> states = dropout_states();
  if (dist::rank() == 0) write_checkpoint(path, states);
}

void Trainer::write_checkpoint(const std::string& path,
                               const std::vector<std::string>& dropout_states) const {
  NamedTensors all;
  for (auto& [n, t] : nn::state_dict(model())) all.emplace_back("model." + n, t);
  for (auto& [n, t] : opt->state_dict()) all.emplace_back("optim." + n, t);
  Metadata md = nn::model_metadata(model(), "model.");
  md["format"] = kCheckpointFormat;
  md["train_config"] = cfg.run_json().dump();  // the architecture is model_config's alone
  md["vocab"] = vocab.to_json().dump();
  md["tokenizer"] = run_token_kind(cfg).name;  // the built-in tasks: word
  if (vocab.bpe()) {  // its merges and pattern, and the bytes it learned them from
    json b = vocab.bpe_json();
    if (!tokenizer_info.trained_on->is_null()) b["trained_on"] = *tokenizer_info.trained_on;
    md["bpe"] = b.dump();
  }
  md["special_tokens"] = nn::special_tokens_json(
      {Vocab::kPad, Vocab::kBos, Vocab::kEos, vocab.has_unk() ? Vocab::kUnk : -1});
  if (classifies()) md["labels"] = json(labels).dump();
  md["data"] = data_info->dump();
  md["step"] = std::to_string(opt->step_count());
  md["data_gen"] = generator_state_string(data_gen);
  md["dropout_gen"] = dropout_states.at(0);  // rank 0's (the only one in one process)
  // Which products trained the weights: a bf16 run says so (the tensors are
  // float32 either way).
  if (matmul_precision() == MatmulPrecision::bf16) md["matmul_precision"] = "bf16";
  if (best.step >= 0) md["best_heldout"] = json{{"loss", best.loss}, {"step", best.step}}.dump();
  if (dropout_states.size() > 1) md["dropout_gen_ranks"] = json(dropout_states).dump();
  check_finite(all, "checkpoint " + brief(path) + ": not written");  // never a NaN model on disk
  write_safetensors(path, all, md);
}

}  // namespace qkv::train
