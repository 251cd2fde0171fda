// The Trainer's definitions (examples/trainer.h holds the class and reads
// first). Header-only: examples/ has one .cpp per program.
#pragma once
#include <unistd.h>

#include <cmath>
#include <limits>
#include <filesystem>
#include <numeric>
#include <set>
#include <string_view>

#include "examples/trainer.h"

namespace qkv::train {

namespace detail {

inline void require(bool ok, const std::string& flag, const std::string& what) {
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
inline std::string num(double v) { return show_value(json(v)); }
inline std::string hex64(uint64_t h) {
  char b[20];
  std::snprintf(b, sizeof b, "%016" PRIx64, h);
  return b;
}
// A data file as a checkpoint records it: the path as typed and absolute (so
// the file is found from another folder), its size and hash.
inline json file_info(const TextFile& f) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(f.path, ec).lexically_normal().string();
  return {{"path", f.path}, {"abspath", ec ? f.path : abs}, {"bytes", f.text.size()}, {"fnv1a64", hex64(f.hash)}};
}
inline double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 8e9;
}
inline std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", bytes / 1073741824.0);
  return b;
}
// Refuses data whose estimated `bytes` would take more than half the
// machine's memory, before any of it is allocated: "<what>: <detail> need
// about 12.3 GiB, more than half of this machine's 23.4 GiB".
inline void check_data_memory(double bytes, const std::string& what, const std::string& detail_text) {
  const double have = physical_memory_bytes();
  if (bytes > 0.5 * have)
    throw Error(what + ": " + detail_text + " need about " + gib(bytes) + ", more than half of this machine's " + gib(have));
}
// Refuses a model or batch whose memory would clearly not fit, before it is
// built. An estimate: weights, gradients and Adam's two moments (16 bytes per
// parameter) plus the activations a step keeps, roughly 40 numbers of width
// max(D, F) per token per layer and the attention maps.
inline void check_memory(const TrainConfig& c, int64_t V, int64_t T) {
  const double D = double(c.d_model), F = double(c.d_ff), L = double(c.layers), H = double(c.heads);
  const double stacks = c.is_gpt() ? 1 : 2.5;  // encoder, decoder (with cross-attention)
  const double params = stacks * L * (4 * D * D + 2 * D * F) + 2 * double(V) * D + double(T) * D;
  const double tokens = double(c.batch) * double(T);
  const double acts = stacks * L * tokens * (40 * std::max(D, F) + 4 * H * double(T)) + 3 * tokens * double(V);
  const double bytes = 16 * params + 4 * acts, have = physical_memory_bytes();
  if (bytes > 0.8 * have) {
    char m[300];
    std::snprintf(m, sizeof m,
                  "this model and batch need about %.1f GiB (--d-model %lld, --d-ff %lld, --layers %lld, "
                  "--batch %lld, %lld tokens per sequence), more than this machine's %.1f GiB",
                  bytes / 1073741824.0, (long long)c.d_model, (long long)c.d_ff, (long long)c.layers,
                  (long long)c.batch, (long long)T, have / 1073741824.0);
    throw Error(m);
  }
}

// An odd 64-bit constant with well-mixed bits (a multiplier from the R2
// quasi-random sequence): multiplying the rank by it spreads ranks 1, 2, ...
// over far-apart seeds.
constexpr uint64_t kRankSeedMultiplier = 0xd1b54a32d192ed03ULL;
// XORed into --seed for the held-out split's own stream (0x5d17: "split");
// any constant works, this one must stay: it fixes which pairs are held out.
constexpr uint64_t kSplitSeedSalt = 0x5d17ULL;

// The dropout seed of MPI rank r > 0 (rank 0 uses the model's own).
inline uint64_t rank_dropout_seed(uint64_t seed, int r) {
  return seed ^ (kRankSeedMultiplier * static_cast<uint64_t>(r + 1));
}

// Data parallel: the rows [begin, end) of a batch drawn on every rank.
inline LMBatch rows_of(const LMBatch& b, dist::Share r) {
  const int64_t T = b.ids.len, n = r.end - r.begin;
  LMBatch out{{std::vector<int64_t>(b.ids.ids.begin() + r.begin * T, b.ids.ids.begin() + r.end * T), n, T, {}},
              std::vector<int64_t>(b.targets.begin() + r.begin * T, b.targets.begin() + r.end * T), 0};
  if (!b.ids.lengths.empty()) out.ids.lengths.assign(b.ids.lengths.begin() + r.begin, b.ids.lengths.begin() + r.end);
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
inline Var share_of_loss(const Var& local_mean, int64_t local_tokens, int64_t global_tokens) {
  if (local_tokens == global_tokens) return local_mean;
  return local_mean * static_cast<real>(double(local_tokens) / double(global_tokens));
}

}  // namespace detail

inline void validate(const TrainConfig& c, const std::string& where) {
  // "--d-model" on the command line; for a checkpoint's settings the file and
  // the key: "<file>: metadata 'model_config' key 'd_model'" (the
  // architecture, under the model's own names) or "... 'train_config' key 'lr'".
  auto name = [&](const char* key) {
    if (where.empty()) return flag_of(key);
    if (!TrainConfig::is_arch_key(key)) return where + ": metadata 'train_config' key '" + key + "'";
    const std::map<std::string, std::string> model_name = {
        {"pre_ln", "pre_norm"}, {"tie", "tie_weights"}, {"positions", "learned_positions"}, {"layers", "layers"}};
    const auto it = model_name.find(key);
    return where + ": metadata 'model_config' key '" + (it == model_name.end() ? key : it->second) + "'";
  };
  using detail::require;
  using detail::require_range;
  using detail::num;
  require(c.model == "seq2seq" || c.model == "gpt", name("model"), "expected seq2seq or gpt, got '" + brief(c.model) + "'");
  require_range<int64_t>(c.d_model, 1, 16384, name("d_model"));
  require_range<int64_t>(c.heads, 1, 1024, name("heads"));
  require(c.d_model % c.heads == 0, name("heads"),
          std::to_string(c.heads) + " heads do not divide --d-model " + std::to_string(c.d_model));
  require_range<int64_t>(c.layers, 1, 128, name("layers"));
  require_range<int64_t>(c.d_ff, 1, 65536, name("d_ff"));
  require(c.dropout >= 0 && c.dropout < 1, name("dropout"), "must be in [0, 1), got " + num(c.dropout));
  require(c.positions == "sinusoidal" || c.positions == "learned", name("positions"),
          "expected sinusoidal or learned, got '" + brief(c.positions) + "'");
  require(!(c.is_gpt() && c.positions != "learned"), name("positions"),
          "the gpt model has learned positions only (nn::GPT)");
  require(c.activation == "relu" || c.activation == "gelu", name("activation"),
          "expected relu or gelu, got '" + brief(c.activation) + "'");
  require_range<int64_t>(c.context, 0, 65536, name("context"));
  require(c.format == "tsv" || c.format == "text", name("format"), "expected tsv or text, got '" + brief(c.format) + "'");
  require(c.tokens == "char" || c.tokens == "word", name("tokens"), "expected char or word, got '" + brief(c.tokens) + "'");
  if (c.data.empty()) {
    tasks::parse_task(c.task);
    require(c.valid.empty(), name("valid"), "needs --data (the built-in tasks draw their own held-out set)");
    require_range<int64_t>(c.vocab, 1, 100000, name("vocab"));
    require_range<int64_t>(c.min_len, 1, 4096, name("min_len"));
    require_range<int64_t>(c.max_len, 1, 4096, name("max_len"));
    require(c.min_len <= c.max_len, name("min_len"),
            std::to_string(c.min_len) + " is more than --max-len " + std::to_string(c.max_len));
    require_range<int64_t>(c.heldout, 1, 1000000, name("heldout"));
  } else {
    require(!(c.format == "text" && !c.is_gpt()), name("format"),
            "text (a plain corpus) trains a language model: use --model gpt");
    if (c.valid.empty())
      require(c.valid_fraction > 0 && c.valid_fraction <= 0.5, name("valid_fraction"),
              "must be in (0, 0.5], got " + num(c.valid_fraction));
  }
  require_range<int64_t>(c.max_vocab, 1, 1000000, name("max_vocab"));
  require_range<int64_t>(c.batch, 1, 65536, name("batch"));
  require(c.batch >= dist::size(), name("batch"),
          std::to_string(c.batch) + " sequences cannot be shared by " + std::to_string(dist::size()) +
              " MPI ranks (each needs at least one)");
  require_range<int64_t>(c.steps, 1, 1000000000, name("steps"));
  require(c.schedule == "noam" || c.schedule == "cosine" || c.schedule == "constant", name("schedule"),
          "expected noam, cosine or constant, got '" + brief(c.schedule) + "'");
  require(std::isfinite(c.lr) && c.lr > 0 && c.lr <= 1e6, name("lr"), "must be finite, > 0 and <= 1e6, got " + num(c.lr));
  require_range<int64_t>(c.warmup, 0, 1000000000, name("warmup"));
  require(!(c.schedule == "noam" && c.warmup < 1), name("warmup"), "the noam schedule needs --warmup >= 1");
  require(!(c.schedule == "cosine" && c.warmup > c.steps), name("warmup"),
          std::to_string(c.warmup) + " is more than --steps " + std::to_string(c.steps) +
              " (the cosine schedule warms up within --steps)");
  require(c.label_smoothing >= 0 && c.label_smoothing < 1, name("label_smoothing"),
          "must be in [0, 1), got " + num(c.label_smoothing));
  require(std::isfinite(c.clip) && c.clip >= 0, name("clip"), "must be finite and >= 0, got " + num(c.clip));
}

inline std::unique_ptr<optim::Schedule> make_schedule(const TrainConfig& c) {
  if (c.schedule == "noam") return std::make_unique<optim::NoamSchedule>(c.d_model, c.warmup, c.lr);
  if (c.schedule == "cosine") return std::make_unique<optim::WarmupCosineSchedule>(c.lr, c.warmup, c.steps, c.lr * real(0.05));
  if (c.schedule == "constant") return std::make_unique<optim::ConstantSchedule>(c.lr, c.warmup);
  throw Error("--schedule: unknown schedule '" + c.schedule + "' (expected noam, cosine or constant)");
}

inline Trainer::Trainer(const TrainConfig& c, const Vocab* given, const std::string& where, DataUse use)
    : cfg(c), data_gen(c.seed) {
  validate(cfg, where);
  if (use == DataUse::None) {
    if (!given) throw Error("Trainer: DataUse::None needs the vocabulary");
    vocab = *given;  // the position table (cfg.context) is the file's
    detail::check_memory(cfg, vocab.size(), std::max<int64_t>(1, cfg.context));
  } else {
    build_data(given);
  }
  build_model();
  opt = std::make_unique<optim::Adam>(model().parameters(), optim::AdamOptions::paper(cfg.lr));
  schedule = make_schedule(cfg);
  // Each MPI rank drops out its own units: rank 0 keeps the model's stream
  // (so one rank is a one-process run), rank r > 0 gets a stream of its own.
  if (dist::rank() > 0) dropout_gen().manual_seed(detail::rank_dropout_seed(cfg.seed, dist::rank()));
}

// Reads the data, fixes the vocabulary and checks every sequence against the
// position table (--context; 0 takes what the data needs).
inline void Trainer::build_data(const Vocab* given) {
  const Split how = parse_split(cfg.tokens);
  const int64_t kMaxFileBytes = int64_t(1) << 30;
  int64_t need = 0;  // the longest sequence a model input will hold
  std::string longest_where;
  if (cfg.data.empty()) {
    vocab = Vocab::symbols(cfg.vocab);
    if (given && given->to_json() != vocab.to_json())
      throw Error("checkpoint: its vocabulary is not the --vocab " + std::to_string(cfg.vocab) + " symbols of the task");
    // The held-out set is kept as ids (8 bytes a token, source and target).
    detail::check_data_memory(double(cfg.heldout) * (16.0 * double(cfg.max_len) + 64), "--heldout " + std::to_string(cfg.heldout),
                              "sequences of up to --max-len " + std::to_string(cfg.max_len) + " tokens");
    try {
      pairs = std::make_unique<PairData>(
          tasks::TaskConfig{tasks::parse_task(cfg.task), cfg.vocab, cfg.min_len, cfg.max_len}, cfg.heldout, data_gen);
    } catch (const Error& e) {  // e.g. a held-out set larger than half of all sequences
      throw Error("--heldout " + std::to_string(cfg.heldout) + " with --vocab " + std::to_string(cfg.vocab) +
                  ", --min-len " + std::to_string(cfg.min_len) + ", --max-len " + std::to_string(cfg.max_len) + ": " + e.what());
    }
    data_info = {{"kind", "task"}, {"task", cfg.task}};
    need = cfg.is_gpt() ? 2 * cfg.max_len + 1 : cfg.max_len + 1;
    longest_where = "--max-len " + std::to_string(cfg.max_len);
  } else if (cfg.format == "tsv") {
    TextFile f = read_text_file(cfg.data, "--data", kMaxFileBytes);
    // Each pair's tokens are held as strings (~40 bytes a character) until encoded.
    detail::check_data_memory(48.0 * double(f.text.size()), "--data " + cfg.data,
                              std::to_string(f.text.size()) + " bytes of pairs");
    std::vector<TokenPair> train_tok = parse_pairs(f, how), valid_tok;
    data_info = {{"kind", "pairs"}, {"data", detail::file_info(f)}};
    if (!cfg.valid.empty()) {
      TextFile v = read_text_file(cfg.valid, "--valid", kMaxFileBytes);
      valid_tok = parse_pairs(v, how);
      data_info["valid"] = detail::file_info(v);
    } else {
      // A fixed split of the file, drawn from its own stream so that it does
      // not depend on anything else the run draws.
      if (train_tok.size() < 2) throw Error("--data " + cfg.data + ": one pair cannot be split into training and held-out");
      std::vector<size_t> order(train_tok.size());
      std::iota(order.begin(), order.end(), size_t{0});
      Generator split_gen(cfg.seed ^ detail::kSplitSeedSalt);
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[static_cast<size_t>(split_gen.randint(0, static_cast<int64_t>(i)))]);
      const size_t n_valid = std::clamp<size_t>(static_cast<size_t>(std::llround(cfg.valid_fraction * double(order.size()))), 1, order.size() - 1);
      std::vector<TokenPair> kept;
      for (size_t i = 0; i < order.size(); ++i) (i < n_valid ? valid_tok : kept).push_back(train_tok[order[i]]);
      train_tok.swap(kept);
    }
    if (given) {
      vocab = *given;
    } else {
      std::vector<const std::vector<std::string>*> lists;
      for (auto& p : train_tok) { lists.push_back(&p.src); lists.push_back(&p.tgt); }
      const auto toks = distinct_tokens(lists);
      if (static_cast<int64_t>(toks.size()) > cfg.max_vocab)
        throw Error("--data " + cfg.data + ": " + std::to_string(toks.size()) + " distinct tokens is more than --max-vocab " +
                    std::to_string(cfg.max_vocab) + (cfg.tokens == "word" ? "" : " (try --tokens word?)"));
      vocab = Vocab::from_tokens(toks);
    }
    std::vector<Pair> train_p, valid_p;
    int64_t unknown_train = 0;
    auto add = [&](const std::vector<TokenPair>& in, std::vector<Pair>& out, int64_t* unk, const std::string& file) {
      for (const TokenPair& p : in) {
        out.push_back({vocab.encode(p.src, unk), vocab.encode(p.tgt, unk)});
        const int64_t len = cfg.is_gpt() ? static_cast<int64_t>(p.src.size() + p.tgt.size()) + 1
                                         : static_cast<int64_t>(std::max(p.src.size(), p.tgt.size() + 1));
        if (len > need) { need = len; longest_where = file + ":" + std::to_string(p.line); }
      }
    };
    add(train_tok, train_p, &unknown_train, cfg.data);
    add(valid_tok, valid_p, &unknown_heldout_tokens, cfg.valid.empty() ? cfg.data : cfg.valid);
    pairs = std::make_unique<PairData>(std::move(train_p), std::move(valid_p));
  } else {  // text: a language model's token stream, encoded straight into ids
    TextFile f = read_text_file(cfg.data, "--data", kMaxFileBytes);
    data_info = {{"kind", "text"}, {"data", detail::file_info(f)}};
    std::optional<TextFile> v;
    if (!cfg.valid.empty()) {
      v = read_text_file(cfg.valid, "--valid", kMaxFileBytes);
      data_info["valid"] = detail::file_info(*v);
    }
    // Count first: the ids take 8 bytes a token (twice while the split is made).
    int64_t n_train = 0, n_valid_file = 0;
    for_each_token(f.text, how, [&](std::string_view) { ++n_train; });
    if (v) for_each_token(v->text, how, [&](std::string_view) { ++n_valid_file; });
    detail::check_data_memory(double(n_train + n_valid_file) * 16, "--data " + cfg.data,
                              std::to_string(n_train + n_valid_file) + " tokens");
    if (given) {
      vocab = *given;
    } else {
      std::set<std::string, std::less<>> distinct;
      const int64_t n_fit = v ? n_train : n_train - static_cast<int64_t>(cfg.valid_fraction * double(n_train));
      int64_t k = 0;
      for_each_token(f.text, how, [&](std::string_view t) {
        if (k++ < n_fit && distinct.find(t) == distinct.end()) distinct.emplace(t);
      });
      if (static_cast<int64_t>(distinct.size()) > cfg.max_vocab)
        throw Error("--data " + cfg.data + ": " + std::to_string(distinct.size()) +
                    " distinct tokens is more than --max-vocab " + std::to_string(cfg.max_vocab));
      vocab = Vocab::from_tokens({distinct.begin(), distinct.end()});
    }
    if (cfg.context == 0) cfg.context = 64;
    int64_t unknown_train = 0;
    Seq train_ids, valid_ids;
    train_ids.reserve(static_cast<size_t>(n_train));
    for_each_token(f.text, how, [&](std::string_view t) { train_ids.push_back(vocab.id_of(t, &unknown_train)); });
    if (v) {
      valid_ids.reserve(static_cast<size_t>(n_valid_file));
      for_each_token(v->text, how, [&](std::string_view t) { valid_ids.push_back(vocab.id_of(t, &unknown_heldout_tokens)); });
    } else {  // the last --valid-fraction of the stream
      const size_t n_valid = static_cast<size_t>(cfg.valid_fraction * double(train_ids.size()));
      valid_ids.assign(train_ids.end() - static_cast<std::ptrdiff_t>(n_valid), train_ids.end());
      train_ids.resize(train_ids.size() - n_valid);
      train_ids.shrink_to_fit();
    }
    if (static_cast<int64_t>(train_ids.size()) < cfg.context + 2)
      throw Error("--data " + cfg.data + ": " + std::to_string(train_ids.size()) + " training tokens is too few for --context " +
                  std::to_string(cfg.context));
    if (static_cast<int64_t>(valid_ids.size()) < cfg.context + 1)
      throw Error((cfg.valid.empty() ? "--valid-fraction: the held-out part of " + cfg.data : "--valid " + cfg.valid) + " has " +
                  std::to_string(valid_ids.size()) + " tokens, fewer than one window of --context " +
                  std::to_string(cfg.context) + " + 1");
    text = std::make_unique<TextData>(std::move(train_ids), std::move(valid_ids), cfg.context);
    need = cfg.context;
    longest_where = "--context";
  }
  if (pairs && pairs->heldout().empty()) throw Error("--valid " + cfg.valid + ": no held-out pairs");
  if (cfg.context == 0) cfg.context = need;
  const bool table_is_fixed = cfg.is_gpt() || cfg.positions == "learned";
  if (table_is_fixed && need > cfg.context)
    throw Error("--context " + std::to_string(cfg.context) + ": the position table is shorter than a sequence of " +
                std::to_string(need) + " tokens (" + longest_where + ")");
  detail::check_memory(cfg, vocab.size(), need);
}

inline void Trainer::build_model() {
  const nn::Activation act = cfg.activation == "gelu" ? nn::Activation::GELU : nn::Activation::ReLU;
  if (cfg.is_gpt()) {
    nn::GPTConfig g;
    g.vocab = vocab.size();
    g.d_model = cfg.d_model; g.heads = cfg.heads; g.layers = cfg.layers; g.d_ff = cfg.d_ff;
    g.max_len = cfg.context; g.dropout = cfg.dropout; g.activation = act; g.pre_norm = cfg.pre_ln;
    g.tie_weights = cfg.tie; g.seed = cfg.seed;
    gpt = std::make_unique<nn::GPT>(g);
  } else {
    nn::TransformerConfig m;
    m.src_vocab = m.tgt_vocab = vocab.size();
    m.d_model = cfg.d_model; m.heads = cfg.heads;
    m.encoder_layers = m.decoder_layers = cfg.layers;
    m.d_ff = cfg.d_ff; m.dropout = cfg.dropout; m.activation = act; m.pre_norm = cfg.pre_ln;
    m.tie_weights = cfg.tie;
    m.learned_positions = cfg.positions == "learned";
    m.max_len = m.learned_positions ? cfg.context : 512;  // sinusoidal tables grow on demand
    m.seed = cfg.seed;
    s2s = std::make_unique<nn::Seq2SeqTransformer>(m);
  }
}

// Every MPI rank draws the whole global batch from data_gen (so data_gen
// stays the same on all ranks, and the batch is a one-process run's) and
// keeps its own rows (dist::share). *target_tokens gets the global count.
inline Var Trainer::loss_on_batch(int64_t* target_tokens) {
  const dist::Share mine = dist::share(cfg.batch, dist::rank(), dist::size());
  if (text) {
    LMBatch b = text->draw(cfg.batch, data_gen);
    *target_tokens = b.target_tokens;
    if (dist::size() > 1) b = detail::rows_of(b, mine);
    return detail::share_of_loss(nn::cross_entropy(gpt->forward(b.ids), b.targets, Vocab::kPad, cfg.label_smoothing),
                                 b.target_tokens, *target_tokens);
  }
  std::vector<Pair> drawn = pairs->draw(cfg.batch, data_gen);
  *target_tokens = 0;
  for (const Pair& p : drawn) *target_tokens += static_cast<int64_t>(p.tgt.size()) + 1;  // y1 .. yL </s>
  if (dist::size() > 1) drawn = std::vector<Pair>(drawn.begin() + mine.begin, drawn.begin() + mine.end);
  if (gpt) {
    LMBatch b = collate_prompted(drawn);
    return detail::share_of_loss(nn::cross_entropy(gpt->forward(b.ids), b.targets, Vocab::kPad, cfg.label_smoothing),
                                 b.target_tokens, *target_tokens);
  }
  tasks::Batch b = collate_pairs(drawn);
  Var logits = s2s->forward(b.src, b.tgt_in);  // (B, T, V)
  return detail::share_of_loss(nn::cross_entropy(logits, b.tgt_out, Vocab::kPad, cfg.label_smoothing), b.target_tokens,
                               *target_tokens);
}

inline real Trainer::step() {
  model().train();
  opt->zero_grad();
  const int64_t s = step_count() + 1;
  int64_t tokens = 0;
  Var loss = loss_on_batch(&tokens);
  // The global batch's loss (the ranks' shares summed): the same on every
  // rank, so the checks below stop all ranks at the same step.
  const real value = static_cast<real>(dist::sum(double(loss.item())));
  if (!std::isfinite(value))
    throw Diverged("step " + std::to_string(s) + ": the loss is " + std::to_string(value) + " (training diverged)");
  // A cross-entropy far above a uniform guess's (ln V) means the weights have
  // blown up even if every number is still finite: also a divergence.
  const double uniform = std::log(double(vocab.size()));
  if (value > kExplodedLoss * uniform) {
    char m[200];
    std::snprintf(m, sizeof m, "step %lld: the loss %.4g is over %g times a uniform guess's (ln V = %.3f): training diverged",
                  (long long)s, double(value), kExplodedLoss, uniform);
    throw Diverged(m);
  }
  loss.backward();
  // The global batch's gradient on every rank, before clipping sees it.
  last_allreduce_seconds = dist::allreduce_gradients(opt->params());
  // The norm before clipping; with --clip 0 nothing is scaled.
  last_grad_norm = optim::clip_grad_norm(opt->params(), cfg.clip > 0 ? cfg.clip : std::numeric_limits<real>::max());
  if (!std::isfinite(last_grad_norm))
    throw Diverged("step " + std::to_string(s) + ": the gradient norm is " + std::to_string(last_grad_norm) +
                   " (training diverged; the parameters are those of step " + std::to_string(s - 1) + ")");
  opt->lr = schedule->lr(s);
  opt->step();
  last_target_tokens = tokens;
  return value;
}

inline real Trainer::check_anomalies() {
  DetectAnomalyGuard anomaly;
  model().eval();
  Var loss;
  if (text) {
    const LMBatch b = text->heldout_batches(cfg.batch).front();
    loss = nn::cross_entropy(gpt->forward(b.ids), b.targets, Vocab::kPad);
  } else {
    const std::vector<Pair>& held = pairs->heldout();
    const std::vector<Pair> some(held.begin(), held.begin() + std::min<size_t>(held.size(), static_cast<size_t>(cfg.batch)));
    if (gpt) {
      const LMBatch b = collate_prompted(some);
      loss = nn::cross_entropy(gpt->forward(b.ids), b.targets, Vocab::kPad);
    } else {
      const tasks::Batch b = collate_pairs(some);
      loss = nn::cross_entropy(s2s->forward(b.src, b.tgt_in), b.tgt_out, Vocab::kPad);
    }
  }
  loss.backward();
  model().zero_grad();
  model().train();
  return loss.item();
}

inline EvalResult Trainer::evaluate() {
  if (!text) {
    EvalResult r = evaluate(pairs->heldout());
    r.unknown_tokens = unknown_heldout_tokens;
    return r;
  }
  NoGradGuard no_grad;
  gpt->eval();
  EvalResult r;
  r.is_lm = true;
  double total = 0;
  for (const LMBatch& b : text->heldout_batches(cfg.batch)) {
    total += double(nn::cross_entropy(gpt->forward(b.ids), b.targets, Vocab::kPad).item()) * double(b.target_tokens);
    r.tokens += b.target_tokens;
  }
  r.loss = r.tokens ? total / double(r.tokens) : 0;
  r.unknown_tokens = unknown_heldout_tokens;
  gpt->train();
  return r;
}

inline EvalResult Trainer::evaluate(const std::vector<Pair>& set, int64_t chunk) {
  EvalResult r;
  // A long evaluation shows how far it is, on a terminal.
  const bool progress = set.size() > 20000 && isatty(STDERR_FILENO) && dist::rank() == 0;
  for (size_t i = 0; i < set.size(); i += static_cast<size_t>(chunk)) {
    if (progress) std::fprintf(stderr, "\r  evaluating: %zu of %zu sequences ", i, set.size());
    const size_t end = std::min(set.size(), i + static_cast<size_t>(chunk));
    std::vector<Seq> sources;
    for (size_t k = i; k < end; ++k) sources.push_back(set[k].src);
    std::vector<Seq> pred = answer(sources);
    for (size_t k = i; k < end; ++k) {
      const Seq& want = set[k].tgt;
      const Seq& got = pred[k - i];
      r.sequences++;
      r.exact += got == want;
      // Token accuracy: position by position over the expected answer and
      // its </s>; a missing or wrong token counts as wrong.
      for (size_t j = 0; j <= want.size(); ++j) {
        const int64_t w = j < want.size() ? want[j] : Vocab::kEos;
        const int64_t p = j < got.size() ? got[j] : (j == got.size() ? Vocab::kEos : -1);
        r.tokens++;
        r.tokens_right += p == w;
      }
      r.predictions.push_back(got);
    }
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  return r;
}

// Sources as one right-padded batch (B, S) with their lengths.
inline nn::Tokens Trainer::source_batch(const std::vector<Seq>& sources) const {
  const int64_t B = static_cast<int64_t>(sources.size());
  nn::Tokens src{std::vector<int64_t>(), B, 0, std::vector<int64_t>(static_cast<size_t>(B))};
  for (const Seq& s : sources) src.len = std::max<int64_t>(src.len, static_cast<int64_t>(s.size()));
  src.ids.assign(static_cast<size_t>(B * src.len), Vocab::kPad);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(sources[b].begin(), sources[b].end(), src.ids.begin() + b * src.len);
    src.lengths[b] = static_cast<int64_t>(sources[b].size());
  }
  return src;
}

inline void Trainer::check_source_fits(size_t n) const {
  const int64_t T = static_cast<int64_t>(n) + (gpt ? 1 : 0);  // gpt reads "source <s>"
  const bool fixed_table = gpt || cfg.positions == "learned";
  if (fixed_table && T > cfg.context)
    throw Error("the input has " + std::to_string(n) + " tokens; this model's position table holds " +
                std::to_string(cfg.context) + (gpt ? " (the input and its answer together)" : ""));
  // Every layer's attention keeps (H, T, T) probabilities (and the decoder's
  // cross-attention against an answer up to as long).
  const double bytes = 4.0 * 3 * double(cfg.layers) * double(cfg.heads) * double(T + 2) * double(T + 2);
  if (bytes > 0.5 * detail::physical_memory_bytes())
    throw Error("the input has " + std::to_string(n) + " tokens; its attention maps need about " + detail::gib(bytes) +
                ", more than half of this machine's " + detail::gib(detail::physical_memory_bytes()));
}

inline std::vector<Seq> Trainer::answer(const std::vector<Seq>& sources) {
  if (is_lm()) throw Error("answer: a language model continues text; it has no source to answer");
  if (decoding.method != "greedy" && decoding.method != "beam")
    throw Error("--decode: expected greedy or beam, got '" + decoding.method + "'");
  if (decoding.method == "beam" && gpt) throw Error("--decode beam: beam search here is for the encoder-decoder (--model seq2seq)");
  int64_t longest = 0;
  for (const Seq& s : sources) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  if (pairs)
    for (const Pair& p : pairs->heldout()) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.tgt.size()));
  if (cfg.data.empty()) longest = std::max(longest, cfg.max_len);
  const int64_t max_new = longest + 2;
  if (gpt) return gpt_answer(sources, max_new);
  const nn::Tokens src = source_batch(sources);
  s2s->eval();
  std::vector<Seq> out;
  if (decoding.method == "beam") {
    nn::BeamOptions bo;
    bo.beam = decoding.beam; bo.alpha = decoding.alpha; bo.max_len = max_new;
    bo.bos = Vocab::kBos; bo.eos = Vocab::kEos; bo.pad = Vocab::kPad;
    for (nn::BeamHypothesis& h : nn::beam_search(*s2s, src, bo)) out.push_back(std::move(h.tokens));
  } else {
    nn::DecodeOptions o;
    o.bos = Vocab::kBos; o.eos = Vocab::kEos; o.pad = Vocab::kPad;
    o.max_len = max_new;
    o.use_cache = decoding.cache;
    out = nn::greedy_decode(*s2s, src, o);
  }
  s2s->train();
  return out;
}

// Greedy continuation of "source <s>" until </s>, with the key/value cache
// (nn::generate at temperature 0), within the position table.
inline std::vector<Seq> Trainer::gpt_answer(const std::vector<Seq>& sources, int64_t max_new) {
  std::vector<Seq> prompts;
  int64_t longest = 0;
  for (const Seq& s : sources) {
    prompts.push_back(s);
    prompts.back().push_back(Vocab::kBos);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts.back().size()));
  }
  nn::SampleOptions o;
  o.temperature = 0;
  o.eos = Vocab::kEos;
  o.max_new_tokens = std::max<int64_t>(1, std::min(max_new, cfg.context - longest + 1));
  Generator unused(0);  // greedy draws nothing
  gpt->eval();
  std::vector<Seq> out = nn::generate(*gpt, source_batch(prompts), o, unused);
  gpt->train();
  for (Seq& s : out)
    if (!s.empty() && s.back() == Vocab::kEos) s.pop_back();
  return out;
}

inline Seq Trainer::continue_text(const Seq& prompt, int64_t n, nn::SampleOptions opt, Generator& gen) {
  if (!gpt) throw Error("continue_text: needs the decoder-only model (--model gpt)");
  if (prompt.empty()) throw Error("continue_text: the prompt is empty");
  // The model sees at most `context` tokens (its position table): the whole
  // prompt when it fits, else its last `context` tokens (prompt_cut says so).
  // Generation fills the table, then slides: the last half of the window
  // becomes the prompt of the next block (the cache is rebuilt from it), so
  // every token is drawn with at least context/2 tokens before it.
  const int64_t W = cfg.context;
  Seq seq(prompt.end() - std::min<int64_t>(W, static_cast<int64_t>(prompt.size())), prompt.end());
  // Never <pad> or <s> (a language model's text has neither), nor </s> when
  // the model does not stop at it.
  opt.suppress = {Vocab::kPad, Vocab::kBos};
  if (!opt.eos) opt.suppress.push_back(Vocab::kEos);
  Seq out;
  gpt->eval();
  while (static_cast<int64_t>(out.size()) < n) {
    const int64_t keep = std::min<int64_t>(static_cast<int64_t>(seq.size()), out.empty() ? W : std::max<int64_t>(1, W / 2));
    const Seq window(seq.end() - keep, seq.end());
    opt.max_new_tokens = std::min<int64_t>(n - static_cast<int64_t>(out.size()), W - keep + 1);
    const Seq more = nn::generate(*gpt, source_batch({window}), opt, gen).front();
    out.insert(out.end(), more.begin(), more.end());
    seq.insert(seq.end(), more.begin(), more.end());
    if (more.empty() || (opt.eos && more.back() == *opt.eos)) break;
  }
  gpt->train();
  return out;
}

inline Seq Trainer::encode_text(const std::string& s, int64_t* unknown) const {
  const bool words = cfg.data.empty() || cfg.tokens == "word";
  return vocab.encode(split_tokens(s, words ? Split::Word : Split::Char), unknown);
}
inline std::string Trainer::decode_text(const Seq& ids) const {
  return vocab.decode(ids, cfg.data.empty() || cfg.tokens == "word" ? " " : "");
}

inline std::vector<std::string> Trainer::dropout_states() const {
  return dist::all_gather(generator_state_string(s2s ? s2s->dropout_gen : gpt->dropout_gen));
}

inline void Trainer::save(const std::string& path) const {
  const std::vector<std::string> states = dropout_states();
  if (dist::rank() == 0) write_checkpoint(path, states);
}

inline void Trainer::write_checkpoint(const std::string& path, const std::vector<std::string>& dropout_states) const {
  NamedTensors all;
  for (auto& [n, t] : nn::state_dict(model())) all.emplace_back("model." + n, t);
  for (auto& [n, t] : opt->state_dict()) all.emplace_back("optim." + n, t);
  Metadata md = s2s ? nn::model_metadata(*s2s, "model.") : nn::model_metadata(*gpt, "model.");
  md["format"] = kCheckpointFormat;
  md["train_config"] = cfg.run_json().dump();  // the architecture is model_config's alone
  md["vocab"] = vocab.to_json().dump();
  md["tokenizer"] = cfg.data.empty() || cfg.tokens == "word" ? "word" : "char";
  json special = {{"pad", Vocab::kPad}, {"bos", Vocab::kBos}, {"eos", Vocab::kEos}};
  if (vocab.has_unk()) special["unk"] = Vocab::kUnk;
  md["special_tokens"] = special.dump();
  md["data"] = data_info.dump();
  md["step"] = std::to_string(opt->step_count());
  md["data_gen"] = generator_state_string(data_gen);
  md["dropout_gen"] = dropout_states.at(0);  // rank 0's (the only one in one process)
  if (dropout_states.size() > 1) md["dropout_gen_ranks"] = json(dropout_states).dump();
  check_finite(all, "checkpoint " + path + ": not written");  // never a NaN model on disk
  write_safetensors(path, all, md);
}

inline void set_arch_from_model(TrainConfig& c, const std::string& kind, const json& mc, const std::string& where) {
  if (kind == "gpt") {
    const nn::GPTConfig g = nn::gpt_config_from_json(mc, where);
    c.model = "gpt";
    c.d_model = g.d_model; c.heads = g.heads; c.layers = g.layers; c.d_ff = g.d_ff; c.dropout = g.dropout;
    c.pre_ln = g.pre_norm; c.tie = g.tie_weights; c.positions = "learned";
    c.activation = nn::activation_name(g.activation);
  } else if (kind == "seq2seq") {
    const nn::TransformerConfig m = nn::transformer_config_from_json(mc, where);
    if (m.encoder_layers != m.decoder_layers)
      throw Error(where + ": encoder_layers " + std::to_string(m.encoder_layers) + " != decoder_layers " +
                  std::to_string(m.decoder_layers) + " (the trainer's --layers sets both)");
    if (m.src_vocab != m.tgt_vocab)
      throw Error(where + ": src_vocab " + std::to_string(m.src_vocab) + " != tgt_vocab " + std::to_string(m.tgt_vocab) +
                  " (the trainer's models share one vocabulary)");
    c.model = "seq2seq";
    c.d_model = m.d_model; c.heads = m.heads; c.layers = m.encoder_layers; c.d_ff = m.d_ff; c.dropout = m.dropout;
    c.pre_ln = m.pre_norm; c.tie = m.tie_weights; c.positions = m.learned_positions ? "learned" : "sinusoidal";
    c.activation = nn::activation_name(m.activation);
  } else {
    throw Error(where + ": model_kind '" + brief(kind, 40) + "' is neither seq2seq nor gpt");
  }
}

namespace detail {
// The model file's kind and its model_config (as JSON), checked present.
inline std::pair<std::string, json> model_of(const TensorFile& f) {
  auto kind = f.metadata.find("model_kind");
  if (kind == f.metadata.end())
    throw Error(f.path + ": metadata has no 'model_kind': not a model file (nn::save_model) or a training checkpoint");
  return {kind->second, nn::metadata_json(f.metadata, "model_config", f.path)};
}
// Every size in the file's model_config against its tensors, before the
// model is built from it (a config saying d_model 20000 over small tensors
// would otherwise allocate until the process is killed).
inline void check_model_fits(const TensorFile& f, const std::string& kind, const json& mc, const std::string& prefix) {
  const std::string where = f.path + ": metadata 'model_config'";
  if (kind == "gpt") nn::check_config_fits(f, prefix, nn::gpt_config_from_json(mc, where));
  else nn::check_config_fits(f, prefix, nn::transformer_config_from_json(mc, where));
}
// The model's vocabulary size from its config.
inline int64_t model_vocab_size(const std::string& kind, const json& mc) {
  const json& v = mc.at(kind == "gpt" ? "vocab" : "src_vocab");
  return v.get<int64_t>();
}
// The model's position table (its config's max_len).
inline int64_t model_max_len(const json& mc) { return mc.at("max_len").get<int64_t>(); }
}  // namespace detail

inline TrainConfig Trainer::checkpoint_config(const TensorFile& f) {
  auto fmt = f.metadata.find("format");
  if (fmt == f.metadata.end())
    throw Error(f.path + ": not a qkv training checkpoint (metadata has no 'format')");
  const bool v2 = fmt->second == kCheckpointFormatV2;
  if (fmt->second != kCheckpointFormat && !v2)
    throw Error(f.path + ": checkpoint format '" + brief(fmt->second, 40) + "' is not the '" + kCheckpointFormat +
                "' (or v2) this program reads");
  const std::string where = f.path + ": metadata 'train_config'";
  json run = nn::metadata_json(f.metadata, "train_config", f.path);
  if (!run.is_object()) throw Error(where + ": expected a JSON object");
  const auto [kind, mc] = detail::model_of(f);
  TrainConfig arch;
  set_arch_from_model(arch, kind, mc, f.path + ": metadata 'model_config'");
  const json from_model = arch.to_json();
  for (auto& [k, v] : from_model.items()) {
    if (!TrainConfig::is_arch_key(k)) continue;
    // Version 2 stored the architecture twice: both must say the same.
    if (v2 && run.contains(k) && run[k] != v)
      throw Error(f.path + ": the file's parts disagree: train_config says " + k + " = " + brief(run[k].dump(), 40) +
                  " but model_config gives " + brief(v.dump(), 40));
    run[k] = v;
  }
  TrainConfig c = TrainConfig::from_json(run, where);
  const int64_t table = detail::model_max_len(mc);
  if ((c.is_gpt() || c.positions == "learned") && c.context != table)
    throw Error(f.path + ": the file's parts disagree: train_config says context = " + std::to_string(c.context) +
                " but model_config's max_len is " + std::to_string(table));
  return c;
}

inline Vocab Trainer::checkpoint_vocab(const TensorFile& f, int64_t model_vocab) {
  Vocab v;
  try {
    v = Vocab::from_json(nn::metadata_json(f.metadata, "vocab", f.path));
  } catch (const json::exception& e) {
    throw Error(f.path + ": metadata 'vocab' is not a list of strings (" + brief(e.what(), 120) + ")");
  } catch (const Error& e) {
    throw Error(f.path + ": metadata 'vocab': " + e.what());
  }
  if (v.size() != model_vocab)
    throw Error(f.path + ": the file's parts disagree: metadata 'vocab' has " + std::to_string(v.size()) +
                " tokens but model_config's vocabulary size is " + std::to_string(model_vocab));
  if (f.metadata.count("special_tokens")) {
    const json sp = nn::metadata_json(f.metadata, "special_tokens", f.path);
    const json want = {{"pad", Vocab::kPad}, {"bos", Vocab::kBos}, {"eos", Vocab::kEos}};
    for (auto& [k, id] : want.items())
      if (!sp.is_object() || !sp.contains(k) || sp[k] != id)
        throw Error(f.path + ": metadata 'special_tokens' key '" + k + "' must be " + id.dump() +
                    " (the vocabulary's <pad>, <s>, </s> are ids 0, 1, 2)");
  }
  return v;
}

namespace detail {
// The run's weights, optimizer state, step and random streams from `f`, after
// checking that its data files are the ones the checkpoint was trained on.
inline void restore(Trainer& t, const TensorFile& f, bool allow_nonfinite, DataUse use = DataUse::Train) {
  // Weights and optimizer state alike; --allow-nonfinite loads such a file for inspection.
  if (!allow_nonfinite) check_finite(f.tensors, f.path + ": refused (--allow-nonfinite loads it anyway)");
  const json saved = nn::metadata_json(f.metadata, "data", f.path);
  for (const char* part : {"data", "valid"}) {
    if (!t.data_info.contains(part)) continue;
    const json& now = t.data_info[part];
    if (!saved.contains(part) || !saved[part].is_object() || !saved[part].contains("fnv1a64"))
      throw Error(f.path + ": metadata 'data' has no '" + part + "' file entry, but this run reads " + now["path"].get<std::string>());
    // Evaluating on a held-out file named anew (not the run's own path): taken, with a note.
    const bool named_anew = saved[part].value("path", "") != now["path"] && saved[part].value("abspath", "") != now["abspath"];
    if (saved[part]["fnv1a64"] != now["fnv1a64"] && use == DataUse::Evaluate && std::string(part) == "valid" && named_anew) {
      std::printf("note: evaluating on %s, not the held-out file the run was trained with\n",
                  now["path"].get<std::string>().c_str());
      continue;
    }
    if (saved[part]["fnv1a64"] != now["fnv1a64"])
      throw Error(f.path + ": was trained on a " + part + " file with hash " + brief(saved[part]["fnv1a64"].dump(), 40) +
                  " but " + now["path"].get<std::string>() + " now has hash " + now["fnv1a64"].dump() +
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
  if (step == f.metadata.end()) throw Error(f.path + ": metadata has no 'step'");
  if (step->second != std::to_string(t.opt->step_count()))
    throw Error(f.path + ": the file's parts disagree: metadata 'step' is '" + brief(step->second, 40) +
                "' but the optimizer state (optim.step) is at step " + std::to_string(t.opt->step_count()));
  for (const char* key : {"data_gen", "dropout_gen"})
    if (!f.metadata.count(key)) throw Error(f.path + ": metadata has no '" + std::string(key) + "'");
  set_generator_state(t.data_gen, f.metadata.at("data_gen"), f.path + ": metadata 'data_gen'");
  set_generator_state(t.dropout_gen(), f.metadata.at("dropout_gen"), f.path + ": metadata 'dropout_gen'");
  // MPI rank r > 0 continues its own saved dropout stream when the run had
  // as many ranks; otherwise (another rank count) a new stream of its own.
  if (dist::rank() > 0) {
    const auto it = f.metadata.find("dropout_gen_ranks");
    const json ranks = it == f.metadata.end() ? json::array() : nn::metadata_json(f.metadata, "dropout_gen_ranks", f.path);
    if (ranks.is_array() && static_cast<int>(ranks.size()) == dist::size() && ranks[dist::rank()].is_string())
      set_generator_state(t.dropout_gen(), ranks[dist::rank()].get<std::string>(), f.path + ": metadata 'dropout_gen_ranks'");
    else
      t.dropout_gen().manual_seed(rank_dropout_seed(t.cfg.seed ^ static_cast<uint64_t>(t.step_count()), dist::rank()));
  }
}
}  // namespace detail

namespace detail {
// A data file named in a checkpoint, found again: as typed (from the current
// folder), else at its absolute path when that file has the same hash.
inline void find_moved_data(TrainConfig& c, const TensorFile& f) {
  std::error_code ec;
  const auto it = f.metadata.find("data");
  if (it == f.metadata.end()) return;
  const json saved = nn::metadata_json(f.metadata, "data", f.path);
  auto relocate = [&](std::string& path, const char* part) {
    if (path.empty() || std::filesystem::exists(path, ec)) return;
    if (!saved.is_object() || !saved.contains(part) || !saved[part].is_object()) return;
    const json& e = saved[part];
    if (e.contains("abspath") && e["abspath"].is_string() && std::filesystem::exists(e["abspath"].get<std::string>(), ec))
      path = e["abspath"].get<std::string>();
  };
  relocate(c.data, "data");
  relocate(c.valid, "valid");
  for (const std::string* p : {&c.data, &c.valid})
    if (!p->empty() && !std::filesystem::exists(*p, ec))
      throw Error(f.path + ": its " + (p == &c.data ? "data" : "held-out") + " file " + *p +
                  " is gone (moved or deleted): give its new path with " + (p == &c.data ? "--data" : "--valid") +
                  " (its hash is checked)" + (p == &c.data ? "" : ", or another held-out file"));
}
}  // namespace detail

inline Trainer Trainer::resume(const std::string& path, const std::function<void(TrainConfig&, bool)>& adjust,
                              bool allow_nonfinite, DataUse use) {
  TensorFile f = read_safetensors(path);
  const auto [kind, mc] = detail::model_of(f);
  const std::string prefix = f.metadata.count("model_prefix") ? f.metadata.at("model_prefix") : "";
  detail::check_model_fits(f, kind, mc, prefix);
  if (!f.metadata.count("format")) {
    // A model file: the weights and the architecture, no training state.
    if (use == DataUse::Train)
      throw Error(path + ": a model file without training state (no 'format'): --ask and --eval-only read it, "
                  "--init-from fine-tunes it with a new optimizer");
    TrainConfig c;
    set_arch_from_model(c, kind, mc, path + ": metadata 'model_config'");
    c.context = detail::model_max_len(mc);
    const auto tok = f.metadata.find("tokenizer");
    c.tokens = tok == f.metadata.end() ? "char" : tok->second;
    // A decoder-only model file is a language model unless the flags say otherwise.
    if (kind == "gpt") c.format = "text";
    const Vocab v = checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
    if (!v.has_unk()) c.vocab = v.size() - 3;  // a built-in task's symbols
    if (adjust) adjust(c, true);
    if (use == DataUse::None && c.data.empty() && v.has_unk()) c.data = "(model file)";  // text is cut by c.tokens
    Trainer t(c, &v, path, use);
    nn::LoadOptions lo;
    lo.prefix = prefix;
    lo.allow_nonfinite = allow_nonfinite;
    nn::load_state_dict(t.model(), f, lo);
    return t;
  }
  TrainConfig c = checkpoint_config(f);
  if (adjust) adjust(c, false);
  if (use == DataUse::Evaluate) detail::find_moved_data(c, f);
  const Vocab v = checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
  Trainer t(c, &v, path, use);
  detail::restore(t, f, allow_nonfinite, use);
  return t;
}

inline Trainer Trainer::init_from(const std::string& path, TrainConfig c, const std::vector<std::string>& given) {
  TensorFile f = read_safetensors(path);
  const auto [kind, mc] = detail::model_of(f);
  const std::string prefix = f.metadata.count("model_prefix") ? f.metadata.at("model_prefix") : "";
  TrainConfig arch = c;
  set_arch_from_model(arch, kind, mc, path + ": metadata 'model_config'");
  detail::check_model_fits(f, kind, mc, prefix);
  const json mine = c.to_json(), theirs = arch.to_json();
  for (const std::string& k : given)
    if (TrainConfig::is_arch_key(k) && mine[k] != theirs[k])
      throw Error(flag_of(k) + ": --init-from " + path + " holds a model with " + flag_of(k) + " " + show_value(theirs[k]) +
                  ", but the command line gives " + show_value(mine[k]) + " (leave the flag out)");
  arch.context = detail::model_max_len(mc);
  if (kind == "seq2seq" && arch.positions == "sinusoidal") arch.context = c.context;  // the table grows on demand
  const Vocab v = checkpoint_vocab(f, detail::model_vocab_size(kind, mc));
  Trainer t(arch, &v);
  nn::LoadOptions lo;
  lo.prefix = prefix;
  nn::load_state_dict(t.model(), f, lo);
  return t;
}

inline void Trainer::load(const std::string& path) {
  TensorFile f = read_safetensors(path);
  const json have = checkpoint_config(f).to_json(), want = cfg.to_json();
  for (auto& [k, v] : want.items()) {
    if (k == "steps" || have[k] == v) continue;
    throw Error(path + ": was trained with " + flag_of(k) + " " + show_value(have[k]) + " but this run has " +
                flag_of(k) + " " + show_value(v));
  }
  detail::restore(*this, f, /*allow_nonfinite=*/false);
}

}  // namespace qkv::train
