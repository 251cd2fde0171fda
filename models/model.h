// The one interface of every model family: what the trainer, the decoders
// (generation/answer.h) and the model files (checkpoint/model_file.h) need of
// a model, so that they hold a `Model&` and never ask which family it is.
//
//   family              kind()     reads a (source, target) pair as
//   Seq2SeqTransformer  "seq2seq"  encoder: source; decoder: <s> target -> target </s>
//   GPT                 "gpt"      one sequence "source <s> target </s>", scored on the target
//   EncoderOnlyModel    "encoder"  source, one label per source token (target as long as source)
//   Bert                "bert"     source (masked ids); target: mlm, the original id at each
//                                  masked position (kPad elsewhere); classify, one label
//   ViT                 "vit"      source: an image's C*H*W pixels 0..255; target: its label
//
// Each layer above learns of a family through the family's own files, found
// by kind() in one table per layer; nothing outside them asks which family
// a model is (tests/cli/family_registry.sh):
//
//   models/<name>.{h,cpp}             the config struct and the class (these virtuals)
//   checkpoint/<name>_codec.cpp       its config in files (nn::ModelCodec, model_file.h)
//   generation/answer_<name>.cpp      how it answers (nn::Answerer, generation/answer.h)
//   trainer/family_<name>.cpp         flags' rules, building it, its data and report
//                                     (train::Family, trainer/family.h)
//
// Adding a family: those files, and its line in each of the three tables
// (model_file.cpp, answer.cpp, trainer/family.cpp); a program's own family
// registers itself instead (tests/toy_family.h). CONTRIBUTING.md lists the rest.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/var.h"
#include "core/generator.h"
#include "data/batch.h"
#include "nn/ffn.h"
#include "nn/module.h"

namespace qkv::nn {

// Teacher forcing on a batch: the logits and the token each position is
// scored against (ignore_index where nothing is scored). The loss is
// cross_entropy(logits, targets, ignore_index).
struct TeacherForced {
  Var logits;                    // (B, T, V)
  std::vector<int64_t> targets;  // (B*T)
  int64_t target_tokens = 0;     // entries of targets that are not ignore_index
  // data::kPad for the token families; -1 (none) where every target is a
  // class and class 0 is one of them (vit, bert's classify: label 0 is a class).
  int64_t ignore_index = data::kPad;
};

class Model : public Module {
 public:
  // The family's name, as files store it in "model_kind".
  virtual const char* kind() const = 0;
  // The size of the output vocabulary (the last dimension of the logits).
  virtual int64_t vocab_size() const = 0;
  // The most positions the model reads in one sequence (a learned position
  // table's rows), or 0 when nothing bounds it (sinusoidal positions).
  virtual int64_t max_positions() const = 0;
  // The most positions one sequence of the model holds while it produces an
  // answer of m tokens to a source of n: the encoder-decoder reads the source
  // (n) and feeds its decoder <s> and m - 1 answer tokens (m); gpt reads one
  // sequence "source <s> answer" without the last answer token (n + m).
  virtual int64_t positions_to_answer(int64_t n, int64_t m) const { return std::max(n, m); }

  // Teacher forcing on (source, target) pairs, as the family reads a pair (above).
  virtual TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) = 0;
  // Next-token prediction on plain text: language models only (reads_text()).
  virtual bool reads_text() const { return false; }
  virtual TeacherForced forward_text(const data::LMBatch& b);

  // Attention maps of the model reading `src` while producing `tgt`
  // (teacher forced, no graph): for each layer that attends from the target
  // to the source, its probabilities (1, H, T, S). Empty when the family has none.
  virtual std::vector<Tensor> source_attention(const data::Seq& src, const data::Seq& tgt) {
    return {};
  }

  // The random stream of the model's dropout layers (its state goes into checkpoints).
  virtual Generator& dropout_generator() = 0;

  // Mixtures of experts (nn/moe.h), found as the FFN blocks of the model's
  // modules, so no family names them. The mean over the model's MoE layers
  // of their load-balancing losses from the last forward (a scalar, the
  // load-balancing loss of nn/moe.h; the trainer adds aux_loss coefficient * it to
  // the task's loss), undefined when the model has none. A mean, not a sum,
  // so that the coefficient does not grow with depth (as Hugging Face's
  // Switch and Mixtral compute it over all layers' router probabilities).
  Var aux_loss() const;
  // The routing of every MoE layer's last forward, in module order (empty for
  // a dense model and before the first forward).
  std::vector<const MoERouting*> routings() const;
  // The parameters one token uses: all of them, less each MoE layer's
  // experts it is not sent to (E - k of them).
  int64_t active_parameters() const;
};

}  // namespace qkv::nn
