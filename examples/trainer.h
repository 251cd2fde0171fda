// The training loop for the toy seq2seq tasks, as a class so that the
// program (examples/train.cpp) and the tests drive the same code.
//
//   Trainer t(cfg);            // draws the held-out set, builds model + Adam
//   t.step();                  // one batch: forward, loss, backward, clip, update
//   t.evaluate(t.data.heldout());
//   t.save("ckpt.safetensors"); t.load("ckpt.safetensors");
#pragma once
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "examples/tasks.h"
#include "nn/checkpoint.h"
#include "nn/cross_entropy.h"
#include "nn/decode.h"
#include "nn/transformer.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/schedule.h"

namespace qkv::train {

struct TrainConfig {
  tasks::TaskConfig task;
  int64_t d_model = 64, heads = 4, layers = 2, d_ff = 256;
  real dropout = 0.0;
  bool pre_ln = false;
  int64_t batch = 64;
  int64_t steps = 1000;            // upper bound, and the cosine schedule's length; may stop early
  std::string schedule = "cosine";  // noam | cosine | constant
  real lr = 2e-3;                  // peak lr (cosine/constant); factor for noam
  int64_t warmup = 100;
  real label_smoothing = 0.0;
  real clip = 1.0;                 // global grad-norm clip; 0 = off
  int64_t heldout = 1000;
  uint64_t seed = 1;

  // The settings a resumed run must share with the run that saved the
  // checkpoint (model shape, data and optimisation), as checkpoint metadata.
  // --steps is free, so a run can be extended (with the cosine schedule that
  // also stretches the remaining decay).
  Metadata model_metadata() const {
    return {{"task", tasks::task_name(task.task)},
            {"symbols", std::to_string(task.symbols)},
            {"min_len", std::to_string(task.min_len)},
            {"max_len", std::to_string(task.max_len)},
            {"d_model", std::to_string(d_model)},
            {"heads", std::to_string(heads)},
            {"layers", std::to_string(layers)},
            {"d_ff", std::to_string(d_ff)},
            {"pre_ln", pre_ln ? "true" : "false"},
            {"heldout", std::to_string(heldout)},
            {"seed", std::to_string(seed)},
            {"batch", std::to_string(batch)},
            {"schedule", schedule},
            {"lr", std::to_string(lr)},
            {"warmup", std::to_string(warmup)},
            {"label_smoothing", std::to_string(label_smoothing)},
            {"clip", std::to_string(clip)},
            {"dropout", std::to_string(dropout)}};
  }
};

struct EvalResult {
  int64_t sequences = 0, exact = 0, tokens = 0, tokens_right = 0;
  double exact_acc() const { return sequences ? double(exact) / sequences : 0; }
  double token_acc() const { return tokens ? double(tokens_right) / tokens : 0; }
  std::vector<std::vector<int64_t>> predictions;
};

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
    throw Error("checkpoint: cannot parse generator state '" + what + "'");
  st.has_cached = cached != 0;
  g.set_state(st);
}

class Trainer {
 public:
  explicit Trainer(const TrainConfig& c)
      : cfg(c),
        data_gen(c.seed),
        data(c.task, c.heldout, data_gen),
        model(model_config(c)),
        opt(model.parameters(), optim::AdamOptions::paper(c.lr)),
        schedule(make_schedule(c)) {}

  // One optimisation step on a fresh batch; returns the loss.
  real step() {
    tasks::Batch b = data.train_batch(cfg.batch, data_gen);
    model.train();
    opt.zero_grad();
    Var logits = model.forward(b.src, b.tgt_in);  // (B,T,V)
    Var loss = nn::cross_entropy(logits, b.tgt_out, tasks::kPad, cfg.label_smoothing);
    loss.backward();
    if (cfg.clip > 0) last_grad_norm = optim::clip_grad_norm(opt.params(), cfg.clip);
    opt.lr = schedule->lr(opt.step_count() + 1);
    opt.step();
    last_target_tokens = b.target_tokens;
    return loss.item();
  }

  int64_t step_count() const { return opt.step_count(); }
  real current_lr() const { return opt.lr; }

  // Greedy decoding of `seqs` (in chunks), compared with the task's answers.
  EvalResult evaluate(const std::vector<tasks::Seq>& seqs, int64_t chunk = 500) {
    model.eval();
    EvalResult r;
    for (size_t i = 0; i < seqs.size(); i += static_cast<size_t>(chunk)) {
      std::vector<tasks::Seq> part(seqs.begin() + i, seqs.begin() + std::min(seqs.size(), i + chunk));
      tasks::Batch b = tasks::collate(cfg.task.task, part);
      int64_t longest = 0;
      for (auto& s : part) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
      nn::DecodeOptions o;
      o.bos = tasks::kBos; o.eos = tasks::kEos; o.pad = tasks::kPad;
      o.max_len = longest + 2;
      auto pred = nn::greedy_decode(model, b.src, o);
      for (size_t k = 0; k < part.size(); ++k) {
        const tasks::Seq want = tasks::apply_task(cfg.task.task, part[k]);
        r.sequences++;
        r.exact += pred[k] == want;
        // Token accuracy: position by position over the expected answer and
        // its <eos>; a missing or wrong token counts as wrong.
        for (size_t j = 0; j <= want.size(); ++j) {
          const int64_t w = j < want.size() ? want[j] : tasks::kEos;
          const int64_t p = j < pred[k].size() ? pred[k][j] : (j == pred[k].size() ? tasks::kEos : -1);
          r.tokens++;
          r.tokens_right += p == w;
        }
        r.predictions.push_back(std::move(pred[k]));
      }
    }
    model.train();
    return r;
  }

  // Model, optimizer state, step, generator states and config in one file.
  void save(const std::string& path) const {
    NamedTensors all;
    for (auto& [n, t] : nn::state_dict(model)) all.emplace_back("model." + n, t);
    for (auto& [n, t] : opt.state_dict()) all.emplace_back("optim." + n, t);
    Metadata md = cfg.model_metadata();
    md["format"] = "qkv-seq2seq-train-v1";
    md["step"] = std::to_string(opt.step_count());
    md["data_gen"] = generator_state_string(data_gen);
    md["dropout_gen"] = generator_state_string(model.dropout_gen);
    write_safetensors(path, all, md);
  }

  // Restores a checkpoint written by save(); its config must match ours.
  void load(const std::string& path) {
    TensorFile f = read_safetensors(path);
    check_config(f.metadata, cfg.model_metadata(), path);
    nn::load_state_dict(model, f, "model.");
    NamedTensors st;
    for (auto& [n, t] : f.tensors)
      if (n.rfind("optim.", 0) == 0) st.emplace_back(n.substr(6), t);
    opt.load_state_dict(st);
    set_generator_state(data_gen, f.metadata.at("data_gen"), "data_gen");
    set_generator_state(model.dropout_gen, f.metadata.at("dropout_gen"), "dropout_gen");
  }

  // Every model-shaping key of `want` must be in `have` with the same value.
  static void check_config(const Metadata& have, const Metadata& want, const std::string& path) {
    auto fmt = have.find("format");
    if (fmt == have.end() || fmt->second != "qkv-seq2seq-train-v1")
      throw Error("checkpoint " + path + ": not a qkv training checkpoint (metadata 'format' missing or different)");
    for (auto& [k, v] : want) {
      auto it = have.find(k);
      if (it == have.end()) throw Error("checkpoint " + path + ": metadata has no '" + k + "'");
      if (it->second != v)
        throw Error("checkpoint " + path + ": was trained with " + k + " = " + it->second +
                    " but this run has " + k + " = " + v);
    }
  }

  static nn::TransformerConfig model_config(const TrainConfig& c) {
    nn::TransformerConfig m;
    m.src_vocab = m.tgt_vocab = c.task.vocab();
    m.d_model = c.d_model; m.heads = c.heads;
    m.encoder_layers = m.decoder_layers = c.layers;
    m.d_ff = c.d_ff; m.dropout = c.dropout; m.pre_norm = c.pre_ln;
    m.seed = c.seed;
    return m;
  }

  static std::unique_ptr<optim::Schedule> make_schedule(const TrainConfig& c) {
    if (c.schedule == "noam") return std::make_unique<optim::NoamSchedule>(c.d_model, c.warmup, c.lr);
    if (c.schedule == "cosine") return std::make_unique<optim::WarmupCosineSchedule>(c.lr, c.warmup, c.steps, c.lr * real(0.05));
    if (c.schedule == "constant") return std::make_unique<optim::ConstantSchedule>(c.lr, c.warmup);
    throw Error("schedule: unknown schedule '" + c.schedule + "' (expected noam, cosine or constant)");
  }

  TrainConfig cfg;
  Generator data_gen;
  tasks::TaskData data;
  nn::Seq2SeqTransformer model;
  optim::Adam opt;
  std::unique_ptr<optim::Schedule> schedule;
  real last_grad_norm = 0;
  int64_t last_target_tokens = 0;
};

}  // namespace qkv::train
