// Toy sequence-to-sequence tasks: copy, reverse and sort random sequences of
// symbols. Token ids: 0 <pad>, 1 <bos>, 2 <eos>, symbols from 3 on.
//
// A held-out evaluation set is drawn first; training batches never contain a
// sequence from it (checked by hash lookup), so held-out accuracy measures
// generalisation, not memory.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "models/transformer.h"

namespace qkv::tasks {

inline constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kFirstSymbol = 3;

using Seq = std::vector<int64_t>;

enum class Task { Copy, Reverse, Sort };

inline Task parse_task(const std::string& s) {
  if (s == "copy") return Task::Copy;
  if (s == "reverse") return Task::Reverse;
  if (s == "sort") return Task::Sort;
  throw Error("task: unknown task '" + s + "' (expected copy, reverse or sort)");
}
inline const char* task_name(Task t) {
  return t == Task::Copy ? "copy" : t == Task::Reverse ? "reverse" : "sort";
}

// The answer for one source sequence.
inline Seq apply_task(Task t, const Seq& src) {
  Seq out = src;
  if (t == Task::Reverse) std::reverse(out.begin(), out.end());
  if (t == Task::Sort) std::sort(out.begin(), out.end());
  return out;
}

// A batch ready for teacher forcing:
//   src     (B, S)  symbols, padded
//   tgt_in  (B, T)  <bos> y1 .. yL, padded      (T = max L + 1)
//   tgt_out (B*T)   y1 .. yL <eos>, padded       (pad ignored by the loss)
struct Batch {
  nn::Tokens src, tgt_in;
  std::vector<int64_t> tgt_out;
  std::vector<Seq> sources;
  int64_t target_tokens = 0;  // non-pad entries of tgt_out
};

inline Batch collate(Task task, const std::vector<Seq>& sources) {
  Batch b;
  b.sources = sources;
  const int64_t B = static_cast<int64_t>(sources.size());
  int64_t S = 0;
  for (const Seq& s : sources) S = std::max<int64_t>(S, static_cast<int64_t>(s.size()));
  const int64_t T = S + 1;
  b.src = {std::vector<int64_t>(B * S, kPad), B, S, std::vector<int64_t>(B)};
  b.tgt_in = {std::vector<int64_t>(B * T, kPad), B, T, std::vector<int64_t>(B)};
  b.tgt_out.assign(B * T, kPad);
  for (int64_t i = 0; i < B; ++i) {
    const Seq& s = sources[i];
    const Seq y = apply_task(task, s);
    const int64_t L = static_cast<int64_t>(s.size());
    std::copy(s.begin(), s.end(), b.src.ids.begin() + i * S);
    b.src.lengths[i] = L;
    b.tgt_in.ids[i * T] = kBos;
    for (int64_t k = 0; k < L; ++k) {
      b.tgt_in.ids[i * T + k + 1] = y[k];
      b.tgt_out[i * T + k] = y[k];
    }
    b.tgt_out[i * T + L] = kEos;
    b.tgt_in.lengths[i] = L + 1;
    b.target_tokens += L + 1;
  }
  return b;
}

struct TaskConfig {
  Task task = Task::Reverse;
  int64_t symbols = 10;          // alphabet size
  int64_t min_len = 3, max_len = 10;
  int64_t vocab() const { return kFirstSymbol + symbols; }
};

class TaskData {
 public:
  // Draws `heldout` distinct sequences first, from `g`.
  TaskData(const TaskConfig& cfg, int64_t heldout, Generator& g) : cfg_(cfg) {
    if (cfg.symbols < 1 || cfg.min_len < 1 || cfg.max_len < cfg.min_len)
      throw Error("TaskData: need symbols >= 1 and 1 <= min_len <= max_len (got symbols " +
                  std::to_string(cfg.symbols) + ", lengths " + std::to_string(cfg.min_len) +
                  ".." + std::to_string(cfg.max_len) + ")");
    // Refuse a held-out set that would leave too little to train on.
    double space = 0;
    for (int64_t L = cfg.min_len; L <= cfg.max_len && space < 1e18; ++L)
      space += std::pow(static_cast<double>(cfg.symbols), static_cast<double>(L));
    if (static_cast<double>(heldout) > space / 2)
      throw Error("TaskData: " + std::to_string(heldout) + " held-out sequences is more than half of the " +
                  std::to_string(static_cast<int64_t>(space)) + " possible sequences");
    while (static_cast<int64_t>(heldout_.size()) < heldout) {
      Seq s = random_sequence(g, cfg.min_len, cfg.max_len);
      if (heldout_set_.insert(s).second) heldout_.push_back(std::move(s));
    }
  }

  const TaskConfig& config() const { return cfg_; }
  const std::vector<Seq>& heldout() const { return heldout_; }
  bool is_heldout(const Seq& s) const { return heldout_set_.count(s) != 0; }

  // A fresh training sequence, never one of the held-out set.
  Seq sample_train(Generator& g) const {
    for (;;) {
      Seq s = random_sequence(g, cfg_.min_len, cfg_.max_len);
      if (!is_heldout(s)) return s;
    }
  }
  Batch train_batch(int64_t B, Generator& g) const {
    std::vector<Seq> srcs;
    srcs.reserve(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) srcs.push_back(sample_train(g));
    return collate(cfg_.task, srcs);
  }
  // Sequences longer than any seen in training (length generalisation).
  std::vector<Seq> longer_set(int64_t n, int64_t extra, Generator& g) const {
    std::vector<Seq> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(random_sequence(g, cfg_.max_len + 1, cfg_.max_len + extra));
    return out;
  }

  Seq random_sequence(Generator& g, int64_t lo, int64_t hi) const {
    const int64_t L = g.randint(lo, hi + 1);
    Seq s(static_cast<size_t>(L));
    for (auto& x : s) x = kFirstSymbol + g.randint(0, cfg_.symbols);
    return s;
  }

 private:
  TaskConfig cfg_;
  std::vector<Seq> heldout_;
  std::set<Seq> heldout_set_;
};

}  // namespace qkv::tasks
