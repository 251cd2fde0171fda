#include "models/bert.h"

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/init.h"
#include "nn/span_logits.h"

namespace qkv::nn {

namespace {

std::string seq_text(const data::Seq& s) { return std::to_string(s.size()); }

}  // namespace

// ---- The mlm head ---------------------------------------------------------------------
BertMlmHead::BertMlmHead(int64_t D, int64_t V, const std::string& norm_kind, Generator& init) {
  dense = register_module("dense", std::make_shared<Linear>(D, D, true, init));
  norm = register_module("norm", make_norm(norm_kind, D));
  bias = register_parameter("bias", Tensor::zeros({V}));
}

Var BertMlmHead::forward(const Var& h, const Var& tied_weight) const {
  ModuleScope scope(this);
  Var x = norm->forward(gelu(dense->forward(h)));  // (B,T,D) -> (B,T,D)
  return linear(x, tied_weight, bias);             // (B,T,D) x (V,D)^T + (V) -> (B,T,V)
}

// ---- The model --------------------------------------------------------------------------
Bert::Bert(const BertConfig& c) : cfg(c), init_gen(c.seed), dropout_gen(dropout_seed(c.seed)) {
  const bool is_mlm = c.head == "mlm", is_classify = c.head == "classify", is_qa = c.head == "qa";
  if (!is_mlm && !is_classify && !is_qa)
    throw Error("Bert: head '" + brief(c.head) + "' (expected mlm, classify or qa)");
  if (c.vocab < 1 || c.max_positions < 1 || c.segments < 1 || c.d_model < 1)
    throw Error("Bert: vocab, max_positions, segments and d_model must be positive, got " +
                std::to_string(c.vocab) + ", " + std::to_string(c.max_positions) + ", " +
                std::to_string(c.segments) + " and " + std::to_string(c.d_model));
  if (is_classify && c.classes < 1)
    throw Error("Bert: head classify needs classes >= 1, got " + std::to_string(c.classes));
  if (c.rope_base != 0)
    throw Error("Bert: rope_base " + std::to_string(c.rope_base) +
                ": BERT reads learned positions (leave rope_base 0)");
  if (c.relative())
    throw Error("Bert: rel_buckets " + std::to_string(c.rel_buckets) +
                ": BERT reads learned positions (leave rel_buckets 0)");
  const LayerOptions o = c.layer();
  const int64_t D = c.d_model;
  // BERT's initialisation of the tables, N(0, 0.02) (the Linear maps keep qkv's Xavier).
  embed = register_module("embed", std::make_shared<Embedding>(c.vocab, D, init_gen));
  embed->weight.data().copy_(normal_init({c.vocab, D}, real(0.02), init_gen));
  segment_embed =
      register_module("segment_embed", std::make_shared<Embedding>(c.segments, D, init_gen));
  segment_embed->weight.data().copy_(normal_init({c.segments, D}, real(0.02), init_gen));
  pos_embed = register_module(
      "pos_embed", std::make_shared<LearnedPositionalEmbedding>(c.max_positions, D, init_gen));
  pos_embed->weight.data().copy_(normal_init({c.max_positions, D}, real(0.02), init_gen));
  embed_norm = register_module("embed_norm", make_norm(c.norm, D));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  encoder =
      register_module("encoder", std::make_shared<Encoder>(c.layers, o, init_gen, dropout_gen));
  if (is_mlm) {
    mlm = register_module("mlm", std::make_shared<BertMlmHead>(D, c.vocab, c.norm, init_gen));
  } else if (is_qa) {
    qa = register_module("qa_outputs", std::make_shared<Linear>(D, 2, true, init_gen));
  } else {
    pooler = register_module("pooler", std::make_shared<Linear>(D, D, true, init_gen));
    classifier =
        register_module("classifier", std::make_shared<Linear>(D, c.classes, true, init_gen));
  }
}

std::vector<int64_t> Bert::segment_ids(const Tokens& t) const {
  std::vector<int64_t> seg(t.ids.size(), 0);
  const std::vector<int64_t> lengths = t.full_lengths();
  const int64_t last = cfg.segments - 1;
  for (int64_t b = 0; b < t.batch; ++b) {
    int64_t s = 0;  // 0 up to and including the first sep_id, then 1
    for (int64_t i = 0; i < lengths[b]; ++i) {
      seg[b * t.len + i] = std::min(s, last);
      if (t.ids[b * t.len + i] == cfg.sep_id) s = 1;
    }
  }
  return seg;
}

Var Bert::encode(const Tokens& t) {
  ModuleScope scope(this);
  t.check("Bert::encode");
  if (t.len > cfg.max_positions)
    throw Error("Bert::encode: ids (" + std::to_string(t.batch) + ", " + std::to_string(t.len) +
                ") are longer than max_positions = " + std::to_string(cfg.max_positions));
  for (size_t i = 0; i < t.ids.size(); ++i)
    if (t.ids[i] < 0 || t.ids[i] >= cfg.vocab)
      throw Error("Bert::encode: id " + std::to_string(t.ids[i]) + " at (" +
                  std::to_string(int64_t(i) / t.len) + ", " + std::to_string(int64_t(i) % t.len) +
                  ") of ids (" + std::to_string(t.batch) + ", " + std::to_string(t.len) +
                  ") is outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
  const Shape bt{t.batch, t.len};
  // token + segment + position (B,T,D), then the norm and dropout (as BERT)
  Var x = add(embed->forward(t.ids, bt), segment_embed->forward(segment_ids(t), bt));
  x = drop->forward(embed_norm->forward(pos_embed->forward(x)));
  return encoder->forward(x, AttentionMask::padding(t.lengths));  // (B,T,D)
}

Var Bert::forward(const Tokens& t) {
  ModuleScope scope(this);
  if (qa) return span_logits(qa->forward(encode(t)), span_allowed(t));  // (B,T,2) -> (B,2,T)
  return head(encode(t));
}

std::vector<uint8_t> Bert::span_allowed(const Tokens& t) const {
  const std::vector<int64_t> seg = segment_ids(t);
  const std::vector<int64_t> lengths = t.full_lengths();
  std::vector<uint8_t> allowed(t.ids.size(), 0);
  for (int64_t b = 0; b < t.batch; ++b) {
    allowed[b * t.len] = 1;  // [CLS]: no answer here
    for (int64_t i = 1; i + 1 < lengths[b]; ++i) allowed[b * t.len + i] = seg[b * t.len + i] != 0;
  }
  return allowed;
}

Var Bert::head(const Var& h) {
  ModuleScope scope(this);
  if (h.dim() != 3 || h.size(2) != cfg.d_model)
    throw Error("Bert::head: hidden states " + to_string(h.shape()) + " are not (B, T, " +
                std::to_string(cfg.d_model) + ")");
  if (mlm) return mlm->forward(h, embed->weight);  // (B,T,V)
  if (qa) throw Error("Bert::head: a qa head needs the ids' segments: call forward");
  // Position 0 of each sequence: row b*T of h viewed as (B*T, D), gathered
  // by the embedding op (its backward scatter-adds into those rows only).
  const int64_t B = h.size(0), T = h.size(1), D = cfg.d_model;
  std::vector<int64_t> first(B);
  for (int64_t b = 0; b < B; ++b) first[b] = b * T;
  Var cls = embedding(reshape(h, {B * T, D}), first, {B});  // (B,D)
  return classifier->forward(tanh(pooler->forward(cls)));   // (B,D) -> (B,D) -> (B,classes)
}

void Bert::check_ids(const std::vector<data::Seq>& seqs, const char* op) const {
  for (size_t b = 0; b < seqs.size(); ++b) {
    const data::Seq& s = seqs[b];
    if (s.empty()) throw Error(std::string(op) + ": sequence " + std::to_string(b) + " is empty");
    if (static_cast<int64_t>(s.size()) > cfg.max_positions)
      throw Error(std::string(op) + ": sequence " + std::to_string(b) + " has " + seq_text(s) +
                  " tokens, more than max_positions = " + std::to_string(cfg.max_positions));
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] < 0 || s[i] >= cfg.vocab)
        throw Error(std::string(op) + ": id " + std::to_string(s[i]) + " at position " +
                    std::to_string(i) + " of sequence " + std::to_string(b) +
                    " is outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
  }
}

Tokens Bert::sources(const std::vector<data::Pair>& pairs, const char* op) const {
  const int64_t B = static_cast<int64_t>(pairs.size());
  if (B == 0) throw Error(std::string(op) + ": no pairs");
  std::vector<data::Seq> srcs(B);
  for (int64_t b = 0; b < B; ++b) srcs[b] = pairs[b].src;
  check_ids(srcs, op);
  return data::right_padded(srcs);  // (B,T)
}

std::vector<int64_t> Bert::mlm_targets(const std::vector<data::Pair>& pairs, int64_t T,
                                       const char* op) const {
  // (B*T): the original id at each chosen position, kPad elsewhere
  std::vector<int64_t> targets(pairs.size() * T, data::kPad);
  for (size_t b = 0; b < pairs.size(); ++b) {
    const data::Pair& p = pairs[b];
    if (p.tgt.size() != p.src.size())
      throw Error(std::string(op) + " (mlm): sequence " + std::to_string(b) + " has " +
                  seq_text(p.src) + " ids but " + seq_text(p.tgt) +
                  " targets (one per id: the original id where chosen, kPad elsewhere)");
    for (size_t i = 0; i < p.tgt.size(); ++i) {
      const int64_t y = p.tgt[i];
      if (y < 0 || y >= cfg.vocab)
        throw Error(std::string(op) + " (mlm): target " + std::to_string(y) + " at position " +
                    std::to_string(i) + " of sequence " + std::to_string(b) +
                    " is outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
      targets[b * T + i] = y;
    }
  }
  return targets;
}

TeacherForced Bert::forward_pairs(const std::vector<data::Pair>& pairs) {
  const char* op = "Bert::forward_pairs";
  const Tokens src = sources(pairs, op);  // (B,T)
  const int64_t B = src.batch;
  TeacherForced out;
  if (mlm) {
    out.targets = mlm_targets(pairs, src.len, op);  // (B*T)
    for (int64_t y : out.targets) out.target_tokens += y != data::kPad;
    out.logits = forward(src);  // (B,T,V)
    return out;
  }
  if (qa) {
    const std::vector<uint8_t> allowed = span_allowed(src);
    out.targets.resize(2 * B);
    for (int64_t b = 0; b < B; ++b) {
      const data::Seq& y = pairs[b].tgt;
      const bool ok = y.size() == 2 && y[0] >= 0 && y[0] <= y[1] && y[1] < src.len &&
                      allowed[b * src.len + y[0]] && allowed[b * src.len + y[1]];
      if (!ok)
        throw Error("Bert::forward_pairs (qa): sequence " + std::to_string(b) +
                    ": expected a target {start, end}, start <= end, both [CLS] (0) or "
                    "positions of the context, got " +
                    seq_text(y) + " number(s)" +
                    (y.size() == 2 ? " {" + std::to_string(y[0]) + ", " + std::to_string(y[1]) + "}"
                                   : std::string()));
      out.targets[2 * b] = y[0];
      out.targets[2 * b + 1] = y[1];
    }
    out.target_tokens = 2 * B;
    out.ignore_index = -1;      // every position is a class, 0 ([CLS]) among them
    out.logits = forward(src);  // (B,2,T)
    return out;
  }
  out.targets.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const data::Seq& y = pairs[b].tgt;
    if (y.size() != 1)
      throw Error("Bert::forward_pairs (classify): sequence " + std::to_string(b) + " has " +
                  seq_text(y) + " labels, not 1");
    if (y[0] < 0 || y[0] >= cfg.classes)
      throw Error("Bert::forward_pairs (classify): label " + std::to_string(y[0]) +
                  " of sequence " + std::to_string(b) + " is outside [0, " +
                  std::to_string(cfg.classes) + ")");
    out.targets[b] = y[0];
  }
  out.target_tokens = B;
  out.ignore_index = -1;                                    // every label is a class, 0 among them
  out.logits = reshape(forward(src), {B, 1, cfg.classes});  // (B,1,classes)
  return out;
}

TeacherForced Bert::forward_chosen(const std::vector<data::Pair>& pairs) {
  const char* op = "Bert::forward_chosen";
  if (!mlm) throw Error(std::string(op) + ": the model's head is '" + cfg.head + "', not mlm");
  const Tokens src = sources(pairs, op);  // (B,T)
  const int64_t B = src.batch, T = src.len, D = cfg.d_model;
  const std::vector<int64_t> all = mlm_targets(pairs, T, op);  // (B*T)
  std::vector<int64_t> rows;                                   // the M chosen rows of (B*T)
  TeacherForced out;
  for (int64_t r = 0; r < B * T; ++r)
    if (all[r] != data::kPad) {
      rows.push_back(r);
      out.targets.push_back(all[r]);
    }
  const int64_t M = static_cast<int64_t>(rows.size());
  if (M == 0) {  // nothing scored: the whole batch, every target kPad (loss 0)
    out.targets = all;
    out.logits = forward(src);  // (B,T,V)
    return out;
  }
  out.target_tokens = M;
  Var h = encode(src);                                                    // (B,T,D)
  Var chosen = embedding(reshape(h, {B * T, D}), rows, {int64_t(1), M});  // (1,M,D)
  out.logits = mlm->forward(chosen, embed->weight);                       // (1,M,V)
  return out;
}

// ---- Probabilities, no graph -----------------------------------------------------------

Tensor Bert::mlm_probabilities(const data::Seq& ids) {
  if (!mlm) throw Error("Bert::mlm_probabilities: the model's head is '" + cfg.head + "', not mlm");
  check_ids({ids}, "Bert::mlm_probabilities");
  EvalModeGuard eval_mode(*this);
  NoGradGuard no_grad;
  const int64_t T = static_cast<int64_t>(ids.size());
  Var logits = forward(Tokens{ids, 1, T, {T}});            // (1,T,V)
  return softmax(reshape(logits, {T, cfg.vocab})).data();  // (T,V)
}

Tensor Bert::span_scores(const std::vector<data::Seq>& seqs) {
  if (!qa) throw Error("Bert::span_scores: the model's head is '" + cfg.head + "', not qa");
  check_ids(seqs, "Bert::span_scores");
  EvalModeGuard eval_mode(*this);
  NoGradGuard no_grad;
  return forward(data::right_padded(seqs)).data();  // (B,2,T)
}

Tensor Bert::class_probabilities(const std::vector<data::Seq>& seqs) {
  if (mlm || qa)
    throw Error("Bert::class_probabilities: the model's head is '" + cfg.head + "', not classify");
  check_ids(seqs, "Bert::class_probabilities");
  EvalModeGuard eval_mode(*this);
  NoGradGuard no_grad;
  return softmax(forward(data::right_padded(seqs))).data();  // (B,classes)
}

}  // namespace qkv::nn
