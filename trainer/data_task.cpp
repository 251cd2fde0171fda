// The built-in tasks as a data source (no --data): pairs drawn from --task
// (data/tasks.h) over --symbols symbols, with a held-out set of --heldout
// pairs drawn apart. Its row of the data-source table (trainer/data_sources.h).
#include <nlohmann/json.hpp>

#include "trainer/data_sources.h"
#include "trainer/trainer.h"

namespace qkv::train {

namespace {

DataNeed read_task(Trainer& t, const Vocab* given) {
  const TrainConfig& c = t.cfg;
  t.vocab = Vocab::symbols(c.vocab);
  if (given && given->to_json() != t.vocab.to_json())
    throw Error("checkpoint: its vocabulary is not the --symbols " + std::to_string(c.vocab) +
                " symbols of the task");
  // The held-out set is kept as ids (8 bytes a token, source and target).
  detail::check_data_memory(
      double(c.heldout) * (16.0 * double(c.max_len) + 64), "--heldout " + std::to_string(c.heldout),
      "sequences of up to --max-len " + std::to_string(c.max_len) + " tokens");
  try {
    t.pairs = std::make_unique<PairData>(
        data::TaskConfig{data::parse_task(c.task), c.vocab, c.min_len, c.max_len}, c.heldout,
        t.data_gen);
  } catch (const Error& e) {  // e.g. a held-out set larger than half of all sequences
    throw Error("--heldout " + std::to_string(c.heldout) + " with --symbols " +
                std::to_string(c.vocab) + ", --min-len " + std::to_string(c.min_len) +
                ", --max-len " + std::to_string(c.max_len) + ": " + e.what());
  }
  *t.data_info = {{"kind", "task"}, {"task", c.task}};
  // Every task's answer has its source's length: the encoder model labels it.
  return {sequence_tokens(t.family(), c.max_len, c.max_len),
          "--max-len " + std::to_string(c.max_len)};
}

}  // namespace

DataSource task_source() {
  DataSource s;
  s.name = "task";
  s.help = "pairs drawn from a built-in task (--task, no --data)";
  s.format = "";
  s.tokens = "word";  // the tasks' symbols
  s.read = read_task;
  return s;
}

}  // namespace qkv::train
