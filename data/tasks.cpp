// The toy tasks (data/tasks.h): their answers, and the held-out set drawn
// before any training sequence.
#include "data/tasks.h"

#include <algorithm>
#include <cmath>

namespace qkv::data {

Task parse_task(const std::string& s) {
  if (s == "copy") return Task::Copy;
  if (s == "reverse") return Task::Reverse;
  if (s == "sort") return Task::Sort;
  throw Error("task: unknown task '" + brief(s) + "' (expected copy, reverse or sort)");
}
const char* task_name(Task t) {
  return t == Task::Copy ? "copy" : t == Task::Reverse ? "reverse" : "sort";
}

Seq apply_task(Task t, const Seq& src) {
  Seq out = src;
  if (t == Task::Reverse) std::reverse(out.begin(), out.end());
  if (t == Task::Sort) std::sort(out.begin(), out.end());
  return out;
}

Batch collate(Task task, const std::vector<Seq>& sources) {
  std::vector<Pair> pairs;
  pairs.reserve(sources.size());
  for (const Seq& s : sources) pairs.push_back({s, apply_task(task, s)});
  return collate_pairs(pairs);
}

TaskData::TaskData(const TaskConfig& cfg, int64_t heldout, Generator& g) : cfg_(cfg) {
  if (cfg.symbols < 1 || cfg.min_len < 1 || cfg.max_len < cfg.min_len)
    throw Error("TaskData: need symbols >= 1 and 1 <= min_len <= max_len (got symbols " +
                std::to_string(cfg.symbols) + ", lengths " + std::to_string(cfg.min_len) + ".." +
                std::to_string(cfg.max_len) + ")");
  // Refuse a held-out set that would leave too little to train on.
  double space = 0;
  for (int64_t L = cfg.min_len; L <= cfg.max_len && space < 1e18; ++L)
    space += std::pow(static_cast<double>(cfg.symbols), static_cast<double>(L));
  if (static_cast<double>(heldout) > space / 2)
    throw Error("TaskData: " + std::to_string(heldout) +
                " held-out sequences is more than half of the " +
                std::to_string(static_cast<int64_t>(space)) + " possible sequences");
  while (static_cast<int64_t>(heldout_.size()) < heldout) {
    Seq s = random_sequence(g, cfg.min_len, cfg.max_len);
    if (heldout_set_.insert(s).second) heldout_.push_back(std::move(s));
  }
}

Seq TaskData::sample_train(Generator& g) const {
  for (;;) {
    Seq s = random_sequence(g, cfg_.min_len, cfg_.max_len);
    if (!is_heldout(s)) return s;
  }
}

Batch TaskData::train_batch(int64_t B, Generator& g) const {
  std::vector<Seq> srcs;
  srcs.reserve(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) srcs.push_back(sample_train(g));
  return collate(cfg_.task, srcs);
}

std::vector<Seq> TaskData::longer_set(int64_t n, int64_t extra, Generator& g) const {
  std::vector<Seq> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(random_sequence(g, cfg_.max_len + 1, cfg_.max_len + extra));
  return out;
}

Seq TaskData::random_sequence(Generator& g, int64_t lo, int64_t hi) const {
  const int64_t L = g.randint(lo, hi + 1);
  Seq s(static_cast<size_t>(L));
  for (auto& x : s) x = kFirstSymbol + g.randint(0, cfg_.symbols);
  return s;
}

}  // namespace qkv::data
