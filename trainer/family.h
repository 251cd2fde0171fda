// What the training program knows of one model family, kept in the family's
// own file (trainer/family_<name>.cpp) and found by name through one table
// (family.cpp), so that the trainer holds a Model& and its Family and never
// asks which family it holds:
//
//   family    file                        reads a pair as (models/model.h)
//   seq2seq   trainer/family_seq2seq.cpp  source -> target (the paper's model)
//   gpt       trainer/family_gpt.cpp      "source <s> target", or plain text
//   encoder   trainer/family_encoder.cpp  one label per source token
//   bert      trainer/family_bert.cpp     text with [MASK]s (--objective mlm), or
//                                         "text<TAB>label" (--objective classify)
//   vit       trainer/family_vit.cpp      an image's pixels -> its label (--format idx)
//
// The other layers learn of a family through their own part: models/ through
// nn::Model's virtuals, checkpoint/ through the family's config codec
// (checkpoint/model_file.cpp's table), generation/ through its answer
// (generation/answer.cpp's table). A program (or a test) adds a family of its
// own with register_family(), beside nn::register_model_codec and
// nn::register_answerer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "core/registry.h"
#include "data/batch.h"
#include "data/vocab.h"
#include "generation/sampling.h"
#include "models/model.h"
#include "nn/activation.h"
#include "trainer/config.h"

namespace qkv::train {

// What the data fixes about a model, beside the settings: the vocabulary's
// size, a classifier's labels, and the images' size. The trainer fills it
// from the data (or, with no data, from a model file: Family::shape_from_model).
struct DataShape {
  int64_t vocab = 0;                         // tokens (Vocab::size())
  int64_t classes = 0;                       // a classifier's labels; 0: not a classifier
  int64_t rows = 0, cols = 0, channels = 0;  // images; 0: the model reads tokens
  int64_t mask_id = -1;                      // the vocabulary's extra special ([MASK]); -1: none
  // A file's model fields no run setting holds (bert's segment table and
  // [SEP]), so that its model is built as it was saved; 0 / -1: the defaults.
  int64_t segments = 0, sep_id = -1;
};

// A family's row, in named parts; every member has a default (null, false,
// "" or the usual value), so a row says only what its family does:
//
//   Family gpt_family() {
//     Family f;
//     f.name = "gpt";
//     f.reads.text = true;
//     f.answers.sample = sample;
//     ...
//     return f;
//   }
struct Family {
  const char* name = nullptr;  // --model NAME, TrainConfig::model, the files' model_kind
  const char* help = nullptr;  // --model's help: "gpt (decoder-only)"

  // ---- its settings ----
  struct Settings {
    // The family's defaults for settings a new run left unsaid (`said(key)`:
    // the command line gave it). May be null.
    void (*defaults)(TrainConfig& c, const std::function<bool(const char*)>& said) = nullptr;
    // The family's rules on the settings (positions, tying, ...). May be null.
    void (*check)(const TrainConfig& c, const Require& require) = nullptr;
  } settings;

  // ---- its model ----
  struct ModelPart {
    // The model the settings describe, over the data's shape (the token
    // families: a vocabulary of d.vocab tokens that labels and sources share).
    std::unique_ptr<nn::Model> (*build)(const TrainConfig& c, const DataShape& d) = nullptr;
    // The architecture back from a model file's model_config (the inverse of
    // build): the TrainConfig keys is_arch_key() names. `where` prefixes errors.
    void (*from_model)(TrainConfig& c, const json& model_config,
                       const std::string& where) = nullptr;
    // The data's shape back from a model file's model_config (classes, image
    // size), for a run that reads no data (--ask). May be null (a token family:
    // no shape beyond the vocabulary).
    void (*shape_from_model)(DataShape& d, const json& model_config) = nullptr;
    // The model_config key holding the vocabulary size; null for a family that
    // reads no tokens (its files' vocabulary is the special tokens alone).
    const char* vocab_key = nullptr;
    // Whether the position table has a fixed length (learned positions): its
    // rows are the run's context and bound every sequence. Null: never.
    bool (*fixed_positions)(const TrainConfig& c) = nullptr;
    // The kinds of positions (--positions, trainer/positions.h) it takes,
    // space-separated, its default first: "learned rope relative". A new run
    // that does not say takes the first; a model file's kind is the first
    // unless its settings show another (rope_base) or from_model says.
    const char* positions = "sinusoidal";
    // Why another kind is refused, between "--positions: " and ", not
    // '<asked>'" ("the bert model has a learned position table"). Null: "the
    // <name> model takes a or b positions".
    const char* positions_refused = nullptr;
  } model;

  // ---- what it reads ----
  struct Reads {
    // Plain text as a language model (--format text); a model file of the
    // family is read as one unless the flags say otherwise.
    bool text = false;
    // Images (--format idx: the IDX files of MNIST and Fashion-MNIST) rather
    // than text; a pair is then (pixels, {label}).
    bool images = false;
    // One label per source token and no </s> (the pairs' targets must be as
    // long as their sources).
    bool labels_tokens = false;
    // The source and its answer as one sequence (attention maps then have one
    // axis of "source <s> answer").
    bool one_sequence = false;
    // Positions one sequence takes to read a pair of n source and m target
    // tokens. Null: max(n, m).
    int64_t (*sequence_tokens)(int64_t n, int64_t m) = nullptr;
    // Positions one image of rows x cols pixels takes (vit: its patches and
    // a class token). Null: one a pixel.
    int64_t (*image_tokens)(const TrainConfig& c, int64_t rows, int64_t cols) = nullptr;
  } reads;

  // ---- how it answers ----
  struct Answers {
    // A language model's continuation of `window` (--ask on text): null for
    // families that are not language models.
    data::Seq (*sample)(nn::Model& m, const data::Seq& window, const nn::SampleOptions& o,
                        Generator& gen) = nullptr;
    // The probability of each label for one input, no graph (--ask): null for
    // a family that is not a classifier.
    std::vector<double> (*label_probabilities)(nn::Model& m, const data::Seq& input) = nullptr;
    // A masked language model's guesses (--ask "a [MASK] game"): for a
    // sequence of ids, each position's probabilities over the vocabulary
    // (T, V), no graph. Null for a family that fills in no masks.
    Tensor (*token_probabilities)(nn::Model& m, const data::Seq& ids) = nullptr;
    // Per layer, where the class token looks: its attention probabilities over
    // the input's positions, (H, N+1) for N patches, no graph. May be null.
    std::vector<Tensor> (*class_attention)(nn::Model& m, const data::Seq& input) = nullptr;
    // Extractive question answering's span logits of each sequence, (B, 2,
    // T): start row and end row, no graph (nn/span_logits.h). Null for a
    // family that answers no questions.
    Tensor (*span_scores)(nn::Model& m, const std::vector<data::Seq>& seqs) = nullptr;
    // Why --decode beam is refused for this family ("" for the usual sentence).
    const char* no_beam = "";
  } answers;

  // ---- what it reports ----
  struct Reports {
    // The report's "N layers": "2" or, for two stacks, "2+2". Null: "N".
    std::string (*layers_text)(const TrainConfig& c) = nullptr;
    // The explorer page's sentence on what the model did with a source: e.g.
    // "answers "abc" with "cba" (greedy), scored with ...".
    std::string (*explain_what)(const std::string& source, const std::string& answer) = nullptr;
    // Stacks of layers the memory estimate counts (the encoder-decoder 2.5:
    // two stacks, the decoder's with cross-attention).
    double stacks = 1;
    // For the memory estimates (the final report's, --explain's, check_memory's):
    // the query and key lengths (T, S) of the longest attention the model runs
    // on a pair of `src` and `tgt` tokens (<s> and </s> included), and the
    // numbers one head's attention maps hold per layer at those lengths (the
    // encoder-decoder: encoder self- S*S, decoder self- T*T, cross T*S). Either
    // may be null: then (max, max) and T*S.
    std::pair<int64_t, int64_t> (*attention_lengths)(int64_t src, int64_t tgt) = nullptr;
    double (*attention_maps)(double T, double S) = nullptr;
  } reports;

  // ---- which objectives (--objective) ----
  struct Objectives {
    // What --objective may say for this family, space-separated, its default
    // first ("mlm classify"); "" for a family with only its own way to learn.
    const char* names = "";
    // A model learning from text by another objective than the next token
    // (bert's mlm): the training pairs made from a batch of text windows
    // (B, T), drawing from `g` (masks, say). Null: the model reads the windows
    // itself (Model::forward_text).
    // `d.mask_id` is the model's mask token (bert's model_config mask_id).
    std::vector<data::Pair> (*text_pairs)(const TrainConfig& c, const DataShape& d,
                                          const data::LMBatch& b, const data::Vocab& v,
                                          Generator& g) = nullptr;
    // Special tokens the family's vocabulary holds after <pad>, <s>, </s>
    // ("[MASK]"), or null.
    const char* extra_special = nullptr;
    // Tokens a run's vocabulary holds for its objective, after extra_special
    // (seq2seq's span corruption: T5's sentinels <extra_id_0> ...). May be null.
    std::vector<std::string> (*tokens)(const TrainConfig& c) = nullptr;
    // What text_pairs' targets are, for the report's "<this> accuracy":
    // "masked-token" (bert), "span-target" (seq2seq). Null without text_pairs.
    const char* made_targets = nullptr;
  } objectives;
};

// extra_special and the objective's tokens: what a vocabulary learned by
// this run adds after <pad>, <s>, </s> (and <unk>).
std::vector<std::string> extra_tokens(const Family& f, const TrainConfig& c);

// A word or character vocabulary from the distinct tokens of a run's training
// text (collected up to --max-vocab + 1): refused past --max-vocab, naming
// --data, then extra_tokens added.
data::Vocab vocab_of_tokens(std::set<std::string, std::less<>> distinct, const Family& f,
                            const TrainConfig& c);

// A BPE vocabulary learned from `text` (--bpe-vocab tokens), then
// extra_tokens; an error names --bpe-vocab, --data and `what` the text is
// ("its training texts").
data::Vocab vocab_of_bpe(const std::string& text, const Family& f, const TrainConfig& c,
                         const std::string& what);

// The members above that may be null, with their defaults.
std::pair<int64_t, int64_t> attention_lengths(const Family& f, int64_t src, int64_t tgt);
double attention_maps(const Family& f, double T, double S);
int64_t sequence_tokens(const Family& f, int64_t n, int64_t m);
bool fixed_positions(const Family& f, const TrainConfig& c);
std::string layers_text(const Family& f, const TrainConfig& c);

// The built-in families and any registered since, in the order help lists them.
const Registry<Family>& families();
// The family named `name`, or nullptr.
const Family* find_family(const std::string& name);
// The family named `name`; an Error "<where>: expected seq2seq, gpt or
// encoder, got '<name>'" for any other.
const Family& family(const std::string& name, const std::string& where);
// "seq2seq, gpt or encoder".
std::string family_names();
// "seq2seq, gpt (decoder-only) or encoder": --model's help.
std::string family_help();
// Adds a family (a program's own); throws when the name is taken.
// unregister_family removes it again (a test's family, when the test ends).
void register_family(const Family& f);
void unregister_family(const std::string& name);

// Helpers the family files share.
nn::Activation activation_of(const TrainConfig& c);  // --activation relu | gelu | swiglu

}  // namespace qkv::train
