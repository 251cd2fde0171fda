// The training loop of the training program, as a class so that the program
// (examples/train.cpp) and the tests drive the same code.
//
//   Trainer t(cfg);            // reads or draws the data, builds model + Adam
//   t.step();                  // one batch: forward, loss, backward, clip, update
//   t.evaluate();              // held-out accuracy (or loss, for a language model)
//   t.save("ckpt.safetensors");
//   Trainer r = Trainer::resume("ckpt.safetensors");   // model, data, optimizer, step
//
// A checkpoint describes its run completely: the whole TrainConfig, the
// vocabulary, the data files' hashes, the model's own configuration (so
// nn::load_model reads it too), the optimizer state, the step
// and both random streams.
//
// Under mpirun (make MPI=1; see dist/distributed.h) every rank runs the same
// Trainer: step() draws the global batch on every rank, keeps the rank's
// rows and sums the gradients over the ranks before clipping, so all ranks
// take the same step; save() is then collective (rank 0 writes).
#pragma once
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "autograd/qkv_autograd.h"
#include "data/loaders.h"
#include "checkpoint/checkpoint.h"
#include "nn/cross_entropy.h"
#include "generation/answer.h"
#include "generation/decode.h"
#include "generation/sampling.h"
#include "checkpoint/model_file.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "dist/distributed.h"
#include "io/json_box.h"
#include "optim/schedule.h"
#include "trainer/config.h"
#include "trainer/diverged_page.h"
#include "trainer/expert_tally.h"
#include "trainer/family.h"

namespace qkv::train {

using json = nlohmann::json;
// The data the trainer reads (data/): named here without the data:: prefix.
using data::LMBatch;
using data::Pair;
using data::PairData;
using data::PairSet;
using data::Seq;
using data::Split;
using data::TextData;
using data::TextFile;
using data::Vocab;

// Helpers shared by the trainer's .cpp files (and tested on their own).
namespace detail {
// --model encoder: Error naming the flag, `file` and the first line whose
// target is not as long as its source; nothing for the other models.
void check_one_label_per_token(const TrainConfig& c, const std::vector<data::TokenPair>& pairs,
                               const std::string& file);
// data/ names the file in its errors; the trainer adds the flag that named it.
// `any_bytes`: not only UTF-8 (a byte-level tokenizer reads it).
TextFile read_flag_file(const std::string& flag, const std::string& path, int64_t max_bytes,
                        bool any_bytes = false);
// Where a text's held-out part starts when it is cut in bytes (a BPE run): the
// last `fraction` of its bytes, moved back to the start of a UTF-8 character.
size_t heldout_byte_cut(const std::string& text, double fraction);
std::string hex64(uint64_t h);  // 16 hex digits
// Seconds since t0 on the steady clock (the run's timings).
double seconds_since(std::chrono::steady_clock::time_point t0);
json file_info(const TextFile& f);  // a data file as a checkpoint records it
double physical_memory_bytes();
std::string gib(double bytes);  // "12.3 GiB"
// XORed into --seed for the held-out split's own stream (0x5d17: "split");
// any constant works, this one must stay: it fixes which pairs are held out.
inline constexpr uint64_t kSplitSeedSalt = 0x5d17ULL;
// A fixed split of n examples into held-out and training: the indices
// 0..n-1 in an order drawn from the split's own stream (--seed ^
// kSplitSeedSalt, so that it depends on nothing else the run draws), and
// how many of the first are held out (--valid-fraction of n, at least one,
// leaving at least one). n must be at least 2.
struct HeldoutSplit {
  std::vector<size_t> order;
  size_t n_valid = 0;
};
HeldoutSplit heldout_split(size_t n, uint64_t seed, double valid_fraction);
// XORed into --seed for the stream that masks held-out text (0x3a5c: "mask"),
// the same at every evaluation of a run.
inline constexpr uint64_t kHeldoutMaskSalt = 0x3a5cULL;
// Scored positions (targets not f.ignore_index) whose likeliest logit is the target.
int64_t argmax_hits(const nn::TeacherForced& f);
// Refuses data whose estimated `bytes` would take over half the machine's memory.
void check_data_memory(double bytes, const std::string& what, const std::string& detail_text);
// Numbers an attention layer keeps per query token for backward, and holds
// per thread in backward, by --attention kernel (trainer.cpp says which).
struct AttentionNumbers {
  double kept_per_query = 0, per_thread = 0;
};
AttentionNumbers attention_numbers(const TrainConfig& c, int64_t B, int64_t T, int64_t S);
// Refuses a model and batch that clearly would not fit in memory.
void check_memory(const TrainConfig& c, int64_t V, int64_t T);
uint64_t rank_dropout_seed(uint64_t seed, int r);  // MPI rank r > 0's dropout stream
// Data parallel: the rows [begin, end) of a batch drawn on every rank.
LMBatch rows_of(const LMBatch& b, dist::Share r);
// This rank's share of the global batch's mean loss (see trainer.cpp).
Var share_of_loss(const Var& local_mean, int64_t local_tokens, int64_t global_tokens);
}  // namespace detail

struct EvalKind;
struct QaData;      // trainer/qa_data.h
class Instruments;  // trainer/instruments.h
struct EvalResult {
  int64_t sequences = 0, exact = 0, tokens = 0, tokens_right = 0;
  double loss = 0;  // mean held-out cross-entropy per target token (teacher-forced for pairs)
  // A language model: the bytes of held-out text the scored tokens cover, and
  // the held-out cross-entropy in bits per byte (total nats / ln 2 / bytes),
  // which compares across tokenizers; 0 when unknown.
  int64_t bytes = 0;
  double bits_per_byte = 0;
  double bleu = 0;  // pairs: corpus BLEU (0..100) of the answers, on the model's tokens
  double f1 = 0;    // qa: SQuAD's F1 (0..1), the mean over questions (exact: EM's count)
  std::vector<std::string> qa_answers;  // qa: each held-out question's answer, in order
  // qa on SQuAD v2: the "no answer" threshold that gives the best F1 on this
  // split, and that F1 (trainer/qa_data.h, best_null_threshold)
  double qa_null_threshold = 0, qa_null_f1 = 0;
  int64_t unknown_tokens = 0;  // held-out tokens the vocabulary lacks (<unk>)
  // The run's evaluation kind (trainer/eval_kinds.h), which reports it:
  // labels (exact_acc() is the accuracy), masked (made targets: token_acc()
  // is theirs), text or sequences. A row of the table: valid while no kind
  // is registered or removed.
  const EvalKind* kind = nullptr;
  const char* made = "";  // masked: what the targets are (Family::made_targets), "masked-token"
  double exact_acc() const { return sequences ? double(exact) / sequences : 0; }
  double token_acc() const { return tokens ? double(tokens_right) / tokens : 0; }
  double perplexity() const { return std::exp(loss); }
  std::vector<Seq> predictions;
};

// Training stopped because the loss or the gradient norm was not finite, or
// the loss exploded past kExplodedLoss times a uniform guess's.
struct Diverged : Error {
  using Error::Error;
};
inline constexpr double kExplodedLoss = 100;

inline std::string generator_state_string(const Generator& g) {
  const auto st = g.state();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %a %d", st.s[0],
                st.s[1], st.s[2], st.s[3], st.cached_normal, st.has_cached ? 1 : 0);
  return buf;
}

inline void set_generator_state(Generator& g, const std::string& s, const std::string& what) {
  Generator::State st{};
  int cached = 0;
  if (std::sscanf(s.c_str(), "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %la %d", &st.s[0],
                  &st.s[1], &st.s[2], &st.s[3], &st.cached_normal, &cached) != 6)
    throw Error(what + ": cannot parse the generator state '" + brief(s) + "'");
  st.has_cached = cached != 0;
  g.set_state(st);
}

// v3: the architecture once (model_config); v2 (read too) also had it in train_config.
inline constexpr const char* kCheckpointFormat = "qkv-train-v3";
inline constexpr const char* kCheckpointFormatV2 = "qkv-train-v2";

// What a Trainer reads besides the checkpoint's own contents.
enum class DataUse {
  Train,     // a new or resumed run: every data file, hash-checked on resume
  Evaluate,  // --eval-only: the held-out data (a moved file is found by hash, a new --valid is
             // taken)
  None,      // --ask: the vocabulary is in the file; no data file is read
};

// What a checkpoint or model file fixes besides the settings and the
// vocabulary: a classifier's label names and the data's shape (images).
struct FileShape {
  std::vector<std::string> labels;
  DataShape shape;
};

class Trainer {
 public:
  // A new run: reads (or draws) the data, builds the vocabulary, the model and
  // Adam. With `vocab` (from a checkpoint) the data is encoded with it instead.
  // `where` names the settings' source in errors ("" for flags, else e.g.
  // "<file>: train_config", or "--init-from <file>": validate() in
  // trainer/config.h); DataUse::None builds the model only.
  // `file` (from a checkpoint) gives the labels and image size the data must have.
  explicit Trainer(const TrainConfig& c, const Vocab* vocab = nullptr,
                   const std::string& where = "", DataUse use = DataUse::Train,
                   const FileShape* file = nullptr);
  // Moved, not copied; defined in trainer/trainer.cpp, where Instruments is
  // a complete type.
  Trainer(Trainer&& other);
  Trainer& operator=(Trainer&& other);
  ~Trainer();

  // Reads a checkpoint written by save(): its config (with `adjust` applied,
  // e.g. a longer --steps), vocabulary, data, weights, optimizer state, step
  // and random streams. Errors name the file and the key.
  // A checkpoint holding NaN or Inf (weights or optimizer state) is refused
  // naming the tensor, unless allow_nonfinite (to inspect it).
  // A model file without training state (nn::save_model, or written by
  // another program) opens for DataUse::Evaluate and DataUse::None only.
  static Trainer resume(const std::string& path,
                        const std::function<void(TrainConfig&, bool model_file)>& adjust = nullptr,
                        bool allow_nonfinite = false, DataUse use = DataUse::Train);
  // A new run from `c` whose architecture, vocabulary and weights come from
  // the model file or checkpoint at `path` (--init-from: fine-tuning with a
  // fresh optimizer). `given` lists the keys set on the command line: an
  // architecture key among them must agree with the file.
  static Trainer init_from(const std::string& path, TrainConfig c,
                           const std::vector<std::string>& given);
  // The tokenizer of a model file or checkpoint (--tokenizer-from): its
  // vocabulary, with its BPE merges when it has them.
  // *kind gets the file's metadata 'tokenizer' (char, word or bpe; char when absent).
  static Vocab file_tokenizer(const std::string& path, std::string* kind = nullptr);
  // The run settings stored in a checkpoint (for comparing with flags).
  static TrainConfig checkpoint_config(const TensorFile& f);
  // The vocabulary stored in a model file or checkpoint, checked against the
  // model's size (model_config) and the special tokens; Error naming the file and key.
  static Vocab checkpoint_vocab(const TensorFile& f, int64_t model_vocab);

  bool is_lm() const;  // a language model: its data is a corpus (reads_corpus)
  // Continues a text (--ask, samples): a language model that predicts the next
  // token, not one learning from text another way (bert's mlm, span).
  bool continues_text() const { return is_lm() && family().answers.sample != nullptr; }
  // What the program knows of the model's family (trainer/family.h).
  const Family& family() const { return train::family(cfg.model, "--model"); }
  // One optimisation step on a fresh batch; returns the loss. Throws Diverged
  // (before changing any parameter) when the loss or the gradient norm is NaN
  // or infinite.
  real step();
  int64_t step_count() const { return opt->step_count(); }
  // After step() threw Diverged (or AnomalyError): runs that step's forward
  // and backward again in detect-anomaly mode from the state before it, and
  // says (trainer/diverged_page.h) which op first made a NaN or Inf (forward
  // or backward) with the statistics of its inputs and output or gradients,
  // or which weight already held one before the forward (the optimizer's
  // earlier update made it), or that no op did (a loss finite but
  // exploded). step() throws before the optimizer's update, so the weights
  // and the optimizer's state are those before the step; the rest of the
  // state before it is the two random streams, whose states step() keeps
  // (two 48-byte copies per step; docs/instruments.md). The rerun keeps
  // every intermediate's values (RetainValuesGuard) for the statistics. One
  // process only (under MPI a rank's anomaly would leave the others waiting
  // in a collective): nullopt otherwise. Changes no parameter.
  std::optional<DivergedStep> rerun_diverged_step();
  real current_lr() const { return opt->lr; }

  // One teacher-forced forward and backward pass over held-out data with the
  // anomaly mode on (qkv::DetectAnomalyGuard): throws qkv::AnomalyError
  // naming the first op (and its module) whose value or gradient is NaN or
  // Inf; returns the loss otherwise. Changes no parameter.
  real check_anomalies();

  // Held-out evaluation: greedy decoding scored by exact sequence and token
  // accuracy, or, for a language model, held-out loss and perplexity.
  EvalResult evaluate();
  // A set `chunk` pairs at a time (fewer when they are long), each chunk
  // read into one buffer kept from chunk to chunk (data/pair_set.h).
  EvalResult evaluate(const PairSet& set, int64_t chunk = 500);
  // The pairs evaluate(set, chunk) takes at a time for pairs of up to
  // `longest` tokens (source and target): at most `chunk`, and at most
  // kEvalChunkTokens tokens a chunk, so that long sequences stay bounded in
  // memory and a progress line still comes.
  static constexpr int64_t kEvalChunkTokens = int64_t(1) << 14;
  static int64_t eval_chunk(int64_t chunk, int64_t longest) {
    return std::max<int64_t>(1, std::min(chunk, kEvalChunkTokens / std::max<int64_t>(1, longest)));
  }
  // What evaluate() is doing, for its progress lines (trainer/progress.h).
  std::string phase = "held-out evaluation";

  // Refuses (naming the length and the memory) a source of `n` tokens that
  // the model cannot take: past a learned position table, or whose attention
  // maps would not fit in memory.
  void check_source_fits(size_t n) const;
  // Refuses (before training) held-out pairs the final report's evaluation,
  // `chunk` pairs at a time, could not fit in memory; `longer`: the longest
  // task sequence of its length-generalisation set (0: --max-len + 3).
  void check_report_fits(int64_t chunk = 500, int64_t longer = 0) const;
  // Answers for source sequences (any model family), by `decoding`.
  std::vector<Seq> answer(const std::vector<Seq>& sources);
  // The decoder answer() and evaluate() use: greedy, or beam search (encoder-
  // decoder only) with the GNMT length penalty. Not part of the run's settings.
  // check_decoding() refuses (naming --decode) a method this model cannot run.
  struct Decoding {
    std::string method = "greedy";  // greedy | beam
    int64_t beam = 4;
    double alpha = 0.6;
    bool cache =
        true;  // greedy with the key/value cache (false: recompute the prefix, for comparison)
  } decoding;
  void check_decoding() const;
  // A language model's continuation of `prompt` (ids): `n` tokens sampled with
  // `opt` (temperature 0: greedy) from `gen`.
  Seq continue_text(const Seq& prompt, int64_t n, nn::SampleOptions opt, Generator& gen);
  // Tokenise a user's text with this run's vocabulary (see Vocab::encode).
  Seq encode_text(const std::string& text, int64_t* unknown = nullptr) const;
  std::string decode_text(const Seq& ids) const;

  // Writes model, optimizer state, step, random streams, config, vocabulary
  // and data description to `path` atomically; refuses (naming the tensor)
  // when any of them holds a NaN or Inf. Under MPI every rank calls it (it
  // gathers their dropout streams) and rank 0 alone writes.
  void save(const std::string& path) const;
  // The two halves of save(): every rank's dropout stream (collective), then
  // the file, written with them by whichever rank calls it.
  std::vector<std::string> dropout_states() const;
  void write_checkpoint(const std::string& path,
                        const std::vector<std::string>& dropout_states) const;
  // Restores a checkpoint of this same run (settings must match; --steps is free).
  void load(const std::string& path);

  // The model, of whichever family (--model): the trainer sees it through
  // the one interface of models/model.h.
  nn::Model& model() { return *net_; }
  const nn::Model& model() const { return *net_; }
  Generator& dropout_gen() { return net_->dropout_generator(); }
  // The global gradient norm of the last step (before clipping).
  real last_grad_norm = 0;
  // A mixture of experts (--experts): its routing counted over the steps.
  ExpertTally experts;
  // A language model's lowest held-out loss at an --eval-every evaluation so
  // far, and its step (-1: none yet). Kept in the checkpoint's metadata
  // 'best_heldout' so that a resumed run never replaces a better best.
  struct Best {
    double loss = 0;
    int64_t step = -1;
  } best;
  int64_t last_target_tokens = 0;     // of the global batch (all ranks)
  double last_allreduce_seconds = 0;  // the gradient allreduce of the last step (0 in one process)

  TrainConfig cfg;
  Vocab vocab;
  // A classifier's label names (vit; its pairs' targets are {index}); empty
  // for the token families. Checkpoints keep them (metadata 'labels').
  std::vector<std::string> labels;
  bool classifies() const { return !labels.empty(); }
  // The data's shape the model was built for (trainer/family.h).
  DataShape shape;
  // A BPE run's tokenizer: learned here (or taken from a checkpoint), how
  // long learning and encoding took, and the bytes and tokens of each part.
  struct TokenizerInfo {
    bool learned = false;
    double seconds = 0;
    int64_t train_bytes = 0, train_tokens = 0, heldout_bytes = 0, heldout_tokens = 0;
    uint64_t train_hash = 0;  // FNV-1a of this run's training bytes
    // The bytes the merges were learned from, {"bytes": n, "fnv1a64": "..."}
    // (metadata 'bpe' key 'trained_on'): this run's training bytes, or the
    // file's record when the tokenizer came from one.
    JsonBox trained_on;
  } tokenizer_info;
  // A resumed checkpoint's metadata 'matmul_precision' was "bf16": its run
  // took bf16 products (a resumed run goes on with them: trainer/open_run.cpp).
  bool trained_in_bf16 = false;
  JsonBox data_info;                   // where the data came from (files, hashes)
  int64_t unknown_heldout_tokens = 0;  // held-out tokens mapped to <unk>
  // What reading the data changed, for the run's header (texts cut to --context).
  std::vector<std::string> data_notes;
  // A classifier's sequences in tokens before any was cut (--count-tokens).
  std::vector<int64_t> uncut_train_tokens, uncut_heldout_tokens;
  // --init-from: what the model took from the file, and what starts fresh.
  nn::SharedLoad init_shared;
  Generator data_gen;
  std::unique_ptr<PairData> pairs;  // (source, target) pairs: a task or a file
  // Question answering (--format squad): each held-out pair's question and
  // where its window lies in the context (trainer/qa_data.h); null otherwise.
  std::shared_ptr<const QaData> qa;
  // --augment: how training images are shifted and mirrored (training batches only).
  data::Augment augment;
  std::unique_ptr<TextData> text;  // gpt on a text file
  // A test set scored once, at the end (images: the t10k files, kept as
  // bytes); held-out checks during training use pairs->heldout().
  PairSet test_set;
  std::unique_ptr<optim::Optimizer> opt;  // --optimizer: adam, adamw or sgd
  std::unique_ptr<optim::Schedule> schedule;

 private:
  void build_data(const Vocab* given);
  void build_model();
  Var loss_on_batch(int64_t* target_tokens);
  // The random streams before the last step() drew its batch (rerun_diverged_step).
  Generator::State before_step_data_{}, before_step_dropout_{};

  std::unique_ptr<nn::Model> net_;

 public:
  // --instruments N: every N steps, step() records the instruments
  // (trainer/instruments.h); null (the default) records nothing. Declared
  // after net_, so it goes first: its probe is taken off a living model.
  std::unique_ptr<Instruments> instruments;
};

}  // namespace qkv::train
