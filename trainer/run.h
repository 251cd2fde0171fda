// The program train as a component: the settings of one invocation
// (RunOptions: what to do with the run, never part of it), opening the run
// (new, resumed, or from a model file), and running it: train, then write the
// checkpoint first and the logs and plots after, then report. examples/train.cpp
// is a thin main over it that reads the flags.
//
//   train::RunOptions o;              // --out, --save, --eval-every, ...
//   train::check_options(o);
//   train::Trainer t = train::open_run(flags, given, o);
//   return train::run(t, o, flags_text);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/trainer.h"

namespace qkv::train {

// Settings of this invocation that are not part of the run (not checked
// against a checkpoint).
struct RunOptions {
  int threads = 0;
  // Matrix products in fp32, or bf16 (bfloat16 operands, float32 sums;
  // weights, gradients, optimizer state and checkpoints stay float32):
  // set_matmul_precision (core/blas.h), docs/precision.md. Not given
  // (precision_given false), a resumed training run keeps its checkpoint's
  // (open_run).
  std::string precision = "fp32";
  bool precision_given = false;
  int64_t eval_every = 250, log_every = 100, save_every = 0, long_eval = 200;
  // Language models: stop after this many evaluations without a new best
  // held-out loss (0: never; the best checkpoint is kept either way).
  int64_t patience = 0;
  double target = 0.99;
  bool eval_only = false, no_early_stop = false, no_save = false, show_attention = false,
       allow_nonfinite = false;
  bool detect_anomaly = false;
  // --count-tokens: read the data as the run would, print each split's
  // sequence lengths in tokens (and how many exceed count_window, the
  // --context given), train nothing. open_run reads every text whole for it.
  bool count_tokens = false;
  int64_t count_window = 0;
  // --instruments N: every N steps, the training instruments
  // (trainer/instruments.h) into <out>/instruments.jsonl, their pictures and
  // a diagnosis at the end (0: off).
  int64_t instruments = 0;
  std::string out_dir, save_path, load_path, ask, init_from;
  // --tokenizer-from FILE: a new run's tokens are a model file's (its
  // vocabulary, or BPE merges), its weights fresh: pre-trained or not, two
  // runs then read the same tokens.
  std::string tokenizer_from;
  // --passage FILE: the context a question-answering model (bert, qa)
  // answers --ask's question from.
  std::string passage;
  std::string best_path;  // set by run(): a language model's best checkpoint (best_checkpoint_path)
  std::string explain, html;      // --explain TEXT --html PAGE: the gradient explorer
  std::string decode = "greedy";  // held-out checks and --ask: greedy | beam
  std::string preset;             // --preset NAME: a new run's settings (trainer/presets.h)
  // --long-lengths A-B: the built-in task's length-generalisation set, o.long_eval
  // sequences of each length A..B, reported length by length (empty: o.long_eval
  // sequences of --max-len + 1 .. + 3 together, one line). parse_long_lengths().
  std::string long_lengths;
  int64_t beam = 4, max_new = 200, top_k = 0;
  double alpha = 0.6, temperature = 0.8, top_p = 0.95;
};

// --long-lengths "A-B" as {A, B}: 1 <= A <= B <= 4096; {0, 0} for "" (the
// default set). Error naming the flag and the text otherwise.
struct LengthRange {
  int64_t lo = 0, hi = 0;
};
LengthRange parse_long_lengths(const std::string& text);
// --count-tokens: refused beside --load, --ask, --explain and --eval-only;
// remembers the --context given (o.count_window) and, for a new model read
// from pairs or labelled texts, asks for a table as long as the longest
// sequence (flags.context 0), so that every sequence is read whole.
void prepare_count_tokens(TrainConfig& flags, RunOptions& o);
// The line train prints for an exception: its message, or for std::bad_alloc
// (which names nothing) "out of memory (std::bad_alloc)" with the files the
// run was reading (--load, --init-from, --tokenizer-from, --data, --valid).
std::string failure_message(const std::exception& e, const TrainConfig& flags, const RunOptions& o);

// Exit statuses: 0 done; 1 bad flags, bad input or a failed output;
// 3 training diverged; 128 + N stopped by signal N (the checkpoint written).
constexpr int kExitError = 1, kExitDiverged = 3;

// Where a language model's best held-out checkpoint goes beside --save's
// file: runs/x/model.safetensors -> runs/x/model.best.safetensors (a name
// without ".safetensors" gets ".best" added).
std::string best_checkpoint_path(const std::string& save_path);

// Checks the settings that need no model (each error names the flag), and
// sets the thread count.
void check_options(const RunOptions& o);

// The run: resumed or reopened from --load, started from --init-from's
// model, or new. `given` lists the run settings given as flags (JSON keys).
Trainer open_run(const TrainConfig& flags, const std::vector<std::string>& given,
                 const RunOptions& o);

// Trains (or evaluates, or answers --ask), writes the checkpoint, the logs and
// plots, and reports; returns the exit status. `flags_text` is the whole
// command line's settings (MPI ranks must agree on it). Throws Error for a
// failure before training.
int run(Trainer& t, RunOptions& o, const std::string& flags_text);

}  // namespace qkv::train
