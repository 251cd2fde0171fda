// BERT (Devlin et al. 2019), trained as RoBERTa (Liu et al. 2019) trains it:
// masked language modelling alone, no next-sentence objective. An encoder
// stack (models/encoder_decoder.h, Post-LN as the paper) over token +
// segment + learned position embeddings, and one of two heads:
//
//   head "mlm"       each position's hidden state -> a distribution over the
//                    vocabulary: transform (Linear D->D, GELU, norm), then the
//                    output layer tied to the token embedding plus its own bias
//   head "classify"  the hidden state of position 0 (<s>, BERT's [CLS]) ->
//                    pooler (Linear D->D, tanh) -> classifier (Linear D->classes)
//   head "qa"        each position's hidden state -> a start and an end logit
//                    (qa_outputs, Linear D->2, as Hugging Face's
//                    BertForQuestionAnswering), masked to [CLS] and the
//                    context (nn/span_logits.h): extractive question answering
//
// The ids are the vocabulary's (data/vocab.h): <s> 1 serves as [CLS], </s> 2
// (sep_id) as [SEP], "[MASK]" (mask_id) is an extra special token. A text is
// "<s> tokens </s>", two texts "<s> A </s> B </s>"; the segment (token type)
// of a position is 0 up to and including the first sep_id, 1 after it.
//
// An mlm model and a classify model of the same sizes share every parameter by
// name and shape except their heads (mlm.* against pooler.*, classifier.*), so a
// classifier starts from a pre-trained file by loading the tensors it shares.
// docs/bert-backward.md derives the gradients of the new pieces.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/encoder_decoder.h"
#include "models/model.h"

namespace qkv::nn {

struct BertConfig : AttentionSettings {
  int64_t vocab = 512;          // input tokens (and the mlm head's outputs)
  int64_t max_positions = 128;  // rows of the position table: the longest sequence read
  int64_t segments = 2;         // rows of the segment table (1: every position is segment 0)
  int64_t classes = 0;          // the classify head's labels (unused by "mlm")
  std::string head = "mlm";     // mlm | classify | qa
  int64_t d_model = 128, heads = 4, layers = 2, d_ff = 512;
  real dropout = 0.1;
  Activation activation = Activation::GELU;
  bool pre_norm = false;  // BERT is Post-LN
  int64_t sep_id = 2;     // </s>, BERT's [SEP]: ends segment 0
  int64_t mask_id = 3;    // [MASK]: the positions answer() fills in (data::MlmOptions::mask_id)
  uint64_t seed = 0;      // initialisation and dropout streams
  LayerOptions layer() const { return layer_options(*this); }
};

// The mlm head: h (B,T,D) -> x = norm(gelu(dense(h))) (B,T,D); the logits
// x E^T + bias (B,T,V) use the token embedding E (V,D) of the model (tied).
class BertMlmHead : public Module {
 public:
  BertMlmHead(int64_t D, int64_t V, const std::string& norm, Generator& init);
  Var forward(const Var& h, const Var& tied_weight) const;
  std::shared_ptr<Linear> dense;
  std::shared_ptr<Norm> norm;
  Parameter bias;  // (V), zeros
};

class Bert : public Model {
 public:
  explicit Bert(const BertConfig& cfg);

  // The segment id of every position of t (B*T): 0 up to and including the
  // first sep_id of the sequence, 1 after it (segments - 1 when that is
  // smaller); 0 at padding.
  std::vector<int64_t> segment_ids(const Tokens& t) const;
  // ids (B,T) -> hidden states (B,T,D): the embeddings, their norm and dropout, the encoder.
  Var encode(const Tokens& t);
  // hidden states (B,T,D) -> the head's logits: mlm (B,T,V); classify
  // (B,classes), read at position 0 of each sequence alone. (qa: forward.)
  Var head(const Var& h);
  // qa: where a span may start or end in t (B*T): position 0 ([CLS]) and
  // segment 1's tokens but the sequence's last (its final [SEP]).
  std::vector<uint8_t> span_allowed(const Tokens& t) const;
  // ids (B,T) -> head(encode(ids)); qa: the span logits (B,2,T), row 0
  // the start's and row 1 the end's, masked to span_allowed.
  Var forward(const Tokens& t);

  // No graph, in eval mode (the mode is restored): the mlm head's
  // distribution at every position of one sequence (T,V), e.g. for
  // "<s> a [MASK] game </s>"; the classify head's distribution over the
  // classes for each sequence (B,classes).
  Tensor mlm_probabilities(const data::Seq& ids);
  Tensor class_probabilities(const std::vector<data::Seq>& seqs);
  // qa: the span logits of each sequence, (B,2,T), kMaskedLogit where no
  // span may start or end (nn/span_logits.h).
  Tensor span_scores(const std::vector<data::Seq>& seqs);

  // The Model interface (models/model.h). A pair is
  //   mlm:      src the (already masked) ids, tgt as long, the original id at
  //             each chosen position and data::kPad elsewhere (data/mlm.h)
  //             -> logits (B,T,V), targets (B*T)
  //   classify: src the ids, tgt {label}, 0 <= label < classes (every label a
  //             class: ignore_index -1) -> logits (B,1,classes), targets (B)
  //   qa:       src "[CLS] question [SEP] context [SEP]", tgt {start, end},
  //             positions of src where a span may start and end, start <=
  //             end ({0, 0}: no answer in this window) -> logits (B,2,T),
  //             targets (B*2): the loss is the mean of the start and end
  //             cross-entropies over the allowed positions
  const char* kind() const override { return "bert"; }
  // (qa: the positions a logit row ranges over, at most max_positions)
  int64_t vocab_size() const override {
    return mlm ? cfg.vocab : qa ? cfg.max_positions : cfg.classes;
  }
  int64_t max_positions() const override { return cfg.max_positions; }
  int64_t positions_to_answer(int64_t n, int64_t) const override { return n; }
  TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) override;
  // The same mlm loss for less: the head (transform and output layer, the
  // costliest part when V is large) run at the M chosen positions only, as
  // the original BERT gathers them -> logits (1,M,V), targets (M), none kPad.
  // Equal loss and gradients to forward_pairs (tests/test_bert_grad.cpp).
  TeacherForced forward_chosen(const std::vector<data::Pair>& pairs);
  Generator& dropout_generator() override { return dropout_gen; }

  BertConfig cfg;
  Generator init_gen, dropout_gen;
  std::shared_ptr<Embedding> embed;                       // (V,D), tied to the mlm output
  std::shared_ptr<Embedding> segment_embed;               // (segments,D)
  std::shared_ptr<LearnedPositionalEmbedding> pos_embed;  // (max_positions,D)
  std::shared_ptr<Norm> embed_norm;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<BertMlmHead> mlm;    // head "mlm", else null
  std::shared_ptr<Linear> pooler;      // head "classify", else null
  std::shared_ptr<Linear> classifier;  // head "classify", else null
  std::shared_ptr<Linear> qa;          // head "qa" (qa_outputs, D->2), else null

 private:
  // Each sequence's ids in [0, vocab), 1 <= length <= max_positions.
  void check_ids(const std::vector<data::Seq>& seqs, const char* op) const;
  // The pairs' sources, checked, as one right-padded batch (B,T).
  Tokens sources(const std::vector<data::Pair>& pairs, const char* op) const;
  // mlm: the pairs' targets laid out (B*T), kPad at padding; each checked.
  std::vector<int64_t> mlm_targets(const std::vector<data::Pair>& pairs, int64_t T,
                                   const char* op) const;
};

}  // namespace qkv::nn
