// Toy sequence-to-sequence tasks: copy, reverse and sort random sequences of
// symbols. Token ids: 0 <pad>, 1 <s>, 2 </s> (data/batch.h), symbols from 3 on.
// Every task's answer has its source's length.
//
// A held-out evaluation set is drawn first; training batches never contain a
// sequence from it (checked by hash lookup), so held-out accuracy measures
// generalisation, not memory.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "data/batch.h"

namespace qkv::data {

inline constexpr int64_t kFirstSymbol = 3;  // the first symbol's id, after <pad>, <s>, </s>

enum class Task { Copy, Reverse, Sort };

// "copy", "reverse" or "sort"; Error naming the text otherwise.
Task parse_task(const std::string& s);
const char* task_name(Task t);

// The answer for one source sequence.
Seq apply_task(Task t, const Seq& src);

// A batch of sources with the task's answers (collate_pairs).
Batch collate(Task task, const std::vector<Seq>& sources);

struct TaskConfig {
  Task task = Task::Reverse;
  int64_t symbols = 10;  // alphabet size
  int64_t min_len = 3, max_len = 10;
  int64_t vocab() const { return kFirstSymbol + symbols; }
};

class TaskData {
 public:
  // Draws `heldout` distinct sequences first, from `g`. Refuses (Error) a
  // config without symbols or lengths, and a held-out set of more than half
  // of all possible sequences (too little would be left to train on).
  TaskData(const TaskConfig& cfg, int64_t heldout, Generator& g);

  const TaskConfig& config() const { return cfg_; }
  const std::vector<Seq>& heldout() const { return heldout_; }
  bool is_heldout(const Seq& s) const { return heldout_set_.count(s) != 0; }

  // A fresh training sequence, never one of the held-out set.
  Seq sample_train(Generator& g) const;
  Batch train_batch(int64_t B, Generator& g) const;
  // Sequences longer than any seen in training (length generalisation).
  std::vector<Seq> longer_set(int64_t n, int64_t extra, Generator& g) const;
  // A sequence of lo..hi random symbols.
  Seq random_sequence(Generator& g, int64_t lo, int64_t hi) const;

 private:
  TaskConfig cfg_;
  std::vector<Seq> heldout_;
  std::set<Seq> heldout_set_;
};

}  // namespace qkv::data
